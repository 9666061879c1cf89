#!/usr/bin/env python3
"""Creates the DeepSeek-V3 and GLM-4.5 MTP fixtures: a tiny DeepseekV3ForCausalLM and a tiny Glm4MoeForCausalLM
target written by transformers (which drops the layer after the last), with one shipped MTP layer added as
model.layers.{L}.* (L = num_hidden_layers = 2) under vLLM's names, its routed experts per expert as Hugging Face
checkpoints hold them, and an independent PyTorch reference of vLLM's served MTP forward
(vllm/model_executor/models/deepseek_mtp.py, glm4_moe_mtp.py; MTP.md 2.0-2.2):

  e = embed(x_{t+1}), zeroed where the position is 0; u = eh_proj(cat[enorm(e), hnorm(h)]) (embedding first, no
  bias); z = the decoder layer on u (residual included); logits = lm_head(shared_head.norm(z)) with the target's
  lm_head (vLLM's load_eagle_model swaps it in for shared_head.head); fed back: shared_head.norm(z) (DeepSeek:
  DeepSeekMultiTokenPredictorLayer returns both) or z itself (GLM: Glm4MoeMultiTokenPredictorLayer returns z).
  Step 1's h is the target's output after its final norm. Every norm x * w with rms_norm_eps.

The decoder layer is transformers' own (DeepseekV3DecoderLayer: MLA, DeepseekV3MoE; Glm4MoeDecoderLayer: GQA with
q/k/v bias and partial RoPE, Glm4MoeMoE), built at layer index L >= first_k_dense_replace, so its MLP is the
mixture of experts as vLLM builds it there: the sigmoid router with grouped top-k over scores plus
e_score_correction_bias (a buffer, random here, never trained), the chosen raw scores renormalised times
routed_scaling_factor, the routed experts plus the shared_experts' MLP. Its projections, norms and MoE block are
called as they are (gradients through the router's weights and the chosen experts), the attention over the
training-time test's keys is written in mtp_reference_common.py, and step 1 is checked against the layer's own
forward. Where vLLM's reading differs from transformers': MLA's latent norms take rms_norm_eps (set here; the
DeepSeek config's is 1e-6 anyway); the RoPE is interleaved (rope_interleave true). Every token's router choice is
checked for near-ties (the topk_group-th against the next group, the k-th against the next expert).

The DeepSeek folder's config.json says scoring_func sigmoid and topk_method noaux_tc (as DeepSeek-V3 and Kimi-K2
ship them: vLLM's DeepseekV2MoE reads both, transformers' config has neither), and its MTP layer holds
embed_tokens (the target's embedding, as DeepSeek ships it) and shared_head.head (the target's lm_head perturbed:
vLLM loads it and then replaces it by the target's, so the logits here never read it). GLM's holds neither (vLLM's
loader maps the target's lm_head and embedding in).

Writes tests/fixtures/models/tiny-deepseek-v3-mtp/ and tiny-glm4-moe-mtp/, and
tests/fixtures/reference/mtp-deepseek-v3.safetensors, mtp-glm4-moe.safetensors: the inputs, the target's post-norm
hidden states and logits, the unroll's logits per step, one training step (soft cross-entropy against the target's
distribution, decay 0.8: the loss and every MTP parameter's gradient, the experts' fused as
grad.model.layers.2.mlp.experts.gate_up_proj / down_proj), and the served chain at anchor p = 3. The other MTP
fixtures are not rewritten.

Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_mtp_deepseek_reference.py
"""
import pathlib
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as mds
from transformers.models.glm4_moe import modeling_glm4_moe as mglm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import mtp_reference_common as common  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
H, V, L, STEPS, P_ANCHOR = 32, 256, 2, 3, 3  # V: the smoke data's ids; L target layers, the MTP layer is layers.L

