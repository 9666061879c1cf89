#!/usr/bin/env python3
"""Writes the regenerated training conversations of scripts/bench/real_target.sh in each peer's input format.

The training data of the benchmark is one file of pretokenized samples, the target's own greedy replies
(`eagle-train generate`): data/train.jsonl. Every tool trains on exactly those tokens; this script writes them
as the peers' own pipelines would take them as well:

  --specforge OUT.jsonl   SpecForge's conversation JSONL ({"id", "conversations": [{"role", "content"}, ...]},
                          what `specforge` data preparation reads, ShareGPT roles user/assistant): the user turn
                          from the source record (Alpaca instruction + "\\n\\n" + input, as scripts/pretokenize.py
                          builds it), the assistant turn the regenerated reply decoded (its end-of-turn token left
                          out; the chat template adds it back)
  --stats OUT.json        sample count, tokens, trained tokens, mean and max length, the reply lengths and how many
                          replies stopped by length (no end id), for the report

speculators' input is its offline data folder (prepare_data's Arrow dataset + token_freq.pt + hidden_states/), which
real_target.sh writes with scripts/make_speculators_fixture.py from the same samples (the tokens themselves, no
re-tokenization).

  python scripts/bench/real_target_data.py --samples data/train.jsonl --source data/src_train.json \
      --tokenizer TARGET --specforge data/specforge/train.jsonl --stats data/stats.json
"""
import argparse
import json
import os


def runs(mask):
    """(start, end, value) runs of a 0/1 mask."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((start, i, mask[start]))
            start = i
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", required=True)
    ap.add_argument("--source", required=True, help="the Alpaca records the samples were made from, in order")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--specforge")
    ap.add_argument("--stats")
    args = ap.parse_args()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    with open(args.samples) as f:
        samples = [json.loads(line) for line in f if line.strip()]
    with open(args.source) as f:
        source = json.load(f)
    if len(samples) != len(source):
        raise SystemExit(f"{args.samples}: {len(samples)} samples, but {len(source)} source records")
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    reply_lens, by_length = [], 0
    if args.specforge:
        os.makedirs(os.path.dirname(os.path.abspath(args.specforge)), exist_ok=True)
        f = open(args.specforge + ".tmp", "w")
    for i, (s, rec) in enumerate(zip(samples, source)):
        replies = [(a, b) for a, b, v in runs(s["loss_mask"]) if v == 1]
        if len(replies) != 1:
            raise SystemExit(f"sample {i}: {len(replies)} replies, expected one")
        a, b = replies[0]
        reply = s["input_ids"][a:b]
        reply_lens.append(len(reply))
        if eos not in reply:
            by_length += 1
        reply = [t for t in reply if t != eos]
        if args.specforge:
            user = rec["instruction"] + ("\n\n" + rec["input"] if rec.get("input") else "")
            f.write(json.dumps({"id": f"alpaca-{i}", "conversations": [
                {"role": "user", "content": user},
                {"role": "assistant", "content": tok.decode(reply).strip("\n")}]}) + "\n")
    if args.specforge:
        f.close()
        os.replace(args.specforge + ".tmp", args.specforge)
    if args.stats:
        lens = [len(s["input_ids"]) for s in samples]
        stats = {"samples": len(samples), "tokens": sum(lens), "trained_tokens": sum(sum(s["loss_mask"]) for s in samples),
                 "mean_length": sum(lens) / len(lens), "max_length": max(lens),
                 "mean_reply": sum(reply_lens) / len(reply_lens), "max_reply": max(reply_lens),
                 "replies_without_end_id": by_length}
        with open(args.stats, "w") as g:
            json.dump(stats, g, indent=1)
        print(json.dumps(stats))


if __name__ == "__main__":
    main()
