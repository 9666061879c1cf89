"""The steps scripts/check_vllm_mtp.py and check_vllm_draft.py share: the held-out prompts as eval picks them,
`eagle-train eval --json` on them, the vLLM run in its own venv, and the comparison of the two ARs."""
import json
import os
import subprocess
import sys

# The end of every serving snippet: vLLM's spec-decode counters (vllm/v1/spec_decode/metrics.py) as one line.
COUNTERS = r"""
m = {x.name: x for x in llm.get_metrics()}
print("RESULT " + json.dumps({"drafts": m["vllm:spec_decode_num_drafts"].value,
                              "accepted": m["vllm:spec_decode_num_accepted_tokens"].value,
                              "per_pos": list(m["vllm:spec_decode_num_accepted_tokens_per_pos"].values),
                              "generated": [list(o.outputs[0].token_ids) for o in outs]}))
"""


def held_out_prompts(data, n):
    """The first n samples' tokens up to their first trained one (as eval picks its prompts), that one included."""
    out = []
    with open(data) as f:
        for line in f:
            j = json.loads(line)
            ids, mask = j["input_ids"], j["loss_mask"]
            first = next((p for p in range(1, len(ids)) if mask[p]), None)
            if first is None:
                continue
            out.append(ids[: first + 1])
            if len(out) == n:
                break
    return out


def write_prompts(data, n, out):
    """OUT/prompts.jsonl: each prompt followed by one trained token, so that eval decodes exactly these."""
    prompts = held_out_prompts(data, n)
    path = os.path.join(out, "prompts.jsonl")
    with open(path, "w") as f:
        for p in prompts:
            f.write(json.dumps({"input_ids": p, "loss_mask": [0] * (len(p) - 1) + [1]}) + "\n")
    return path, len(prompts)


def eagle_eval(binary, checkpoint, target, prompts_file, n, max_new, k, out):
    """`eagle-train eval --json` greedy, fp32, one prompt at a time; its JSON, also kept as OUT/eval.json."""
    ev = subprocess.run([binary, "eval", "--checkpoint", checkpoint, "--model_name_or_path", target,
                         "--eval_data_path", prompts_file, "--eval_num_prompts", str(n),
                         "--eval_max_new_tokens", str(max_new), "--eval_draft_len", str(k),
                         "--eval_batch_size", "1", "--target_dtype", "float32", "--device", "cpu", "--json"],
                        capture_output=True, text=True)
    if ev.returncode != 0:
        sys.exit(f"eagle-train eval failed:\n{ev.stderr}")
    mine = json.loads(ev.stdout[ev.stdout.find("{"):])
    open(os.path.join(out, "eval.json"), "w").write(json.dumps(mine, indent=2))
    return mine


def serve(vllm_python, code, argv, out):
    """Runs the serving snippet (code + COUNTERS) in the vLLM venv; its counters (log: OUT/vllm.log)."""
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_TARGET_DEVICE="cpu", VLLM_CPU_OMP_THREADS_BIND="nobind")
    sv = subprocess.run([vllm_python, "-c", code + COUNTERS, *argv], capture_output=True, text=True, env=env)
    open(os.path.join(out, "vllm.log"), "w").write(sv.stdout + sv.stderr)
    line = next((l for l in sv.stdout.splitlines() if l.startswith("RESULT ")), None)
    if sv.returncode != 0 or line is None:
        sys.exit(f"vLLM failed (log: {out}/vllm.log):\n{sv.stderr[-4000:]}")
    v = json.loads(line[len("RESULT "):])
    open(os.path.join(out, "vllm.json"), "w").write(json.dumps(v))
    return v


def report(mine, v, n, max_new, k, tol):
    """Prints both ARs and exits 0 when they agree within tol (1 + accepted / drafts for vLLM), else 1."""
    vllm_ar = 1.0 + v["accepted"] / v["drafts"] if v["drafts"] else float("nan")
    print(f"prompts {n}, max_new {max_new}, k {k}")
    print(f"eagle-train eval: ar {mine['ar']:.6f}, ar_by_depth {mine.get('ar_by_depth')}")
    print(f"vLLM: ar {vllm_ar:.6f} ({v['accepted']} accepted of {v['drafts']} rounds; per position {v['per_pos']})")
    ok = abs(vllm_ar - mine["ar"]) <= tol
    print("SAME" if ok else "DIFFERENT")
    sys.exit(0 if ok else 1)
