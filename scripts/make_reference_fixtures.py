#!/usr/bin/env python3
"""Creates the tiny target-model fixtures and their transformers reference outputs.

For each supported family a tiny random model is built with transformers (pinned below), saved with
save_pretrained into tests/fixtures/models/<name>/, and run on fixed inputs; the reference outputs
(hidden states of every layer, logits, greedy continuation, the same in bf16) go to
tests/fixtures/reference/<name>.safetensors. The bf16 outputs (a.bf16.*) are those of the model as
from_pretrained(dtype=torch.bfloat16) loads it: bf16 weights, RoPE inv_freq kept in fp32 (checked by
loading the folder back). For the mixtures of experts, a.bf16.routing_agrees (uint8 [layers, tokens]: 1
where the bf16 run chose the fp32 run's expert set, 1 for dense layers) and a.bf16.first_flip_layer
(int64 scalar, num_hidden_layers if no disagreement) tell which tokens' routing survives bf16. The
C++ parity tests compare against them. Reruns give the same tensors; only the order of the __metadata__
keys may change (safetensors writes them from a hash map).

Dense families (Llama, Llama 3, Mistral, Qwen2, Qwen3) and mixture-of-experts ones: Qwen3-MoE (a dense
layer among sparse ones), Mixtral (sliding window) and gpt-oss (alternating sliding/full attention,
learned attention sinks, biased router and experts, clamped SwiGLU, YaRN). tiny-gpt-oss-mxfp4 is a
gpt-oss whose experts are saved as MXFP4 blocks/scales as on the Hub; its reference outputs come from
the weights dequantized by transformers' own convert_moe_packed_tensors, and the folder is checked to
load back through transformers (Mxfp4Config(dequantize=True)) to the same logits.

Later families: Gemma 3 (text; per-layer-type RoPE, linear-scaled for full attention, sliding window, q/k
norm, (1 + w) RMSNorm, sqrt(hidden) embedding scale), Gemma 2 (attention and final-logit softcapping, the
caps low enough to bind), Phi-3 (fused qkv_proj and gate_up_proj, partial rotary, LongRoPE, whose short or
long factors are chosen per forward call: b.greedy and b.greedy_logits [steps, vocab] record a continuation
that crosses original_max_position_embeddings), Phi-4 (Phi3ForCausalLM, full rotary), Qwen3 with YaRN,
Mistral and Qwen2 with sliding windows (Qwen2's only past max_window_layers), and tiny-qwen3-fp8, a Qwen3
saved as block-scaled FP8 as the Qwen3-*-FP8 releases are (see fp8_projections), whose references come from
the weights as transformers' Fp8Dequantize makes them; the folder is checked to load back through
transformers (FineGrainedFP8Config(dequantize=True)) when accelerate is installed (5.23 requires it for FP8).

DeepSeek-V2 (tiny-deepseek-v2, see DEEPSEEK_V2): the same attention without q LoRA, the RoPE turned in fp32, the
softmax router with group_limited_greedy and no correction bias (a group gap is printed beside the top-k gap).

DeepSeek-V3 (multi-head latent attention with q LoRA, interleaved RoPE and YaRN's mscale; the sigmoid router with
a correction bias, grouped top-k and shared experts; one without q LoRA as Moonlight), GLM-4.5 (glm4_moe) and
GLM-4.7-Flash (glm4_moe_lite: DeepSeek-V3's attention with values wider than q/k, mlp_layer_types): their
checkpoints also hold an MTP layer model.layers.{L}.* as the releases do (add_mtp_layers), which neither
transformers nor the target loads.

Gemma 4 (tiny-gemma4, Gemma4ForCausalLM; see GEMMA4): per-layer head widths and key/value heads, K = V on the full
layers, proportional RoPE, KV-shared layers with double-wide MLPs, per-layer inputs, layer scalars, a final soft cap.
Gemma 4's mixture of experts (tiny-gemma4-moe, see GEMMA4_MOE): the router and experts beside the dense MLP in every
layer, as gemma-4-26B-A4B (no per-layer inputs, no KV sharing).

Also written: tests/fixtures/reference/rope.safetensors (scaled RoPE inverse frequencies, YaRN with
its attention factor) and tests/fixtures/configs/llama31-4x.json (a config in the 4.x spelling).

Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_reference_fixtures.py
Only some outputs:           ... make_reference_fixtures.py --only tiny-gpt-oss rope
(names: the FAMILIES keys, "rope", "llama31-4x"; the others are left as they are).
"""
import argparse
import contextlib
import copy
import json
import math
import pathlib
import shutil
import sys

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

PINNED = "5.23.0"
if transformers.__version__ != PINNED:
    sys.exit(f"transformers {PINNED} is required (found {transformers.__version__}): "
             f"pip install transformers=={PINNED}")

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "models"
REFS = ROOT / "tests" / "fixtures" / "reference"
CONFIGS = ROOT / "tests" / "fixtures" / "configs"

GREEDY_TOKENS = 8
LEN_A, LEN_B = 11, 7  # the two fixed prompts; B is right-padded to A's length in the padded batch

# gpt-oss, shared by tiny-gpt-oss and tiny-gpt-oss-mxfp4. swiglu_limit 1.5 (7.0 in the real model) so that
# the clamp of gate/up is hit by weights of realistic scale; YaRN as gpt-oss ships it (truncate False) with
# a small original_max_position_embeddings so its ramp matters (transformers warns that factor 4 is not
# max_position_embeddings / original_max_position_embeddings and uses the explicit factor).
GPT_OSS = dict(
    vocab_size=256, hidden_size=64, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, swiglu_limit=1.5,
    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"], sliding_window=4,
    attention_bias=True, rms_norm_eps=1e-5, max_position_embeddings=256, tie_word_embeddings=False,
    rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0,
                     "beta_slow": 1.0, "original_max_position_embeddings": 16, "truncate": False},
    bos_token_id=None, eos_token_id=5)

# Dense families that the window/YaRN/FP8 variants below start from.
MISTRAL = dict(
    vocab_size=256, hidden_size=60, intermediate_size=64, num_hidden_layers=3, num_attention_heads=5,
    num_key_value_heads=1, head_dim=12, rms_norm_eps=1e-6, max_position_embeddings=512,
    sliding_window=None, tie_word_embeddings=False,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, bos_token_id=1, eos_token_id=2)
QWEN2 = dict(
    vocab_size=320, hidden_size=48, intermediate_size=64, num_hidden_layers=3, num_attention_heads=3,
    num_key_value_heads=1, rms_norm_eps=1e-6, max_position_embeddings=512, tie_word_embeddings=True,
    use_sliding_window=False, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    bos_token_id=None, eos_token_id=5)
QWEN3 = dict(
    vocab_size=256, hidden_size=48, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, head_dim=20, rms_norm_eps=1e-6, max_position_embeddings=512,
    tie_word_embeddings=False, use_sliding_window=False,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, bos_token_id=None, eos_token_id=5)
