#!/usr/bin/env python3
"""One stage of a drifting target for scripts/bench/follow_sim.sh: a policy version fine-tuned from the one before.

Reads a Hugging Face Llama folder (the demo target or an earlier stage), fine-tunes every weight for --steps steps
on a slice of pretokenized samples (the trained tokens of {"input_ids", "loss_mask"} lines), and writes the next
version's folder (config.json, model.safetensors, the tokenizer and generation files copied). Each stage trains on
another slice, with a reply style of its own: its samples' replies are those of the slice (Alpaca topics differ by
slice), so the target's outputs drift stage by stage as an RL policy's do. Fixed seed, fixed steps: the same
versions on every machine.

  python scripts/bench/drift_target.py --base DIR --data alpaca.jsonl --first 1000 --count 1000 --steps 150 --out DIR2
"""
import argparse
import json
import random
import shutil
from pathlib import Path

import torch
from transformers import LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--first", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    torch.set_num_threads(2)
    lines = Path(a.data).read_text().splitlines()[a.first:a.first + a.count]
    samples = [json.loads(line) for line in lines]
    model = LlamaForCausalLM.from_pretrained(a.base, dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    for step in range(a.steps):
        batch = random.sample(samples, a.batch)
        width = max(len(s["input_ids"]) for s in batch)
        ids = torch.zeros(a.batch, width, dtype=torch.long)
        labels = torch.full((a.batch, width), -100, dtype=torch.long)
        mask = torch.zeros(a.batch, width, dtype=torch.long)
        for i, s in enumerate(batch):
            n = len(s["input_ids"])
            ids[i, :n] = torch.tensor(s["input_ids"])
            mask[i, :n] = 1
            lab = torch.tensor(s["input_ids"])
            lab[torch.tensor(s["loss_mask"]) == 0] = -100
            labels[i, :n] = lab
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == a.steps - 1:
            print(f"stage step {step}: loss {loss.item():.4f}", flush=True)
    out = Path(a.out)
    tmp = out.with_name(".tmp-" + out.name)
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (Path(a.base) / name).exists():
            shutil.copy(Path(a.base) / name, tmp / name)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
