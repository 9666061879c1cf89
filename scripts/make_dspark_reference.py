#!/usr/bin/env python3
"""Creates the DSpark block-draft fixtures from speculators 0.9.0's own DSparkDraftModel (the reference of
--draft dspark; issue 49): one training step's logits, confidence logits, loss and every gradient, and the
greedy round vLLM 0.32's DSpark speculator drafts from the same weights; in both layouts, and the draft as
speculators itself saves it.

Target: tests/fixtures/models/tiny-qwen3 (3 layers, H 48, vocabulary 256) run by transformers. The draft:
speculators' DSparkDraftModel (models/dspark/core.py) with 2 Qwen3 layers, block 4, sample_from_anchor
true (vLLM's anchor-as-first layout: slot k of the block anchored at p predicts x[p+k+1], teacher the
target's logits at p+k), Markov rank 8 (vanilla), the confidence head on the hidden state and the
Markov embedding, mask token 255, aux ids [1, 2] (hidden_states[1], hidden_states[2]: DFlash target layers
t = 0, 1), eager attention (the same mask as its flex attention), the eager KL and TV losses, gamma 4,
confidence alpha 1. Weights random (seed 0) at scales that make every part matter (W1 std 0.3).

Training step: one packed row of two samples (10 and 8 tokens, position ids restarting per sample);
speculators' select_anchors draws with torch.randperm, so the anchors are fixed here instead (patched):
five anchors whose blocks lie inside their samples, where speculators' and eagle-train's candidate rules
agree. Its loss mask is speculators': loss_mask[p + k] for slot k (the input position; the label is
x[p + k + 1]) times the anchor's validity.

The round (vLLM dspark/speculator.py, greedy): the block [x_P, M, M, M] at positions P..P+3 over the
context < P is exactly the training block of anchor P, so its final-normed hidden states are reused; then
left to right: z_i = lm_head(h_i) + W2 W1[prev_i], x_i = argmax z_i, prev_0 = x_P, prev_{i+1} = x_i.

The 1 + N fill-in layout (sample_from_anchor false, DFlash's): the same weights, anchors and block; slot k
(1..3) predicts x[p+k] with teacher the target's logits at p+k-1 (speculators' (index - 1) mod T) and previous
token x[p+k-1] (slot 0: x[p], masked out); the round drafts slots 1..3 with prev_0 = x_P.

Writes tests/fixtures/reference/dspark-head.safetensors (anchor first) and dspark-fillin-head.safetensors
(fill-in), each with the draft's parameters under its checkpoint names
(`markov_head.markov_w1.weight`, `confidence_head.proj.weight`, ...), the inputs (input_ids, loss_mask,
document_ids, position_ids, aux features, the target's last hidden state and logits), anchors,
`ref.logits` [N*B, V] (Markov-corrected), `ref.confidence_logits` [N*B], `ref.accept_rate` [N*B],
`ref.aligned_loss_mask`, `ref.loss`, `ref.kl_loss`, `ref.confidence_loss`, `grad.<name>` for every trained
parameter, `round.base_logits` [N, B, V] and `round.tokens` [N, K] (greedy, vLLM's chain over the K
drafting slots); and tests/fixtures/models/dspark-speculators/ (anchor first): speculators' own
save_pretrained of that draft (config.json with speculators_model_type dspark, model.safetensors), the
speculators layout `eval` imports.

Run with the project venv and speculators 0.9.0 importable (pip install --no-deps speculators==0.9.0, or
PYTHONPATH to its unpacked wheel):  ~/.cache/eagle-train/venv/bin/python scripts/make_dspark_reference.py
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
import speculators.models.dspark.core as dspark_core  # noqa: E402
from speculators.losses import resolve_loss_config  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
TARGET_DIR = ROOT / "tests" / "fixtures" / "models" / "tiny-qwen3"
REF = ROOT / "tests" / "fixtures" / "reference" / "dspark-head.safetensors"
REF_FILLIN = ROOT / "tests" / "fixtures" / "reference" / "dspark-fillin-head.safetensors"
SAVED = ROOT / "tests" / "fixtures" / "models" / "dspark-speculators"

BLOCK, LAYERS, RANK, MASK_ID, GAMMA, ALPHA = 4, 2, 8, 255, 4.0, 1.0
AUX_IDS = [1, 2]  # hidden_states indices (speculators' aux ids; DFlash target layers t = id - 1)
ANCHORS = [1, 3, 5, 10, 13]  # sample 0: positions 0..9, sample 1: 10..17 (blocks inside their sample)


def reference(sample_from_anchor, path, saved=None):
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
    model = dspark_core.DSparkDraftModel.from_training_args(
        layer_cfg, draft_vocab_size=tc.vocab_size, block_size=BLOCK, verifier_name_or_path=str(TARGET_DIR),
        target_layer_ids=AUX_IDS, mask_token_id=MASK_ID, draft_attn_impl="eager", markov_rank=RANK,
        enable_confidence_head=True, confidence_head_with_markov=True,
        sample_from_anchor=sample_from_anchor).float()
    assert model.config.sample_from_anchor == sample_from_anchor
    assert model.markov_head is not None and model.confidence_head is not None
    frozen = ("embed_tokens", "lm_head", "verifier")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith(frozen):
                p.requires_grad_(False)
            elif name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name == "markov_head.markov_w1.weight":
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            elif name == "confidence_head.proj.bias":
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=gen))

    anchors = torch.tensor(ANCHORS)
    select_anchors = dflash_core.select_anchors
    dflash_core.select_anchors = lambda lm, n, b: (anchors.clone(), torch.ones(len(ANCHORS), dtype=torch.bool))
    seen = {}
    backbone = model._backbone_forward

    def recording_backbone(*args, **kwargs):
        out = backbone(*args, **kwargs)
        seen["hidden"], seen["base_logits"], seen["targets"], seen["mask"], seen["idx"] = out
        return out

    model._backbone_forward = recording_backbone
    metrics_fn = dspark_core.compute_metrics

    def recording_metrics(logits, targets, confidence_logits, loss_mask, *args, **kwargs):
        seen["logits"], seen["confidence_logits"] = logits, confidence_logits
        loss, metrics = metrics_fn(logits, targets, confidence_logits, loss_mask, *args, **kwargs)
        seen["metrics"] = metrics
        return loss, metrics

    dspark_core.compute_metrics = recording_metrics
    loss_config = resolve_loss_config("kl_div", "eager")
    tv = resolve_loss_config("tv", "eager")["tv"][0]
    _, loss, metrics = model(hidden_states=hidden_states, input_ids=input_ids, loss_mask=loss_mask,
                             verifier_last_hidden_states=verifier_last, document_ids=document_ids,
                             position_ids=position_ids, loss_config=loss_config, tv_loss_fn=tv, gamma=GAMMA,
                             max_anchors=len(ANCHORS), confidence_head_alpha=ALPHA)
    loss.backward()
    with torch.no_grad():
        accept_rate = 1.0 - tv(seen["logits"], seen["targets"])[0]
        conf_loss = seen["metrics"]["confidence_loss_sum"]
        # The teacher: the target's own logits at p + k, fill-in p + k - 1 (speculators rebuilds them from the
        # last hidden state).
        idx = seen["idx"] if sample_from_anchor else (seen["idx"] - 1) % input_ids.shape[1]
        assert torch.allclose(seen["targets"][0], target_logits[idx], atol=1e-5), "teacher != target logits"
        # The greedy round of vLLM's DSpark speculator from the same block hidden states: every slot drafts
        # (anchor first), or slots 1.. (fill-in), prev_0 the anchor token.
        hidden = seen["hidden"][0].view(len(ANCHORS), BLOCK, -1)
        base = model.lm_head(hidden).float()  # [N, B, V]
        w1, w2 = model.markov_head.markov_w1.weight, model.markov_head.markov_w2.weight
        first = 0 if sample_from_anchor else 1
        tokens = torch.zeros(len(ANCHORS), BLOCK - first, dtype=torch.long)
        prev = input_ids[0, anchors]
        for i in range(first, BLOCK):
            z = base[:, i] + w1[prev] @ w2.T
            prev = z.argmax(-1)
            tokens[:, i - first] = prev
    dflash_core.select_anchors = select_anchors
    model._backbone_forward = backbone
    dspark_core.compute_metrics = metrics_fn

    out = {name: p.detach().clone().contiguous() for name, p in model.named_parameters()
           if not name.startswith(frozen)}
    out.update({f"grad.{name}": p.grad.detach().clone().contiguous() for name, p in model.named_parameters()
                if p.grad is not None})
    out.update({
        "input_ids": input_ids[0], "loss_mask": loss_mask[0], "document_ids": document_ids[0],
        "position_ids": position_ids[0], "aux_hidden": hidden_states[0].contiguous(),
        "target_last_hidden": verifier_last[0].contiguous(), "target_logits": target_logits.contiguous(),
        "anchors": anchors, "ref.logits": seen["logits"][0].detach().contiguous(),
        "ref.base_logits": seen["base_logits"][0].detach().contiguous(),
        "ref.confidence_logits": seen["confidence_logits"][0].detach().contiguous(),
        "ref.accept_rate": accept_rate.contiguous(), "ref.aligned_loss_mask": seen["mask"][0].contiguous(),
        "ref.loss": loss.detach().reshape(()), "ref.confidence_loss": conf_loss.detach().reshape(()),
        "ref.kl_loss": (loss.detach() - ALPHA * conf_loss.detach()).reshape(()),
        "round.base_logits": base.contiguous(), "round.tokens": tokens,
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(out, str(path), metadata={
        "block_size": str(BLOCK), "markov_rank": str(RANK), "mask_token_id": str(MASK_ID), "gamma": str(GAMMA),
        "confidence_head_alpha": str(ALPHA), "aux_ids": ",".join(map(str, AUX_IDS)), "draft_layers": str(LAYERS),
        "sample_from_anchor": str(sample_from_anchor).lower()})
    print(f"wrote {path}: loss {loss.item():.6f} (kl {out['ref.kl_loss'].item():.6f}, confidence "
          f"{conf_loss.item():.6f}), round tokens {tokens.tolist()}")
    if saved is not None:
        model.zero_grad(set_to_none=True)
        model.save_pretrained(str(saved))
        # Two edits, neither to what eagle-train or vLLM reads of it: the verifier's path is made the
        # repository-relative one (save_pretrained writes this machine's absolute path), and config.py (the
        # config class, for trust_remote_code loaders) is dropped: a model folder here is data, never code.
        (saved / "config.py").unlink(missing_ok=True)
        config_path = saved / "config.json"
        config = json.loads(config_path.read_text())
        config["speculators_config"]["verifier"]["name_or_path"] = "tests/fixtures/models/tiny-qwen3"
        config.pop("auto_map", None)
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        print(f"wrote {saved} (speculators' save_pretrained): {sorted(p.name for p in saved.iterdir())}")


def main():
    reference(True, REF, SAVED)
    reference(False, REF_FILLIN)


if __name__ == "__main__":
    main()
