#!/usr/bin/env python3
"""The reference for "a DFlash draft learns where EAGLE-3 learns" (issue 53 item 2, docs/benchmarks.md):
trains speculators 0.9.0's own DFlashDraftModel (its forward, anchors, mask and KL loss, eager
attention) on a target's features and a JSONL dataset, and prints its held-out accuracy per block slot
against the target's argmax (speculators' position_k_acc) every 100 steps.

The features are those eagle-train's DFlash draft reads: the outputs of the target layers t in
--target_layers (hidden_states[t + 1], run by transformers), the last layer's output before the final
norm for the teacher. Packing as speculators packs (one row, document ids), AdamW (0.9, 0.95), cosine
to 0, gradients clipped at 0.5, the target's embedding and LM head frozen.

Needs torch, transformers and speculators 0.9.0 (pip install --no-deps speculators==0.9.0 into a
scratch venv or a folder on PYTHONPATH); speculators' data-pipeline imports are stubbed
(scripts/speculators_shims.py), as nothing here uses them. Example (the fixture of the test):
  PYTHONPATH=/tmp/specref python scripts/bench/dflash_learning_reference.py \
    --target tests/fixtures/models/tiny-llama-learn --train tests/fixtures/data/recurrence_train.jsonl \
    --eval tests/fixtures/data/recurrence_eval.jsonl --steps 150 --target_layers 2
"""
import argparse
import json
import math
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import speculators_shims  # noqa: E402

speculators_shims.install()
import transformers  # noqa: E402
from speculators.losses import resolve_loss_config  # noqa: E402
from speculators.models.dflash.core import DFlashDraftModel  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--target"); ap.add_argument("--train"); ap.add_argument("--eval")
ap.add_argument("--layers", type=int, default=1); ap.add_argument("--block", type=int, default=4)
ap.add_argument("--target_layers", default="4"); ap.add_argument("--steps", type=int, default=400)
ap.add_argument("--batch", type=int, default=4); ap.add_argument("--lr", type=float, default=3e-3)
ap.add_argument("--gamma", type=float, default=7.0); ap.add_argument("--anchors", type=int, default=512)
ap.add_argument("--seed", type=int, default=11); ap.add_argument("--mask", type=int, default=2)
a = ap.parse_args()
torch.manual_seed(a.seed)
tl = [int(x) for x in a.target_layers.split(",")]
target = transformers.AutoModelForCausalLM.from_pretrained(a.target, dtype=torch.float32).eval()
cfg = target.config
def feats(ids):
    cap = {}
    h = target.model.layers[-1].register_forward_hook(lambda m, i, o: cap.__setitem__("last", o[0] if isinstance(o, tuple) else o))
    with torch.no_grad():
        out = target(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    h.remove()
    return torch.cat([out.hidden_states[t + 1][0] for t in tl], -1), cap["last"][0] if cap["last"].dim() == 3 else cap["last"]
def load(p):
    rows = [json.loads(l) for l in open(p)]
    return [(r["input_ids"], r["loss_mask"], *feats(r["input_ids"])) for r in rows]
train, held = load(a.train), load(a.eval)
layer_cfg = transformers.Qwen3Config(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
    intermediate_size=cfg.intermediate_size, num_hidden_layers=a.layers, num_attention_heads=cfg.num_attention_heads,
    num_key_value_heads=cfg.num_key_value_heads, head_dim=cfg.hidden_size // cfg.num_attention_heads,
    rms_norm_eps=cfg.rms_norm_eps, max_position_embeddings=cfg.max_position_embeddings, rope_theta=10000.0)
model = DFlashDraftModel.from_training_args(layer_cfg, draft_vocab_size=cfg.vocab_size, block_size=a.block,
    verifier_name_or_path=a.target, target_layer_ids=[t + 1 for t in tl], mask_token_id=a.mask,
    draft_attn_impl="eager")
for n, p in model.named_parameters():
    if n.startswith(("embed_tokens", "lm_head", "verifier")): p.requires_grad_(False)
params = [p for p in model.parameters() if p.requires_grad]
print("trained parameters", sum(p.numel() for p in params), flush=True)
opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, a.steps) / a.steps)))
loss_cfg = resolve_loss_config("kl_div", "eager")  # the fused loss needs Triton on a GPU
def packed(rows):
    ids = torch.tensor([[t for r in rows for t in r[0]]]); lm = torch.tensor([[m for r in rows for m in r[1]]])
    doc = torch.tensor([[i for i, r in enumerate(rows) for _ in r[0]]])
    pos = torch.tensor([[p for r in rows for p in range(len(r[0]))]])
    hs = torch.cat([r[2] for r in rows])[None]; last = torch.cat([r[3] for r in rows])[None]
    return dict(hidden_states=hs, input_ids=ids, loss_mask=lm, verifier_last_hidden_states=last, document_ids=doc, position_ids=pos)
def evaluate():
    model.eval(); c = [0] * a.block; t = [0] * a.block
    with torch.no_grad():
        for r in held:
            _, _, m = model(**packed([r]), gamma=a.gamma, max_anchors=a.anchors, loss_config=loss_cfg)
            for k in range(1, a.block):
                c[k] += float(m[f"position_{k}_acc_sum"]); t[k] += float(m[f"position_{k}_acc_total"])
    model.train()
    return [c[k] / max(t[k], 1) for k in range(1, a.block)]
g = torch.Generator().manual_seed(a.seed)
for step in range(1, a.steps + 1):
    idx = torch.randint(len(train), (a.batch,), generator=g).tolist()
    _, loss, m = model(**packed([train[i] for i in idx]), gamma=a.gamma, max_anchors=a.anchors, loss_config=loss_cfg)
    opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(params, 0.5); opt.step(); sched.step()
    if step % 100 == 0 or step == a.steps:
        print(f"step {step} loss {loss.item():.4f} held-out acc by slot {['%.3f' % x for x in evaluate()]}", flush=True)
