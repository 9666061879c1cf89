#!/usr/bin/env python3
"""Reads the runs of scripts/bench/bench_dflash.sh (issue 40) and prints what it needs.

  dflash_table.py loop RUN               training-loop seconds of a run (summary.json: real_tokens / tokens_per_s,
                                         evaluations and checkpoints left out)
  dflash_table.py steps RUN SECONDS      optimizer steps that fill SECONDS at the s/step of RUN (a short pilot)
  dflash_table.py ar LABEL=RUN=EVAL...   part (a): the Markdown table of AR and ar_by_depth (eval --json files)
  dflash_table.py tput LABEL=RUN...      part (b): the Markdown table of real tokens/s and peak memory

Seconds per step and real tokens/s come from metrics.jsonl's windows (logging_steps steps each), the first
window left out (it holds the first step of each shape: allocation and warm-up), as in train_table.py.
Peak memory is the largest peak_memory_mib logged: on CPU the process's maximum resident set (target,
data, draft, optimizer, activations), on CUDA the caching allocator's peak."""
import json
import os
import sys


def load(path):
    text = open(path).read()  # eval's stdout may hold lines before its JSON
    return json.loads(text[max(text.find("{\n"), 0):])


def windows(run):
    """(steps, seconds, real tokens, peak MiB) per logged window of metrics.jsonl."""
    out, prev = [], 0
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if "tokens_per_s" not in j:
                continue
            n, prev = j["step"] - prev, j["step"]
            seconds = j["ms_per_step"] * n / 1000.0
            out.append((n, seconds, j["tokens_per_s"] * seconds, j.get("peak_memory_mib")))
    return out


def timed(run):
    w = windows(run)
    w = w[1:] if len(w) > 1 else w
    steps, secs, toks = (sum(x[i] for x in w) for i in range(3))
    peaks = [x[3] for x in windows(run) if x[3] is not None]
    return steps, secs, toks, max(peaks) if peaks else None


def loop_seconds(run):
    s = load(os.path.join(run, "summary.json"))
    return s["real_tokens"] / s["tokens_per_s"] if s.get("tokens_per_s") else 0.0


def ar_table(rows):
    print("| draft | steps | training loop s | wall s | draft len K | ar at K | best ar (depth) | ar_by_depth 1..K |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        label, run, ev = row.split("=", 2)
        s, j = load(os.path.join(run, "summary.json")), load(ev)
        depth = j.get("ar_by_depth", [])
        best = max(((d, k + 1) for k, d in enumerate(depth) if d is not None), default=(None, 0))
        fmt = lambda v: "n/a" if v is None else f"{v:.3f}"
        print(f"| {label} | {s['steps']} | {loop_seconds(run):.0f} | {s['wall_time_s']:.0f} | {j.get('draft_len')} | "
              f"{fmt(j.get('ar'))} | {fmt(best[0])} ({best[1]}) | {' '.join(fmt(d) for d in depth)} |")


def tput_table(rows):
    print("| draft | steps (timed) | s/step | real tokens/s | peak memory (MiB) |")
    print("|---|---|---|---|---|")
    for row in rows:
        label, run = row.split("=", 1)
        steps, secs, toks, peak = timed(run)
        s_step = secs / steps if steps else 0.0
        tok_s = toks / secs if secs else 0.0
        peak = "n/a" if peak is None else f"{peak:.0f}"
        print(f"| {label} | {load(os.path.join(run, 'summary.json'))['steps']} ({steps}) | {s_step:.2f} | "
              f"{tok_s:.0f} | {peak} |")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "loop":
        print(f"{loop_seconds(args[0]):.1f}")
    elif cmd == "steps":
        steps, secs, _, _ = timed(args[0])
        print(max(1, round(float(args[1]) / (secs / steps))))
    elif cmd == "ar":
        ar_table(args)
    elif cmd == "tput":
        tput_table(args)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
