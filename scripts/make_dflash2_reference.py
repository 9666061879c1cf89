#!/usr/bin/env python3
"""Creates the DFlash2 block-draft fixture from speculators 0.9.0's own DFlash2DraftModel (the reference of
--draft dflash2; issue 50): one training step's unary logits, selector candidates and scores, both losses and
every gradient, and the greedy round vLLM 0.32's DFlash2 proposer drafts from the same weights.

Target: tests/fixtures/models/tiny-qwen3 (3 layers, H 48, vocabulary 256) run by transformers. The draft:
speculators' DFlash2DraftModel (models/dflash2/) with 2 Qwen3 layers, block 4 in DFlash's 1 + N fill-in
layout (sample_from_anchor false: slot k >= 1 of the block anchored at p predicts x[p+k], teacher the
target's logits at p+k-1), mask token 255, aux ids [1, 2], eager attention, the eager KL loss, gamma 4,
selector alpha 1; each layer's two convolutions with 2 taps over groups of 16 channels (3 groups), the
candidate selector of rank 8 over the unary top 64 (a quarter of the vocabulary: the
target's argmax is among the candidates at some slots and injected at others). Weights random (seed 0) at scales that make every part
matter (the convolutions' base kernels and kernel projections too: at speculators' init they are the
identity).

Training step: one packed row of two samples (10 and 8 tokens); speculators' select_anchors draws with
torch.randperm, so the anchors are fixed (patched) to five whose blocks lie inside their samples. Its loss
mask is speculators': loss_mask[p + k] for slot k (the input position) times the anchor's validity, slot 0
masked out.

The round (vLLM v1/worker/gpu/spec_decode/dflash2/speculator.py, greedy): the block [x_P, M, M, M] at
positions P..P+3 over the context < P is exactly the training block of anchor P, so its final-normed hidden
states are reused; slots 1..3 draft left to right: C_s = top-64 of lm_head(h_s), score(c) = unary[c] +
sum_r P[prev, r] (W_h h_s)[r] S[c, r], x_s = the best candidate, prev = x_P for slot 1, then x_s.

Writes tests/fixtures/reference/dflash2-head.safetensors: the draft's parameters under its checkpoint names,
the inputs (input_ids, loss_mask, document_ids, position_ids, aux features, the target's logits), anchors,
`ref.unary_logits` [N*B, V], `ref.candidate_ids` [N*B, K] (the training candidates, the target injected),
`ref.candidate_logits` [N*B, K], `ref.target_positions` [N*B], `ref.aligned_loss_mask` [N*B], `ref.loss`,
`ref.unary_loss`, `ref.selector_loss`, `grad.<name>` for every trained parameter, `round.tokens` [N, B - 1]; and
tests/fixtures/models/dflash2-speculators/: speculators' own save_pretrained of that draft (config.json with
speculators_model_type dflash2, model.safetensors), the speculators layout `eval` imports (the verifier's path made
the repository-relative one, config.py and its auto_map entry dropped: a model folder here is data, never code).

Run with the project venv and speculators 0.9.0 importable (pip install --no-deps speculators==0.9.0, or
PYTHONPATH to its unpacked wheel):  ~/.cache/eagle-train/venv/bin/python scripts/make_dflash2_reference.py
"""
import json
import pathlib
import sys

import torch
import transformers
from safetensors.torch import save_file

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import speculators_shims  # noqa: E402

speculators_shims.install()
import speculators.models.dflash.core as dflash_core  # noqa: E402
import speculators.models.dflash2.core as dflash2_core  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
TARGET_DIR = ROOT / "tests" / "fixtures" / "models" / "tiny-qwen3"
REF = ROOT / "tests" / "fixtures" / "reference" / "dflash2-head.safetensors"
SAVED = ROOT / "tests" / "fixtures" / "models" / "dflash2-speculators"

BLOCK, LAYERS, MASK_ID, GAMMA, ALPHA = 4, 2, 255, 4.0, 1.0
TAPS, GROUP, RANK, TOP_K = 2, 16, 8, 64
AUX_IDS = [1, 2]
ANCHORS = [1, 3, 5, 10, 13]


