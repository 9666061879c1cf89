#!/usr/bin/env python3
"""DeepSeek-V3 and GLM-4.5 MTP targets that vLLM's CPU build can serve, for scripts/check_vllm_mtp.py.

The test fixtures of scripts/make_mtp_deepseek_reference.py have head sizes vLLM's CPU kernels refuse (GLM's
head_dim 16: CPU_ATTN takes 32, 64, 80, ...; DeepSeek's MLA head kv_lora_rank + qk_rope_head_dim = 20: CPU_MLA's
decode kernel takes only 512 + 64, DeepSeek-V3's own). This script runs the same generator (transformers' target, the shipped MTP layer added under
vLLM's names, its own reference checks) with the hidden size 64, GLM's head_dim 32 and DeepSeek's kv_lora_rank
512 + qk_rope_head_dim 64, into OUT/deepseek-v3 and OUT/glm4-moe (and their reference files beside them).
Random weights: train them (train --draft mtp) before comparing, so the AR is not 1. --layers N gives the
targets N layers (default 2, the fixtures'; the MTP layer is model.layers.N): an EAGLE-3 head needs three
distinct aux layers, so check one on a 4-layer target (vLLM collects each aux layer once).

Usage: ~/.cache/eagle-train/venv/bin/python scripts/bench/make_vllm_mtp_targets.py OUT [--layers N]
"""
import argparse
import pathlib
import sys

import transformers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import make_mtp_deepseek_reference as gen  # noqa: E402

H = 64


def main():
    a = argparse.ArgumentParser()
    a.add_argument("out")
    a.add_argument("--layers", type=int, default=gen.L)
    o = a.parse_args()
    out = pathlib.Path(o.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    gen.H = H
    gen.L, gen.PREFIX = o.layers, f"model.layers.{o.layers}."
    V, L = gen.V, gen.L
    gen.FAMILIES["deepseek_v3"].update(
        config=lambda: transformers.DeepseekV3Config(
            vocab_size=V, hidden_size=H, intermediate_size=96, num_hidden_layers=L, num_attention_heads=4,
            num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=512, qk_nope_head_dim=32, qk_rope_head_dim=64,
            v_head_dim=32, n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=2,
            moe_intermediate_size=32, n_shared_experts=2, routed_scaling_factor=2.5, norm_topk_prob=True,
            first_k_dense_replace=1, rms_norm_eps=1e-6, max_position_embeddings=512, rope_interleave=True,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 128, "beta_fast": 32.0, "beta_slow": 1.0,
                             "mscale": 1.0, "mscale_all_dim": 0.8},
            tie_word_embeddings=False, initializer_range=0.05, attention_bias=False, bos_token_id=0,
            eos_token_id=1, num_nextn_predict_layers=1),
        folder=str(out / "deepseek-v3"), reference=str(out / "deepseek-v3.reference.safetensors"))
    gen.FAMILIES["glm4_moe"].update(
        config=lambda: transformers.Glm4MoeConfig(
            vocab_size=V, hidden_size=H, intermediate_size=96, num_hidden_layers=L, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, attention_bias=True, use_qk_norm=False, n_routed_experts=8,
            num_experts_per_tok=2, n_group=2, topk_group=1, moe_intermediate_size=32, n_shared_experts=1,
            routed_scaling_factor=1.5, norm_topk_prob=True, first_k_dense_replace=1, rms_norm_eps=1e-5,
            max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5},
            tie_word_embeddings=False, initializer_range=0.05, bos_token_id=None, eos_token_id=5,
            num_nextn_predict_layers=1),
        folder=str(out / "glm4-moe"), reference=str(out / "glm4-moe.reference.safetensors"))
    for family in gen.FAMILIES:
        gen.make(family)


if __name__ == "__main__":
    main()
