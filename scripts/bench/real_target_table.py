#!/usr/bin/env python3
"""Summary of scripts/bench/real_target.sh's train stage: per-tool results, a Markdown table, an SVG plot.

Reads RUNS/<tool>-r<repeat>/ (what real_target.sh's run_tool leaves: saves.jsonl from the runner, eval-step-N.json
from `eagle-train eval --json`, time.txt from /usr/bin/time -v) and writes

  OUT/<tool>.jsonl      one line per saved head: tool, repeat, step, wall_s (since launch), real_tokens,
                        tokens_per_s (real tokens / wall_s: start-up included), ar, ar_ci95, ar_by_depth,
                        peak_rss_mb (of the whole training process tree's largest process), head
  OUT/table.md          per run: the last head's wall time, steps, real tokens/s, AR (3 drafted), the best AR of
                        the run's heads, peak RSS; then the AR of every head by wall time
                        and the goal per pair (eagle-train against each peer of its draft kind): the wall time
                        eagle-train takes to reach the peer's final AR (heads' ARs joined linearly from AR 1 at
                        0 s) as a share of the peer's, and its AR at the peer's final wall time
  OUT/ar_vs_wall.svg    AR (3 drafted tokens) against wall time, one line per run (no matplotlib)

  python scripts/bench/real_target_table.py --runs RT_DIR/runs/budget1200 --out RT_DIR/results [--budget 1200]
"""
import argparse
import json
import os
import re

COLORS = {"eagle-train-eagle3": "#c0392b", "eagle-train-eagle3-peerbatch": "#e67e22", "eagle-train-dflash": "#8e44ad",
          "specforge-eagle3": "#2471a3", "speculators-eagle3": "#27ae60", "speculators-dflash": "#16a085",
          "eagle-train-eagle3-cpu": "#7b241c", "eagle-train-eagle3-offline": "#f1948a"}
# The goal's pairs (issue 52): each eagle-train run against each peer run of its draft kind.
PAIRS = [(ours, peer) for ours in ("eagle-train-eagle3", "eagle-train-eagle3-peerbatch", "eagle-train-eagle3-cpu",
                                   "eagle-train-eagle3-offline")
         for peer in ("specforge-eagle3", "speculators-eagle3")] + [("eagle-train-dflash", "speculators-dflash")]


def peak_rss_mb(path):
    if not os.path.exists(path):
        return None
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(path).read())
    return round(int(m.group(1)) / 1024, 1) if m else None


def collect(runs):
    rows = {}
    for name in sorted(os.listdir(runs)):
        m = re.fullmatch(r"(.+)-r(\d+)", name)
        run = os.path.join(runs, name)
        if not m or not os.path.isdir(run) or not os.path.exists(os.path.join(run, "saves.jsonl")):
            continue
        tool, rep = m.group(1), int(m.group(2))
        rss = peak_rss_mb(os.path.join(run, "time.txt"))
        for line in open(os.path.join(run, "saves.jsonl")):
            if not line.strip():
                continue
            save = json.loads(line)
            ev_path = os.path.join(run, f"eval-step-{save['step']}.json")
            if not os.path.exists(ev_path):
                continue
            ev = json.load(open(ev_path))
            wall = save["wall_s"]
            rows.setdefault(tool, []).append({
                "tool": tool, "repeat": rep, "step": save["step"], "wall_s": wall, "real_tokens": save["real_tokens"],
                "tokens_per_s": round(save["real_tokens"] / wall, 2) if wall and save["real_tokens"] is not None else None,
                "ar": ev["ar"], "ar_ci95": ev.get("ar_ci95"), "ar_by_depth": ev.get("ar_by_depth"),
                "peak_rss_mb": rss, "head": save["dir"], "eval_prompts": ev.get("heldout_samples")})
    return rows