# DeepSeek-V3 (MLA and the sigmoid router with grouped top-k): q LoRA 24, kv LoRA 32, q/k heads of 12 + 8 (rope) and
# v heads of 10 (another width than q/k), 8 experts in 4 groups, 2 groups chosen, top 3, two shared experts, one
# dense layer first; YaRN with mscale 1 and mscale_all_dim 0.8, so that both the cos/sin factor and the softmax
# scale's mscale^2 differ from 1; interleaved RoPE as DeepSeek-V3 ships it.
DEEPSEEK_V3 = dict(
    vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=32, qk_nope_head_dim=12,
    qk_rope_head_dim=8, v_head_dim=10, n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=3, n_group=4,
    topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=1, num_mtp_layers=1,
    rope_interleave=True, rms_norm_eps=1e-6, max_position_embeddings=256, tie_word_embeddings=False,
    rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                     "mscale": 1.0, "mscale_all_dim": 0.8, "original_max_position_embeddings": 16},
    bos_token_id=0, eos_token_id=1)
# DeepSeek-V2: DeepSeek-V3's MLA without q LoRA (as DeepSeek-V2-Lite), its RoPE always interleaved and turned in fp32,
# YaRN with DeepSeek-V2's mscale 0.707 (both); the softmax router with group_limited_greedy (as DeepSeek-V2: the
# topk_group groups of the best single score; with k 3 of 2 groups of 2 the choice then differs from greedy's for
# some tokens), weights never renormalised, times routed_scaling_factor; no correction bias; shared experts; one
# dense layer first.
DEEPSEEK_V2 = dict(
    vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=12,
    qk_rope_head_dim=8, v_head_dim=10, n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=3, n_group=4,
    topk_group=2, topk_method="group_limited_greedy", routed_scaling_factor=2.0, norm_topk_prob=False,
    first_k_dense_replace=1, rms_norm_eps=1e-6, max_position_embeddings=256, tie_word_embeddings=False,
    rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                     "mscale": 0.707, "mscale_all_dim": 0.707, "original_max_position_embeddings": 16},
    bos_token_id=0, eos_token_id=1)
# The hybrid linear-attention families (Qwen3.5 dense and MoE, Qwen3-Next): Gated DeltaNet layers (linear_attention)
# among gated full-attention ones, 2 key heads of 8 serving 4 value heads of 12 (grouped), a conv of 4 taps, q/k
# heads of 16 with partial rotary 0.25 (their default: 4 features turn), every RMSNorm (1 + w).
QWEN3_5 = dict(
    vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=12,
    linear_num_key_heads=2, linear_num_value_heads=4,
    layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"], rms_norm_eps=1e-6,
    max_position_embeddings=512, tie_word_embeddings=False,
    rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
    bos_token_id=None, eos_token_id=5)
QWEN3_5_MOE = {k: v for k, v in QWEN3_5.items() if k != "intermediate_size"} | dict(
    num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=24)
# name -> (config class, config kwargs); each family's seed is 1234 + its position here, so new families go
# at the end. Odd head counts, grouped-query attention, tied and untied embeddings, a llama3 rope scaling,
# q/k/v bias (Qwen2), q/k norm with an explicit head_dim (Qwen3); mixtures of experts: Qwen3-MoE with
# normalised top-k and a dense MLP in layer 2 (mlp_only_layers), Mixtral with a sliding window of 8 (shorter
# than the 11-token prompt and its greedy continuation; transformers lets query q see keys k with
# q - window < k <= q), gpt-oss (see GPT_OSS) dense and with MXFP4 experts. save_pretrained writes the MoE
# experts of Qwen3-MoE and Mixtral per expert as on the Hub (mlp.experts.N.{gate,up,down}_proj.weight,
# block_sparse_moe.experts.N.w1/w2/w3.weight and block_sparse_moe.gate.weight), gpt-oss's as 3-D tensors.
# Gemma 2's softcaps are 2 (attention) and 10 (logits), 50 and 30 in the real models: with weights of realistic
# scale the scores stay below 3 and the logits reach 75, so these bind on some scores and a fifth of the logits
# while keeping the top logits apart (a cap of 3 rounds several of them to exactly 3.0 in fp32, a tie).
# Gemma 4's text model with every piece it adds: sliding layers of head_dim 16 and 2 key/value heads, full ones of
# 32 (per_layer_config, from global_head_dim) with 1 (num_global_key_value_heads) whose values are k_proj's output
# (attention_k_eq_v), proportional RoPE on the full layers (4 of 16 pairs turn), value norm, the last two layers
# (one of each type) KV-shared with a double-wide MLP, per-layer inputs of 8, final logits capped at 10 (binding on
# some), and layer scalars drawn in (0.5, 1.5) by randomize (transformers initialises them to 1).
GEMMA4 = dict(
    vocab_size=256, hidden_size=48, intermediate_size=48, num_hidden_layers=5, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=1, attention_k_eq_v=True,
    layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "full_attention"],
    sliding_window=4, num_kv_shared_layers=2, use_double_wide_mlp=True, hidden_size_per_layer_input=8,
    vocab_size_per_layer_input=256, final_logit_softcapping=10.0, hidden_activation="gelu_pytorch_tanh",
    rms_norm_eps=1e-6, max_position_embeddings=512, tie_word_embeddings=True, pad_token_id=0, bos_token_id=2,
    eos_token_id=1)
# Gemma 4's MoE block (enable_moe_block) as gemma-4-26B-A4B has it: in every layer the router (on the residual stream:
# RMS-normed without a weight, times its scale and hidden_size^-1/2, softmax, top k renormalised, times
# per_expert_scale) and the experts (GELU-tanh gated, on their own pre-norm) beside the dense MLP, each output normed
# before the two are added and normed again; 8 experts, top 2, of 16; no per-layer inputs and no KV sharing, as the
# 26B. randomize draws router.scale near sqrt(hidden_size) (router logits of order 1) and per_expert_scale in
# (0.5, 1.5) (transformers initialises both to 1).
GEMMA4_MOE = GEMMA4 | dict(
    num_hidden_layers=4, layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    num_kv_shared_layers=0, use_double_wide_mlp=False, hidden_size_per_layer_input=0, enable_moe_block=True,
    num_experts=8, top_k_experts=2, moe_intermediate_size=16)
