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

The unroll, the loss and the served chain are scripts/mtp_reference_common.py's (every MTP reference script's).
Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_mtp_qwen_moe_reference.py
"""
import pathlib
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as m35
from transformers.models.qwen3_next import modeling_qwen3_next as mnext

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import mtp_reference_common as common  # noqa: E402

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

    input_ids, pos, doc = common.packed_row(V)
    hidden, target_logits = common.target_states(target, input_ids)
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
        return (u, *qkv(layer.input_layernorm(u), positions))

    def step_out(u, a, gate):  # the rest of the attention and the decoder layer (its sparse MoE block), mtp.norm
        r = u + attn.o_proj(a.transpose(1, 2).reshape(1, u.shape[1], NH * HD) * torch.sigmoid(gate))
        o = mtp.norm(r + moe(layer.post_attention_layernorm(r)))
        return o, o

    scale = HD ** -0.5
    logits = common.ttt_logits(step_in, step_out, lm_head, input_ids, hidden, pos, doc, STEPS, scale)
    loss_mask = torch.ones(1, common.T, dtype=torch.uint8)
    loss_mask[0, 1] = 0
    loss, dens = common.training_loss(logits, target_logits, doc, loss_mask)
    loss.backward()
    assert mtp.layers[0].mlp.gate.weight.grad.abs().sum() > 0  # the router trains
    used = (mtp.layers[0].mlp.experts.gate_up_proj.grad.abs().sum((1, 2)) > 0).sum()
    assert used >= 3, used  # most experts see tokens

    drafts, served = common.served_chain(step_in, step_out, lm_head, input_ids, hidden, 3, STEPS, scale)
    with torch.no_grad():
        assert torch.allclose(served[0, 0], logits[0][0, 3], atol=1e-5)
        u0, *_ = step_in(input_ids[:, 1:8], hidden[:, :7], pos[:, :7])
        mask = torch.full((7, 7), float("-inf")).triu(1)[None, None]
        z = layer(u0, position_embeddings=rope(u0, pos[:, :7]), attention_mask=mask, position_ids=pos[:, :7])
        z = z[0] if isinstance(z, tuple) else z
        assert torch.allclose(mtp.norm(z) @ lm_head.T, logits[0][:, :7], atol=1e-5)
    probs = torch.cat(router_probs)
    gap = (probs[:, K - 1] - probs[:, K]).min().item()
    assert gap > 1e-3, gap  # no token's k-th choice is a near-tie

    shipped = {}
    for k, v in mtp.state_dict().items():
        shipped |= common.per_expert(k, v.detach(), "mtp.", E, I_E)
    assert len(shipped) == 4 + 8 + 1 + 3 + 1 + 3 * E, sorted(shipped)  # fc and norms, attention, router, shared
    model_dir = ROOT / "tests" / "fixtures" / "models" / f["folder"]
    weights = common.write_target(model_dir, target, shipped, {f["layers_key"]: 1} if f["layers_key"] else {},
                                  "mtp.")
    assert any(".mlp.experts.0.gate_proj.weight" in k for k in weights)  # saved per expert, as on the Hub

    grads = {"mtp." + name: t.grad for name, t in mtp.named_parameters()}
    ref = common.reference(input_ids, pos, doc, hidden, target_logits, loss_mask, dens, loss, drafts, served,
                           logits, grads)
    path = ROOT / "tests" / "fixtures" / "reference" / f["reference"]
    save_file(ref, str(path))
    print("wrote", model_dir, "and", path, f"(router gap {gap:.4f}, {int(used)} of {E} experts trained)")


if __name__ == "__main__":
    for family in FAMILIES:
        make(family)