def main():
    torch.manual_seed(0)
    target = transformers.AutoModelForCausalLM.from_pretrained(str(TARGET_DIR), dtype=torch.float32).eval()
    tc = target.config
    samples = [[3, 17, 42, 99, 7, 250, 31, 64, 128, 9], [5, 77, 13, 200, 45, 6, 88, 19]]
    masks = [[0, 1, 1, 1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1, 1]]
    feats, last, tlogits = [], [], []
    for ids in samples:
        cap = {}
        hook = target.model.layers[-1].register_forward_hook(
            lambda m, i, o: cap.__setitem__("h", o[0] if isinstance(o, tuple) else o))
        with torch.no_grad():
            out = target(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
        hook.remove()
        feats.append(torch.cat([out.hidden_states[a][0] for a in AUX_IDS], -1))
        last.append(cap["h"][0])
        tlogits.append(out.logits[0])
    input_ids = torch.tensor([[t for s in samples for t in s]])
    loss_mask = torch.tensor([[m for s in masks for m in s]])
    document_ids = torch.tensor([[d for d, s in enumerate(samples) for _ in s]])
    position_ids = torch.tensor([[p for s in samples for p in range(len(s))]])
    hidden_states = torch.cat(feats)[None]
    verifier_last = torch.cat(last)[None]
    target_logits = torch.cat(tlogits)

    layer_cfg = transformers.Qwen3Config(
        vocab_size=tc.vocab_size, hidden_size=tc.hidden_size, intermediate_size=tc.intermediate_size,
        num_hidden_layers=LAYERS, num_attention_heads=tc.num_attention_heads,
        num_key_value_heads=tc.num_key_value_heads, head_dim=tc.head_dim, rms_norm_eps=tc.rms_norm_eps,
        max_position_embeddings=tc.max_position_embeddings, rope_parameters=dict(tc.rope_parameters))
    model = dflash2_core.DFlash2DraftModel.from_training_args(
        layer_cfg, draft_vocab_size=tc.vocab_size, block_size=BLOCK, verifier_name_or_path=str(TARGET_DIR),
        target_layer_ids=AUX_IDS, mask_token_id=MASK_ID, draft_attn_impl="eager", conv_kernel_size=TAPS,
        conv_group_size=GROUP, selector_rank=RANK, selector_top_k=TOP_K).float()
    assert not model.config.sample_from_anchor
    frozen = ("embed_tokens", "lm_head", "verifier")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith(frozen):
                p.requires_grad_(False)
            elif name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("base_kernel"):
                p.copy_(0.5 + 0.3 * torch.randn(p.shape, generator=gen))
            elif "codebook" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=gen))

    anchors = torch.tensor(ANCHORS)
    dflash_core.select_anchors = lambda lm, n, b: (anchors.clone(), torch.ones(len(ANCHORS), dtype=torch.bool))
    seen = {}
    backbone = model._backbone_forward

    def recording_backbone(*args, **kwargs):
        out = backbone(*args, **kwargs)
        seen["hidden"], seen["unary"], seen["targets"], seen["mask"], seen["idx"] = out
        return out

    model._backbone_forward = recording_backbone
    metrics_fn = dflash2_core.compute_metrics

    def recording_metrics(**kwargs):
        seen.update({k: kwargs[k] for k in ("training_candidate_ids", "candidate_logits", "target_positions")})
        loss, metrics = metrics_fn(**kwargs)
        seen["metrics"] = metrics
        return loss, metrics

    dflash2_core.compute_metrics = recording_metrics
    kwargs = dflash2_core.DFlash2DraftModel.get_trainer_kwargs(
        loss_fn="kl_div", loss_implementation="eager", dflash_decay_gamma=GAMMA, max_anchors=len(ANCHORS),
        selector_loss_alpha=ALPHA)[0]
    _, loss, metrics = model(hidden_states=hidden_states, input_ids=input_ids, loss_mask=loss_mask,
                             verifier_last_hidden_states=verifier_last, document_ids=document_ids,
                             position_ids=position_ids, **kwargs)
    loss.backward()
    with torch.no_grad():
        idx = (seen["idx"] - 1) % input_ids.shape[1]
        assert torch.allclose(seen["targets"][0], target_logits[idx], atol=1e-5), "teacher != target logits"
        m = metrics
        selector_loss = m["selector_loss_sum"] / m["selector_loss_total"] if "selector_loss_sum" in m else None
        unary_loss = m["unary_loss_sum"] / m["unary_loss_total"] if "unary_loss_sum" in m else None
        # The greedy round of vLLM's DFlash2 proposer from the same block hidden states (slots 1..B-1).
        hidden = seen["hidden"][0].view(len(ANCHORS), BLOCK, -1)
        unary = model.lm_head(hidden).float()  # [N, B, V]
        sel = model.candidate_selector
        prev = input_ids[0, anchors]
        tokens = torch.zeros(len(ANCHORS), BLOCK - 1, dtype=torch.long)
        for s in range(1, BLOCK):
            vals, cand = unary[:, s].topk(TOP_K, dim=-1)
            ctx = sel.predecessor_codebook[prev] * sel.hidden_projection(hidden[:, s])
            score = vals + (ctx.unsqueeze(1) * sel.successor_codebook[cand]).sum(-1)
            prev = cand.gather(1, score.argmax(-1, keepdim=True)).squeeze(1)
            tokens[:, s - 1] = prev

    out = {name: p.detach().clone().contiguous() for name, p in model.named_parameters()
           if not name.startswith(frozen)}
    out.update({f"grad.{name}": p.grad.detach().clone().contiguous() for name, p in model.named_parameters()
                if p.grad is not None})
    out.update({
        "input_ids": input_ids[0], "loss_mask": loss_mask[0], "document_ids": document_ids[0],
        "position_ids": position_ids[0], "aux_hidden": hidden_states[0].contiguous(),
        "target_logits": target_logits.contiguous(), "anchors": anchors,
        "ref.unary_logits": seen["unary"][0].detach().contiguous(),
        "ref.candidate_ids": seen["training_candidate_ids"][0].contiguous(),
        "ref.candidate_logits": seen["candidate_logits"][0].detach().contiguous(),
        "ref.target_positions": seen["target_positions"][0].contiguous(),
        "ref.aligned_loss_mask": seen["mask"][0].contiguous(),
        "ref.loss": loss.detach().reshape(()),
        "round.tokens": tokens,
    })
    if selector_loss is not None:
        out["ref.selector_loss"] = selector_loss.detach().reshape(())
        out["ref.unary_loss"] = unary_loss.detach().reshape(())
    REF.parent.mkdir(parents=True, exist_ok=True)
    save_file(out, str(REF), metadata={
        "block_size": str(BLOCK), "mask_token_id": str(MASK_ID), "gamma": str(GAMMA),
        "selector_loss_alpha": str(ALPHA), "aux_ids": ",".join(map(str, AUX_IDS)), "draft_layers": str(LAYERS),
        "conv_kernel_size": str(TAPS), "conv_group_size": str(GROUP), "selector_rank": str(RANK),
        "selector_top_k": str(TOP_K)})
    print(f"wrote {REF}: loss {loss.item():.6f}, metrics {sorted(metrics)}, round tokens {tokens.tolist()}")
    model.zero_grad(set_to_none=True)
    model.save_pretrained(str(SAVED))
    (SAVED / "config.py").unlink(missing_ok=True)
    config_path = SAVED / "config.json"
    config = json.loads(config_path.read_text())
    config["speculators_config"]["verifier"]["name_or_path"] = "tests/fixtures/models/tiny-qwen3"
    config.pop("auto_map", None)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    print(f"wrote {SAVED} (speculators' save_pretrained): {sorted(p.name for p in SAVED.iterdir())}")


if __name__ == "__main__":
    main()
