#!/usr/bin/env python3
"""Creates the reference of the MLA draft layer (--draft_layer deepseek): an EAGLE-3 head whose decoder
layer is vLLM's DeepseekV2Eagle3DecoderLayer (vllm/model_executor/models/deepseek_eagle3.py), its
attention built from transformers' DeepseekV3Attention modules and functions (q_a_proj, q_a_layernorm,
q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj via expand_kv, o_proj, DeepseekV3RotaryEmbedding,
apply_rotary_pos_emb_interleave, the yarn_apply_mscale softmax scale) with its first projections taking
2H (vLLM's input_size), and its MLP transformers' DeepseekV3MLP (the dense one). Shaped after
tests/fixtures/models/tiny-deepseek-v3 (hidden 64, 4 heads, q_lora_rank 24, kv_lora_rank 32, qk_nope 12,
qk_rope 8, v_head_dim 10, YaRN factor 4 with mscale 1 and mscale_all_dim 0.8).

vLLM's reading where it differs from transformers' DeepseekV3Attention: the latent norms take
config.rms_norm_eps (DeepseekV2MLAAttention) rather than DeepseekV3RMSNorm's default; the RoPE is
interleaved whatever rope_interleave says (is_neox_style=False); the YaRN attention factor on cos/sin is
yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim) (transformers: the same here,
both given).

The training-time test over one packed row of two samples (EAGLE.md "Training-time test": step k at
position t reads the embedding of x_{t+1+k} and the previous step's hidden, RoPE position + k, attends
the step-0 keys of its document causally plus the keys of steps 1..k at t), 3 steps, the loss with decay
0.8 over valid-count denominators, and the gradients of a few parameters.

Writes tests/fixtures/heads/eagle3-mla-ref/ (config.json as eagle-train exports the layer:
Eagle3DeepseekV3ForCausalLM, midlayer.* names; bf16 weights, computed in fp32) and
tests/fixtures/reference/eagle3-mla-head.safetensors (inputs, embedding, logits_k, teacher, loss,
grad.<name>).

Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_mla_head_reference.py
"""
import json
import pathlib

import torch
import transformers
from safetensors.torch import save_file
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

ROOT = pathlib.Path(__file__).resolve().parent.parent
HEAD_DIR = ROOT / "tests" / "fixtures" / "heads" / "eagle3-mla-ref"
REF = ROOT / "tests" / "fixtures" / "reference" / "eagle3-mla-head.safetensors"

H, I, NH, V, VD, STEPS, EPS = 64, 96, 4, 256, 64, 3, 1e-6
QL, KVL, NOPE, ROPE_D, VH = 24, 32, 12, 8, 10
ROPE = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.8}
GRADS = ["fc.weight", "midlayer.hidden_norm.weight", "midlayer.self_attn.q_a_proj.weight",
         "midlayer.self_attn.q_a_layernorm.weight", "midlayer.self_attn.kv_a_proj_with_mqa.weight",
         "midlayer.self_attn.kv_b_proj.weight", "midlayer.self_attn.o_proj.weight", "midlayer.mlp.down_proj.weight",
         "lm_head.weight"]


