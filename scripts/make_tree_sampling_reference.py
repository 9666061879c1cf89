#!/usr/bin/env python3
"""Creates tests/fixtures/reference/tree_sampling.json: SGLang's tree speculative sampling at a
temperature (sgl-kernel's TreeSpeculativeSamplingTargetOnly with threshold_single = threshold_acc =
1, as EagleVerifyInput.verify calls it), transcribed as a scalar loop in PyTorch, on hand-built
trees and random target logits instead of models.

The target's distribution after each node is softmax(logits / T) in fp64, restricted to the smallest
most likely set whose mass reaches top_p and renormalised (generate's rule, as for temp_ar). The
kernel walks from the root: each node's children (first child, then next siblings: node order, as
build_tree_efficient links them) add p(child token) to a running sum, and the first child whose sum
reaches the node's coin is accepted, the walk going on from it with its own coin; a rejected child's
target probability is written into draft_probs. The next token is sampled with the final coin from
relu(p - draft_probs) of the last accepted node (p itself once the walk reached the last step).
Each case lists the tree (token and parent per node, node 0 the root), the logits [n, V],
temperature, top_p, a coin per node, the final coin, and the expected path and next token. The
coins include all-zero (always the first child) and near-one (rejections) sets besides random ones.

Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_tree_sampling_reference.py
"""
import json
import pathlib

import torch

# The target's distribution at a temperature and top_p: the same rule as the alpha reference's.
from make_alpha_reference import probs

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "reference" / "tree_sampling.json"




def links(parent):
    """retrive_next_token / retrive_next_sibling as build_tree_efficient fills them: nodes from the
    last to the first, each put in front of its parent's child list."""
    n = len(parent)
    next_token, next_sibling = [-1] * n, [-1] * n
    for i in range(n - 1, 0, -1):
        p = parent[i]
        if next_token[p] != -1:
            next_sibling[i] = next_token[p]
        next_token[p] = i
    return next_token, next_sibling


def tree_sampling(token, parent, depth, target_probs, coins, final_coin):
    """TreeSpeculativeSamplingTargetOnly for one request (threshold_single = threshold_acc = 1)."""
    n, v = target_probs.shape
    next_token, next_sibling = links(parent)
    num_speculative_tokens = max(depth) + 1  # the kernel's accept_index width: steps + 1
    draft_probs = torch.zeros(n, v, dtype=torch.float64)
    prob_acc, cur, coin = 0.0, 0, coins[0]
    path = [0]
    for _ in range(1, num_speculative_tokens):
        idx = next_token[cur]
        while idx != -1:
            t = token[idx]
            single = float(target_probs[cur, t])
            prob_acc += single
            if coin <= prob_acc or single >= 1.0:
                prob_acc, cur, coin = 0.0, idx, coins[idx]
                path.append(idx)
                break
            draft_probs[cur, t] = target_probs[cur, t]
            idx = next_sibling[idx]
        if idx == -1:
            break
    row = target_probs[cur].clone()
    if len(path) - 1 != num_speculative_tokens - 1:
        row = (row - draft_probs[cur]).clamp_min(0.0)
    u = final_coin * float(row.sum())
    run, nxt = 0.0, v - 1
    for i in range(v):
        if row[i] <= 0:
            continue
        run += float(row[i])
        if run > u:
            nxt = i
            break
    return path, nxt


def trees():
    # (token, parent): node order with parents first. A branching tree of depth 3 (topk 3), a chain,
    # and a tree whose branches repeat tokens.
    return [
        ("tree", [5, 2, 7, 1, 3, 2, 6, 0, 4], [-1, 0, 0, 0, 1, 1, 2, 4, 4]),
        ("chain", [5, 3, 3, 6], [-1, 0, 1, 2]),
        ("repeats", [1, 2, 2, 2, 4, 2], [-1, 0, 1, 2, 0, 4]),
    ]


def main():
    g = torch.Generator().manual_seed(17)
    v = 8
    cases = []
    for name, token, parent in trees():
        n = len(token)
        depth = [0] * n
        for i in range(1, n):
            depth[i] = depth[parent[i]] + 1
        logits = (torch.randn(n, v, generator=g) * 1.5).float()
        # The target likes some drafted tokens, so paths reach past the root.
        for i in range(1, n):
            logits[parent[i], token[i]] += 1.0
        coin_sets = [[0.0] * n, [0.999999] * n]
        coin_sets += [torch.rand(n, generator=g, dtype=torch.float64).tolist() for _ in range(6)]
        for t, top_p in ((1.0, 1.0), (0.7, 0.8)):
            p = probs(logits, t, top_p)
            for coins in coin_sets:
                final = float(torch.rand(1, generator=g, dtype=torch.float64))
                path, nxt = tree_sampling(token, parent, depth, p, coins, final)
                cases.append(dict(name=name, token=token, parent=parent, depth=depth, logits=logits.tolist(),
                                  temperature=t, top_p=top_p, coins=coins, final_coin=final,
                                  expected=dict(path=path, next=nxt)))
    # The cases must walk the tree: rejections, acceptances past the first child, and full depth.
    assert any(len(c["expected"]["path"]) == 1 for c in cases)
    assert any(len(c["expected"]["path"]) >= 3 for c in cases)
    assert any(c["expected"]["path"][1:2] not in ([], [1]) for c in cases if c["name"] == "tree")
    OUT.write_text(json.dumps(cases, indent=1) + "\n")
    print(f"wrote {OUT}: {len(cases)} cases")
    for c in cases[::4]:
        print(c["name"], c["temperature"], "path", c["expected"]["path"], "next", c["expected"]["next"])


if __name__ == "__main__":
    main()