# Each family's config takes keyword overrides of its fields (scripts/bench/make_vllm_mtp_targets.py: other sizes).
FAMILIES = {
    "deepseek_v3": dict(
        config=lambda **sizes: transformers.DeepseekV3Config(**{**dict(
            vocab_size=V, hidden_size=H, intermediate_size=48, num_hidden_layers=L, num_attention_heads=4,
            num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
            v_head_dim=8, n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=2,
            moe_intermediate_size=16, n_shared_experts=2, routed_scaling_factor=2.5, norm_topk_prob=True,
            first_k_dense_replace=1, rms_norm_eps=1e-6, max_position_embeddings=256, rope_interleave=True,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 16, "beta_fast": 32.0, "beta_slow": 1.0,
                             "mscale": 1.0, "mscale_all_dim": 0.8},
            tie_word_embeddings=False, initializer_range=0.2, attention_bias=False, bos_token_id=0,
            eos_token_id=1, num_nextn_predict_layers=1), **sizes}),
        model=transformers.DeepseekV3ForCausalLM, module=mds, layer=mds.DeepseekV3DecoderLayer,
        norm=mds.DeepseekV3RMSNorm, rope=mds.DeepseekV3RotaryEmbedding, mla=True, fed_back_normed=True,
        config_updates={"scoring_func": "sigmoid", "topk_method": "noaux_tc"}, seed=0,
        folder="tiny-deepseek-v3-mtp", reference="mtp-deepseek-v3.safetensors"),
    "glm4_moe": dict(
        config=lambda **sizes: transformers.Glm4MoeConfig(**{**dict(
            vocab_size=V, hidden_size=H, intermediate_size=48, num_hidden_layers=L, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, attention_bias=True, use_qk_norm=False, n_routed_experts=8,
            num_experts_per_tok=2, n_group=2, topk_group=1, moe_intermediate_size=16, n_shared_experts=1,
            routed_scaling_factor=1.5, norm_topk_prob=True, first_k_dense_replace=1, rms_norm_eps=1e-5,
            max_position_embeddings=256,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5},
            tie_word_embeddings=False, initializer_range=0.2, bos_token_id=None, eos_token_id=5,
            num_nextn_predict_layers=1), **sizes}),
        model=transformers.Glm4MoeForCausalLM, module=mglm, layer=mglm.Glm4MoeDecoderLayer,
        norm=mglm.Glm4MoeRMSNorm, rope=mglm.Glm4MoeRotaryEmbedding, mla=False, fed_back_normed=False,
        config_updates={}, seed=0, folder="tiny-glm4-moe-mtp", reference="mtp-glm4-moe.safetensors"),
}


class Mtp(torch.nn.Module):
    """vLLM's MTP layer less the embedding and LM head (the target's): its state_dict names are model.layers.{L}.*'s
    with the block's "layer." dropped (vLLM's _rewrite_spec_layer_name puts them under mtp_block.)."""

    def __init__(self, f, cfg):
        super().__init__()
        eps = cfg.rms_norm_eps
        self.enorm = f["norm"](H, eps=eps)
        self.hnorm = f["norm"](H, eps=eps)
        self.eh_proj = torch.nn.Linear(2 * H, H, bias=False)
        self.shared_head = torch.nn.Module()
        self.shared_head.norm = f["norm"](H, eps=eps)
        self.layer = f["layer"](cfg, layer_idx=L)  # L >= first_k_dense_replace: the MoE block


PREFIX = f"model.layers.{L}."


def block_name(name):
    """A name of Mtp's state_dict under the layer's prefix: the decoder block's tensors lose "layer."."""
    return name[len("layer."):] if name.startswith("layer.") else name


