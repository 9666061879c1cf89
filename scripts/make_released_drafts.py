#!/usr/bin/env python3
"""Released-layout drafts for the --init_draft tests, written by speculators 0.9.0's own code.

A draft a user downloads was saved by a peer's trainer, not by eagle-train. These fixtures are such drafts,
made by the peer's own classes and save_pretrained, so that `train --init_draft` and `eval` are tested on the
files the peer writes:

  tests/fixtures/models/eagle3-speculators/   speculators' Eagle3DraftModel for tiny-llama: one layer, a reduced
                                              draft vocabulary of 64 ids (d2t, t2d), aux layers [1, 2, 3], 3
                                              speculative tokens (vLLM serves this layout as method eagle3)
  tests/fixtures/models/dflash-speculators/   speculators' DFlashDraftModel for tiny-qwen3: two layers, block 4,
                                              target layers [1, 2], mask token 255, non-causal blocks
                                              (sliding_window_non_causal true: DFlash's blocks, z-lab's; speculators'
                                              default for dflash is block-causal, which vLLM serves with
                                              dflash_config.causal and eagle-train refuses by name)

The weights are speculators' initialisation, then each trainable tensor is set from a seeded normal draw (norms
near 1), so that no tensor is trivially zero or one. Two edits to what save_pretrained writes, neither to what
eagle-train or vLLM reads: the verifier's path is made the repository-relative one (save_pretrained writes this
machine's absolute path), and config.py and auto_map (the config class, for trust_remote_code loaders) are
dropped: a model folder here is data, never code.

Regenerate (speculators is not in the project venv):
  ~/.cache/eagle-train/venv/bin/python -m pip install --no-deps --target /tmp/specref speculators==0.9.0
  PYTHONPATH=/tmp/specref ~/.cache/eagle-train/venv/bin/python scripts/make_released_drafts.py
"""
import json
import pathlib
import shutil

import sys

import torch
import transformers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import speculators_shims  # noqa: E402

speculators_shims.install()
from speculators.models.dflash import core as dflash_core  # noqa: E402
from speculators.models.eagle3 import core as eagle3_core  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "models"


def perturb(model, seed):
    """Seeded values for every trainable tensor (the verifier's frozen copies kept)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith(("embed_tokens", "verifier", "lm_head")) and not p.requires_grad:
                continue
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def save(model, out, verifier):
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(str(out))
    (out / "config.py").unlink(missing_ok=True)
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    config["speculators_config"]["verifier"]["name_or_path"] = verifier
    config.pop("auto_map", None)
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out} (speculators' save_pretrained): {sorted(p.name for p in out.iterdir())}")


def eagle3():
    target = MODELS / "tiny-llama"
    tc = transformers.AutoConfig.from_pretrained(str(target))
    layer_cfg = transformers.LlamaConfig(**{**tc.to_dict(), "num_hidden_layers": 1})
    draft_ids = torch.arange(0, tc.vocab_size, tc.vocab_size // 64)[:64]  # 64 target ids, increasing
    d2t = draft_ids - torch.arange(64)
    t2d = torch.zeros(tc.vocab_size, dtype=torch.bool)
    t2d[draft_ids] = True
    model = eagle3_core.Eagle3DraftModel.from_training_args(
        layer_cfg, t2d=t2d, d2t=d2t, draft_vocab_size=64, norm_before_residual=False, ttt_steps=3,
        verifier_name_or_path=str(target), target_layer_ids=[1, 2, 3], draft_attn_impl="eager").float()
    perturb(model, 1)
    save(model, MODELS / "eagle3-speculators", "tests/fixtures/models/tiny-llama")


def dflash():
    target = MODELS / "tiny-qwen3"
    tc = transformers.AutoConfig.from_pretrained(str(target))
    layer_cfg = transformers.Qwen3Config(
        vocab_size=tc.vocab_size, hidden_size=tc.hidden_size, intermediate_size=tc.intermediate_size,
        num_hidden_layers=2, num_attention_heads=tc.num_attention_heads,
        num_key_value_heads=tc.num_key_value_heads, head_dim=tc.head_dim, rms_norm_eps=tc.rms_norm_eps,
        max_position_embeddings=tc.max_position_embeddings, rope_parameters=dict(tc.rope_parameters))
    model = dflash_core.DFlashDraftModel.from_training_args(
        layer_cfg, draft_vocab_size=tc.vocab_size, block_size=4, verifier_name_or_path=str(target),
        target_layer_ids=[1, 2], mask_token_id=255, draft_attn_impl="eager",
        sliding_window_non_causal=True).float()
    perturb(model, 2)
    save(model, MODELS / "dflash-speculators", "tests/fixtures/models/tiny-qwen3")


if __name__ == "__main__":
    eagle3()
    dflash()
