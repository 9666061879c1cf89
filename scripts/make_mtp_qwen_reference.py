#!/usr/bin/env python3
"""Creates the Qwen3.5 MTP fixture: a tiny dense Qwen3_5ForCausalLM target written by transformers (which drops
mtp.*), with one shipped MTP layer added under vLLM's names, and an independent PyTorch reference of vLLM's
served MTP forward (vllm/model_executor/models/qwen3_5_mtp.py, MTP.md 2.0 and 2.3):

  e = embed(x_{t+1}) (no position-0 mask); u = fc(cat[pre_fc_norm_embedding(e), pre_fc_norm_hidden(h)])
  (embedding first, no bias); one full-attention Qwen3_5DecoderLayer on u (q_proj emits [q | gate] per head,
  q_norm/k_norm, partial RoPE, sigmoid(gate) * attention before o_proj, dense MLP); o = norm(u + attn + mlp);
  logits = lm_head(o); o is fed back. Every norm is Qwen3_5RMSNorm, x * (1 + w) in fp32. Step 1's h is the
  target's output after its final norm (Qwen3_5Model's last_hidden_state).

The layer is transformers' own modules (Qwen3_5DecoderLayer, Qwen3_5RMSNorm, Qwen3_5TextRotaryEmbedding): its
projections, norms and MLP are called as they are, the attention over the training-time test's keys is written
here (step k at t: x_{t+1+k} at RoPE position t+k over the step-1 keys s <= t of its sample plus the chain's own
earlier steps), and step 1 is checked against the layer's own forward.

Writes tests/fixtures/models/tiny-qwen3-5-mtp/ (transformers' config.json plus mtp_num_hidden_layers 1; its
model.safetensors plus the 15 mtp.* tensors) and tests/fixtures/reference/mtp-qwen3-5.safetensors: a packed row
of two samples, the target's post-norm last hidden states and logits, the unroll's logits per step, one training
step (soft cross-entropy against the target's distribution, decay 0.8, valid-count denominators: the loss and
every MTP tensor's gradient), and the served chain of a cache-based drafting loop at anchor p = 3 of sample 0.

Kept apart from make_mtp_reference.py (MiMo) so that running it does not rewrite the MiMo fixture.
Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_mtp_qwen_reference.py
"""
import json
import pathlib

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers.models.qwen3_5.modeling_qwen3_5 import (Qwen3_5DecoderLayer, Qwen3_5RMSNorm,
                                                          Qwen3_5TextRotaryEmbedding, apply_rotary_pos_emb)

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL_DIR = ROOT / "tests" / "fixtures" / "models" / "tiny-qwen3-5-mtp"
REF = ROOT / "tests" / "fixtures" / "reference" / "mtp-qwen3-5.safetensors"

H, I, NH, NKV, HD, V, STEPS, EPS = 32, 48, 4, 2, 16, 256, 3, 1e-6  # V: the smoke data's ids; rotary 16 * 0.25


class Mtp(torch.nn.Module):
    """vLLM's Qwen3_5MultiTokenPredictor less the embedding (the target's): its state_dict names are mtp.*'s."""

    def __init__(self, cfg):
        super().__init__()
        self.fc = torch.nn.Linear(2 * H, H, bias=False)
        self.pre_fc_norm_embedding = Qwen3_5RMSNorm(H, eps=EPS)
        self.pre_fc_norm_hidden = Qwen3_5RMSNorm(H, eps=EPS)
        self.norm = Qwen3_5RMSNorm(H, eps=EPS)
        self.layers = torch.nn.ModuleList([Qwen3_5DecoderLayer(cfg, layer_idx=1)])  # layer_types[1]: full


