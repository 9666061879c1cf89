#!/usr/bin/env python3
"""Creates tests/fixtures/reference/tree_eval.json: SGLang's EAGLE draft tree (select_top_k_tokens,
organize_draft_results) and greedy tree verification (verify_tree_greedy) in PyTorch, on hand-built
draft-logit and target-choice tables instead of models.

Each case has a draft vocabulary (draft id -> target id), the draft logits of the root and of each
(depth, draft id) node, the target's greedy choice after each (depth, token) node, the tree shape
(steps, topk, draft_tokens) and the expected candidates, selected tree, node tokens, parents,
depths, attention mask and accepted path. One case has tied logits and tied scores: ties go to the
lower draft id among a node's children and to the lower candidate index across candidates (a stable
sort; SGLang's fast_topk leaves their order unspecified). For the cases without ties the script
also checks the tree against SGLang's own tensor formulation (score products over [topk, topk]
blocks, topk of the concatenated scores, sorted indices).

Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_tree_reference.py
"""
import json
import pathlib

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "reference" / "tree_eval.json"


def stable_top(values, k):
    return torch.sort(values, descending=True, stable=True).indices[:k].tolist()


def build(case):
    steps, k, ndt = case["shape"]
    vocab = case["vocab_ids"]
    k = min(k, len(vocab))
    cands = []

    def children(row, parent, depth, pscore):
        row = torch.tensor(row, dtype=torch.float32)
        probs = torch.softmax(row, -1)
        for i in stable_top(row, k):
            cands.append([i, vocab[i], parent, depth, pscore * float(probs[i])])

    children(case["root_logits"], -1, 1, 1.0)
    frontier = list(range(k))
    for step in range(1, steps):
        first = len(cands)
        for f in frontier:
            c = cands[f]
            children(case["logits"][f"{c[3]},{c[0]}"], f, step + 1, c[4])
        scores = torch.tensor([c[4] for c in cands[first:]], dtype=torch.float64)
        frontier = [first + i for i in stable_top(scores, k)]
    scores = torch.tensor([c[4] for c in cands], dtype=torch.float64)
    selected = sorted(stable_top(scores, ndt - 1))
    node_of = {}
    token, parent, depth = [case["root_token"]], [-1], [0]
    for n, s in enumerate(selected):
        c = cands[s]
        node_of[s] = n + 1
        token.append(c[1])
        parent.append(0 if c[2] < 0 else node_of[c[2]])
        depth.append(c[3])
    n = len(token)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = parent[j]
    # Greedy verification: the target's choice after each node, by (depth, token).
    choice = [case["target_next"][f"{depth[i]},{token[i]}"] for i in range(n)]
    path = [0]
    while True:
        kids = [c for c in range(path[-1] + 1, n) if parent[c] == path[-1] and token[c] == choice[path[-1]]]
        if not kids:
            break
        path.append(kids[0])
    return dict(candidates=cands, selected=selected, token=token, parent=parent, depth=depth,
                mask=mask.int().tolist(), choice=choice, path=path)


def sglang_selected(case):
    """SGLang's formulation (eagle_utils.select_top_k_tokens / organize_draft_results), batch 1."""
    steps, k, ndt = case["shape"]
    vocab = case["vocab_ids"]
    probs = torch.softmax(torch.tensor(case["root_logits"], dtype=torch.float32), -1)[None]
    topk_p, topk_index = torch.topk(probs, k, dim=-1)
    score_list, scores = [topk_p.double()[:, None, :]], topk_p.double()
    ids = topk_index  # draft ids of the frontier
    for i in range(1, steps):
        rows = torch.tensor([case["logits"][f"{i},{int(d)}"] for d in ids[0]], dtype=torch.float32)
        p = torch.softmax(rows, -1)
        tp, ti = torch.topk(p, k, dim=-1)
        expand = scores[:, :, None] * tp.double()[None]
        score_list.append(expand)
        cs_p, cs_i = torch.topk(expand.flatten(1), k, dim=-1)
        scores = cs_p
        ids = ti.reshape(1, -1).gather(1, cs_i)
    flat = torch.cat(score_list, dim=1).flatten(1)
    return sorted(torch.topk(flat, ndt - 1, dim=-1).indices[0].tolist())


def case_ties():
    # Draft vocab of 5 ids in a target vocabulary of 12; ties at the root (ids 1 and 3) and between
    # two children of different parents with equal scores.
    vocab = [0, 2, 5, 7, 11]
    c = dict(name="ties", shape=[3, 2, 6], vocab_ids=vocab, root_token=9,
             root_logits=[0.0, 2.0, -1.0, 2.0, 0.5], logits={}, target_next={})
    for d in (1, 2):
        for i in range(5):
            row = [float((i * 3 + j * 5 + d) % 4) for j in range(5)]
            c["logits"][f"{d},{i}"] = row
    for d in range(0, 4):
        for t in vocab + [9]:
            c["target_next"][f"{d},{t}"] = vocab[(t + d) % 5]
    c["target_next"]["0,9"] = 7  # the root's choice: the tied root child with the higher id
    return c


def case_tree():
    vocab = list(range(6))
    g = torch.Generator().manual_seed(3)
    c = dict(name="tree", shape=[4, 3, 10], vocab_ids=vocab, root_token=1,
             root_logits=torch.randn(6, generator=g).tolist(), logits={}, target_next={})
    for d in range(1, 4):
        for i in range(6):
            c["logits"][f"{d},{i}"] = torch.randn(6, generator=g).tolist()
    for d in range(0, 5):
        for t in vocab:
            c["target_next"][f"{d},{t}"] = int(torch.randint(0, 6, (1,), generator=g))
    # The target agrees with the draft's second choice along one branch (deeper than a chain gets).
    row = c["root_logits"]
    for d in range(0, 3):
        second = stable_top(torch.tensor(row), 2)[1]
        c["target_next"][f"{d},{c['root_token'] if d == 0 else t}"] = second
        t = second
        row = c["logits"][f"{d + 1},{t}"]
    return c


def case_chain():
    c = case_tree()
    c["name"], c["shape"] = "chain", [3, 1, 4]
    # The target follows the draft's first choice twice, then disagrees.
    row, t = c["root_logits"], c["root_token"]
    for d in range(0, 3):
        first = stable_top(torch.tensor(row), 1)[0]
        c["target_next"][f"{d},{t}"] = first if d < 2 else (first + 1) % 6
        t = first
        row = c["logits"][f"{d + 1},{t}"]
    return c


def main():
    cases = []
    for c in (case_ties(), case_tree(), case_chain()):
        c["expected"] = build(c)
        if c["name"] != "ties":
            assert sglang_selected(c) == c["expected"]["selected"], c["name"]
        cases.append(c)
    # The tied case must exercise the tie rules: equal scores among the candidates.
    scores = [x[4] for x in cases[0]["expected"]["candidates"]]
    assert len(set(scores)) < len(scores)
    OUT.write_text(json.dumps(cases, indent=1) + "\n")
    print(f"wrote {OUT}")
    for c in cases:
        e = c["expected"]
        print(c["name"], "tokens", e["token"], "parents", e["parent"], "path", e["path"])


if __name__ == "__main__":
    main()
