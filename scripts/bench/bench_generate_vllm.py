#!/usr/bin/env python3
"""vLLM's generation of the same replies as `eagle-train generate` (docs/benchmarks.md, "eagle-train
generate": side by side with vLLM's CPU backend).

Reads a file `eagle-train generate` wrote (greedy), takes each sample's prompt (the tokens before its
first trained one) and reply (the trained tokens), generates the replies with vLLM's offline engine
(greedy, the same end ids and max_new_tokens, prompt token ids in, token ids out), and prints one
JSON line: vLLM's generated tokens, seconds, tokens/s and how many replies are identical to
eagle-train's. Run it with a Python that has vllm (see docs/offline.md for the CPU build), e.g.
  taskset -c 0 VLLM_CPU_OMP_THREADS_BIND=0 python scripts/bench/bench_generate_vllm.py TARGET OUT.jsonl 256
"""
import json
import sys
import time


def main():
    target, path, max_new = sys.argv[1], sys.argv[2], int(sys.argv[3])
    max_len = int(sys.argv[4]) if len(sys.argv) > 4 else 512
    prompts, replies = [], []
    for line in open(path):
        j = json.loads(line)
        first = j["loss_mask"].index(1)
        prompts.append(j["input_ids"][:first])
        replies.append(j["input_ids"][first:])
    end_ids = json.load(open(f"{target}/generation_config.json")).get("eos_token_id", [])
    end_ids = end_ids if isinstance(end_ids, list) else [end_ids]
    from vllm import LLM, SamplingParams

    llm = LLM(model=target, skip_tokenizer_init=True, dtype="float32", max_model_len=max_len, seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=max_new, stop_token_ids=end_ids, detokenize=False)
    start = time.time()
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    seconds = time.time() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    identical = sum(list(o.outputs[0].token_ids) == r for o, r in zip(outs, replies))
    print(json.dumps({"prompts": len(prompts), "tokens": tokens, "seconds": round(seconds, 2),
                      "tokens_per_s": round(tokens / seconds, 1), "identical_replies": identical}))


if __name__ == "__main__":
    main()