def main():
    torch.manual_seed(0)
    cfg = transformers.Qwen3_5TextConfig(
        vocab_size=V, hidden_size=H, intermediate_size=I, num_hidden_layers=2, num_attention_heads=NH,
        num_key_value_heads=NKV, head_dim=HD, linear_conv_kernel_dim=4, linear_key_head_dim=8,
        linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
        layer_types=["linear_attention", "full_attention"], rms_norm_eps=EPS, max_position_embeddings=64,
        tie_word_embeddings=False, initializer_range=0.2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        bos_token_id=None, eos_token_id=5)
    cfg._attn_implementation = "eager"
    target = transformers.Qwen3_5ForCausalLM(cfg).float().eval()
    mtp = Mtp(cfg).float()
    with torch.no_grad():
        for name, p in list(target.named_parameters()) + list(mtp.named_parameters()):
            if name.endswith("norm.weight") and p.dim() == 1 and "linear_attn" not in name:
                p.copy_(0.1 * torch.randn_like(p))  # Qwen3_5RMSNorm: x * (1 + w)
        for name, p in mtp.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn_like(p) * 0.15)
    layer = mtp.layers[0]
    attn = layer.self_attn
    rope = Qwen3_5TextRotaryEmbedding(cfg)

    # One packed row: sample 0 = 7 tokens, sample 1 = 5 tokens; the target runs each sample alone.
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

    def qkv(x, positions):  # Qwen3_5Attention.forward up to the attention itself
        n = x.shape[1]
        q, gate = torch.chunk(attn.q_proj(x).view(1, n, NH, 2 * HD), 2, dim=-1)
        q = attn.q_norm(q).transpose(1, 2)
        k = attn.k_norm(attn.k_proj(x).view(1, n, NKV, HD)).transpose(1, 2)
        v = attn.v_proj(x).view(1, n, NKV, HD).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, *rope(x, positions))
        return q, k.repeat_interleave(NH // NKV, 1), v.repeat_interleave(NH // NKV, 1), gate.reshape(1, n, NH * HD)

    def step_in(ids, state, positions):
        e = embedding[ids]  # no position-0 mask (qwen3_5_mtp.py)
        u = mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(e), mtp.pre_fc_norm_hidden(state)], -1))
        return u, qkv(layer.input_layernorm(u), positions)

    def step_out(u, a, gate):  # the rest of Qwen3_5Attention and Qwen3_5DecoderLayer, then mtp.norm
        r = u + attn.o_proj(a.transpose(1, 2).reshape(1, u.shape[1], NH * HD) * torch.sigmoid(gate))
        return mtp.norm(r + layer.mlp(layer.post_attention_layernorm(r)))

    # The training-time-test unroll.
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

    # One training step, as make_mtp_reference.py's: the target's distribution at t+k+1 teaches step k at t.
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

    # The served chain (vLLM's draft prefill, then decode steps on the layer's own KV cache) at anchor p = 3.
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
        # Step 1 of sample 0 through transformers' own Qwen3_5DecoderLayer.forward (plain causal attention).
        u0, _ = step_in(input_ids[:, 1:8], hidden[:, :7], pos[:, :7])
        mask = torch.full((7, 7), float("-inf")).triu(1)[None, None]
        z = layer(u0, position_embeddings=rope(u0, pos[:, :7]), attention_mask=mask, position_ids=pos[:, :7])
        z = z[0] if isinstance(z, tuple) else z
        assert torch.allclose(mtp.norm(z) @ lm_head.T, logits[0][:, :7], atol=1e-5)

    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    for old in MODEL_DIR.glob("*"):
        old.unlink()
    target.save_pretrained(MODEL_DIR)
    weights = load_file(str(MODEL_DIR / "model.safetensors"))
    assert not any(k.startswith("mtp.") for k in weights)  # transformers drops mtp.*: added here
    shipped = {"mtp." + k: v.detach().contiguous() for k, v in mtp.state_dict().items()}
    assert len(shipped) == 15, sorted(shipped)
    save_file(weights | shipped, str(MODEL_DIR / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((MODEL_DIR / "config.json").read_text())
    config["mtp_num_hidden_layers"] = 1
    (MODEL_DIR / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for extra in MODEL_DIR.glob("generation_config.json"):
        extra.unlink()

    ref = {"input_ids": input_ids, "position_ids": pos, "document_ids": doc, "hidden": hidden.contiguous(),
           "target_logits": target_logits.contiguous(), "target_argmax": argmax, "loss_mask": loss_mask,
           "denominators": torch.tensor(dens), "loss": loss.detach().reshape(1),
           "served_drafts": torch.cat(drafts, 1), "served_logits": torch.cat(served, 1).contiguous()}
    for k, l in enumerate(logits):
        ref[f"logits_{k}"] = l.detach().contiguous()
    for name, t in mtp.named_parameters():
        ref["grad.mtp." + name] = t.grad.contiguous()
    save_file(ref, str(REF))
    print("wrote", MODEL_DIR, "and", REF)


if __name__ == "__main__":
    main()
