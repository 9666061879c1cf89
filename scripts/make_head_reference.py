#!/usr/bin/env python3
"""Creates the EAGLE-3 head reference fixture: an independent PyTorch implementation of the head's
training-time-test forward (EAGLE.md; the layer in SGLang's LlamaForCausalLMEagle3 order, RoPE from
transformers), run on a packed row of two samples.

Writes tests/fixtures/heads/eagle3-ref/ (config.json + model.safetensors in the SGLang layout, as
SpecForge saves a head, bf16 weights and llama3 RoPE scaling) and
tests/fixtures/reference/eagle3-head.safetensors (inputs, the frozen embedding, the draft logits of
each step). The C++ test imports the head and compares its logits.

Also the EAGLE-3 variants vLLM serves (EAGLE-variants.md): heads/eagle31-qwen3-ref (fc_norm, norm_output
and the Qwen3-style layer with q/k norm per head, in the EAGLE layout as Eagle3Qwen3ForCausalLM) and
heads/eagle3-nbf-ref (norm_before_fc), with their references reference/<name>.safetensors. The base
head's files are unchanged by the variants (they draw their extra weights after the base ones).

Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_head_reference.py
"""
import json
import pathlib

import torch
import transformers
from safetensors.torch import save_file
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

ROOT = pathlib.Path(__file__).resolve().parent.parent
HEAD_DIR = ROOT / "tests" / "fixtures" / "heads" / "eagle3-ref"
REF = ROOT / "tests" / "fixtures" / "reference" / "eagle3-head.safetensors"

H, I, NH, NKV, HD, V, VD, STEPS, EPS = 32, 48, 4, 2, 8, 64, 20, 3, 1e-5
ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16}


def rms(x, w):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


def main():
    make(HEAD_DIR, REF)
    make(ROOT / "tests" / "fixtures" / "heads" / "eagle31-qwen3-ref",
         ROOT / "tests" / "fixtures" / "reference" / "eagle31-qwen3-head.safetensors",
         fc_norm=True, norm_output=True, qk_norm=True)
    make(ROOT / "tests" / "fixtures" / "heads" / "eagle3-nbf-ref",
         ROOT / "tests" / "fixtures" / "reference" / "eagle3-nbf-head.safetensors", norm_before_fc=True)


