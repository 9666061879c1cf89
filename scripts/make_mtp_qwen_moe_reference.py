#!/usr/bin/env python3
"""Creates the mixture-of-experts Qwen MTP fixtures: a tiny Qwen3_5MoeForCausalLM (and a tiny Qwen3NextForCausalLM)
target written by transformers (which drops mtp.*), with one shipped MTP layer added under vLLM's names, its routed
experts per expert as Hugging Face checkpoints hold them (mtp.layers.0.mlp.experts.{e}.{gate,up,down}_proj.weight),
and an independent PyTorch reference of vLLM's served MTP forward (vllm/model_executor/models/qwen3_5_mtp.py's
Qwen3_5MoeMTP, qwen3_next_mtp.py; MTP.md 2.0 and 2.3):

  e = embed(x_{t+1}) (no position-0 mask); u = fc(cat[pre_fc_norm_embedding(e), pre_fc_norm_hidden(h)]); one
  full-attention decoder layer on u (gated attention, q/k norm, partial RoPE) whose MLP is the sparse MoE block:
  softmax top-k router mlp.gate (renormalised), routed experts, plus sigmoid(shared_expert_gate(x)) *
  shared_expert(x); o = norm(u + attn + moe); logits = lm_head(o); o is fed back. Every norm x * (1 + w) in fp32.

The layer is transformers' own decoder layer (Qwen3_5MoeDecoderLayer / Qwen3NextDecoderLayer): its projections,
norms and its Qwen3_5MoeSparseMoeBlock / Qwen3NextSparseMoeBlock are called as they are (the block's router, experts
and shared expert, with gradients through the router's top-k weights and the chosen experts), the attention over
the training-time test's keys is written here as in make_mtp_qwen_reference.py, and step 1 is checked against the
layer's own forward. Every token's k-th and (k+1)-th router probabilities are checked apart (no near-tie that
could route differently in another implementation).

Writes tests/fixtures/models/tiny-qwen3-5-moe-mtp/ and tiny-qwen3-next-mtp/ (transformers' config.json, plus
mtp_num_hidden_layers 1 for Qwen3.5-MoE; Qwen3-Next's num_nextn_predict_layers is left out: vLLM's default 1), and
tests/fixtures/reference/mtp-qwen3-5-moe.safetensors, mtp-qwen3-next.safetensors: the inputs, the target's
post-norm last hidden states and logits, the unroll's logits per step, one training step (soft cross-entropy
against the target's distribution, decay 0.8: the loss and every MTP parameter's gradient, the experts' fused as
grad.mtp.layers.0.mlp.experts.gate_up_proj / down_proj), and a cache-based served chain at anchor p = 3.

Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_mtp_qwen_moe_reference.py
"""
import json
import pathlib

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as m35
from transformers.models.qwen3_next import modeling_qwen3_next as mnext

ROOT = pathlib.Path(__file__).resolve().parent.parent
H, NH, NKV, HD, V, STEPS, EPS = 32, 4, 2, 16, 256, 3, 1e-6  # V: the smoke data's ids; rotary 16 * 0.25
E, K, I_E, I_S = 4, 2, 16, 24  # experts, top k, each expert's width, the shared expert's

COMMON = dict(
    vocab_size=V, hidden_size=H, num_hidden_layers=2, num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD,
    linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=2,
    linear_num_value_heads=4, layer_types=["linear_attention", "full_attention"], rms_norm_eps=EPS,
    max_position_embeddings=64, tie_word_embeddings=False, initializer_range=0.2,
    rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
    bos_token_id=None, eos_token_id=5, num_experts=E, num_experts_per_tok=K, moe_intermediate_size=I_E,
    shared_expert_intermediate_size=I_S)
