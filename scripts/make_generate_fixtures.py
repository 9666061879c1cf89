#!/usr/bin/env python3
"""Writes the expected token ids of `eagle-train generate` for the tiny fixture models:
tests/fixtures/reference/generate.json, from transformers' own greedy generate().

For each model folder in tests/fixtures/models (made by make_reference_fixtures.py, read here
unchanged):
- "prompts": four prompts of different lengths and the greedy reply generate() writes to each alone
  (max_new_tokens, the config's eos ids); the C++ tests run them in one batch and with fewer rows
  than prompts. The script checks that transformers' own left-padded batched generate() gives the
  same tokens and records the smallest top-1/top-2 logit gap along the replies, so a near tie that
  could flip between two correct implementations is caught here rather than in the test.
- "end": a prompt whose reply stops at an end id: the id is a token the model writes greedily as its
  4th token, added as generation_config.json's eos_token_id (the test writes that file).
- "two_turns": a sample of two user turns and two assistant replies (mask 1); the expected output
  keeps the user turns and replaces both replies: reply 1 = generate(turn 1), reply 2 =
  generate(turn 1 + reply 1 + turn 2).

Run with the project venv:  ~/.cache/eagle-train/venv/bin/python scripts/make_generate_fixtures.py
"""
import json
import pathlib
import sys

import torch
import transformers

PINNED = "5.23.0"
if transformers.__version__ != PINNED:
    sys.exit(f"transformers {PINNED} is required (found {transformers.__version__})")

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "models"
OUT = ROOT / "tests" / "fixtures" / "reference" / "generate.json"
FAMILIES = ["tiny-llama", "tiny-llama3", "tiny-mistral", "tiny-qwen2", "tiny-qwen3"]
MAX_NEW_TOKENS = 10
PROMPT_LENGTHS = [3, 14, 7, 10]
MIN_GAP = 1e-3  # smallest top-1/top-2 logit gap accepted along a greedy reply
FIRST_ID = 6    # prompt ids start above every special id of the fixtures


def eos_list(config):
    e = config.eos_token_id
    return [] if e is None else (list(e) if isinstance(e, (list, tuple)) else [e])


def greedy(model, prompt, eos):
    """transformers' generate() on one prompt: the reply (end id included) and its smallest gap."""
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=MAX_NEW_TOKENS, do_sample=False,
                         eos_token_id=eos or None, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    reply = out.sequences[0, len(prompt):].tolist()
    gap = min(float(l[0].topk(2).values[0] - l[0].topk(2).values[1]) for l in out.logits)
    return reply, gap


def batched(model, prompts, eos):
    """transformers' left-padded batched generate(): the replies, padding after an end id removed."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    seqs = model.generate(ids, attention_mask=mask, max_new_tokens=MAX_NEW_TOKENS, do_sample=False,
                          eos_token_id=eos or None, pad_token_id=0)
    replies = []
    for row in seqs[:, width:].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        replies.append(row[:cut])
    return replies


def family(name, index):
    model = transformers.AutoModelForCausalLM.from_pretrained(MODELS / name, dtype=torch.float32)
    model.eval()
    eos = eos_list(model.config)
    gen = torch.Generator().manual_seed(4321 + index)
    vocab = model.config.vocab_size

    def random_ids(n):
        return torch.randint(FIRST_ID, vocab, (n,), generator=gen).tolist()

    out = {"end_ids": eos, "prompts": []}
    gaps = []
    prompts = [random_ids(n) for n in PROMPT_LENGTHS]
    for p in prompts:
        reply, gap = greedy(model, p, eos)
        out["prompts"].append({"prompt": p, "reply": reply})
        gaps.append(gap)
    assert batched(model, prompts, eos) == [c["reply"] for c in out["prompts"]], f"{name}: batched generate differs"

    # An end id the model reaches: its 4th greedy token for a fresh prompt (not among the first three).
    while True:
        p = random_ids(8)
        free, _ = greedy(model, p, [])
        if free[3] not in free[:3] and free[3] not in eos:
            break
    end_id = free[3]
    reply, gap = greedy(model, p, eos + [end_id])
    assert reply == free[:4], f"{name}: generation did not stop at the added end id"
    out["end"] = {"generation_config_eos_token_id": [end_id], "prompt": p, "reply": reply}
    gaps.append(gap)

    # Two turns: user 1, reply 1 (trained), user 2, reply 2 (trained); replies are placeholders.
    user1, user2 = random_ids(6), random_ids(5)
    old1, old2 = [FIRST_ID] * 4, [FIRST_ID + 1] * 3
    new1, gap1 = greedy(model, user1, eos)
    new2, gap2 = greedy(model, user1 + new1 + user2, eos)
    out["two_turns"] = {
        "input_ids": user1 + old1 + user2 + old2,
        "loss_mask": [0] * 6 + [1] * 4 + [0] * 5 + [1] * 3,
        "expected_ids": user1 + new1 + user2 + new2,
        "expected_mask": [0] * 6 + [1] * len(new1) + [0] * 5 + [1] * len(new2),
    }
    gaps += [gap1, gap2]
    out["min_logit_gap"] = min(gaps)
    assert out["min_logit_gap"] >= MIN_GAP, f"{name}: a near tie ({out['min_logit_gap']}) along a greedy reply"
    stops = sum(1 for c in out["prompts"] if len(c["reply"]) < MAX_NEW_TOKENS)
    print(f"{name}: end ids {eos}, {stops} of {len(prompts)} replies stop at one, smallest logit gap "
          f"{out['min_logit_gap']:.4f}")
    return out


if __name__ == "__main__":
    doc = {"transformers": transformers.__version__, "torch": torch.__version__, "max_new_tokens": MAX_NEW_TOKENS,
           "families": {name: family(name, i) for i, name in enumerate(FAMILIES)}}
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}")
