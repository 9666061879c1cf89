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
heads/eagle3-nbf-ref (norm_before_fc), and heads/eagle3-2layer-ref (num_hidden_layers 2: layer 1 a plain
pre-norm layer on H with its own keys/values, EAGLE-variants.md §2; its reference also holds a training
step: teacher logits, loss mask, target argmax, the loss with decay 0.8 and every parameter's gradient),
and heads/peagle-ref (P-EAGLE, §4: depths d >= 1 on the mask token and F1(mask_hidden); its reference
also holds a training step and the served forward, one causal pass over 5 prefix slots and 2 mask slots,
with the 3 drafted tokens), with their references reference/<name>.safetensors. The base head's files
are unchanged by the variants (they draw their extra weights after the base ones).

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
MASK_ID = 5  # P-EAGLE's mask token in the reference
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
    make(ROOT / "tests" / "fixtures" / "heads" / "eagle3-2layer-ref",
         ROOT / "tests" / "fixtures" / "reference" / "eagle3-2layer-head.safetensors", num_layers=2, with_loss=True)
    make(ROOT / "tests" / "fixtures" / "heads" / "peagle-ref",
         ROOT / "tests" / "fixtures" / "reference" / "peagle-head.safetensors", parallel=True, with_loss=True)


def make(head_dir, ref_path, fc_norm=False, norm_output=False, qk_norm=False, norm_before_fc=False, num_layers=1,
         with_loss=False, parallel=False):
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
    for l in range(1, num_layers):  # F3: plain pre-norm layers on H (names as vLLM/speculators load them)
        p = f"layers.{l}."
        for n in ["input_layernorm", "post_attention_layernorm"]:
            w[p + n + ".weight"] = bf(1 + 0.1 * torch.randn(H))
        w[p + "self_attn.q_proj.weight"] = bf(torch.randn(NH * HD, H) * 0.1)
        w[p + "self_attn.k_proj.weight"] = bf(torch.randn(NKV * HD, H) * 0.1)
        w[p + "self_attn.v_proj.weight"] = bf(torch.randn(NKV * HD, H) * 0.1)
        w[p + "self_attn.o_proj.weight"] = bf(torch.randn(H, NH * HD) * 0.1)
        w[p + "mlp.gate_proj.weight"] = bf(torch.randn(I, H) * 0.1)
        w[p + "mlp.up_proj.weight"] = bf(torch.randn(I, H) * 0.1)
        w[p + "mlp.down_proj.weight"] = bf(torch.randn(H, I) * 0.1)
        if qk_norm:
            w[p + "self_attn.q_norm.weight"] = bf(1 + 0.1 * torch.randn(HD))
            w[p + "self_attn.k_norm.weight"] = bf(1 + 0.1 * torch.randn(HD))
    if parallel:  # P-EAGLE's mask state lives in aux space (before F1)
        w["mask_hidden"] = bf(torch.randn(1, 1, 3 * H))
    f = {k: v.float().requires_grad_(with_loss) for k, v in w.items() if v.is_floating_point()}

    # One packed row: sample 0 = 7 tokens, sample 1 = 5 tokens.
    T = 12
    doc = torch.tensor([[0] * 7 + [1] * 5])
    pos = torch.tensor([list(range(7)) + list(range(5))])
    input_ids = torch.randint(0, V, (1, T))
    aux = torch.randn(1, T, 3 * H)
    embedding = torch.randn(V, H)

    rope = LlamaRotaryEmbedding(transformers.LlamaConfig(hidden_size=H, num_attention_heads=NH, head_dim=HD,
                                                         max_position_embeddings=64, rope_parameters=ROPE))
    u = aux
    if norm_before_fc:  # F1: one norm over all aux features, then (never together) one per feature
        u = rms(u, f["input_norm.weight"])
    if fc_norm:
        u = torch.cat([rms(u[..., i * H:(i + 1) * H], f[f"fc_norm.{i}.weight"]) for i in range(3)], -1)
    hidden = u @ f["fc.weight"].T
    visible = (torch.arange(T)[None, :] <= torch.arange(T)[:, None]) & (doc[0][None, :] == doc[0][:, None])
    names = ["midlayer."] + [f"layers.{l}." for l in range(1, num_layers)]
    keys, values = [[] for _ in names], [[] for _ in names]  # every layer its own keys per step
    logits = []

    def layer(a, x, residual, k, kl, vl):
        q = (x @ f[a + "self_attn.q_proj.weight"].T).view(1, T, NH, HD).transpose(1, 2)
        kk = (x @ f[a + "self_attn.k_proj.weight"].T).view(1, T, NKV, HD).transpose(1, 2)
        vv = (x @ f[a + "self_attn.v_proj.weight"].T).view(1, T, NKV, HD).transpose(1, 2)
        if qk_norm:  # Qwen3 layer: each head's q and k normalised before RoPE
            q, kk = rms(q, f[a + "self_attn.q_norm.weight"]), rms(kk, f[a + "self_attn.k_norm.weight"])
        cos, sin = rope(x, pos + k)
        q, kk = apply_rotary_pos_emb(q, kk, cos, sin)
        kk, vv = kk.repeat_interleave(NH // NKV, 1), vv.repeat_interleave(NH // NKV, 1)
        kl.append(kk)
        vl.append(vv)
        scale = HD ** -0.5
        s0 = (q @ kl[0].transpose(-1, -2) * scale).masked_fill(~visible, float("-inf"))
        diag = [(q * kl[j]).sum(-1, keepdim=True) * scale for j in range(1, k + 1)]
        p = torch.softmax(torch.cat([s0] + diag, -1), -1)
        out = p[..., :T] @ vl[0]
        for j in range(1, k + 1):
            out = out + p[..., T + j - 1:T + j] * vl[j]
        attn = out.transpose(1, 2).reshape(1, T, NH * HD) @ f[a + "self_attn.o_proj.weight"].T
        h = residual + attn
        m = rms(h, f[a + "post_attention_layernorm.weight"])
        return h + (torch.nn.functional.silu(m @ f[a + "mlp.gate_proj.weight"].T) *
                    (m @ f[a + "mlp.up_proj.weight"].T)) @ f[a + "mlp.down_proj.weight"].T

    def combine(g):  # F1
        u = g
        if norm_before_fc:
            u = rms(u, f["input_norm.weight"])
        if fc_norm:
            u = torch.cat([rms(u[..., i * H:(i + 1) * H], f[f"fc_norm.{i}.weight"]) for i in range(3)], -1)
        return u @ f["fc.weight"].T

    for k in range(STEPS):
        shifted = torch.cat([input_ids[:, k + 1:], torch.zeros(1, k + 1, dtype=torch.long)], 1)
        if parallel and k > 0:  # P-EAGLE depth k: the mask token and F1(mask_hidden) at every position
            shifted = torch.full_like(shifted, MASK_ID)
            hidden = combine(f["mask_hidden"]).expand(1, T, H)
        emb = embedding[shifted]
        a = names[0]
        x = torch.cat([rms(emb, f[a + "input_layernorm.weight"]), rms(hidden, f[a + "hidden_norm.weight"])], -1)
        h = layer(a, x, hidden, k, keys[0], values[0])  # F2: the state enters the residual at layer 0 only
        for l in range(1, num_layers):  # F3
            h = layer(names[l], rms(h, f[names[l] + "input_layernorm.weight"]), h, k, keys[l], values[l])
        o = rms(h, f["norm.weight"])
        logits.append(o @ f["lm_head.weight"].T)
        hidden = o if norm_output else h  # F4: the recurrent state

    head_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in w.items()}, str(head_dir / "model.safetensors"))
    cfg = {"architectures": ["Eagle3Qwen3ForCausalLM" if qk_norm else "LlamaForCausalLMEagle3"],
           "model_type": "qwen3" if qk_norm else "llama", "hidden_size": H,
           "intermediate_size": I, "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
           "num_hidden_layers": num_layers, "rms_norm_eps": EPS, "hidden_act": "silu", "max_position_embeddings": 64,
           "rope_theta": ROPE["rope_theta"], "rope_scaling": {k: v for k, v in ROPE.items() if k != "rope_theta"},
           "vocab_size": V, "draft_vocab_size": VD, "target_hidden_size": H, "tie_word_embeddings": False,
           "torch_dtype": "bfloat16", "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4],
                                                      "use_aux_hidden_state": True}}
    if fc_norm or norm_output or norm_before_fc:
        cfg.update({"fc_norm": fc_norm, "norm_output": norm_output, "norm_before_fc": norm_before_fc})
    if qk_norm:
        cfg["use_sliding_window"] = False
    if parallel:
        cfg.update({"mask_token_id": MASK_ID, "eagle_train": {"parallel_drafting": True}})
    (head_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    ref = {"input_ids": input_ids, "position_ids": pos, "document_ids": doc, "aux_hidden": aux,
           "embedding": embedding}
    for k, l in enumerate(logits):
        ref[f"logits_{k}"] = l.detach().contiguous()
    if with_loss:  # one training step: the EAGLE.md loss (soft CE, decay^k, valid-count denominators)
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
        ref.update({"teacher_logits": teacher, "loss_mask": loss_mask, "target_argmax": argmax,
                    "denominators": torch.tensor(dens), "loss": loss.detach().reshape(1)})
        for name, t in f.items():
            ref["grad." + name] = t.grad.contiguous()
    if parallel:  # the served forward (EAGLE-variants.md §4, §6): one causal pass, 5 prefix + 2 mask slots
        with torch.no_grad():
            n, K = 5, 3
            ids_s = torch.cat([input_ids[:, 1:n + 1], torch.full((1, K - 1), MASK_ID)], 1)
            state = torch.cat([combine(aux[:, :n]), combine(f["mask_hidden"]).expand(1, K - 1, H)], 1)
            L = n + K - 1
            causal = torch.arange(L)[None, :] <= torch.arange(L)[:, None]
            positions = torch.arange(L)[None, :]
            a = names[0]
            x = torch.cat([rms(embedding[ids_s], f[a + "input_layernorm.weight"]),
                           rms(state, f[a + "hidden_norm.weight"])], -1)
            h = state
            for l in range(num_layers):
                a = names[l]
                xin = x if l == 0 else rms(h, f[a + "input_layernorm.weight"])
                q = (xin @ f[a + "self_attn.q_proj.weight"].T).view(1, L, NH, HD).transpose(1, 2)
                kk = (xin @ f[a + "self_attn.k_proj.weight"].T).view(1, L, NKV, HD).transpose(1, 2)
                vv = (xin @ f[a + "self_attn.v_proj.weight"].T).view(1, L, NKV, HD).transpose(1, 2)
                cos, sin = rope(xin, positions)
                q, kk = apply_rotary_pos_emb(q, kk, cos, sin)
                kk, vv = kk.repeat_interleave(NH // NKV, 1), vv.repeat_interleave(NH // NKV, 1)
                sc = (q @ kk.transpose(-1, -2) * HD ** -0.5).masked_fill(~causal, float("-inf"))
                out = torch.softmax(sc, -1) @ vv
                h = h + out.transpose(1, 2).reshape(1, L, NH * HD) @ f[a + "self_attn.o_proj.weight"].T
                m = rms(h, f[a + "post_attention_layernorm.weight"])
                h = h + (torch.nn.functional.silu(m @ f[a + "mlp.gate_proj.weight"].T) *
                         (m @ f[a + "mlp.up_proj.weight"].T)) @ f[a + "mlp.down_proj.weight"].T
            served = rms(h[:, n - 1:], f["norm.weight"]) @ f["lm_head.weight"].T
            best = served.argmax(-1)
            ref["served_logits"] = served.contiguous()
            ref["served_drafts"] = best + w["d2t"][best]
    save_file(ref, str(ref_path))
    print("wrote", head_dir, "and", ref_path)


if __name__ == "__main__":
    main()