FAMILIES = {
    "tiny-llama": (transformers.LlamaConfig, dict(
        vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=256, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, bos_token_id=1, eos_token_id=2)),
    "tiny-llama3": (transformers.LlamaConfig, dict(
        vocab_size=256, hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=3,
        num_key_value_heads=1, rms_norm_eps=1e-5, max_position_embeddings=1024, tie_word_embeddings=True,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
        bos_token_id=1, eos_token_id=[2, 3])),
    "tiny-mistral": (transformers.MistralConfig, MISTRAL),
    "tiny-qwen2": (transformers.Qwen2Config, QWEN2),
    "tiny-qwen3": (transformers.Qwen3Config, QWEN3),
    "tiny-qwen3-moe": (transformers.Qwen3MoeConfig, dict(
        vocab_size=256, hidden_size=48, intermediate_size=64, moe_intermediate_size=24, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[2], rms_norm_eps=1e-6,
        max_position_embeddings=512, tie_word_embeddings=False, use_sliding_window=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, bos_token_id=None, eos_token_id=5)),
    "tiny-mixtral": (transformers.MixtralConfig, dict(
        vocab_size=256, hidden_size=48, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, sliding_window=8, rms_norm_eps=1e-5,
        max_position_embeddings=512, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, bos_token_id=1, eos_token_id=2)),
    "tiny-gpt-oss": (transformers.GptOssConfig, GPT_OSS),
    "tiny-gpt-oss-mxfp4": (transformers.GptOssConfig, GPT_OSS),
    "tiny-gemma3": (transformers.Gemma3TextConfig, dict(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        sliding_window=4, hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, max_position_embeddings=512,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0}},
        attn_logit_softcapping=None, final_logit_softcapping=None, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=2, eos_token_id=1)),
    "tiny-gemma2": (transformers.Gemma2Config, dict(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24, sliding_window=4,
        hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attn_logit_softcapping=2.0, final_logit_softcapping=10.0, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=2, eos_token_id=1)),
    "tiny-phi3": (transformers.Phi3Config, dict(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=64, original_max_position_embeddings=8,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                         "short_factor": [1.0, 1.05, 1.1, 1.15, 1.2, 1.3],
                         "long_factor": [2.0, 2.5, 3.25, 4.5, 6.0, 8.0]},
        sliding_window=None, tie_word_embeddings=False, pad_token_id=None, bos_token_id=1, eos_token_id=5)),
    "tiny-phi4": (transformers.Phi3Config, dict(
        vocab_size=256, hidden_size=48, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=512, original_max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": 250000.0}, sliding_window=None,
        tie_word_embeddings=False, pad_token_id=None, bos_token_id=1, eos_token_id=5)),
    "tiny-qwen3-yarn": (transformers.Qwen3Config, QWEN3 | dict(
        max_position_embeddings=32,
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8,
                         "rope_theta": 1000000.0})),
    "tiny-mistral-window": (transformers.MistralConfig, MISTRAL | dict(sliding_window=4, max_position_embeddings=512)),
    "tiny-qwen2-window": (transformers.Qwen2Config, QWEN2 | dict(
        use_sliding_window=True, sliding_window=4, max_window_layers=1)),
    "tiny-qwen3-fp8": (transformers.Qwen3Config, QWEN3 | dict(
        hidden_size=64, intermediate_size=96, head_dim=16, num_attention_heads=4, num_key_value_heads=2)),
    "tiny-deepseek-v3": (transformers.DeepseekV3Config, DEEPSEEK_V3),
    "tiny-deepseek-v3-nolora": (transformers.DeepseekV3Config, DEEPSEEK_V3 | dict(
        num_hidden_layers=2, q_lora_rank=None, rope_interleave=False, n_group=1, topk_group=1, num_experts_per_tok=2,
        norm_topk_prob=False, routed_scaling_factor=1.0, first_k_dense_replace=0, n_shared_experts=1,
        tie_word_embeddings=True, num_mtp_layers=0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "tiny-glm4-moe": (transformers.Glm4MoeConfig, dict(
        vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, attention_bias=True, use_qk_norm=True,
        n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1,
        routed_scaling_factor=1.5, norm_topk_prob=True, first_k_dense_replace=1, num_mtp_layers=1, rms_norm_eps=1e-5,
        max_position_embeddings=512, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5},
        bos_token_id=None, eos_token_id=5)),
    "tiny-glm4-moe-lite": (transformers.Glm4MoeLiteConfig, dict(
        vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=32, qk_nope_head_dim=12,
        qk_rope_head_dim=8, v_head_dim=24, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=1,
        topk_group=1, routed_scaling_factor=1.8, norm_topk_prob=True, mlp_layer_types=["sparse", "dense", "sparse"],
        rope_interleave=True, rms_norm_eps=1e-5, max_position_embeddings=512, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, bos_token_id=0, eos_token_id=1)),
    "tiny-qwen3-next": (transformers.Qwen3NextConfig, QWEN3_5_MOE | dict(
        intermediate_size=96, mlp_only_layers=[1], decoder_sparse_step=1, norm_topk_prob=True, num_experts=4,
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"])),
    "tiny-qwen3-5": (transformers.Qwen3_5TextConfig, QWEN3_5 | dict(tie_word_embeddings=True)),
    "tiny-qwen3-5-moe": (transformers.Qwen3_5MoeTextConfig, QWEN3_5_MOE),
    # Qwen3_5ForConditionalGeneration as Qwen3.5 ships: the text model under model.language_model, a (tiny) vision
    # tower under model.visual that a text-only target never loads.
    "tiny-qwen3-5-vl": (transformers.Qwen3_5Config, dict(
        # Qwen3.5's text RoPE as released: multimodal sections, one position for all three in text.
        text_config=QWEN3_5 | dict(rope_parameters=QWEN3_5["rope_parameters"] | dict(
            mrope_section=[1, 1, 0], mrope_interleaved=True)),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2,
                                                patch_size=4, temporal_patch_size=2, spatial_merge_size=2,
                                                out_hidden_size=64, num_position_embeddings=16),
        image_token_id=250, video_token_id=251, vision_start_token_id=252, vision_end_token_id=253,
        tie_word_embeddings=False)),
    # Gemma 4 (see GEMMA4): every piece its text model adds to Gemma 3.
    "tiny-gemma4": (transformers.Gemma4TextConfig, GEMMA4),
    # DeepSeek-V2 (see DEEPSEEK_V2), after the others so that they keep their seeds.
    "tiny-deepseek-v2": (transformers.DeepseekV2Config, DEEPSEEK_V2),
    # Gemma 4's mixture of experts (see GEMMA4_MOE), last for the same reason.
    "tiny-gemma4-moe": (transformers.Gemma4TextConfig, GEMMA4_MOE),
}
# Hybrid linear-attention families: also prompts c and d longer than the delta rule's chunk of 64 (c.*, d.*), so that
# a packed row of both starts a document inside a chunk.
LINEAR = {"tiny-qwen3-next", "tiny-qwen3-5", "tiny-qwen3-5-moe", "tiny-qwen3-5-vl"}
LEN_C, LEN_D = 150, 90
# Families whose checkpoint also holds num_mtp_layers MTP layers as model.layers.{L..} (DeepSeek-V3, GLM-4.5 ship
# them so, GLM-4.7-Flash too); transformers does not load them (see add_mtp_layers).
MTP_LAYERS = {"tiny-deepseek-v3", "tiny-glm4-moe", "tiny-glm4-moe-lite"}
# Families whose expert weights are saved MXFP4-quantized (see write_mxfp4_checkpoint).
MXFP4 = {"tiny-gpt-oss-mxfp4"}
# What openai/gpt-oss-20b's config.json says.
MXFP4_QUANTIZATION_CONFIG = {
    "quant_method": "mxfp4",
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                               "lm_head"]}


