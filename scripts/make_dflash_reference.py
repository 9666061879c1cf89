#!/usr/bin/env python3
"""Creates the DFlash block-draft fixture: an independent PyTorch reference of the draft vLLM 0.32 serves
(DFlashQwen3ForCausalLM) and of one training step as the peers train it (SpecForge / ModelOpt).

Target: tests/fixtures/models/tiny-qwen3 (3 layers, H 48, vocab 256) run by transformers; its embedding and
LM head are the draft's (frozen), its features are hidden_states[t + 1] (the un-normed residual output of
layer t) for the DFlash target layer ids t = 0, 1, concatenated in ascending t. The draft: 2 Qwen3-style
layers on H with random weights (fixed seed), block size 4 (K = 3 mask slots), mask token 255.

(a) The served forward: u = hidden_norm(fc(c_p)) for every context position p < n; in every layer the
    context keys k_norm(k_proj(u)) + RoPE(p) and values v_proj(u) (no input_layernorm on the context);
    the block [x_n, M, M, M] at positions n..n+3, pre-norm layers whose attention sees all context keys and
    all 4 block keys (non-causal), the final norm, the target's LM head on slots 1..3 (slot i predicts the
    token at n + i). Drafting is its greedy argmax; three rounds of vLLM's greedy loop (DFlash.md section 2)
    are simulated with the target and stored.
(b) One training step: anchors a among the trainable positions (loss_mask[a] = 1, the whole block inside
    a's sample), each block [x_a, M x 3] at positions pos(a)..pos(a)+3 attending its own block
    bidirectionally and its sample's context strictly before a; blocks never see each other. Written
    with one dense mask over [context; every block] (SpecForge's flex-attention mask made dense). Slot k
    (1..3) predicts the token at a + k; teacher = softmax(target logits at a + k - 1) (soft CE, the
    default) or the data token (hard CE); weight exp(-(k - 1) / gamma), valid iff the anchor is a real
    candidate and loss_mask[a + k] = 1; loss = sum w * CE / sum w.

The anchors of the training step are the fixture's `anchors` input. `anchor_noise` shows the sampling
rule the C++ code uses (dflash_sample_anchors): the num_anchors candidates with the smallest
torch.rand((B, T), generator seeded ANCHOR_SEED) values, non-candidates scored 1 + (t + 1) / (T + 1) (so
that too few candidates pad with the earliest non-candidates, in a fixed order), sorted; `anchors` is that
result.

Writes tests/fixtures/reference/dflash-head.safetensors: the draft's parameters (its checkpoint names,
DFlash.md section 3), the inputs of the training step (two rows: a packed row of two samples and a row of
one sample with right padding), the target's features/logits/argmax, the anchors, the block logits of the
training forward, the loss and every parameter gradient for soft CE (`grad.<name>`) and hard CE
(`hard.grad.<name>`), and the served rounds.

Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_dflash_reference.py
"""
import math
import pathlib

import torch
import transformers
from safetensors.torch import load_file, save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
TARGET_DIR = ROOT / "tests" / "fixtures" / "models" / "tiny-qwen3"
REF = ROOT / "tests" / "fixtures" / "reference" / "dflash-head.safetensors"

H, NH, NKV, HD, I, L, V = 48, 4, 2, 20, 64, 2, 256  # draft: the target's H, heads and head_dim; 2 layers
TARGET_LAYER_IDS = [0, 1]                             # DFlash ids t: features hidden_states[t + 1]
BLOCK, MASK_ID, GAMMA, NUM_ANCHORS, ANCHOR_SEED = 4, 255, 4.0, 5, 1234
EPS, THETA = 1e-6, 1e6


def rms(x, w):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


