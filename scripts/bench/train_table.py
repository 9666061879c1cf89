#!/usr/bin/env python3
"""Summarises the runs of scripts/bench/bench_train.sh into a Markdown table.

Real tokens/s come from output_dir/metrics.jsonl rather than summary.json (whose tokens_per_s covers
every training step, the first ones included): the windows of metrics.jsonl (logging_steps steps
each) are summed, the first window left out (it holds the first step of each new shape: allocation
and warm-up), as real tokens over seconds: sum(tokens_per_s * ms_per_step * steps) / sum(ms)."""
import json
import os
import sys


def computed_tokens(windows):
    """Tokens computed, padding included: each window's real tokens over its padding efficiency."""
    return sum(w[2] / w[3] for w in windows if w[3] > 0)


def summarise(run_dir):
    steps_rows, evals = [], []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if "tokens_per_s" in j:
                steps_rows.append(j)
            if "eval_loss" in j:
                evals.append(j)
    prev = 0
    windows = []
    for j in steps_rows:
        n = j["step"] - prev
        prev = j["step"]
        seconds = j["ms_per_step"] * n / 1000.0
        windows.append((n, seconds, j["tokens_per_s"] * seconds, j["padding_efficiency"]))
    timed = windows[1:] if len(windows) > 1 else windows
    secs = sum(w[1] for w in timed)
    toks = sum(w[2] for w in timed)
    steps = sum(w[0] for w in timed)
    # padding efficiency over all steps, weighted by real tokens: real / computed
    computed = computed_tokens(windows)
    real_all = sum(w[2] for w in windows)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    return {
        "tok_s": toks / secs if secs > 0 else 0.0,
        # Every token the step computed, padding included: equal across modes when padding is the
        # only difference in their work.
        "computed_tok_s": computed_tokens(timed) / secs if secs > 0 else 0.0,
        "s_step": secs / steps if steps else 0.0,
        "tok_step": real_all / prev if prev else 0.0,
        "pad_eff": real_all / computed if computed else 0.0,
        "loss": steps_rows[-1]["loss"],
        "eval_loss": evals[-1]["eval_loss"] if evals else None,
        "steps": prev,
        "timed_steps": steps,
        "summary_tok_s": summary.get("tokens_per_s"),
    }


def main():
    # argv: pairs of "label=run_dir"; runs with the same part before ':' share a baseline (the first).
    rows = [a.split("=", 1) for a in sys.argv[1:]]
    base = {}
    print("| data, training_seq_len | mode | steps (timed) | real tokens/step | padding eff. | s/step | "
          "real tokens/s | vs baseline | computed tokens/s | train loss (last window) | held-out loss | summary.json tok/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, run_dir in rows:
        group, mode = label.split(":", 1)
        if not os.path.exists(os.path.join(run_dir, "summary.json")):
            print(f"| {group} | {mode} | failed: see {run_dir}/train.log | | | | | | | | | |")
            continue
        s = summarise(run_dir)
        base.setdefault(group, s["tok_s"])
        ratio = s["tok_s"] / base[group] if base[group] else 0.0
        ev = f"{s['eval_loss']:.3f}" if s["eval_loss"] is not None else "n/a"
        print(f"| {group} | {mode} | {s['steps']} ({s['timed_steps']}) | {s['tok_step']:.0f} | {s['pad_eff']:.3f} | "
              f"{s['s_step']:.2f} | {s['tok_s']:.0f} | {ratio:.2f}x | {s['computed_tok_s']:.0f} | {s['loss']:.3f} | {ev} | "
              f"{s['summary_tok_s']:.0f} |")


if __name__ == "__main__":
    main()
