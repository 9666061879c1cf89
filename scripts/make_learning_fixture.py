#!/usr/bin/env python3
"""Creates the learnability fixture: a target on which a draft can learn, and data it can learn from.

tests/fixtures/models/tiny-llama-learn: a random-weight Llama (4 layers, hidden 64, 4 heads / 2 KV heads,
vocabulary 512) initialised with std 0.1 instead of transformers' 0.02. At 0.02 a random target's
next-token distribution is nearly flat and its argmax a near-arbitrary function of the context, so no
draft learns it in a few hundred steps; at 0.1 an EAGLE-3 head and a DFlash draft both reach a slot-1
held-out accuracy of about 0.25 in 150-400 steps (docs/benchmarks.md, "DFlash learns where EAGLE-3
learns"). At 0.15 and above neither learns: the argmax depends on the context in ways too many to fit.

tests/fixtures/data/recurrence_{train,eval}.jsonl: 300 and 40 samples of an order-2 recurrence
x[t] = (7 x[t-1] + 3 x[t-2] + 5) mod 509 + 3 with 5% of the tokens replaced by random ones, lengths
lognormal around 40 tokens, the first quarter of each sample masked out (loss_mask 0): the case of issue 53
item 2, where a DFlash draft was reported to learn nothing while EAGLE-3 learned.

Reruns write the same files (fixed seeds). Run with the project venv:
  ~/.cache/eagle-train/venv/bin/python scripts/make_learning_fixture.py
"""
import json
import pathlib
import random

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "fixtures" / "models" / "tiny-llama-learn"
DATA = ROOT / "tests" / "fixtures" / "data"


def sample(rng):
    n = max(8, int(rng.lognormvariate(3.7, 0.4)))
    ids = [1, rng.randrange(3, 512), rng.randrange(3, 512)]
    while len(ids) < n:
        c = (ids[-1] * 7 + ids[-2] * 3 + 5) % 509 + 3
        if rng.random() < 0.05:
            c = rng.randrange(3, 512)
        ids.append(c)
    q = len(ids) // 4
    return {"input_ids": ids, "loss_mask": [0] * q + [1] * (len(ids) - q)}


def main():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
                         initializer_range=0.1)
    LlamaForCausalLM(config).float().save_pretrained(str(MODEL), safe_serialization=True)
    (MODEL / "generation_config.json").unlink(missing_ok=True)
    rng = random.Random(11)
    for name, count in (("train", 300), ("eval", 40)):
        with open(DATA / f"recurrence_{name}.jsonl", "w") as f:
            for _ in range(count):
                f.write(json.dumps(sample(rng), separators=(",", ":")) + "\n")
    print("wrote", MODEL, "and", DATA / "recurrence_{train,eval}.jsonl")


if __name__ == "__main__":
    main()