def rope(x, positions):
    """Neox rotate-half RoPE of x [..., n, HD] at integer positions [n] (theta THETA, no scaling)."""
    inv = 1.0 / THETA ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD)
    f = positions.float()[:, None] * inv[None, :]
    emb = torch.cat([f, f], -1)
    cos, sin = emb.cos(), emb.sin()
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def make_weights():
    w = {"fc.weight": torch.randn(H, len(TARGET_LAYER_IDS) * H) * 0.1,
         "hidden_norm.weight": 1 + 0.1 * torch.randn(H), "norm.weight": 1 + 0.1 * torch.randn(H)}
    for i in range(L):
        p = f"layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(H)
        w[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(H)
        w[p + "self_attn.q_proj.weight"] = torch.randn(NH * HD, H) * 0.15
        w[p + "self_attn.k_proj.weight"] = torch.randn(NKV * HD, H) * 0.15
        w[p + "self_attn.v_proj.weight"] = torch.randn(NKV * HD, H) * 0.15
        w[p + "self_attn.o_proj.weight"] = torch.randn(H, NH * HD) * 0.15
        w[p + "self_attn.q_norm.weight"] = 1 + 0.1 * torch.randn(HD)
        w[p + "self_attn.k_norm.weight"] = 1 + 0.1 * torch.randn(HD)  # different per layer
        w[p + "mlp.gate_proj.weight"] = torch.randn(I, H) * 0.15
        w[p + "mlp.up_proj.weight"] = torch.randn(I, H) * 0.15
        w[p + "mlp.down_proj.weight"] = torch.randn(H, I) * 0.15
    return w


class Draft:
    def __init__(self, f, embed, lm_head):
        self.f, self.embed, self.lm_head = f, embed, lm_head

    def context(self, feats):
        """u = hidden_norm(fc(c)) [n, H]."""
        return rms(feats @ self.f["fc.weight"].T, self.f["hidden_norm.weight"])

    def context_kv(self, i, u, positions):
        """Layer i's context keys and values [NKV, n, HD] (vLLM's precompute_and_store_context_kv)."""
        p = f"layers.{i}.self_attn."
        n = u.shape[0]
        k = (u @ self.f[p + "k_proj.weight"].T).view(n, NKV, HD).transpose(0, 1)
        v = (u @ self.f[p + "v_proj.weight"].T).view(n, NKV, HD).transpose(0, 1)
        return rope(rms(k, self.f[p + "k_norm.weight"]), positions), v

    def qkv(self, i, x, positions):
        p = f"layers.{i}.self_attn."
        n = x.shape[0]
        q = (x @ self.f[p + "q_proj.weight"].T).view(n, NH, HD).transpose(0, 1)
        k = (x @ self.f[p + "k_proj.weight"].T).view(n, NKV, HD).transpose(0, 1)
        v = (x @ self.f[p + "v_proj.weight"].T).view(n, NKV, HD).transpose(0, 1)
        q = rope(rms(q, self.f[p + "q_norm.weight"]), positions)
        k = rope(rms(k, self.f[p + "k_norm.weight"]), positions)
        return q, k, v

    def finish(self, i, h, attn):
        """h + o_proj(attn), then h + mlp(post_norm(h)); attn [NH, n, HD]."""
        p = f"layers.{i}."
        h = h + attn.transpose(0, 1).reshape(h.shape[0], NH * HD) @ self.f[p + "self_attn.o_proj.weight"].T
        m = rms(h, self.f[p + "post_attention_layernorm.weight"])
        y = (torch.nn.functional.silu(m @ self.f[p + "mlp.gate_proj.weight"].T) * (m @ self.f[p + "mlp.up_proj.weight"].T)) \
            @ self.f[p + "mlp.down_proj.weight"].T
        return h + y

    def served_block(self, feats, anchor, n):
        """vLLM's draft forward of one round: context features [n, A*H] of positions 0..n-1, the anchor
        token at position n. Returns the logits [BLOCK - 1, V] of slots 1..BLOCK-1."""
        u = self.context(feats)
        ids = torch.tensor([anchor] + [MASK_ID] * (BLOCK - 1))
        positions = torch.arange(n, n + BLOCK)
        h = self.embed[ids]
        for i in range(L):
            ck, cv = self.context_kv(i, u, torch.arange(n))
            q, k, v = self.qkv(i, rms(h, self.f[f"layers.{i}.input_layernorm.weight"]), positions)
            keys = torch.cat([ck, k], 1).repeat_interleave(NH // NKV, 0)
            values = torch.cat([cv, v], 1).repeat_interleave(NH // NKV, 0)
            p = torch.softmax(q @ keys.transpose(-1, -2) * HD ** -0.5, -1)  # non-causal: every key
            h = self.finish(i, h, p @ values)
        return rms(h, self.f["norm.weight"])[1:] @ self.lm_head.T

    def train_blocks(self, feats, input_ids, position_ids, document_ids, anchors):
        """The training forward of one row: feats [T, A*H], anchors [N]. One dense mask over the keys
        [context (T); block 0; ...; block N-1]. Returns the final-normed hidden [N, BLOCK, H]."""
        T, N = input_ids.shape[0], anchors.shape[0]
        u = self.context(feats)
        ids = torch.full((N, BLOCK), MASK_ID, dtype=torch.long)
        ids[:, 0] = input_ids[anchors]
        positions = (position_ids[anchors][:, None] + torch.arange(BLOCK)[None, :]).reshape(-1)
        qblock = torch.arange(N).repeat_interleave(BLOCK)           # block of each query row
        qanchor = anchors.repeat_interleave(BLOCK)
        ctx_ok = (torch.arange(T)[None, :] < qanchor[:, None]) & \
            (document_ids[None, :] == document_ids[qanchor][:, None])
        blk_ok = qblock[:, None] == qblock[None, :]
        mask = torch.cat([ctx_ok, blk_ok], 1)                        # [N*BLOCK, T + N*BLOCK]
        h = self.embed[ids.reshape(-1)]
        for i in range(L):
            ck, cv = self.context_kv(i, u, position_ids)
            q, k, v = self.qkv(i, rms(h, self.f[f"layers.{i}.input_layernorm.weight"]), positions)
            keys = torch.cat([ck, k], 1).repeat_interleave(NH // NKV, 0)
            values = torch.cat([cv, v], 1).repeat_interleave(NH // NKV, 0)
            s = (q @ keys.transpose(-1, -2) * HD ** -0.5).masked_fill(~mask, float("-inf"))
            h = self.finish(i, h, torch.softmax(s, -1) @ values)
        return rms(h, self.f["norm.weight"]).view(N, BLOCK, H)


def candidates(loss_mask, document_ids):
    """[B, T] bool: a may anchor a block: trained, not padding, the whole block in a's sample."""
    B, T = loss_mask.shape
    ahead = torch.cat([document_ids[:, BLOCK - 1:], torch.full((B, BLOCK - 1), -2)], 1)
    return (loss_mask != 0) & (document_ids >= 0) & (ahead == document_ids)


def sample_anchors(cand):
    B, T = cand.shape
    g = torch.Generator().manual_seed(ANCHOR_SEED)
    noise = torch.rand((B, T), generator=g)
    fallback = 1 + (torch.arange(T, dtype=torch.float32) + 1) / (T + 1)
    score = torch.where(cand, noise, fallback.expand(B, T))
    idx = torch.topk(score, NUM_ANCHORS, dim=1, largest=False).indices
    return torch.sort(idx, 1).values, noise


def main():
    torch.manual_seed(0)
    target = transformers.AutoModelForCausalLM.from_pretrained(str(TARGET_DIR), dtype=torch.float32).eval()
    ends = load_file(str(TARGET_DIR / "model.safetensors"))
    embed, lm_head = ends["model.embed_tokens.weight"], ends["lm_head.weight"]

    def target_run(ids):
        with torch.no_grad():
            out = target(input_ids=ids[None], output_hidden_states=True, use_cache=False)
        hs = out.hidden_states
        feats = torch.cat([hs[t + 1][0] for t in sorted(set(TARGET_LAYER_IDS))], -1)
        return feats.float(), out.logits[0].float()

    w = make_weights()
    f = {k: v.clone().requires_grad_(True) for k, v in w.items()}
    draft = Draft(f, embed, lm_head)

    # Training rows: row 0 packs samples of 10 and 8 tokens; row 1 one sample of 14 then 4 padding.
    T = 18
    input_ids = torch.randint(0, V - 1, (2, T))
    document_ids = torch.tensor([[0] * 10 + [1] * 8, [0] * 14 + [-1] * 4])
    position_ids = torch.tensor([list(range(10)) + list(range(8)), list(range(14)) + [0] * 4])
    loss_mask = torch.ones(2, T, dtype=torch.uint8)
    loss_mask[0, :3] = 0   # sample 0's prompt
    loss_mask[0, 10:12] = 0
    loss_mask[0, 15] = 0
    loss_mask[1, :9] = 0   # row 1: few candidates (9 and 10), so padding anchors appear
    loss_mask[1, 14:] = 0
    feats = torch.zeros(2, T, len(TARGET_LAYER_IDS) * H)
    tlogits = torch.zeros(2, T, V)
    for r, spans in enumerate([[(0, 10), (10, 18)], [(0, 14)]]):
        for s, e in spans:
            feats[r, s:e], tlogits[r, s:e] = target_run(input_ids[r, s:e])
    targmax = tlogits.argmax(-1)

    cand = candidates(loss_mask, document_ids)
    anchors, noise = sample_anchors(cand)
    anchor_ok = torch.gather(cand, 1, anchors)
    assert anchor_ok[0].all() and anchor_ok[1].sum() == 2, (anchors, anchor_ok)

    outs = [draft.train_blocks(feats[r], input_ids[r], position_ids[r], document_ids[r], anchors[r]) for r in range(2)]
    out = torch.stack(outs)                                    # [2, N, BLOCK, H]
    logits = out @ lm_head.T                                   # [2, N, BLOCK, V]

    # The training forward at a real anchor is the served round at n = pos(a) with its sample's context.
    with torch.no_grad():
        for r in range(2):
            for j in range(NUM_ANCHORS):
                a = int(anchors[r, j])
                if not anchor_ok[r, j]:
                    continue
                s = a - int(position_ids[r, a])
                served = draft.served_block(feats[r, s:a], int(input_ids[r, a]), a - s)
                assert torch.allclose(served, logits[r, j, 1:], atol=1e-5), (r, j)

    # Losses: slots k = 1..BLOCK-1, weights exp(-(k-1)/gamma), sum w * CE / sum w over valid slots.
    def step_loss(hard):
        num, den, counts = 0.0, 0.0, []
        for k in range(1, BLOCK):
            pos = (anchors + k).clamp_max(T - 1)
            valid = anchor_ok & (anchors + k < T) & (torch.gather(loss_mask, 1, pos) != 0)
            logq = torch.log_softmax(logits[:, :, k], -1)
            if hard:
                ce = -torch.gather(logq, 2, torch.gather(input_ids, 1, pos)[..., None])[..., 0]
            else:
                teacher = torch.softmax(torch.stack([tlogits[r, anchors[r] + k - 1] for r in range(2)]), -1)
                ce = -(teacher * logq).sum(-1)
            wk = math.exp(-(k - 1) / GAMMA)
            num = num + wk * torch.where(valid, ce, torch.zeros_like(ce)).sum()
            den += wk * float(valid.sum())
            counts.append(int(valid.sum()))
        return num / den, counts

    ref = {}
    for hard in (False, True):
        for t in f.values():
            t.grad = None
        loss, counts = step_loss(hard)
        loss.backward(retain_graph=True)
        prefix = "hard." if hard else ""
        ref[prefix + "loss"] = loss.detach().reshape(1)
        for name, t in f.items():
            ref[prefix + "grad." + name] = t.grad.clone().contiguous()
    ref["denominators"] = torch.tensor(counts, dtype=torch.float32)  # valid slots per k (equal for both)

    # vLLM's greedy loop (DFlash.md section 2) on a prompt of 6 tokens, three rounds.
    with torch.no_grad():
        prompt = torch.randint(0, V - 1, (6,))
        seq = prompt.clone()
        _, tl = target_run(seq)
        n = len(prompt)
        b = int(tl[n - 1].argmax())
        rounds = {"n": [], "anchor": [], "drafts": [], "logits": [], "accepted": []}
        for _ in range(3):
            fts, _ = target_run(seq)
            z = draft.served_block(fts[:n], b, n)
            d = z.argmax(-1)
            full = torch.cat([seq, torch.tensor([b]), d])
            _, tl = target_run(full)
            am = tl.argmax(-1)
            a = 0
            while a < BLOCK - 1 and int(d[a]) == int(am[n + a]):
                a += 1
            rounds["n"].append(n)
            rounds["anchor"].append(b)
            rounds["drafts"].append(d)
            rounds["logits"].append(z)
            rounds["accepted"].append(a)
            seq = torch.cat([seq, torch.tensor([b]), d[:a]])
            b = int(am[n + a])
            n += a + 1
        final = torch.cat([seq, torch.tensor([b])])  # every token up to the last round's next anchor
        final_feats, _ = target_run(final)

    ref.update({f"param.{k}": v.contiguous() for k, v in w.items()})
    ref.update({
        "input_ids": input_ids, "position_ids": position_ids, "document_ids": document_ids, "loss_mask": loss_mask,
        "aux_hidden": feats.contiguous(), "target_logits": tlogits.contiguous(), "target_argmax": targmax,
        "anchors": anchors.contiguous(), "anchor_noise": noise.contiguous(),
        "anchor_seed": torch.tensor([ANCHOR_SEED], dtype=torch.int64),
        "block_logits": logits.detach().contiguous(),
        "round_n": torch.tensor(rounds["n"]), "round_anchor": torch.tensor(rounds["anchor"]),
        "round_drafts": torch.stack(rounds["drafts"]), "round_logits": torch.stack(rounds["logits"]).contiguous(),
        "round_accepted": torch.tensor(rounds["accepted"]),
        "round_tokens": final, "round_features": final_feats.contiguous(),
    })
    save_file(ref, str(REF), metadata={"block_size": str(BLOCK), "mask_token_id": str(MASK_ID),
                                       "decay_gamma": str(GAMMA), "target_layer_ids": str(TARGET_LAYER_IDS)})
    print("wrote", REF, f"({REF.stat().st_size} bytes); rounds accepted {rounds['accepted']}, "
          f"loss {float(ref['loss']):.6f} (hard {float(ref['hard.loss']):.6f}), counts {counts}")


if __name__ == "__main__":
    main()
