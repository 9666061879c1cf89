#!/usr/bin/env python3
"""vLLM's serving speed with the final heads of scripts/bench/real_target.sh (issue 52): output tokens/s of the
target alone and with each draft, on the same held-out prompts, greedy, fp32, vLLM's CPU build
(scripts/setup_vllm_cpu.sh), and vLLM's own acceptance (1 + accepted / drafts) beside `eagle-train eval`'s.

Each configuration runs in a fresh vLLM process: it loads, decodes one prompt untimed (warm-up), then decodes
the PROMPTS prompts MAX_NEW tokens each, BATCH at a time (max_num_seqs), timed; the spec-decode counters are
read before and after the timed part. Greedy decoding with a draft gives the target's own tokens, so every
configuration writes the same number of tokens; the script checks that the outputs equal the target's alone.

  scripts/bench/real_target_serve.py --target MODEL --data HELDOUT.jsonl --out DIR [--prompts 16] [--max_new 64]
      [--k 3] [--batch 1] [--threads 2] [--vllm_python ~/.cache/eagle-train/vllm-venv/bin/python]
      NAME=HEAD_DIR:METHOD ...      (METHOD: eagle3 or dflash, vLLM's speculative method)

Writes DIR/serve.jsonl (one line per configuration: name, method, seconds, tokens, tokens_per_s, speedup against
the target alone, vllm_ar, same_outputs) and prints it as a Markdown table.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import vllm_check_common as common  # noqa: E402

SERVE = r"""
import json, sys, time
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
target, draft, prompts_file, k, max_new, method, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], int(sys.argv[7])
prompts = [json.loads(l)["input_ids"][:-1] for l in open(prompts_file)]
spec = None if draft == "-" else {"method": method, "model": draft, "num_speculative_tokens": k}
llm = LLM(model=target, dtype="float32", skip_tokenizer_init=True, enforce_eager=True, seed=0,
          max_model_len=max(len(p) for p in prompts) + max_new + k + 8, max_num_seqs=batch,
          enable_prefix_caching=False, disable_log_stats=False, speculative_config=spec)
params = SamplingParams(temperature=0.0, max_tokens=max_new)
def counters():
    m = {x.name: x for x in llm.get_metrics()}
    get = lambda n: m[n].value if n in m else 0
    return get("vllm:spec_decode_num_drafts"), get("vllm:spec_decode_num_accepted_tokens")
llm.generate([TokensPrompt(prompt_token_ids=prompts[0])], params, use_tqdm=False)  # warm-up, untimed
d0, a0 = counters()
t0 = time.perf_counter()
outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
seconds = time.perf_counter() - t0
d1, a1 = counters()
print("RESULT " + json.dumps({"seconds": seconds, "drafts": d1 - d0, "accepted": a1 - a0,
                              "generated": [list(o.outputs[0].token_ids) for o in outs]}))
"""


def run(o, name, draft, method, prompts_file, out):
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_TARGET_DEVICE="cpu", VLLM_CPU_OMP_THREADS_BIND="nobind",
               OMP_NUM_THREADS=str(o.threads))
    argv = [o.target, draft, prompts_file, str(o.k), str(o.max_new), method, str(o.batch)]
    sv = subprocess.run([o.vllm_python, "-c", SERVE, *argv], capture_output=True, text=True, env=env)
    open(os.path.join(out, f"vllm-{name}.log"), "w").write(sv.stdout + sv.stderr)
    line = next((l for l in sv.stdout.splitlines() if l.startswith("RESULT ")), None)
    if sv.returncode != 0 or line is None:
        print(f"{name}: vLLM failed (log: {out}/vllm-{name}.log): {sv.stderr.strip().splitlines()[-1:]}",
              file=sys.stderr)
        return None
    return json.loads(line[len("RESULT "):])


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--target", required=True)
    a.add_argument("--data", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--prompts", type=int, default=16)
    a.add_argument("--max_new", type=int, default=64)
    a.add_argument("--k", type=int, default=3)
    a.add_argument("--batch", type=int, default=1)
    a.add_argument("--threads", type=int, default=2)
    a.add_argument("--vllm_python", default=os.path.expanduser("~/.cache/eagle-train/vllm-venv/bin/python"))
    a.add_argument("heads", nargs="*", help="NAME=HEAD_DIR:METHOD")
    o = a.parse_args()
    os.makedirs(o.out, exist_ok=True)
    prompts_file, n = common.write_prompts(o.data, o.prompts, o.out)
    base = run(o, "target-alone", "-", "none", prompts_file, o.out)
    if base is None:
        sys.exit("the target alone did not run under vLLM")
    rows = [{"name": "target alone", "method": "-", "seconds": round(base["seconds"], 2),
             "tokens": sum(map(len, base["generated"])), "vllm_ar": None, "same_outputs": True}]
    for spec in o.heads:
        name, _, rest = spec.partition("=")
        head, _, method = rest.rpartition(":")
        r = run(o, name, head, method, prompts_file, o.out)
        if r is None:
            rows.append({"name": name, "method": method, "failed": True})
            continue
        rows.append({"name": name, "method": method, "head": head, "seconds": round(r["seconds"], 2),
                     "tokens": sum(map(len, r["generated"])),
                     "vllm_ar": round(1 + r["accepted"] / r["drafts"], 4) if r["drafts"] else None,
                     "same_outputs": r["generated"] == base["generated"]})
    with open(os.path.join(o.out, "serve.jsonl"), "w") as f:
        for r in rows:
            if not r.get("failed"):
                r["tokens_per_s"] = round(r["tokens"] / r["seconds"], 1)
                r["speedup"] = round(base["seconds"] / r["seconds"], 3)
            r.update(prompts=n, max_new=o.max_new, k=o.k, batch=o.batch, threads=o.threads)
            f.write(json.dumps(r) + "\n")
    print(f"{n} prompts, {o.max_new} new tokens each, {o.k} drafted a round, {o.batch} at a time, {o.threads} threads")
    print("| configuration | output tokens/s | speed-up | vLLM AR | outputs equal the target's |")
    print("|---|---|---|---|---|")
    for r in rows:
        if r.get("failed"):
            print(f"| {r['name']} | failed (vllm-{r['name']}.log) | | | |")
            continue
        ar = "-" if r["vllm_ar"] is None else f"{r['vllm_ar']:.3f}"
        print(f"| {r['name']} | {r['tokens_per_s']} | {r['speedup']:.2f}x | {ar} | {'yes' if r['same_outputs'] else 'NO'} |")


if __name__ == "__main__":
    main()
