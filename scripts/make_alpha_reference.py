#!/usr/bin/env python3
"""Creates tests/fixtures/reference/alpha.json: the per-position expected acceptance of speculative
sampling, sum_x min(p(x), q(x)), in PyTorch, with p the target's and q the draft's distribution at
a temperature and a nucleus mass (softmax(logits / T), the smallest most-likely set reaching top_p,
renormalised: generate's rule), q over a draft vocabulary (zero elsewhere) or one-hot at the
draft's argmax (greedy drafts, vLLM's default). Random logits tables, not models.

Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_alpha_reference.py
"""
import json
import pathlib

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "reference" / "alpha.json"


def probs(logits, t, top_p):
    p = torch.softmax(logits.double() / t, -1)
    if top_p < 1.0:
        s, order = p.sort(-1, descending=True)
        before = s.cumsum(-1) - s
        s = s.masked_fill(before >= top_p, 0.0)
        p = torch.zeros_like(p).scatter(-1, order, s)
        p = p / p.sum(-1, keepdim=True)
    return p


def main():
    g = torch.Generator().manual_seed(11)
    rows, v = 7, 12
    vocab = [0, 1, 3, 4, 6, 8, 9, 11]
    target = (torch.randn(rows, v, generator=g) * 2).float()
    draft = (torch.randn(rows, len(vocab), generator=g) * 2).float()
    draft[:, 2] += target[:, 3]  # some agreement
    cases = []
    for t, top_p in ((1.0, 1.0), (0.7, 0.9), (0.3, 0.5)):
        p = probs(target, t, top_p)
        q = torch.zeros(rows, v, dtype=torch.float64)
        q[:, vocab] = probs(draft, t, top_p)
        sampled = torch.minimum(p, q).sum(-1)
        greedy = p.gather(1, torch.tensor(vocab)[draft.argmax(-1)][:, None])[:, 0]
        cases.append(dict(temperature=t, top_p=top_p, sampled=sampled.tolist(), greedy=greedy.tolist()))
    OUT.write_text(json.dumps(dict(vocab_ids=vocab, target_logits=target.tolist(), draft_logits=draft.tolist(),
                                   cases=cases), indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