def route_gap(cfg, gate, x):
    """The smallest margin of the grouped router's choices over tokens x [N, H]: the topk_group-th group against the
    next, the k-th expert of the kept groups against the next (DeepseekV3TopkRouter / Glm4MoeTopkRouter)."""
    scores = torch.sigmoid(x.float() @ gate.weight.float().T) + gate.e_score_correction_bias
    g, e = cfg.n_group, cfg.n_routed_experts
    groups = scores.view(-1, g, e // g).topk(2, -1).values.sum(-1).sort(-1, descending=True).values
    gap = float("inf")
    if cfg.topk_group < g:
        gap = (groups[:, cfg.topk_group - 1] - groups[:, cfg.topk_group]).min().item()
    kept = groups[:, cfg.topk_group - 1:cfg.topk_group]
    group_score = scores.view(-1, g, e // g).topk(2, -1).values.sum(-1)
    mask = (group_score >= kept).unsqueeze(-1).expand(-1, g, e // g).reshape(-1, e)
    choice = scores.masked_fill(~mask, float("-inf")).sort(-1, descending=True).values
    k = cfg.num_experts_per_tok
    if k < choice.shape[-1]:
        margin = choice[:, k - 1] - choice[:, k]
        gap = min(gap, margin[torch.isfinite(margin)].min().item() if torch.isfinite(margin).any() else gap)
    return gap


def make(family):
    f = FAMILIES[family]
    torch.manual_seed(f["seed"])
    cfg = f["config"]()
    cfg._attn_implementation = "eager"
    target = f["model"](cfg).float().eval()
    mtp = Mtp(f, cfg).float()
    layer = mtp.layer
    attn, moe = layer.self_attn, layer.mlp
    assert type(moe).__name__.endswith("MoE"), type(moe)
    with torch.no_grad():
        for name, p in mtp.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))  # x * w
            elif p.dim() >= 2:  # projections, the router, the experts [E, ., .]
                p.copy_(torch.randn_like(p) * 0.15)
            else:  # GLM's q/k/v biases
                p.copy_(torch.randn_like(p) * 0.1)
        moe.gate.weight.mul_(4.0)  # a router that prefers experts clearly (no near-ties)
        moe.gate.e_score_correction_bias.copy_(0.05 * torch.randn(cfg.n_routed_experts))
    if f["mla"]:  # vLLM's DeepseekV2MLAAttention: RMSNorm(rank, eps=config.rms_norm_eps)
        attn.q_a_layernorm.variance_epsilon = cfg.rms_norm_eps
        attn.kv_a_layernorm.variance_epsilon = cfg.rms_norm_eps
    rope = f["rope"](cfg)
    routed = []  # every routed token's input (the near-tie check)
    moe.gate.register_forward_hook(lambda mod, inp, out: routed.append(inp[0].detach().reshape(-1, H)))

    input_ids, pos, doc = common.packed_row(V)
    hidden, target_logits = common.target_states(target, input_ids)
    embedding = target.model.embed_tokens.weight.detach()
    lm_head = target.lm_head.weight.detach()
    NH = cfg.num_attention_heads

    if f["mla"]:
        nope, rot, vd, kvl = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
        scale = attn.scaling  # qk_head_dim^-1/2 * yarn_get_mscale(factor, mscale_all_dim)^2, vLLM's too

        def qkv(x, positions):  # DeepseekV3Attention.forward up to the attention itself
            n = x.shape[1]
            q = attn.q_b_proj(attn.q_a_layernorm(attn.q_a_proj(x))).view(1, n, NH, nope + rot).transpose(1, 2)
            q_pass, q_rot = torch.split(q, [nope, rot], dim=-1)
            kv_nope, k_rot = torch.split(attn.kv_a_proj_with_mqa(x), [kvl, rot], dim=-1)
            kv_nope = attn.kv_a_layernorm(kv_nope).view(1, 1, n, kvl)
            q_rot, k_rot = mds.apply_rotary_pos_emb_interleave(q_rot, k_rot.view(1, 1, n, rot), *rope(x, positions))
            k, v = attn.expand_kv(kv_nope, k_rot)
            return torch.cat((q_pass, q_rot), dim=-1), k, v

        def attention_out(a):
            return attn.o_proj(a.transpose(1, 2).reshape(1, a.shape[2], NH * vd))
    else:
        NKV, HD = cfg.num_key_value_heads, cfg.head_dim
        scale = attn.scaling  # head_dim^-1/2

        def qkv(x, positions):  # Glm4MoeAttention.forward up to the attention itself
            n = x.shape[1]
            q = attn.q_proj(x).view(1, n, NH, HD).transpose(1, 2)
            k = attn.k_proj(x).view(1, n, NKV, HD).transpose(1, 2)
            v = attn.v_proj(x).view(1, n, NKV, HD).transpose(1, 2)
            q, k = mglm.apply_rotary_pos_emb(q, k, *rope(x, positions))  # the first head_dim * 0.5 features
            return q, k.repeat_interleave(NH // NKV, 1), v.repeat_interleave(NH // NKV, 1)

        def attention_out(a):
            return attn.o_proj(a.transpose(1, 2).reshape(1, a.shape[2], NH * HD))

    def step_in(ids, state, positions):
        e = torch.where(positions.unsqueeze(-1) == 0, 0.0, embedding[ids])  # vLLM: masked at position 0
        u = mtp.eh_proj(torch.cat([mtp.enorm(e), mtp.hnorm(state)], -1))
        q, k, v = qkv(layer.input_layernorm(u), positions)
        return u, q, k, v, None

    def step_out(u, a, _):  # the rest of the decoder layer, then shared_head.norm
        r = u + attention_out(a)
        z = r + moe(layer.post_attention_layernorm(r))
        o = mtp.shared_head.norm(z)
        return o, (o if f["fed_back_normed"] else z)

    logits = common.ttt_logits(step_in, step_out, lm_head, input_ids, hidden, pos, doc, STEPS, scale)
    loss_mask = torch.ones(1, common.T, dtype=torch.uint8)
    loss_mask[0, 1] = 0
    loss, dens = common.training_loss(logits, target_logits, doc, loss_mask)
    loss.backward()
    assert moe.gate.weight.grad.abs().sum() > 0  # the router trains
    assert moe.shared_experts.down_proj.weight.grad.abs().sum() > 0
    used = (moe.experts.gate_up_proj.grad.abs().sum((1, 2)) > 0).sum()
    assert used >= 5, used  # most experts see tokens

    drafts, served = common.served_chain(step_in, step_out, lm_head, input_ids, hidden, P_ANCHOR, STEPS, scale)
    with torch.no_grad():
        assert torch.allclose(served[0, 0], logits[0][0, P_ANCHOR], atol=1e-5)
        # Step 1 of sample 0 through transformers' own decoder layer (plain causal attention).
        u0, *_ = step_in(input_ids[:, 1:8], hidden[:, :7], pos[:, :7])
        mask = torch.full((7, 7), float("-inf")).triu(1)[None, None]
        z = layer(u0, position_embeddings=rope(u0, pos[:, :7]), attention_mask=mask, position_ids=pos[:, :7])
        z = z[0] if isinstance(z, tuple) else z
        assert torch.allclose(mtp.shared_head.norm(z) @ lm_head.T, logits[0][:, :7], atol=1e-5)
    gap = route_gap(cfg, moe.gate, torch.cat(routed))
    assert gap > 1e-3, gap  # no token's expert or group choice is a near-tie

    experts, width = cfg.n_routed_experts, cfg.moe_intermediate_size
    shipped = {}
    for k, v in mtp.state_dict().items():
        shipped |= common.per_expert(block_name(k), v.detach(), PREFIX, experts, width)
    if f["mla"]:  # DeepSeek ships the embedding and an LM head in its MTP layer; vLLM replaces both by the target's
        torch.manual_seed(99)
        shipped[PREFIX + "embed_tokens.weight"] = embedding.clone()
        shipped[PREFIX + "shared_head.head.weight"] = (lm_head + 0.05 * torch.randn_like(lm_head)).contiguous()
    bias = shipped[PREFIX + "mlp.gate.e_score_correction_bias"]
    assert bias.dtype == torch.float32 and bias.abs().sum() > 0
    model_dir = ROOT / "tests" / "fixtures" / "models" / f["folder"]
    weights = common.write_target(model_dir, target, shipped, f["config_updates"], PREFIX)
    assert any(".mlp.experts.0.gate_proj.weight" in k for k in weights)  # saved per expert, as on the Hub

    grads = {PREFIX + block_name(name): p.grad for name, p in mtp.named_parameters()}
    ref = common.reference(input_ids, pos, doc, hidden, target_logits, loss_mask, dens, loss, drafts, served,
                           logits, grads)
    path = ROOT / "tests" / "fixtures" / "reference" / f["reference"]
    save_file(ref, str(path))
    print("wrote", model_dir, "and", path, f"({len(shipped)} MTP tensors, {len(grads)} parameters, router gap "
          f"{gap:.4f}, {int(used)} of {experts} experts trained, loss {loss.item():.4f})")


if __name__ == "__main__":
    for family in FAMILIES:
        make(family)
