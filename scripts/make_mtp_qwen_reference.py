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
The unroll, the loss and the served chain are scripts/mtp_reference_common.py's (every MTP reference script's).
Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_mtp_qwen_reference.py
"""
import pathlib
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers.models.qwen3_5.modeling_qwen3_5 import (Qwen3_5DecoderLayer, Qwen3_5RMSNorm,
                                                          Qwen3_5TextRotaryEmbedding, apply_rotary_pos_emb)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import mtp_reference_common as common  # noqa: E402

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
    input_ids, pos, doc = common.packed_row(V)
    hidden, target_logits = common.target_states(target, input_ids)
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
        return (u, *qkv(layer.input_layernorm(u), positions))

    def step_out(u, a, gate):  # the rest of Qwen3_5Attention and Qwen3_5DecoderLayer, then mtp.norm
        r = u + attn.o_proj(a.transpose(1, 2).reshape(1, u.shape[1], NH * HD) * torch.sigmoid(gate))
        o = mtp.norm(r + layer.mlp(layer.post_attention_layernorm(r)))
        return o, o

    # The training-time-test unroll and one training step (mtp_reference_common.py): the target's
    # distribution at t+k+1 teaches step k at t.
    scale = HD ** -0.5
    logits = common.ttt_logits(step_in, step_out, lm_head, input_ids, hidden, pos, doc, STEPS, scale)
    loss_mask = torch.ones(1, common.T, dtype=torch.uint8)
    loss_mask[0, 1] = 0
    loss, dens = common.training_loss(logits, target_logits, doc, loss_mask)
    loss.backward()

    # The served chain (vLLM's draft prefill, then decode steps on the layer's own KV cache) at anchor p = 3.
    drafts, served = common.served_chain(step_in, step_out, lm_head, input_ids, hidden, 3, STEPS, scale)
    with torch.no_grad():
        assert torch.allclose(served[0, 0], logits[0][0, 3], atol=1e-5)
        # Step 1 of sample 0 through transformers' own Qwen3_5DecoderLayer.forward (plain causal attention).
        u0, *_ = step_in(input_ids[:, 1:8], hidden[:, :7], pos[:, :7])
        mask = torch.full((7, 7), float("-inf")).triu(1)[None, None]
        z = layer(u0, position_embeddings=rope(u0, pos[:, :7]), attention_mask=mask, position_ids=pos[:, :7])
        z = z[0] if isinstance(z, tuple) else z
        assert torch.allclose(mtp.norm(z) @ lm_head.T, logits[0][:, :7], atol=1e-5)

    shipped = {"mtp." + k: v.detach().contiguous() for k, v in mtp.state_dict().items()}
    assert len(shipped) == 15, sorted(shipped)
    common.write_target(MODEL_DIR, target, shipped, {"mtp_num_hidden_layers": 1}, "mtp.")

    grads = {"mtp." + name: t.grad for name, t in mtp.named_parameters()}
    ref = common.reference(input_ids, pos, doc, hidden, target_logits, loss_mask, dens, loss, drafts, served,
                           logits, grads)
    save_file(ref, str(REF))
    print("wrote", MODEL_DIR, "and", REF)


if __name__ == "__main__":
    main()
