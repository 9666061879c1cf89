#!/usr/bin/env python3
"""Creates the loss reference fixture: each of eagle-train's per-position losses (kl, tv, lk_hybrid)
of one TTT step, its weighted sum and its gradients with respect to the final-normed hidden o and
the LM head, computed by PyTorch autograd over the whole [B, T, V_d] logits.

The losses follow vllm-project/speculators' eager reference (src/speculators/losses/eager.py):
kl_div_loss (here as the soft cross-entropy -sum p log q, eagle-train's kl, whose gradient is the
same), tv_loss (1 - sum min(p, q)) and lk_hybrid_loss (lambda * KL(p||q) + (1 - lambda) * TV,
lambda = exp(-3 * alpha) with alpha = sum min(p, q) detached). The teacher of position t is the
softmax of the teacher logits of position t + shift in the same row; the step's loss is
scale * sum over valid positions.

Writes tests/fixtures/reference/losses.safetensors. Run with the project venv:
  ~/.cache/eagle-train/venv/bin/python scripts/make_loss_reference.py
"""
import pathlib

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "reference" / "losses.safetensors"

B, T, H, VD, SHIFT, SCALE, ETA = 2, 9, 8, 11, 2, 0.7, 3.0


def per_position(kind, logits, p):
    logq = F.log_softmax(logits.float(), dim=-1)
    q = F.softmax(logits.float(), dim=-1)
    if kind == "kl":
        return -(p * logq).sum(-1)
    overlap = torch.minimum(q, p).sum(-1)
    if kind == "tv":
        return 1.0 - overlap
    kl = F.kl_div(logq, p, reduction="none", log_target=False).sum(-1)
    weight = torch.exp(-ETA * overlap.detach())
    return weight * kl + (1.0 - weight) * (1.0 - overlap)


def main():
    g = torch.Generator().manual_seed(29)
    o = torch.randn(B, T, H, generator=g, dtype=torch.float64).float()
    w = (torch.randn(VD, H, generator=g, dtype=torch.float64) * 0.7).float()
    teacher = (torch.randn(B, T, VD, generator=g, dtype=torch.float64) * 2).float()
    # A sharp teacher at one position (mass near one id) and a row whose tail is padding.
    teacher[0, 4, 3] += 12.0
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[:, T - SHIFT - 1:] = False  # the chain needs token t + shift + 1 of the row
    valid[0, 1] = False
    valid[1, 3] = False
    shifted = torch.zeros_like(teacher)
    shifted[:, : T - SHIFT] = teacher[:, SHIFT:]
    p = F.softmax(shifted, dim=-1)
    ref = {"o": o, "lm_head": w, "teacher_logits": teacher, "valid": valid.to(torch.uint8)}
    for kind in ("kl", "tv", "lk_hybrid"):
        oo = o.clone().double().float().requires_grad_()
        ww = w.clone().requires_grad_()
        logits = oo @ ww.t()
        pos = per_position(kind, logits, p)
        loss = SCALE * torch.where(valid, pos, torch.zeros_like(pos)).sum()
        loss.backward()
        ref[f"{kind}.loss"] = loss.detach().reshape(1)
        ref[f"{kind}.position_loss"] = pos.detach()
        ref[f"{kind}.grad_o"] = oo.grad
        ref[f"{kind}.grad_lm_head"] = ww.grad
    ref["argmax"] = (o @ w.t()).argmax(-1)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in ref.items()}, str(OUT))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
