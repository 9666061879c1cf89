#!/usr/bin/env python3
"""Long-tailed synthetic training data for scripts/bench/bench_train.sh: log-normal lengths
(median ~600, sigma 0.8, capped at training_seq_len) whose ids are real text tokens, cut from the
concatenated token stream of the demo target's alpaca.jsonl, so the head's loss means something.
loss_mask is 0 on the first ~20% of each sample (the "prompt") and 1 after."""
import argparse
import json
import math
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--source", required=True, help="tokenized JSONL with input_ids (the demo target's alpaca.jsonl)")
    ap.add_argument("--output", required=True)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--median", type=float, default=600.0)
    ap.add_argument("--sigma", type=float, default=0.8)
    ap.add_argument("--cap", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    stream = []
    with open(a.source) as f:
        for line in f:
            if line.strip():
                stream.extend(json.loads(line)["input_ids"])
    rng = random.Random(a.seed)
    pos = 0
    lengths = []
    tmp = a.output + ".tmp"
    with open(tmp, "w") as out:
        for _ in range(a.samples):
            n = int(round(a.median * math.exp(rng.gauss(0.0, a.sigma))))
            n = max(16, min(a.cap, n))
            if pos + n > len(stream):
                pos = 0  # wrap around the stream; the offset differs each pass
            ids = stream[pos:pos + n]
            pos += n
            prompt = max(1, n // 5)
            out.write(json.dumps({"input_ids": ids, "loss_mask": [0] * prompt + [1] * (n - prompt)}) + "\n")
            lengths.append(n)
    import os
    os.replace(tmp, a.output)
    lengths.sort()
    print(f"{a.output}: {len(lengths)} samples from a stream of {len(stream)} tokens; lengths "
          f"median {lengths[len(lengths) // 2]}, mean {sum(lengths) / len(lengths):.0f}, "
          f"p90 {lengths[int(0.9 * len(lengths))]}, max {lengths[-1]}, "
          f"at the cap {sum(1 for n in lengths if n == a.cap)}")


if __name__ == "__main__":
    main()