FAMILIES = {
    "qwen3_5_moe": dict(
        config=lambda: transformers.Qwen3_5MoeTextConfig(**COMMON), model=transformers.Qwen3_5MoeForCausalLM,
        module=m35, layer=m35.Qwen3_5MoeDecoderLayer, norm=m35.Qwen3_5MoeRMSNorm,
        rope=m35.Qwen3_5MoeTextRotaryEmbedding, layers_key="mtp_num_hidden_layers", seed=7,
        folder="tiny-qwen3-5-moe-mtp", reference="mtp-qwen3-5-moe.safetensors"),
    "qwen3_next": dict(
        config=lambda: transformers.Qwen3NextConfig(
            **COMMON, intermediate_size=48, decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True),
        model=transformers.Qwen3NextForCausalLM, module=mnext, layer=mnext.Qwen3NextDecoderLayer,
        norm=mnext.Qwen3NextRMSNorm, rope=mnext.Qwen3NextRotaryEmbedding, layers_key=None, seed=16,
        folder="tiny-qwen3-next-mtp", reference="mtp-qwen3-next.safetensors"),
}


class Mtp(torch.nn.Module):
    """vLLM's MultiTokenPredictor less the embedding (the target's): its state_dict names are mtp.*'s."""

    def __init__(self, f, cfg):
        super().__init__()
        self.fc = torch.nn.Linear(2 * H, H, bias=False)
        self.pre_fc_norm_embedding = f["norm"](H, eps=EPS)
        self.pre_fc_norm_hidden = f["norm"](H, eps=EPS)
        self.norm = f["norm"](H, eps=EPS)
        self.layers = torch.nn.ModuleList([f["layer"](cfg, layer_idx=1)])  # layer_types[1]: full attention


