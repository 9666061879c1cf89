#!/usr/bin/env python3
"""Writes a synthetic pretokenized JSONL file for the prepare benchmark (not committed data).

Samples look like chat data tokenized with a Llama-3-sized vocabulary: lengths 64..2048, ids below
128256, half Zipf-like and half uniform (so the prepared file needs uint32 tokens), a loss_mask that is 0 on a
prompt prefix and 1 on the answer, and an extra "id" field the reader must skip.
"""
import argparse
import random

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("output")
    ap.add_argument("--mb", type=float, default=220.0, help="approximate size in MB")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    random.seed(args.seed)
    target = int(args.mb * 1e6)
    written = 0
    n = 0
    with open(args.output, "w") as f:
        while written < target:
            length = int(rng.integers(64, 2049))
            # Half Zipf-like frequent ids, half spread over the vocabulary (4-6 digit numbers).
            ids = np.where(rng.random(length) < 0.5, np.minimum(rng.zipf(1.2, length) - 1, 128255),
                           rng.integers(0, 128256, length))
            prompt = int(rng.integers(1, length))
            mask = ["0"] * prompt + ["1"] * (length - prompt)
            line = '{"id": "s%d", "input_ids": [%s], "loss_mask": [%s]}\n' % (
                n, ", ".join(map(str, ids.tolist())), ", ".join(mask))
            f.write(line)
            written += len(line)
            n += 1
    print(f"{args.output}: {n} samples, {written / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
