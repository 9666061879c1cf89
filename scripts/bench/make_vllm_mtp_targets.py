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
import functools
import pathlib
import sys

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
    deepseek, glm = gen.FAMILIES["deepseek_v3"], gen.FAMILIES["glm4_moe"]
    deepseek.update(
        config=functools.partial(
            deepseek["config"], intermediate_size=96, q_lora_rank=32, kv_lora_rank=512, qk_nope_head_dim=32,
            qk_rope_head_dim=64, v_head_dim=32, moe_intermediate_size=32, max_position_embeddings=512,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 128, "beta_fast": 32.0, "beta_slow": 1.0,
                             "mscale": 1.0, "mscale_all_dim": 0.8},
            initializer_range=0.05),
        folder=str(out / "deepseek-v3"), reference=str(out / "deepseek-v3.reference.safetensors"))
    glm.update(
        config=functools.partial(glm["config"], intermediate_size=96, head_dim=32, moe_intermediate_size=32,
                                 max_position_embeddings=512, initializer_range=0.05),
        folder=str(out / "glm4-moe"), reference=str(out / "glm4-moe.reference.safetensors"))
    for family in gen.FAMILIES:
        gen.make(family)


if __name__ == "__main__":
    main()