def make(family):
    f = FAMILIES[family]
    torch.manual_seed(f["seed"])
    cfg = f["config"]()
    cfg._attn_implementation = "eager"
    target = f["model"](cfg).float().eval()
    mtp = Mtp(f, cfg).float()
    with torch.no_grad():
        for name, p in list(target.named_parameters()) + list(mtp.named_parameters()):
            if name.endswith("norm.weight") and p.dim() == 1 and "linear_attn" not in name:
                p.copy_(0.1 * torch.randn_like(p))  # x * (1 + w)
        for name, p in mtp.named_parameters():
            if p.dim() >= 2:  # projections, the router, the shared expert's gate, the experts [E, ., .]
                p.copy_(torch.randn_like(p) * 0.15)
        mtp.layers[0].mlp.gate.weight.mul_(4.0)  # a router that prefers experts clearly (no near-ties)
    layer = mtp.layers[0]
    attn, moe = layer.self_attn, layer.mlp
    assert type(moe).__name__.endswith("SparseMoeBlock"), type(moe)
    rope = f["rope"](cfg)
    apply_rope = f["module"].apply_rotary_pos_emb
    router_probs = []  # every routed token's sorted probabilities (the near-tie check)
    moe.gate.register_forward_hook(lambda mod, inp, out: router_probs.append(
        torch.softmax(out[0].detach(), -1).sort(-1, descending=True).values))

    T = 12
    doc = torch.tensor([[0] * 7 + [1] * 5])
    pos = torch.tensor([list(range(7)) + list(range(5))])
    input_ids = torch.randint(0, V, (1, T))
    hidden, target_logits = [], []
    with torch.no_grad():
        for s, e in [(0, 7), (7, 12)]:
            h = target.model(input_ids[:, s:e]).last_hidden_state  # after the final norm
            out = target(input_ids[:, s:e])
            assert torch.allclose(target.lm_head(h), out.logits, atol=1e-5)
            hidden.append(h)
            target_logits.append(out.logits)
    hidden = torch.cat(hidden, 1)
    target_logits = torch.cat(target_logits, 1)
    embedding = target.model.embed_tokens.weight.detach()
    lm_head = target.lm_head.weight.detach()

    def qkv(x, positions):  # the gated attention's forward up to the attention itself
        n = x.shape[1]
        q, gate = torch.chunk(attn.q_proj(x).view(1, n, NH, 2 * HD), 2, dim=-1)
        q = attn.q_norm(q).transpose(1, 2)
        k = attn.k_norm(attn.k_proj(x).view(1, n, NKV, HD)).transpose(1, 2)
        v = attn.v_proj(x).view(1, n, NKV, HD).transpose(1, 2)
        q, k = apply_rope(q, k, *rope(x, positions))
        return q, k.repeat_interleave(NH // NKV, 1), v.repeat_interleave(NH // NKV, 1), gate.reshape(1, n, NH * HD)

    def step_in(ids, state, positions):
        e = embedding[ids]  # no position-0 mask
        u = mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(e), mtp.pre_fc_norm_hidden(state)], -1))
        return u, qkv(layer.input_layernorm(u), positions)

    def step_out(u, a, gate):  # the rest of the attention and the decoder layer (its sparse MoE block), mtp.norm
        r = u + attn.o_proj(a.transpose(1, 2).reshape(1, u.shape[1], NH * HD) * torch.sigmoid(gate))
        return mtp.norm(r + moe(layer.post_attention_layernorm(r)))

    visible = (torch.arange(T)[None, :] <= torch.arange(T)[:, None]) & (doc[0][None, :] == doc[0][:, None])
    scale = HD ** -0.5
    state, keys, values, logits = hidden, [], [], []
    for k in range(STEPS):
        shifted = torch.cat([input_ids[:, k + 1:], torch.zeros(1, k + 1, dtype=torch.long)], 1)
        u, (q, kk, vv, gate) = step_in(shifted, state, pos + k)
        keys.append(kk)
        values.append(vv)
        s0 = (q @ keys[0].transpose(-1, -2) * scale).masked_fill(~visible, float("-inf"))
        diag = [(q * keys[j]).sum(-1, keepdim=True) * scale for j in range(1, k + 1)]
        p = torch.softmax(torch.cat([s0] + diag, -1), -1)
        a = p[..., :T] @ values[0]
        for j in range(1, k + 1):
            a = a + p[..., T + j - 1:T + j] * values[j]
        state = step_out(u, a, gate)
        logits.append(state @ lm_head.T)

    loss_mask = torch.ones(1, T, dtype=torch.uint8)
    loss_mask[0, 1] = 0
    argmax = target_logits.argmax(-1)
    loss, dens = 0.0, []
    for k in range(STEPS):
        sh = lambda x, fill: torch.cat([x[:, k + 1:], torch.full_like(x[:, :k + 1], fill)], 1)  # noqa: E731
        ahead = lambda x, fill: torch.cat([x[:, k + 2:], torch.full_like(x[:, :k + 2], fill)], 1)  # noqa: E731
        valid = (ahead(doc, -2) == doc) & (doc >= 0) & (ahead(loss_mask, 0) != 0)
        ce = -(torch.softmax(sh(target_logits, 0.0), -1) * torch.log_softmax(logits[k], -1)).sum(-1)
        den = float(valid.sum().clamp_min(1))
        dens.append(den)
        loss = loss + 0.8 ** k * torch.where(valid, ce, torch.zeros_like(ce)).sum() / den
    loss.backward()
    assert mtp.layers[0].mlp.gate.weight.grad.abs().sum() > 0  # the router trains
    used = (mtp.layers[0].mlp.experts.gate_up_proj.grad.abs().sum((1, 2)) > 0).sum()
    assert used >= 3, used  # most experts see tokens

    with torch.no_grad():
        p_anchor = 3
        positions = torch.arange(p_anchor + 1)[None, :]
        u, (q, kk, vv, gate) = step_in(input_ids[:, 1:p_anchor + 2], hidden[:, :p_anchor + 1], positions)
        causal = torch.arange(p_anchor + 1)[None, :] <= torch.arange(p_anchor + 1)[:, None]
        a = torch.softmax((q @ kk.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf")), -1) @ vv
        o = step_out(u, a, gate)[:, -1:]
        cache_k, cache_v = kk, vv
        drafts, served = [], []
        for j in range(STEPS):
            z = o @ lm_head.T
            served.append(z)
            token = z.argmax(-1)
            drafts.append(token)
            if j + 1 == STEPS:
                break
            u, (q, kk, vv, gate) = step_in(token, o, torch.tensor([[p_anchor + 1 + j]]))
            cache_k, cache_v = torch.cat([cache_k, kk], 2), torch.cat([cache_v, vv], 2)
            o = step_out(u, torch.softmax(q @ cache_k.transpose(-1, -2) * scale, -1) @ cache_v, gate)
        assert torch.allclose(served[0][0, 0], logits[0][0, p_anchor], atol=1e-5)
        u0, _ = step_in(input_ids[:, 1:8], hidden[:, :7], pos[:, :7])
        mask = torch.full((7, 7), float("-inf")).triu(1)[None, None]
        z = layer(u0, position_embeddings=rope(u0, pos[:, :7]), attention_mask=mask, position_ids=pos[:, :7])
        z = z[0] if isinstance(z, tuple) else z
        assert torch.allclose(mtp.norm(z) @ lm_head.T, logits[0][:, :7], atol=1e-5)
    probs = torch.cat(router_probs)
    gap = (probs[:, K - 1] - probs[:, K]).min().item()
    assert gap > 1e-3, gap  # no token's k-th choice is a near-tie

    model_dir = ROOT / "tests" / "fixtures" / "models" / f["folder"]
    model_dir.mkdir(parents=True, exist_ok=True)
    for old in model_dir.glob("*"):
        old.unlink()
    target.save_pretrained(model_dir)
    weights = load_file(str(model_dir / "model.safetensors"))
    assert not any(k.startswith("mtp.") for k in weights)  # transformers drops mtp.*: added here
    assert any(".mlp.experts.0.gate_proj.weight" in k for k in weights)  # saved per expert, as on the Hub
    shipped = {}
    for k, v in mtp.state_dict().items():
        v = v.detach()
        if k.endswith("mlp.experts.gate_up_proj"):  # [E, 2 I, H]: gate rows, then up rows (its chunk(2))
            base = k[: -len("gate_up_proj")]
            for e in range(E):
                shipped[f"mtp.{base}{e}.gate_proj.weight"] = v[e, :I_E].contiguous()
                shipped[f"mtp.{base}{e}.up_proj.weight"] = v[e, I_E:].contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            base = k[: -len("down_proj")]
            for e in range(E):
                shipped[f"mtp.{base}{e}.down_proj.weight"] = v[e].contiguous()
        else:
            shipped["mtp." + k] = v.contiguous()
    assert len(shipped) == 4 + 8 + 1 + 3 + 1 + 3 * E, sorted(shipped)  # fc and norms, attention, router, shared
    save_file(weights | shipped, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((model_dir / "config.json").read_text())
    if f["layers_key"]:
        config[f["layers_key"]] = 1
    (model_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for extra in model_dir.glob("generation_config.json"):
        extra.unlink()

    ref = {"input_ids": input_ids, "position_ids": pos, "document_ids": doc, "hidden": hidden.contiguous(),
           "target_logits": target_logits.contiguous(), "target_argmax": argmax, "loss_mask": loss_mask,
           "denominators": torch.tensor(dens), "loss": loss.detach().reshape(1),
           "served_drafts": torch.cat(drafts, 1), "served_logits": torch.cat(served, 1).contiguous()}
    for k, l in enumerate(logits):
        ref[f"logits_{k}"] = l.detach().contiguous()
    for name, t in mtp.named_parameters():
        ref["grad.mtp." + name] = t.grad.contiguous()
    path = ROOT / "tests" / "fixtures" / "reference" / f["reference"]
    save_file(ref, str(path))
    print("wrote", model_dir, "and", path, f"(router gap {gap:.4f}, {int(used)} of {E} experts trained)")


if __name__ == "__main__":
    for family in FAMILIES:
        make(family)