def randomize(model, gen):
    """Weights of realistic scale (transformers' init is 0.02, which makes near-tied logits): linear
    weights N(0, 1/fan_in), biases and norm offsets small, embeddings N(0, 1). Mixture-of-experts
    tensors: the 3-D expert weights N(0, 1/fan_in) too, fan_in being the input dim (shape[1] in the
    transposed [E, in, out] gpt-oss layout, shape[2] in the [E, out, in] Mixtral/Qwen3-MoE one); routers
    are linear weights (and a bias for gpt-oss); gpt-oss's attention sinks ([heads]) N(0, 1). Gemma's RMSNorm
    scales by (1 + weight), so its norm weights are the offsets alone, 0.1 N(0, 1)."""
    # Gemma 4's RMSNorm scales by w itself.
    one_plus = model.config.model_type.startswith(("gemma", "qwen3_5", "qwen3_next")) and \
        not model.config.model_type.startswith("gemma4")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                # Qwen3.5's gated norm in the Gated DeltaNet and the vision tower's LayerNorms scale by w itself.
                plain = not one_plus or name.endswith("linear_attn.norm.weight") or ".visual." in name
                p.copy_((1.0 if plain else 0.0) + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("A_log"):
                # Decay rates exp(A_log) in (0.02, 0.5): with softplus(a + dt_bias) ~ 0.7 the state keeps most of
                # itself per token, so that it carries across the delta rule's chunks (transformers: U(0.01, 16)).
                p.copy_(torch.empty(p.shape).uniform_(0.02, 0.5, generator=gen).log())
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("self_attn.sinks"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("router.scale"):  # Gemma 4's router input scale [H]: logits of order 1
                p.copy_(math.sqrt(p.shape[0]) * torch.empty(p.shape).uniform_(0.5, 1.5, generator=gen))
            elif name.endswith("router.per_expert_scale"):  # Gemma 4's weight per expert [E]
                p.copy_(torch.empty(p.shape).uniform_(0.5, 1.5, generator=gen))
            elif p.dim() == 3:  # experts.gate_up_proj / experts.down_proj
                experts = model.get_submodule(name.rsplit(".", 1)[0])
                fan_in = p.shape[1] if getattr(experts, "is_transposed", False) else p.shape[2]
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
            elif p.dim() == 1:  # other vectors (none outside the vision tower): small, as biases
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
        # The sigmoid routers' correction bias (DeepSeek-V3, GLM-4.5) is a buffer: 0.1 N(0, 1), of the order of the
        # gaps between sigmoid scores, so that it changes some choices.
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=gen))
            elif name.endswith("layer_scalar"):  # Gemma 4's per-layer output scale (a persistent buffer)
                b.copy_(torch.empty(b.shape).uniform_(0.5, 1.5, generator=gen))


