"""What the MTP reference scripts share: vLLM's serving of one MTP layer (MTP.md 2.0) written once over a family's
step functions, so that each script (make_mtp_deepseek_reference.py) only says how its layer computes one step.

A family gives two functions:
  step_in(ids [1, n], state [1, n, H], positions [1, n]) -> (u, q, k, v, extra): the block's input and residual u
      [1, n, H] and its attention's queries, keys and values [1, heads, n, d] (RoPE applied, grouped heads
      repeated), plus whatever step_out needs of the attention's side (Qwen's output gate; None);
  step_out(u, a [1, heads, n, d_v], extra) -> (o, state): o the logits' input [1, n, H] (logits = o @ lm_head^T)
      and the state the next step takes (o, or the pre-norm output for GLM).

The training-time test: step k at t reads x_{t+1+k} at RoPE position t+k and attends the step-1 keys s <= t of its
sample plus the chain's own earlier steps (EAGLE.md); the loss is the soft cross-entropy against the target's
distribution at t+k+1, weighted decay^k over valid-count denominators; the served chain is vLLM's draft prefill
over x_1..x_{p+1} at positions 0..p, then decode steps on the layer's own cache.

Run nothing here: it is imported by the make_mtp_*_reference.py scripts (the project venv).
"""
import json

import torch
from safetensors.torch import load_file, save_file

T = 12  # one packed row: sample 0 of 7 tokens, sample 1 of 5
SPANS = [(0, 7), (7, 12)]


def packed_row(vocab):
    """input_ids [1, T], position_ids and document_ids of the row (the caller seeds torch first)."""
    doc = torch.tensor([[0] * 7 + [1] * 5])
    pos = torch.tensor([list(range(7)) + list(range(5))])
    return torch.randint(0, vocab, (1, T)), pos, doc


def target_states(target, input_ids):
    """The target's last hidden states after its final norm (what vLLM's DeepSeek, GLM and Qwen MTP layers read at
    step 1) and its logits, each sample run alone."""
    hidden, logits = [], []
    with torch.no_grad():
        for s, e in SPANS:
            h = target.model(input_ids[:, s:e]).last_hidden_state
            out = target(input_ids[:, s:e])
            assert torch.allclose(target.lm_head(h), out.logits, atol=1e-5)
            hidden.append(h)
            logits.append(out.logits)
    return torch.cat(hidden, 1), torch.cat(logits, 1)


def ttt_logits(step_in, step_out, lm_head, input_ids, hidden, pos, doc, steps, scale):
    """The unroll's logits per step [1, T, V], with autograd."""
    visible = (torch.arange(T)[None, :] <= torch.arange(T)[:, None]) & (doc[0][None, :] == doc[0][:, None])
    state, keys, values, logits = hidden, [], [], []
    for k in range(steps):
        shifted = torch.cat([input_ids[:, k + 1:], torch.zeros(1, k + 1, dtype=torch.long)], 1)
        u, q, kk, vv, extra = step_in(shifted, state, pos + k)
        keys.append(kk)
        values.append(vv)
        s0 = (q @ keys[0].transpose(-1, -2) * scale).masked_fill(~visible, float("-inf"))
        diag = [(q * keys[j]).sum(-1, keepdim=True) * scale for j in range(1, k + 1)]
        p = torch.softmax(torch.cat([s0] + diag, -1), -1)
        a = p[..., :T] @ values[0]
        for j in range(1, k + 1):
            a = a + p[..., T + j - 1:T + j] * values[j]
        o, state = step_out(u, a, extra)
        logits.append(o @ lm_head.T)
    return logits


def training_loss(logits, target_logits, doc, loss_mask, decay=0.8):
    """One training step's loss (step k at t predicts x_{t+k+2}, taught by the target's distribution at t+k+1, where
    t+k+2 is in t's sample and not masked) and the valid-count denominators."""
    loss, dens = 0.0, []
    for k in range(len(logits)):
        sh = lambda x, fill: torch.cat([x[:, k + 1:], torch.full_like(x[:, :k + 1], fill)], 1)  # noqa: E731
        ahead = lambda x, fill: torch.cat([x[:, k + 2:], torch.full_like(x[:, :k + 2], fill)], 1)  # noqa: E731
        valid = (ahead(doc, -2) == doc) & (doc >= 0) & (ahead(loss_mask, 0) != 0)
        ce = -(torch.softmax(sh(target_logits, 0.0), -1) * torch.log_softmax(logits[k], -1)).sum(-1)
        den = float(valid.sum().clamp_min(1))
        dens.append(den)
        loss = loss + decay ** k * torch.where(valid, ce, torch.zeros_like(ce)).sum() / den
    return loss, dens


