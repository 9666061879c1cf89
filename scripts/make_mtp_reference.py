#!/usr/bin/env python3
"""Creates the MiMo-style MTP fixture: a tiny MiMoForCausalLM target (transformers' Qwen2ForCausalLM for
the decoder, random weights) with one shipped MTP layer, and an independent PyTorch reference of vLLM's
MTP forward (vllm/model_executor/models/mimo_mtp.py, MTP.md 2.0 and 2.4):

  e = embed(x_{t+1}), zeroed where the position is 0; u = input_proj(cat[hidden_layernorm(h), token_layernorm(e)])
  (hidden first); a Qwen2 decoder layer on u (q/k/v bias); o = final_layernorm(u + attn + mlp);
  logits = lm_head(o); o is fed back. Step 1's h is the target's last hidden state before its final norm.

Training-time test over STEPS steps as vLLM drafts: step k (0-based) at t takes x_{t+1+k} at RoPE position
t+k and attends the step-1 keys s <= t of its sample plus the chain's own earlier steps.

Writes tests/fixtures/models/tiny-mimo/ (config.json: model_type mimo, architectures MiMoForCausalLM, the
Qwen2 fields, num_nextn_predict_layers 1; two shards and model.safetensors.index.json: the decoder layers in
shard 1, the final norm, lm_head and model.mtp_layers.0.* in shard 2) and
tests/fixtures/reference/mtp-mimo.safetensors: a packed row of two samples, the target's pre-norm last hidden
states and logits, the unroll's logits per step, one training step (soft cross-entropy against the target's
distribution, decay 0.8, valid-count denominators: the loss and every MTP parameter's gradient), and the
served chain of a cache-based drafting loop at anchor p = 3 of sample 0 (served_drafts).

The unroll, the loss and the served chain are scripts/mtp_reference_common.py's (every MTP reference script's).
Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_mtp_reference.py
"""
import json
import pathlib
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RotaryEmbedding, apply_rotary_pos_emb

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import mtp_reference_common as common  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL_DIR = ROOT / "tests" / "fixtures" / "models" / "tiny-mimo"
REF = ROOT / "tests" / "fixtures" / "reference" / "mtp-mimo.safetensors"

H, I, NH, NKV, HD, V, L, STEPS, EPS, THETA = 32, 48, 4, 2, 8, 256, 2, 3, 1e-6, 10000.0  # V: the smoke data's ids
P = "model.mtp_layers.0."


def rms(x, w):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