def table(rows):
    out = ["| tool | repeat | heads | last head at (s) | steps | real tokens/s | AR (3 drafted) | best AR | peak RSS (MB) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for tool in sorted(rows):
        for rep in sorted({r["repeat"] for r in rows[tool]}):
            rs = sorted((r for r in rows[tool] if r["repeat"] == rep), key=lambda r: r["wall_s"])
            last = rs[-1]
            out.append(f"| {tool} | {rep} | {len(rs)} | {last['wall_s']:.0f} | {last['step']} | "
                       f"{last['tokens_per_s']:.1f} | {last['ar']:.3f} +- {last['ar_ci95'] or 0:.3f} | "
                       f"{max(r['ar'] for r in rs):.3f} | {last['peak_rss_mb']} |")
    out += ["", "AR of each head (wall time s: AR):", ""]
    for tool in sorted(rows):
        for rep in sorted({r["repeat"] for r in rows[tool]}):
            rs = sorted((r for r in rows[tool] if r["repeat"] == rep), key=lambda r: r["wall_s"])
            out.append(f"- {tool} r{rep}: " + ", ".join(f"{r['wall_s']:.0f}: {r['ar']:.3f}" for r in rs))
    return "\n".join(out) + "\n"


def curve(rs):
    """(wall_s, AR) of a run's heads by time, from (0, 1.0): no head drafts nothing accepted."""
    return [(0.0, 1.0)] + [(r["wall_s"], r["ar"]) for r in sorted(rs, key=lambda r: r["wall_s"])]


def reach_time(pts, ar):
    """The first wall time at which the piecewise-linear curve reaches `ar`, or None."""
    for (t0, a0), (t1, a1) in zip(pts, pts[1:]):
        if a1 >= ar:
            return t1 if a1 == a0 else t0 + (t1 - t0) * max(0.0, ar - a0) / (a1 - a0)
    return None


def ar_at(pts, t):
    """The curve's AR at wall time t (its last head's beyond it)."""
    for (t0, a0), (t1, a1) in zip(pts, pts[1:]):
        if t <= t1:
            return a0 + (a1 - a0) * (t - t0) / (t1 - t0) if t1 > t0 else a1
    return pts[-1][1]


def goals(rows):
    """The issue's goal per pair and repeat: the wall time eagle-train takes to reach the peer's final AR, as a
    share of the peer's, and eagle-train's AR at the peer's final wall time."""
    out = ["| eagle-train run | peer run | peer's final AR (at s) | eagle-train reaches it at (s) | share of the "
           "peer's time | eagle-train AR at the peer's time | goal (<= 2/3, AR >=) |", "|---|---|---|---|---|---|---|"]
    for ours, peer in PAIRS:
        for rep in sorted({r["repeat"] for r in rows.get(ours, [])} & {r["repeat"] for r in rows.get(peer, [])}):
            p = curve([r for r in rows[peer] if r["repeat"] == rep])
            o = curve([r for r in rows[ours] if r["repeat"] == rep])
            t_p, a_p = p[-1]
            t_o = reach_time(o, a_p)
            a_o = ar_at(o, t_p)
            share = t_o / t_p if t_o is not None and t_p > 0 else None
            met = share is not None and share <= 2 / 3 and a_o >= a_p
            out.append(f"| {ours} r{rep} | {peer} r{rep} | {a_p:.3f} ({t_p:.0f}) | "
                       f"{'not reached' if t_o is None else f'{t_o:.0f}'} | "
                       f"{'-' if share is None else f'{share:.2f}'} | {a_o:.3f} | {'met' if met else 'not met'} |")
    return "\n".join(out) + "\n"


def svg(rows, budget):
    pts = [r for rs in rows.values() for r in rs]
    lo = min([r["ar"] for r in pts] + [1.0]) - 0.05
    hi = max(r["ar"] for r in pts) + 0.05
    xmax = max([r["wall_s"] for r in pts] + [budget or 0])
    W, H, L, B = 640, 340, 60, 40
    def x(v): return L + (W - L - 200) * v / xmax
    def y(a): return H - B - (H - B - 20) * (a - lo) / (hi - lo)
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif">',
         f'<line x1="{L}" y1="{H - B}" x2="{W - 190}" y2="{H - B}" stroke="#444"/>',
         f'<line x1="{L}" y1="20" x2="{L}" y2="{H - B}" stroke="#444"/>',
         f'<text x="{(W - 140) / 2}" y="{H - 8}" font-size="12" text-anchor="middle">wall time (s)</text>',
         f'<text x="14" y="{H / 2}" font-size="12" transform="rotate(-90 14 {H / 2})" text-anchor="middle">AR (3 drafted)</text>']
    for i in range(5):
        v = xmax * i / 4
        s.append(f'<text x="{x(v):.1f}" y="{H - B + 16}" font-size="11" text-anchor="middle">{v:.0f}</text>')
        a = lo + (hi - lo) * i / 4
        s.append(f'<text x="{L - 6}" y="{y(a) + 4:.1f}" font-size="11" text-anchor="end">{a:.2f}</text>')
    dy = 0
    for tool in sorted(rows):
        color = COLORS.get(tool, "#555")
        for rep in sorted({r["repeat"] for r in rows[tool]}):
            rs = sorted((r for r in rows[tool] if r["repeat"] == rep), key=lambda r: r["wall_s"])
            line = " ".join(f"{x(r['wall_s']):.1f},{y(r['ar']):.1f}" for r in rs)
            dash = "" if rep == 1 else ' stroke-dasharray="4 3"'
            s.append(f'<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{line}"/>')
            s += [f'<circle cx="{x(r["wall_s"]):.1f}" cy="{y(r["ar"]):.1f}" r="3" fill="{color}"/>' for r in rs]
        s.append(f'<text x="{W - 180}" y="{30 + dy}" fill="{color}" font-size="12">{tool}</text>')
        dy += 16
    s.append("</svg>")
    return "\n".join(s) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=float, default=None)
    args = ap.parse_args()
    rows = collect(args.runs)
    if not rows:
        raise SystemExit(f"no evaluated heads under {args.runs}")
    os.makedirs(args.out, exist_ok=True)
    for tool, rs in rows.items():
        with open(os.path.join(args.out, f"{tool}.jsonl"), "w") as f:
            for r in sorted(rs, key=lambda r: (r["repeat"], r["wall_s"])):
                f.write(json.dumps(r) + "\n")
    md = table(rows) + "\n" + goals(rows)
    open(os.path.join(args.out, "table.md"), "w").write(md)
    open(os.path.join(args.out, "ar_vs_wall.svg"), "w").write(svg(rows, args.budget))
    print(md)
    print(f"wrote {args.out}/<tool>.jsonl, table.md, ar_vs_wall.svg")


if __name__ == "__main__":
    main()
