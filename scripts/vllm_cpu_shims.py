"""Applies the two CPU shims vLLM 0.32's hidden-states connector needs on the CPU build, to the venv's copy.

Neither changes a value: (1) the connector allocates its host copy with torch.empty_like(..., pin_memory=True),
which needs a CUDA driver; the shim drops pin_memory=True. (2) the CPU worker's event placeholder has no query();
the shim gives it one that returns True (CPU work is synchronous). Run with the vLLM venv's python; idempotent.
"""

import pathlib
import re
import sys

import vllm

root = pathlib.Path(vllm.__file__).parent
connector = root / "distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"
text = connector.read_text()
new = re.sub(r",\s*pin_memory=True", "", text)
if new != text:
    connector.write_text(new)
    print(f"shim: dropped pin_memory=True in {connector}")

# Every _EventPlaceholder of the CPU worker (vllm/v1/worker/cpu/shm.py installs one as torch.cuda.Event; the
# model runner has another) gets a query() beside its synchronize().
patched = 0
for path in sorted((root / "v1/worker").rglob("*.py")):
    lines = path.read_text().splitlines(keepends=True)
    out, in_class, class_indent, changed, has_query = [], False, 0, False, False
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if stripped.startswith("class _EventPlaceholder"):
            in_class, class_indent = True, indent
            block = []
            for later in lines[i + 1 :]:
                if later.strip() and len(later) - len(later.lstrip()) <= indent:
                    break
                block.append(later)
            has_query = any("self.query" in b for b in block)
        elif in_class and stripped and indent <= class_indent:
            in_class = False
        out.append(line)
        if in_class and stripped.startswith("self.synchronize ="):
            if not has_query:
                out.append(" " * indent + "self.query = lambda: True  # eagle-train shim: CPU work is synchronous\n")
                changed = True
            patched += 1
    if changed:
        path.write_text("".join(out))
        print(f"shim: _EventPlaceholder.query() in {path}")
if patched == 0:
    sys.exit("vllm_cpu_shims: no _EventPlaceholder with synchronize() under vllm/v1/worker")