FP4_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def mxfp4_experts(model, gen):
    """Random MXFP4 expert weights for a gpt-oss model, as openai/gpt-oss-* ship them: for each
    experts.gate_up_proj / experts.down_proj, `<proj>_blocks` uint8 [E, out_rows, in/32, 16] (two FP4 e2m1
    values a byte, low nibble first, along the input dim) and `<proj>_scales` uint8 [E, out_rows, in/32]
    (a power of two per 32 inputs, exponent biased by 127); out_rows is 2I for gate_up (gate and up
    interleaved, as the dense layout's columns) and H for down. The weights transformers dequantizes them
    to (convert_moe_packed_tensors, the dense [E, in, out] layout) are loaded into the model. Random
    nibbles have an RMS of about 2.93, so the scale exponents are centred (+-1) on what gives a weight RMS
    near 1/sqrt(fan_in). Returns the packed tensors by checkpoint name.

    This is the layout transformers' Mxfp4Deserialize reads (blocks [E, out, in/2] viewed transposed as the
    triton [E, in/2, out], packed along the input dim) and Mxfp4ReverseDeserialize writes back; it is also
    what triton_kernels' downcast_to_mxfp_torch (used by quantize_to_mxfp4) makes of the dense [E, in, out]
    weights quantized along axis 1, the input dim (checked on these weights). Note that 5.23's Mxfp4Quantize
    (on-the-fly quantization, GPU only) transposes the dense tensor to [E, out, in] before quantizing along
    axis 1, i.e. along the output dim; that path is not what the Hub checkpoints hold."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
    lut = torch.tensor(FP4_E2M1, dtype=torch.float64)
    packed = {}
    with torch.no_grad():
        for name, experts in model.named_modules():
            if not isinstance(experts, GptOssExperts):
                continue
            for proj in ("gate_up_proj", "down_proj"):
                dense = getattr(experts, proj)  # [E, in, out]
                n_exp, fan_in, rows = dense.shape
                centre = 127 + round(math.log2(1.0 / (math.sqrt(fan_in) * math.sqrt(68.5 / 8))))
                blocks = torch.randint(0, 256, (n_exp, rows, fan_in // 32, 16), generator=gen).to(torch.uint8)
                scales = torch.randint(centre - 1, centre + 2, (n_exp, rows, fan_in // 32),
                                       generator=gen).to(torch.uint8)
                weights = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
                assert weights.shape == dense.shape, (name, proj, weights.shape, dense.shape)
                # The layout, decoded independently: dense[e, k, r] = fp4(nibble k of row r) * 2^(scale - 127).
                nib = torch.stack([blocks & 0x0F, blocks >> 4], -1).reshape(n_exp, rows, fan_in).long()
                mine = lut[nib] * torch.exp2(scales.double() - 127).repeat_interleave(32, -1)
                assert torch.equal(mine.transpose(1, 2).float(), weights), (name, proj)
                dense.copy_(weights)
                packed[f"{name}.{proj}_blocks"] = blocks
                packed[f"{name}.{proj}_scales"] = scales
    return packed


def add_mtp_layers(out_dir, config, gen):
    """Appends the checkpoint's MTP layers as DeepSeek-V3 and GLM-4.5 ship them: model.layers.{L + i}.* for the
    num_mtp_layers (num_nextn_predict_layers) after the last decoder layer, each a decoder layer (here a copy of
    the last one's tensors) plus enorm, hnorm, eh_proj and shared_head.norm. transformers' *ForCausalLM does not
    load them (unexpected keys, ignored); the target must not either."""
    path = out_dir / "model.safetensors"
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    L, H = config.num_hidden_layers, config.hidden_size
    last = f"model.layers.{L - 1}."
    for i in range(getattr(config, "num_mtp_layers", 1)):  # Glm4MoeLiteConfig has no field: one, as GLM-4.7-Flash
        p = f"model.layers.{L + i}."
        for k in [k for k in tensors if k.startswith(last)]:
            tensors[p + k[len(last):]] = tensors[k].clone()
        tensors[p + "enorm.weight"] = 1.0 + 0.1 * torch.randn(H, generator=gen)
        tensors[p + "hnorm.weight"] = 1.0 + 0.1 * torch.randn(H, generator=gen)
        tensors[p + "eh_proj.weight"] = torch.randn(H, 2 * H, generator=gen) / math.sqrt(2 * H)
        tensors[p + "shared_head.norm.weight"] = 1.0 + 0.1 * torch.randn(H, generator=gen)
    save_file(tensors, str(path), metadata=metadata)


def write_mxfp4_checkpoint(out_dir, packed):
    """Replaces the dense expert weights of a saved gpt-oss checkpoint by their MXFP4 blocks/scales (the
    biases stay dense) and adds the quantization_config of openai/gpt-oss-20b to config.json."""
    path = out_dir / "model.safetensors"
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    for key in packed:
        dense_key = key.removesuffix("_blocks").removesuffix("_scales")
        tensors.pop(dense_key, None)
    tensors.update(packed)
    save_file(tensors, str(path), metadata=metadata)
    cfg_path = out_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"] = MXFP4_QUANTIZATION_CONFIG
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


# Families whose dense projections are saved as block-scaled FP8 (see fp8_projections).
FP8 = {"tiny-qwen3-fp8"}
FP8_BLOCK = (16, 16)  # 128 x 128 in the releases; 16 x 16 so that the tiny matrices have several blocks
# What the Qwen3-*-FP8 releases' config.json says (e.g. Qwen3-4B-Thinking-2507-FP8), with the block size above.
FP8_QUANTIZATION_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                           "weight_block_size": list(FP8_BLOCK), "modules_to_not_convert": ["lm_head"]}
FP8_PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                   "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def fp8_projections(model):
    """Block-scaled FP8 weights for the attention and MLP projections of a dense model, as the Qwen3-*-FP8
    releases ship them: `<proj>.weight` float8_e4m3fn [out, in] and `<proj>.weight_scale_inv` fp32
    [ceil(out/16), ceil(in/16)], the dense weight being weight * weight_scale_inv of its block. Made the way
    those checkpoints were: each block of the randomized fp32 weight scaled so that its largest |value| is 448
    (scale_inv = amax / 448) and cast (round to nearest) to e4m3. The dense weights loaded into the model are
    what transformers' Fp8Dequantize (the load-time dequantization of FineGrainedFP8Config(dequantize=True))
    makes of them: fp8 -> fp32, times the block's fp32 scale in fp32, then cast to the parameter's dtype (so
    a bf16 load rounds the fp32 product once); checked against an independent decoding that repeats the
    scales over (partial) blocks. The other tensors (embeddings, norms, lm_head) are bf16 in the releases
    (torch_dtype bfloat16) and so in write_quantized_checkpoint: their values are rounded to bf16 here, the
    fp32 references computing with those. Returns the FP8 tensors by checkpoint name.

    Every matrix here is a whole number of 16 x 16 blocks, as in the Qwen3 FP8 releases (128 x 128). With a
    partial last block the scale grid is ceil(out/16) x ceil(in/16) (FP8Linear's shape, and how its kernels
    and _dequantize_fp8_weight read it), but 5.23's load-time Fp8Dequantize derives the block from the grid
    (rows // scale_rows): it raises "not divisible by scale grid" (e.g. 40 rows, 3 scale rows) or silently
    uses a wrong block (56 rows, 4 scale rows: blocks of 14), so such a folder cannot be checked by loading
    it back through transformers."""
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize
    bm, bn = FP8_BLOCK
    fp8_max = torch.finfo(torch.float8_e4m3fn).max
    packed = {}
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            for proj in FP8_PROJECTIONS:
                linear = layer.get_submodule(proj)
                w = linear.weight.detach()
                rows, cols = w.shape
                assert rows % bm == 0 and cols % bn == 0, (proj, w.shape)  # see the FP8 note in the docstring
                blocks = w.reshape(rows // bm, bm, cols // bn, bn)
                scale = (blocks.abs().amax(dim=(1, 3)) / fp8_max).float()
                q = (blocks / scale[:, None, :, None]).reshape(rows, cols).to(torch.float8_e4m3fn)
                dense = Fp8Dequantize(None)._dequantize_one(q, scale, output_dtype=torch.float32)
                expand = scale.repeat_interleave(bm, 0)[:rows].repeat_interleave(bn, 1)[:, :cols]
                assert torch.equal(q.float() * expand, dense), (i, proj)
                linear.weight.copy_(dense)
                name = f"model.layers.{i}.{proj}"
                packed[f"{name}.weight"] = q
                packed[f"{name}.weight_scale_inv"] = scale
        for name, p in model.named_parameters():
            if name.removesuffix(".weight") not in {k.removesuffix(".weight") for k in packed}:
                p.copy_(p.to(torch.bfloat16).float())
    return packed


def write_fp8_checkpoint(out_dir, packed):
    """Replaces the projection weights of a saved checkpoint by their FP8 values and scales, stores the other
    tensors as bf16 (their values are bf16 already, see fp8_projections), and adds the quantization_config and
    dtype bfloat16 to config.json, as the Qwen3-*-FP8 releases have."""
    path = out_dir / "model.safetensors"
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    for k, t in tensors.items():
        if k not in packed:
            assert torch.equal(t.to(torch.bfloat16).float(), t), k
            tensors[k] = t.to(torch.bfloat16)
    tensors.update(packed)
    save_file(tensors, str(path), metadata=metadata)
    cfg_path = out_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"] = FP8_QUANTIZATION_CONFIG
    cfg["dtype"] = "bfloat16"
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def fp8_load_config():
    """FineGrainedFP8Config(dequantize=True), or None when transformers cannot load FP8 here: 5.23's
    FineGrainedFP8HfQuantizer.validate_environment raises "Loading an FP8 quantized model requires accelerate"
    before it looks at dequantize, and accelerate is not in the project venv (install it to run the checks)."""
    from transformers.utils import is_accelerate_available
    if not is_accelerate_available():
        return None
    return transformers.FineGrainedFP8Config(dequantize=True)


def check_fp8_loads(out_dir, ref, ids_a, ids_b, padded, mask):
    """Loads the FP8 folder back with transformers (dequantized at load, to fp32) and checks its logits. With
    a pre-quantized FP8 checkpoint and dequantize=True, 5.23 casts only the dequantized weights to the dtype
    asked for (Fp8Dequantize writes the parameter's dtype) and leaves every other tensor in the checkpoint's
    dtype (HfQuantizer.get_new_dtype returns None as each converter carries the Fp8Dequantize op), so
    dtype=float32 gives fp32 projections beside bf16 norms and embeddings, on which the forward fails ("expected
    m1 and m2 to have the same dtype"); those are upcast here (exactly) before the forward. dtype=bfloat16,
    the checkpoint's, loads a model that runs (check_bf16_loads)."""
    quant = fp8_load_config()
    if quant is None:
        print(f"{out_dir.name}: FP8 load-back check skipped: transformers needs accelerate to load FP8")
        return
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        out_dir, quantization_config=quant, dtype=torch.float32, attn_implementation="eager").eval()
    left = {n for n, p in loaded.named_parameters() if p.dtype != torch.float32}
    assert left == {n for n, p in loaded.named_parameters() if "_proj." not in n}, sorted(left)
    loaded.float()
    worst = 0.0
    with torch.no_grad():
        for key, ids, m in (("a", ids_a, None), ("b", ids_b, None), ("padded", padded, mask)):
            logits = run(loaded, ids, m)[1]
            diff = (logits - ref[f"{key}.logits"]).abs().max().item()
            assert diff <= 1e-5, f"{out_dir.name}: transformers' FP8 load differs by {diff} on {key}"
            worst = max(worst, diff)
    print(f"{out_dir.name}: loaded back by transformers (FineGrainedFP8Config(dequantize=True)), "
          f"max logit difference {worst:.3g}")


class SoftcapHits:
    """Counts, while active, the Gemma 2 attention scores (query-key products times the scaling, at the
    positions the mask lets through) and the final logits whose |value / cap| exceeds 1 before the tanh
    softcapping, by wrapping the modeling module's eager_attention_forward and hooking lm_head."""

    def __init__(self, model):
        self.model, self.config = model, model.config
        self.module = sys.modules[type(model.model.layers[0].self_attn).__module__]
        self.attn = self.attn_total = self.logit = self.logit_total = 0
        self.attn_change = self.logit_change = 0.0

    def __enter__(self):
        self.orig = self.module.eager_attention_forward

        def wrapped(module, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None, **kw):
            if softcap is not None:
                k = self.module.repeat_kv(key, module.num_key_value_groups)
                scores = torch.matmul(query, k.transpose(2, 3)) * scaling
                allowed = (attention_mask == 0).expand_as(scores) if attention_mask is not None else \
                    torch.ones_like(scores, dtype=torch.bool)
                s = scores[allowed]
                self.attn += int((s.abs() > softcap).sum())
                self.attn_total += s.numel()
                self.attn_change = max(self.attn_change, (s - softcap * torch.tanh(s / softcap)).abs().max().item())
            return self.orig(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                             softcap=softcap, **kw)
        self.module.eager_attention_forward = wrapped

        def hook(_m, _args, out):
            cap = self.config.final_logit_softcapping
            self.logit += int((out.abs() > cap).sum())
            self.logit_total += out.numel()
            self.logit_change = max(self.logit_change, (out - cap * torch.tanh(out / cap)).abs().max().item())
        self.handle = self.model.lm_head.register_forward_hook(hook)
        return self

    def __exit__(self, *exc):
        self.module.eager_attention_forward = self.orig
        self.handle.remove()


class ClampHits:
    """Counts, while active, the gpt-oss SwiGLU inputs beyond swiglu_limit (gate > limit, |up| > limit)
    of the routed tokens, by wrapping each experts module's _apply_gate (what the eager forward calls)."""

    def __init__(self, model):
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
        self.experts = [m for m in model.modules() if isinstance(m, GptOssExperts)]
        self.gate = self.up = self.total = 0

    def __enter__(self):
        for m in self.experts:
            def wrapped(gate_up, m=m, orig=type(m)._apply_gate):
                gate, up = gate_up[..., ::2], gate_up[..., 1::2]
                self.gate += int((gate > m.limit).sum())
                self.up += int((up.abs() > m.limit).sum())
                self.total += gate.numel()
                return orig(m, gate_up)
            m._apply_gate = wrapped
        return self

    def __exit__(self, *exc):
        for m in self.experts:
            del m._apply_gate


def check_mxfp4_loads(out_dir, ref, ids_a, ids_b, padded, mask):
    """Loads the MXFP4 folder back with transformers and checks its logits. On CPU the experts are
    dequantized at load (Mxfp4Dequantize -> convert_moe_packed_tensors, to the dtype asked for), which needs
    the explicit Mxfp4Config(dequantize=True): without it 5.23 first validates the environment for the
    triton kernels and raises "Using mxfp4 requires Accelerate" when accelerate is not installed (it is
    not in the project venv), before it would fall back to dequantizing for lack of the `kernels` package."""
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        out_dir, quantization_config=transformers.Mxfp4Config(dequantize=True), dtype=torch.float32,
        attn_implementation="eager", experts_implementation="eager")
    loaded.eval()
    worst = 0.0
    with torch.no_grad():
        for key, ids, m in (("a", ids_a, None), ("b", ids_b, None), ("padded", padded, mask)):
            logits = run(loaded, ids, m)[1]
            diff = (logits - ref[f"{key}.logits"]).abs().max().item()
            assert diff <= 1e-5, f"{out_dir.name}: transformers' MXFP4 load differs by {diff} on {key}"
            worst = max(worst, diff)
    print(f"{out_dir.name}: loaded back by transformers (Mxfp4Config(dequantize=True)), "
          f"max logit difference {worst:.3g}")


class Routing:
    """Records, while active, each sparse layer's router output on the forward passes: the chosen experts
    (router_indices, what the experts are then run for) and the router logits, by a forward hook on every
    router module (the Qwen3MoeTopKRouter / MixtralTopKRouter / GptOssTopKRouter, whose forward returns
    (router_logits, router_scores, router_indices); DeepseekV3TopkRouter / Glm4MoeTopkRouter too; Gemma4TextRouter
    returns the softmax itself first). `layers` maps a
    layer index to (choice scores, indices) of the last pass, [tokens, experts] and [tokens, top_k]; dense layers (Qwen3-MoE's mlp_only_layers) have none."""

    def __init__(self, model):
        self.routers = [(int(n.split(".layers.")[1].split(".")[0]), m) for n, m in model.named_modules()
                        if type(m).__name__.endswith(("TopKRouter", "TopkRouter", "Gemma4TextRouter"))]
        self.layers, self.hooks, self.group_gap = {}, [], math.inf

    def __enter__(self):
        for layer, m in self.routers:
            def hook(m, _args, out, layer=layer):
                # The scores the choice is made from: the softmax of the logits, or sigmoid + correction bias
                # (DeepSeek-V3, GLM-4.5).
                logits = out[0].detach().double()
                bias = getattr(m, "e_score_correction_bias", None)
                scores = logits.sigmoid() + bias.double() if bias is not None else torch.softmax(logits, -1)
                if type(m).__name__ == "Gemma4TextRouter":
                    scores = logits  # its router_probabilities: the softmax over all experts already
                if getattr(m, "topk_method", None) == "group_limited_greedy":
                    # DeepSeek-V2: the gap between the topk_group-th and the next group's best score, then the
                    # choice among the kept groups' experts (the others' scores zeroed, as the router does).
                    g = scores.view(-1, m.num_group, m.num_experts // m.num_group).max(-1).values
                    top = g.sort(-1, descending=True).values
                    self.group_gap = min(self.group_gap, (top[:, m.topk_group - 1] - top[:, m.topk_group]).min().item())
                    keep = torch.zeros_like(g).scatter_(1, g.topk(m.topk_group, -1).indices, 1.0).bool()
                    scores = scores.masked_fill(~keep.repeat_interleave(m.num_experts // m.num_group, -1), 0.0)
                self.layers[layer] = (scores, out[2].detach())
            self.hooks.append(m.register_forward_hook(hook))
        return self

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()
        self.hooks = []


def routing_agreement(config, fp32, bf16, top_k):
    """`a.bf16.routing_agrees` uint8 [layers, tokens]: 1 where the bf16 run chose the same expert set as
    the fp32 run for that token and sparse layer, 1 for dense layers; `a.bf16.first_flip_layer` int64
    scalar: the first layer with a disagreement, num_hidden_layers if none. Also returns the smallest gap,
    in the fp32 run, between the k-th and the (k+1)-th largest router score (the softmax over all
    experts of the router logits; sigmoid + e_score_correction_bias for DeepSeek-V3 and GLM-4.5, where the groups
    also decide) over the tokens and sparse layers."""
    n_layers = config.num_hidden_layers
    tokens = next(iter(fp32.layers.values()))[1].shape[0]
    agrees = torch.ones(n_layers, tokens, dtype=torch.uint8)
    min_gap = math.inf
    for layer, (logits, idx) in fp32.layers.items():
        idx_bf = bf16.layers[layer][1]
        same = (idx.sort(-1).values == idx_bf.sort(-1).values).all(-1)
        agrees[layer] = same.to(torch.uint8)
        probs = logits.sort(-1, descending=True).values  # the router's choice scores (Routing)
        min_gap = min(min_gap, (probs[:, top_k - 1] - probs[:, top_k]).min().item())
    flips = (agrees == 0).any(-1).nonzero()
    first = int(flips[0]) if len(flips) else n_layers
    return agrees, torch.tensor(first, dtype=torch.int64), min_gap


def to_bf16_as_loaded(model):
    """model.to(torch.bfloat16), then its RoPE buffers (the non-persistent fp32 *inv_freq and
    *original_inv_freq, per layer type for Gemma 3, which .to() would round to bf16) and the routers'
    e_score_correction_bias (DeepSeek-V3, GLM-4.5: _keep_in_fp32_modules_strict) restored to their fp32
    values: the model that from_pretrained(dtype=torch.bfloat16) gives (checked in make by loading the saved
    folder back). Gemma's embed_scale (sqrt(hidden_size), a non-persistent 0-d buffer) is bf16 there, as .to()
    makes it (its forward casts it to the embedding's dtype anyway)."""
    kept = {(owner, buf): b.detach().clone() for owner, m in model.named_modules()
            for buf, b in m._buffers.items()
            if b is not None and b.dtype == torch.float32
            and ((buf in m._non_persistent_buffers_set and buf.endswith("inv_freq"))
                 or buf == "e_score_correction_bias")}
    model = model.to(torch.bfloat16)
    for (owner, buf), value in kept.items():
        model.get_submodule(owner)._buffers[buf] = value
    return model


def check_bf16_loads(out_dir, bf, ids, hidden, logits, quant=None):
    """from_pretrained(out_dir, dtype=torch.bfloat16) with eager attention and experts (dequantizing MXFP4 or
    FP8 at load: quant is the quantization config to load with) must hold the same parameters and buffers
    (dtypes and values) as to_bf16_as_loaded's model and give bit-identical hidden states and logits. The
    buffers are compared after the forward pass on `ids` that both models have then run last: LongRoPE's
    inv_freq is rewritten by every forward (short or long factors, see longrope_frequency_update)."""
    kw = {"attn_implementation": "eager"}
    if hasattr(bf.config, "num_local_experts") or getattr(bf.config, "enable_moe_block", False):
        kw["experts_implementation"] = "eager"
    if quant is not None:
        kw["quantization_config"] = quant
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.bfloat16, **kw).eval()
    h, lg = run(loaded, ids)
    assert torch.equal(h, hidden) and torch.equal(lg, logits), f"{out_dir.name}: bf16 load gives other outputs"
    mine = {**dict(bf.named_parameters()), **dict(bf.named_buffers())}
    if type(bf).__name__.endswith("ForConditionalGeneration"):
        # AutoModelForCausalLM reads a multimodal Qwen3.5 folder as its text model (Qwen3_5ForCausalLM): the
        # wrapper's model.language_model.X as model.X, the vision tower model.visual.* left out.
        mine = {("model." + k[len("model.language_model."):] if k.startswith("model.language_model.") else k): t
                for k, t in mine.items() if not k.startswith("model.visual.")}
    theirs = {**dict(loaded.named_parameters()), **dict(loaded.named_buffers())}
    assert mine.keys() == theirs.keys(), sorted(mine.keys() ^ theirs.keys())
    for k, t in mine.items():
        assert t.dtype == theirs[k].dtype and torch.equal(t, theirs[k]), f"{out_dir.name}: {k} differs"
    print(f"{out_dir.name}: bf16 reference equals from_pretrained(dtype=bfloat16) ({type(loaded).__name__}) bit for bit")


def run(model, ids, mask=None):
    out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
    return torch.stack(out.hidden_states).float().contiguous(), out.logits.float().contiguous()


def greedy(model, prompt, n, with_logits=False):
    """Greedy continuation through transformers' own KV cache (what generate does); with_logits also returns
    the last-position logits [n, vocab] that chose each token (call 0: the prompt, call i: token i - 1)."""
    out = model(input_ids=prompt, use_cache=True)
    past, tokens, logits = out.past_key_values, [], []
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    for _ in range(n):
        tokens.append(nxt)
        logits.append(out.logits[0, -1].float())
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    if with_logits:
        return torch.cat(tokens, 1), torch.stack(logits).contiguous()
    return torch.cat(tokens, 1)


def make(name, cls, kwargs, index):
    torch.manual_seed(1234 + index)
    gen = torch.Generator().manual_seed(1234 + index)
    config = cls(**copy.deepcopy(kwargs))
    # Eager attention, and for mixtures of experts the eager per-expert loop of the modeling files. The
    # default, grouped_mm, gives the same fp32 outputs here (top-2 sums commute) and the same bf16 ones except
    # for Mixtral, whose router weights stay fp32: eager rounds each weighted expert output to bf16 before
    # adding it to a bf16 sum, grouped_mm adds the top-k in fp32 and rounds once.
    impl = {"attn_implementation": "eager"}
    if hasattr(config, "num_local_experts") or getattr(config, "enable_moe_block", False):  # Gemma 4's MoE too
        impl["experts_implementation"] = "eager"
    if cls is transformers.Qwen3_5Config:  # the multimodal wrapper, as the Hub's Qwen3.5 checkpoints are
        model = transformers.Qwen3_5ForConditionalGeneration._from_config(config, dtype=torch.float32, **impl)
    else:
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32, **impl)
    randomize(model, gen)
    packed = mxfp4_experts(model, gen) if name in MXFP4 else None
    fp8 = fp8_projections(model) if name in FP8 else None
    if config.tie_word_embeddings:
        model.tie_weights()
    model.eval()
    out_dir = MODELS / name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir)
    # generation_config.json is not part of the contract and only adds churn.
    (out_dir / "generation_config.json").unlink(missing_ok=True)
    if packed is not None:
        write_mxfp4_checkpoint(out_dir, packed)
    if fp8 is not None:
        write_fp8_checkpoint(out_dir, fp8)
    if name in MTP_LAYERS:
        add_mtp_layers(out_dir, config, gen)

    text = config.get_text_config()  # the multimodal wrapper's text model
    v = text.vocab_size
    ids_a = torch.randint(3, v, (1, LEN_A), generator=gen)
    ids_b = torch.randint(3, v, (1, LEN_B), generator=gen)
    padded = torch.zeros(2, LEN_A, dtype=torch.long)
    padded[0] = ids_a[0]
    padded[1, :LEN_B] = ids_b[0]
    mask = torch.zeros(2, LEN_A, dtype=torch.long)
    mask[0] = 1
    mask[1, :LEN_B] = 1

    ref = {}
    with torch.no_grad():
        ref["a.input_ids"], ref["b.input_ids"] = ids_a, ids_b
        clamp, routing = ClampHits(model), Routing(model)
        # Gemma 2's two caps (Gemma 4 has the final one only: its hits are counted below).
        softcap = SoftcapHits(model) if getattr(config, "attn_logit_softcapping", None) is not None else None
        with clamp, routing, softcap or contextlib.nullcontext():
            ref["a.hidden_states"], ref["a.logits"] = run(model, ids_a)
        if clamp.experts:
            print(f"{name}: swiglu_limit {config.swiglu_limit} exceeded on prompt a by {clamp.gate} gate and "
                  f"{clamp.up} up values of {clamp.total} each")
            assert clamp.gate > 0 and clamp.up > 0
        if softcap is not None:
            print(f"{name}: softcapping on prompt a: |score| > {config.attn_logit_softcapping} for {softcap.attn} of "
                  f"{softcap.attn_total} attention scores (largest change {softcap.attn_change:.3g}), "
                  f"|logit| > {config.final_logit_softcapping} for {softcap.logit} of {softcap.logit_total} logits "
                  f"(largest change {softcap.logit_change:.3g})")
            assert softcap.attn > 0 and softcap.logit > 0
        if text.model_type == "gemma4_text":
            cap = text.final_logit_softcapping
            seen = []
            hook = model.lm_head.register_forward_hook(lambda _m, _args, out: seen.append(out))
            run(model, ids_a)
            hook.remove()
            raw = seen[0]
            print(f"{name}: |logit| > {cap} for {int((raw.abs() > cap).sum())} of {raw.numel()} logits on prompt a")
            assert (raw.abs() > cap).any()
        ref["b.hidden_states"], ref["b.logits"] = run(model, ids_b)
        ref["padded.input_ids"], ref["padded.attention_mask"] = padded, mask
        ref["padded.hidden_states"], ref["padded.logits"] = run(model, padded, mask)
        ref["a.greedy"] = greedy(model, ids_a, GREEDY_TOKENS)
        if name in LINEAR:
            for key, n in (("c", LEN_C), ("d", LEN_D)):
                ref[f"{key}.input_ids"] = torch.randint(3, v, (1, n), generator=gen)
                ref[f"{key}.hidden_states"], ref[f"{key}.logits"] = run(model, ref[f"{key}.input_ids"])
        if text.rope_parameters.get("rope_type") == "longrope":
            # Prompt b is within original_max_position_embeddings, its continuation goes past it: the first
            # calls use the short factors, the later ones the long (the cached keys keep the earlier rotation).
            ref["b.greedy"], ref["b.greedy_logits"] = greedy(model, ids_b, GREEDY_TOKENS, with_logits=True)
        if packed is not None:
            check_mxfp4_loads(out_dir, ref, ids_a, ids_b, padded, mask)
        if fp8 is not None:
            check_fp8_loads(out_dir, ref, ids_a, ids_b, padded, mask)
        # The same model computed in bf16 by transformers as from_pretrained(dtype=bfloat16) loads it (weights
        # in bf16, RoPE inv_freq kept in fp32), for the bf16 bound of our forward.
        bf = to_bf16_as_loaded(model)
        routing_bf = Routing(bf)
        with routing_bf:
            ref["a.bf16.hidden_states"], ref["a.bf16.logits"] = run(bf, ids_a)
        quant = transformers.Mxfp4Config(dequantize=True) if packed is not None else None
        if fp8 is not None:
            quant = fp8_load_config()
        if fp8 is not None and quant is None:
            print(f"{name}: bf16 load-back check skipped: transformers needs accelerate to load FP8")
        else:
            check_bf16_loads(out_dir, bf, ids_a, ref["a.bf16.hidden_states"], ref["a.bf16.logits"], quant)
        rel = {k: ((ref[f"a.bf16.{k}"] - ref[f"a.{k}"]).abs().max() / ref[f"a.{k}"].abs().max()).item()
               for k in ("hidden_states", "logits")}
        summary = f"bf16 vs fp32 on prompt a: hidden states {rel['hidden_states']:.3g}, logits {rel['logits']:.3g}"
        if routing.routers:
            agrees, first, gap = routing_agreement(config, routing, routing_bf,
                                                   getattr(config, "num_experts_per_tok", None) or config.top_k_experts)
            ref["a.bf16.routing_agrees"], ref["a.bf16.first_flip_layer"] = agrees, first
            summary += (f"; {int((agrees == 0).sum())} of {len(routing.layers) * LEN_A} (token, sparse layer) "
                        f"expert sets differ, first in layer {int(first)}; smallest fp32 top-k gap {gap:.3g}")
            if routing.group_gap < math.inf:
                summary += f", group gap {routing.group_gap:.3g}"
        print(f"{name}: {summary} (max |bf16 - fp32| / max |fp32|)")
    REFS.mkdir(parents=True, exist_ok=True)
    save_file({k: t.contiguous() for k, t in ref.items()}, str(REFS / f"{name}.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})
    print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters")


def write_rope_references():
    """Inverse frequencies of the scaled RoPE types from transformers' own functions, for the
    layers test (llama3 is also covered end to end by tiny-llama3, yarn by tiny-gpt-oss). head_dim 64;
    YaRN also stores its attention factor (the cos/sin scale) as a 1-element float64 `<name>.attention_factor`.
    transformers' yarn reads `truncate` from config.rope_parameters (default True)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    # name -> (rope_parameters, seq_len for dynamic, max_position_embeddings)
    cases = {
        "linear": ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, None, 128),
        "dynamic": ({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 300, 128),
        "llama3": ({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 64}, None, 128),
        # gpt-oss's.
        "yarn": ({"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                  "original_max_position_embeddings": 4096, "truncate": False}, None, 131072),
        # beta_fast/beta_slow left to their defaults (32/1); the correction range floored/ceiled.
        "yarn_truncated": ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                            "original_max_position_embeddings": 32, "truncate": True}, None, 128),
    }
    out, meta = {}, {"head_dim": "64", "max_position_embeddings": "128", "dynamic_seq_len": "300"}
    for name, (params, seq_len, max_pos) in cases.items():
        cfg = transformers.LlamaConfig(hidden_size=256, num_attention_heads=4, max_position_embeddings=max_pos,
                                       rope_parameters=copy.deepcopy(params))
        inv, scale = ROPE_INIT_FUNCTIONS[params["rope_type"]](cfg, "cpu", seq_len=seq_len)
        out[name] = inv.float().contiguous()
        if params["rope_type"] == "yarn":
            out[f"{name}.attention_factor"] = torch.tensor([scale], dtype=torch.float64)
            meta[f"{name}.rope_parameters"] = json.dumps(params, sort_keys=True)
            meta[f"{name}.max_position_embeddings"] = str(max_pos)
            print(f"rope {name}: attention factor {scale!r}")
        else:
            assert scale == 1.0
    save_file(out, str(REFS / "rope.safetensors"), metadata=meta)


def write_4x_config():
    """A Llama 3.1-style config in the transformers 4.x spelling, for the config-reading test."""
    CONFIGS.mkdir(parents=True, exist_ok=True)
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-5, "max_position_embeddings": 131072,
        "rope_theta": 500000.0, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009], "pretraining_tp": 1, "transformers_version": "4.43.0",
    }
    (CONFIGS / "llama31-4x.json").write_text(json.dumps(cfg, indent=2) + "\n")


def main():
    names = list(FAMILIES) + ["rope", "llama31-4x"]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=names,
                        help="regenerate only these (default: everything): " + ", ".join(names))
    only = set(parser.parse_args().only or names)
    for i, (name, (cls, kwargs)) in enumerate(FAMILIES.items()):
        if name in only:
            make(name, cls, kwargs, i)
    if "rope" in only:
        write_rope_references()
    if "llama31-4x" in only:
        write_4x_config()


if __name__ == "__main__":
    main()