def served_chain(step_in, step_out, lm_head, input_ids, hidden, p_anchor, steps, scale):
    """vLLM's round at anchor p of sample 0: the draft prefill over (h_t, x_{t+1}) at positions 0..p into the layer's
    own cache, then steps - 1 decode steps, each fed the previous draft and the fed-back state at position + 1.
    Returns the drafts [1, steps] and each step's logits [1, steps, V]."""
    with torch.no_grad():
        positions = torch.arange(p_anchor + 1)[None, :]
        u, q, kk, vv, extra = step_in(input_ids[:, 1:p_anchor + 2], hidden[:, :p_anchor + 1], positions)
        causal = torch.arange(p_anchor + 1)[None, :] <= torch.arange(p_anchor + 1)[:, None]
        a = torch.softmax((q @ kk.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf")), -1) @ vv
        o, state = step_out(u, a, extra)
        o, state = o[:, -1:], state[:, -1:]
        cache_k, cache_v = kk, vv
        drafts, served = [], []
        for j in range(steps):
            z = o @ lm_head.T
            served.append(z)
            token = z.argmax(-1)
            drafts.append(token)
            if j + 1 == steps:
                break
            u, q, kk, vv, extra = step_in(token, state, torch.tensor([[p_anchor + 1 + j]]))
            cache_k, cache_v = torch.cat([cache_k, kk], 2), torch.cat([cache_v, vv], 2)
            o, state = step_out(u, torch.softmax(q @ cache_k.transpose(-1, -2) * scale, -1) @ cache_v, extra)
    return torch.cat(drafts, 1), torch.cat(served, 1).contiguous()


def per_expert(name, value, prefix, experts, width):
    """A fused experts tensor of transformers 5 (<..>mlp.experts.gate_up_proj [E, 2 I, H]: gate rows, then up rows;
    .down_proj [E, H, I]) as Hugging Face checkpoints hold it, one tensor per expert and projection; any other
    tensor under its own name. prefix is put before each name."""
    if name.endswith("mlp.experts.gate_up_proj"):
        base = name[: -len("gate_up_proj")]
        out = {}
        for e in range(experts):
            out[f"{prefix}{base}{e}.gate_proj.weight"] = value[e, :width].contiguous()
            out[f"{prefix}{base}{e}.up_proj.weight"] = value[e, width:].contiguous()
        return out
    if name.endswith("mlp.experts.down_proj"):
        base = name[: -len("down_proj")]
        return {f"{prefix}{base}{e}.down_proj.weight": value[e].contiguous() for e in range(experts)}
    return {prefix + name: value.contiguous()}


def write_target(model_dir, target, shipped, config_updates, dropped_prefix):
    """The target saved by transformers into model_dir (emptied first), with the shipped MTP tensors added to its
    model.safetensors (transformers drops them: none may be under dropped_prefix already) and config_updates merged
    into its config.json (sorted keys); generation_config.json removed."""
    model_dir.mkdir(parents=True, exist_ok=True)
    for old in model_dir.glob("*"):
        old.unlink()
    target.save_pretrained(model_dir)
    weights = load_file(str(model_dir / "model.safetensors"))
    assert not any(k.startswith(dropped_prefix) for k in weights), dropped_prefix
    assert not set(weights) & set(shipped)
    save_file(weights | shipped, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((model_dir / "config.json").read_text())
    config.update(config_updates)
    (model_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for extra in model_dir.glob("generation_config.json"):
        extra.unlink()
    return weights


def reference(input_ids, pos, doc, hidden, target_logits, loss_mask, dens, loss, drafts, served, logits, grads):
    """The reference file's tensors (tests/mtp_fixtures.h reads these names)."""
    ref = {"input_ids": input_ids, "position_ids": pos, "document_ids": doc, "hidden": hidden.contiguous(),
           "target_logits": target_logits.contiguous(), "target_argmax": target_logits.argmax(-1),
           "loss_mask": loss_mask, "denominators": torch.tensor(dens), "loss": loss.detach().reshape(1),
           "served_drafts": drafts, "served_logits": served}
    for k, l in enumerate(logits):
        ref[f"logits_{k}"] = l.detach().contiguous()
    for name, g in grads.items():
        ref["grad." + name] = g.contiguous()
    return ref