def main():
    torch.manual_seed(0)
    config = transformers.DeepseekV3Config(
        hidden_size=H, intermediate_size=I, num_attention_heads=NH, num_key_value_heads=NH, q_lora_rank=QL,
        kv_lora_rank=KVL, qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE_D, v_head_dim=VH, rms_norm_eps=EPS,
        max_position_embeddings=256, rope_parameters=dict(ROPE), rope_interleave=True, vocab_size=V,
        attention_bias=False, num_hidden_layers=1, first_k_dense_replace=1)
    attn = ds.DeepseekV3Attention(config, layer_idx=0)
    # vLLM's layer 0 projects [norm(e); norm(h)] of 2H (DeepseekV2MLAAttention's input_size).
    attn.q_a_proj = torch.nn.Linear(2 * H, QL, bias=False)
    attn.kv_a_proj_with_mqa = torch.nn.Linear(2 * H, KVL + ROPE_D, bias=False)
    attn.q_a_layernorm.variance_epsilon = EPS  # vLLM: RMSNorm(rank, eps=config.rms_norm_eps)
    attn.kv_a_layernorm.variance_epsilon = EPS
    mlp = ds.DeepseekV3MLP(config)
    norms = {n: ds.DeepseekV3RMSNorm(H, eps=EPS) for n in ["input_layernorm", "hidden_norm", "post_attention_layernorm"]}
    final_norm = ds.DeepseekV3RMSNorm(H, eps=EPS)
    rotary = ds.DeepseekV3RotaryEmbedding(config)

    w = {"fc.weight": torch.randn(H, 3 * H) * 0.08, "norm.weight": 1 + 0.1 * torch.randn(H),
         "lm_head.weight": torch.randn(VD, H) * 0.2}
    for n in norms:
        w[f"midlayer.{n}.weight"] = 1 + 0.1 * torch.randn(H)
    a = "midlayer.self_attn."
    w[a + "q_a_proj.weight"] = torch.randn(QL, 2 * H) * 0.1
    w[a + "q_a_layernorm.weight"] = 1 + 0.1 * torch.randn(QL)
    w[a + "q_b_proj.weight"] = torch.randn(NH * (NOPE + ROPE_D), QL) * 0.3
    w[a + "kv_a_proj_with_mqa.weight"] = torch.randn(KVL + ROPE_D, 2 * H) * 0.1
    w[a + "kv_a_layernorm.weight"] = 1 + 0.1 * torch.randn(KVL)
    w[a + "kv_b_proj.weight"] = torch.randn(NH * (NOPE + VH), KVL) * 0.3
    w[a + "o_proj.weight"] = torch.randn(H, NH * VH) * 0.1
    for n in ["gate_proj", "up_proj"]:
        w[f"midlayer.mlp.{n}.weight"] = torch.randn(I, H) * 0.1
    w["midlayer.mlp.down_proj.weight"] = torch.randn(H, I) * 0.1
    ids = torch.sort(torch.randperm(V)[:VD]).values
    w["d2t"] = ids - torch.arange(VD)
    w["t2d"] = torch.zeros(V, dtype=torch.bool).index_fill_(0, ids, True)

    # Weights stored as bf16 (a small fixture), computed in fp32; the transformers modules take them
    # (one tensor each, leaves for the gradients).
    w = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in w.items()}
    f = {k: v.float().requires_grad_(True) for k, v in w.items() if v.is_floating_point()}
    for name, mod in [("q_a_proj", attn.q_a_proj), ("q_a_layernorm", attn.q_a_layernorm), ("q_b_proj", attn.q_b_proj),
                      ("kv_a_proj_with_mqa", attn.kv_a_proj_with_mqa), ("kv_a_layernorm", attn.kv_a_layernorm),
                      ("kv_b_proj", attn.kv_b_proj), ("o_proj", attn.o_proj)]:
        mod.weight = torch.nn.Parameter(f[a + name + ".weight"])
        f[a + name + ".weight"] = mod.weight
    for n in ["gate_proj", "up_proj", "down_proj"]:
        getattr(mlp, n).weight = torch.nn.Parameter(f[f"midlayer.mlp.{n}.weight"])
        f[f"midlayer.mlp.{n}.weight"] = getattr(mlp, n).weight
    for n, mod in norms.items():
        mod.weight = torch.nn.Parameter(f[f"midlayer.{n}.weight"])
        f[f"midlayer.{n}.weight"] = mod.weight
    final_norm.weight = torch.nn.Parameter(f["norm.weight"])
    f["norm.weight"] = final_norm.weight

    # One packed row: sample 0 = 7 tokens, sample 1 = 5 tokens.
    T = 12
    doc = torch.tensor([[0] * 7 + [1] * 5])
    pos = torch.tensor([list(range(7)) + list(range(5))])
    input_ids = torch.randint(0, V, (1, T))
    aux = torch.randn(1, T, 3 * H)
    embedding = torch.randn(V, H)
    visible = (torch.arange(T)[None, :] <= torch.arange(T)[:, None]) & (doc[0][None, :] == doc[0][:, None])

    def qkv(x, positions):
        q = attn.q_b_proj(attn.q_a_layernorm(attn.q_a_proj(x))).view(1, T, NH, NOPE + ROPE_D).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [NOPE, ROPE_D], dim=-1)
        kv_nope, k_rot = torch.split(attn.kv_a_proj_with_mqa(x), [KVL, ROPE_D], dim=-1)
        kv_nope = attn.kv_a_layernorm(kv_nope).view(1, 1, T, KVL)
        k_rot = k_rot.view(1, 1, T, ROPE_D)
        cos, sin = rotary(x, positions)
        q_rot, k_rot = ds.apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin)
        k, v = attn.expand_kv(kv_nope, k_rot)
        return torch.cat((q_pass, q_rot), dim=-1), k, v

    hidden = aux @ f["fc.weight"].T
    keys, values, logits = [], [], []
    for k in range(STEPS):
        shifted = torch.cat([input_ids[:, k + 1:], torch.zeros(1, k + 1, dtype=torch.long)], 1)
        x = torch.cat([norms["input_layernorm"](embedding[shifted]), norms["hidden_norm"](hidden)], -1)
        q, kk, vv = qkv(x, pos + k)
        keys.append(kk)
        values.append(vv)
        s0 = (q @ keys[0].transpose(-1, -2) * attn.scaling).masked_fill(~visible, float("-inf"))
        diag = [(q * keys[j]).sum(-1, keepdim=True) * attn.scaling for j in range(1, k + 1)]
        p = torch.softmax(torch.cat([s0] + diag, -1), -1)
        out = p[..., :T] @ values[0]
        for j in range(1, k + 1):
            out = out + p[..., T + j - 1:T + j] * values[j]
        h = hidden + attn.o_proj(out.transpose(1, 2).reshape(1, T, NH * VH))
        h = h + mlp(norms["post_attention_layernorm"](h))
        logits.append(final_norm(h) @ f["lm_head.weight"].T)
        hidden = h  # the recurrent state: the layer's output before the final norm

    torch.manual_seed(1)
    teacher = torch.randn(1, T, VD) * 2
    loss_mask = torch.ones(1, T, dtype=torch.uint8)
    loss_mask[0, 1] = 0
    argmax = ids[torch.randint(0, VD, (1, T))]
    argmax[0, 4] = int(torch.nonzero(~w["t2d"])[0])  # one target token outside the draft vocabulary
    loss, dens = 0.0, []
    for k in range(STEPS):
        sh = lambda x, fill: torch.cat([x[:, k + 1:], torch.full_like(x[:, :k + 1], fill)], 1)  # noqa: E731
        ahead = lambda x, fill: torch.cat([x[:, k + 2:], torch.full_like(x[:, :k + 2], fill)], 1)  # noqa: E731
        valid = (ahead(doc, -2) == doc) & (doc >= 0) & (ahead(loss_mask, 0) != 0) & w["t2d"][sh(argmax, 0)]
        ce = -(torch.softmax(sh(teacher, 0.0), -1) * torch.log_softmax(logits[k], -1)).sum(-1)
        den = float(valid.sum().clamp_min(1))
        dens.append(den)
        loss = loss + 0.8 ** k * torch.where(valid, ce, torch.zeros_like(ce)).sum() / den
    loss.backward()

    HEAD_DIR.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in w.items()}, str(HEAD_DIR / "model.safetensors"))
    cfg = {"architectures": ["Eagle3DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": H,
           "intermediate_size": I, "num_attention_heads": NH, "num_key_value_heads": NH, "q_lora_rank": QL,
           "kv_lora_rank": KVL, "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE_D, "v_head_dim": VH,
           "num_hidden_layers": 1, "rms_norm_eps": EPS, "hidden_act": "silu", "max_position_embeddings": 256,
           "rope_theta": ROPE["rope_theta"],
           "rope_scaling": {k: v for k, v in ROPE.items() if k != "rope_theta"}, "rope_interleave": True,
           "vocab_size": V, "draft_vocab_size": VD, "target_hidden_size": H, "attention_bias": False,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16", "norm_before_residual": False,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2], "use_aux_hidden_state": True},
           "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
           "eagle_train": {"target_num_hidden_layers": 3, "ttt_steps": STEPS}}
    (HEAD_DIR / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    ref = {"input_ids": input_ids, "position_ids": pos, "document_ids": doc, "aux_hidden": aux,
           "embedding": embedding, "teacher_logits": teacher, "loss_mask": loss_mask, "target_argmax": argmax,
           "denominators": torch.tensor(dens), "loss": loss.detach().reshape(1)}
    for k, l in enumerate(logits):
        ref[f"logits_{k}"] = l.detach().contiguous()
    for name in GRADS:
        ref["grad." + name] = f[name].grad.contiguous()
    save_file(ref, str(REF))
    print("wrote", HEAD_DIR, "and", REF, "loss", float(loss.detach()), "scale", attn.scaling)


if __name__ == "__main__":
    main()