def make(head_dir, ref_path, fc_norm=False, norm_output=False, qk_norm=False, norm_before_fc=False):
    torch.manual_seed(0)
    bf = lambda t: t.to(torch.bfloat16)  # noqa: E731  (weights stored as bf16, computed in fp32)
    w = {"fc.weight": bf(torch.randn(H, 3 * H) * 0.1), "norm.weight": bf(1 + 0.1 * torch.randn(H)),
         "lm_head.weight": bf(torch.randn(VD, H) * 0.2)}
    for n in ["input_layernorm", "hidden_norm", "post_attention_layernorm"]:
        w[f"midlayer.{n}.weight"] = bf(1 + 0.1 * torch.randn(H))
    w["midlayer.self_attn.q_proj.weight"] = bf(torch.randn(NH * HD, 2 * H) * 0.1)
    w["midlayer.self_attn.k_proj.weight"] = bf(torch.randn(NKV * HD, 2 * H) * 0.1)
    w["midlayer.self_attn.v_proj.weight"] = bf(torch.randn(NKV * HD, 2 * H) * 0.1)
    w["midlayer.self_attn.o_proj.weight"] = bf(torch.randn(H, NH * HD) * 0.1)
    w["midlayer.mlp.gate_proj.weight"] = bf(torch.randn(I, H) * 0.1)
    w["midlayer.mlp.up_proj.weight"] = bf(torch.randn(I, H) * 0.1)
    w["midlayer.mlp.down_proj.weight"] = bf(torch.randn(H, I) * 0.1)
    ids = torch.sort(torch.randperm(V)[:VD]).values
    w["d2t"] = ids - torch.arange(VD)
    w["t2d"] = torch.zeros(V, dtype=torch.bool).index_fill_(0, ids, True)
    # The variants' extra weights, drawn after the base ones (the base head stays as it was).
    if fc_norm:
        for i in range(3):
            w[f"fc_norm.{i}.weight"] = bf(1 + 0.1 * torch.randn(H))
    if norm_before_fc:
        w["input_norm.weight"] = bf(1 + 0.1 * torch.randn(3 * H))
    if qk_norm:
        w["midlayer.self_attn.q_norm.weight"] = bf(1 + 0.1 * torch.randn(HD))
        w["midlayer.self_attn.k_norm.weight"] = bf(1 + 0.1 * torch.randn(HD))
    f = {k: v.float() for k, v in w.items() if v.is_floating_point()}

    # One packed row: sample 0 = 7 tokens, sample 1 = 5 tokens.
    T = 12
    doc = torch.tensor([[0] * 7 + [1] * 5])
    pos = torch.tensor([list(range(7)) + list(range(5))])
    input_ids = torch.randint(0, V, (1, T))
    aux = torch.randn(1, T, 3 * H)
    embedding = torch.randn(V, H)

    rope = LlamaRotaryEmbedding(transformers.LlamaConfig(hidden_size=H, num_attention_heads=NH, head_dim=HD,
                                                         max_position_embeddings=64, rope_parameters=ROPE))
    a = f"midlayer."
    u = aux
    if norm_before_fc:  # F1: one norm over all aux features, then (never together) one per feature
        u = rms(u, f["input_norm.weight"])
    if fc_norm:
        u = torch.cat([rms(u[..., i * H:(i + 1) * H], f[f"fc_norm.{i}.weight"]) for i in range(3)], -1)
    hidden = u @ f["fc.weight"].T
    visible = (torch.arange(T)[None, :] <= torch.arange(T)[:, None]) & (doc[0][None, :] == doc[0][:, None])
    keys, values, logits = [], [], []
    for k in range(STEPS):
        shifted = torch.cat([input_ids[:, k + 1:], torch.zeros(1, k + 1, dtype=torch.long)], 1)
        emb = embedding[shifted]
        x = torch.cat([rms(emb, f[a + "input_layernorm.weight"]), rms(hidden, f[a + "hidden_norm.weight"])], -1)
        q = (x @ f[a + "self_attn.q_proj.weight"].T).view(1, T, NH, HD).transpose(1, 2)
        kk = (x @ f[a + "self_attn.k_proj.weight"].T).view(1, T, NKV, HD).transpose(1, 2)
        vv = (x @ f[a + "self_attn.v_proj.weight"].T).view(1, T, NKV, HD).transpose(1, 2)
        if qk_norm:  # Qwen3 layer: each head's q and k normalised before RoPE
            q, kk = rms(q, f[a + "self_attn.q_norm.weight"]), rms(kk, f[a + "self_attn.k_norm.weight"])
        cos, sin = rope(x, pos + k)
        q, kk = apply_rotary_pos_emb(q, kk, cos, sin)
        kk, vv = kk.repeat_interleave(NH // NKV, 1), vv.repeat_interleave(NH // NKV, 1)
        keys.append(kk)
        values.append(vv)
        scale = HD ** -0.5
        s0 = (q @ keys[0].transpose(-1, -2) * scale).masked_fill(~visible, float("-inf"))
        diag = [(q * keys[j]).sum(-1, keepdim=True) * scale for j in range(1, k + 1)]
        p = torch.softmax(torch.cat([s0] + diag, -1), -1)
        out = p[..., :T] @ values[0]
        for j in range(1, k + 1):
            out = out + p[..., T + j - 1:T + j] * values[j]
        attn = out.transpose(1, 2).reshape(1, T, NH * HD) @ f[a + "self_attn.o_proj.weight"].T
        h = hidden + attn
        m = rms(h, f[a + "post_attention_layernorm.weight"])
        h = h + (torch.nn.functional.silu(m @ f[a + "mlp.gate_proj.weight"].T) * (m @ f[a + "mlp.up_proj.weight"].T)) \
            @ f[a + "mlp.down_proj.weight"].T
        o = rms(h, f["norm.weight"])
        logits.append(o @ f["lm_head.weight"].T)
        hidden = o if norm_output else h  # F4: the recurrent state

    head_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in w.items()}, str(head_dir / "model.safetensors"))
    cfg = {"architectures": ["Eagle3Qwen3ForCausalLM" if qk_norm else "LlamaForCausalLMEagle3"],
           "model_type": "qwen3" if qk_norm else "llama", "hidden_size": H,
           "intermediate_size": I, "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
           "num_hidden_layers": 1, "rms_norm_eps": EPS, "hidden_act": "silu", "max_position_embeddings": 64,
           "rope_theta": ROPE["rope_theta"], "rope_scaling": {k: v for k, v in ROPE.items() if k != "rope_theta"},
           "vocab_size": V, "draft_vocab_size": VD, "target_hidden_size": H, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16", "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4],
                                                      "use_aux_hidden_state": True}}
    if fc_norm or norm_output or norm_before_fc:
        cfg.update({"fc_norm": fc_norm, "norm_output": norm_output, "norm_before_fc": norm_before_fc})
    if qk_norm:
        cfg["use_sliding_window"] = False
    (head_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    ref = {"input_ids": input_ids, "position_ids": pos, "document_ids": doc, "aux_hidden": aux,
           "embedding": embedding}
    for k, l in enumerate(logits):
        ref[f"logits_{k}"] = l.contiguous()
    save_file(ref, str(ref_path))
    print("wrote", head_dir, "and", ref_path)


if __name__ == "__main__":
    main()