def main():
    torch.manual_seed(0)
    qcfg = transformers.Qwen2Config(vocab_size=V, hidden_size=H, intermediate_size=I, num_hidden_layers=L,
                                    num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD, rms_norm_eps=EPS,
                                    max_position_embeddings=64, rope_theta=THETA, tie_word_embeddings=False,
                                    initializer_range=0.2, use_sliding_window=False, eos_token_id=5)
    target = transformers.Qwen2ForCausalLM(qcfg).float().eval()
    with torch.no_grad():
        for name, p in target.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))

    w = {}
    for n in ["token_layernorm", "hidden_layernorm", "final_layernorm", "input_layernorm",
              "post_attention_layernorm"]:
        w[P + n + ".weight"] = 1 + 0.1 * torch.randn(H)
    w[P + "input_proj.weight"] = torch.randn(H, 2 * H) * 0.15
    for n, rows in [("q_proj", NH * HD), ("k_proj", NKV * HD), ("v_proj", NKV * HD)]:
        w[P + f"self_attn.{n}.weight"] = torch.randn(rows, H) * 0.15
        w[P + f"self_attn.{n}.bias"] = torch.randn(rows) * 0.1
    w[P + "self_attn.o_proj.weight"] = torch.randn(H, NH * HD) * 0.15
    w[P + "mlp.gate_proj.weight"] = torch.randn(I, H) * 0.15
    w[P + "mlp.up_proj.weight"] = torch.randn(I, H) * 0.15
    w[P + "mlp.down_proj.weight"] = torch.randn(H, I) * 0.15
    f = {k: v.clone().requires_grad_(True) for k, v in w.items()}

    # One packed row: sample 0 = 7 tokens, sample 1 = 5 tokens; the target runs each sample alone.
    input_ids, pos, doc = common.packed_row(V)
    pre_norm = {}
    hook = target.model.layers[-1].register_forward_hook(
        lambda m, a, out: pre_norm.__setitem__("h", out[0] if isinstance(out, tuple) else out))
    hidden, target_logits = [], []
    with torch.no_grad():
        for s, e in common.SPANS:
            out = target(input_ids[:, s:e])
            hidden.append(pre_norm["h"])
            target_logits.append(out.logits)
            # The hook saw the last layer's output before the final norm (MiMoModel's hidden + residual).
            assert torch.allclose(target.lm_head(target.model.norm(pre_norm["h"])), out.logits, atol=1e-5)
    hook.remove()
    hidden = torch.cat(hidden, 1)
    target_logits = torch.cat(target_logits, 1)
    embedding = target.model.embed_tokens.weight.detach()
    lm_head = target.lm_head.weight.detach()
    rope = Qwen2RotaryEmbedding(qcfg)

    def qkv(x, positions):
        n = x.shape[1]
        q = (x @ f[P + "self_attn.q_proj.weight"].T + f[P + "self_attn.q_proj.bias"]).view(1, n, NH, HD)
        k = (x @ f[P + "self_attn.k_proj.weight"].T + f[P + "self_attn.k_proj.bias"]).view(1, n, NKV, HD)
        v = (x @ f[P + "self_attn.v_proj.weight"].T + f[P + "self_attn.v_proj.bias"]).view(1, n, NKV, HD)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        cos, sin = rope(x, positions)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return q, k.repeat_interleave(NH // NKV, 1), v.repeat_interleave(NH // NKV, 1)

    def step_in(ids, state, positions):
        e = embedding[ids] * (positions != 0).unsqueeze(-1).float()  # vLLM: inputs_embeds[positions == 0] = 0
        u = torch.cat([rms(state, f[P + "hidden_layernorm.weight"]), rms(e, f[P + "token_layernorm.weight"])],
                      -1) @ f[P + "input_proj.weight"].T
        return (u, *qkv(rms(u, f[P + "input_layernorm.weight"]), positions), None)

    def step_out(u, attn, _):
        r = u + attn.transpose(1, 2).reshape(1, u.shape[1], NH * HD) @ f[P + "self_attn.o_proj.weight"].T
        m = rms(r, f[P + "post_attention_layernorm.weight"])
        y = (torch.nn.functional.silu(m @ f[P + "mlp.gate_proj.weight"].T) * (m @ f[P + "mlp.up_proj.weight"].T)) \
            @ f[P + "mlp.down_proj.weight"].T
        o = rms(r + y, f[P + "final_layernorm.weight"])
        return o, o

    # The training-time-test unroll and one training step (mtp_reference_common.py): the target's distribution
    # at t+k+1 teaches step k at t (every id is in the full draft vocabulary), valid iff t+k+2 is in the same
    # sample and trained.
    scale = HD ** -0.5
    logits = common.ttt_logits(step_in, step_out, lm_head, input_ids, hidden, pos, doc, STEPS, scale)
    loss_mask = torch.ones(1, common.T, dtype=torch.uint8)
    loss_mask[0, 1] = 0
    loss, dens = common.training_loss(logits, target_logits, doc, loss_mask)
    loss.backward()

    # The served chain (vLLM's draft prefill, then decode steps on a KV cache), written independently of
    # the unroll: anchor p = 3 of sample 0, prefix positions 0..p with (h_t, x_{t+1}), then STEPS - 1 steps.
    p_anchor = 3
    drafts, served = common.served_chain(step_in, step_out, lm_head, input_ids, hidden, p_anchor, STEPS, scale)
    with torch.no_grad():
        # Teacher forcing equals serving where the drafts were the tokens: step 1 at p is the unroll's.
        assert torch.allclose(served[0, 0], logits[0][0, p_anchor], atol=1e-5)
        # The hand-written block is transformers' Qwen2DecoderLayer (sample 0, step 1: plain causal attention).
        qcfg._attn_implementation = "eager"
        layer = Qwen2DecoderLayer(qcfg, layer_idx=0).eval()
        layer.load_state_dict({k[len(P):]: v for k, v in w.items()
                               if not any(n in k for n in ["token_", "hidden_", "final_", "input_proj"])})
        u0, *_ = step_in(input_ids[:, 1:8], hidden[:, :7], pos[:, :7])
        mask = torch.full((7, 7), float("-inf")).triu(1)[None, None]
        z = layer(u0, attention_mask=mask, position_ids=pos[:, :7], position_embeddings=rope(u0, pos[:, :7]))
        z = z[0] if isinstance(z, tuple) else z
        assert torch.allclose(rms(z, f[P + "final_layernorm.weight"]) @ lm_head.T, logits[0][:, :7], atol=1e-5)

    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    for old in MODEL_DIR.glob("*.safetensors"):
        old.unlink()
    sd = {k: v.detach().contiguous() for k, v in target.state_dict().items()}
    shard2 = {k: v for k, v in sd.items() if not k.startswith("model.layers.") and k != "model.embed_tokens.weight"}
    shard1 = {k: v for k, v in sd.items() if k not in shard2}
    shard2.update({k: v.contiguous() for k, v in w.items()})
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    save_file(shard1, str(MODEL_DIR / names[0]), metadata={"format": "pt"})
    save_file(shard2, str(MODEL_DIR / names[1]), metadata={"format": "pt"})
    weight_map = {k: names[0] for k in shard1} | {k: names[1] for k in shard2}
    total = sum(t.numel() * t.element_size() for t in list(shard1.values()) + list(shard2.values()))
    (MODEL_DIR / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2) + "\n")
    cfg = {"architectures": ["MiMoForCausalLM"], "model_type": "mimo", "hidden_size": H, "intermediate_size": I,
           "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
           "hidden_act": "silu", "rms_norm_eps": EPS, "max_position_embeddings": 64, "rope_theta": THETA,
           "rope_scaling": None, "vocab_size": V, "tie_word_embeddings": False, "use_sliding_window": False,
           "max_window_layers": L, "attention_dropout": 0.0, "eos_token_id": 5, "bos_token_id": None,
           "torch_dtype": "float32", "num_nextn_predict_layers": 1}
    (MODEL_DIR / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")

    grads = {name: t.grad for name, t in f.items()}
    ref = common.reference(input_ids, pos, doc, hidden, target_logits, loss_mask, dens, loss, drafts, served,
                           logits, grads)
    save_file(ref, str(REF))
    print("wrote", MODEL_DIR, "and", REF)


if __name__ == "__main__":
    main()
