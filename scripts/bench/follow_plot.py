#!/usr/bin/env python3
"""The plot of scripts/bench/follow_sim.sh: AR by policy version of the frozen draft and the follower's serving
version, and the from-scratch draft on the last version, as one SVG.

  python scripts/bench/follow_plot.py ROWS.md OUT.svg SCRATCH_AR
"""
import sys
rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in open(sys.argv[1]) if line.strip()]
out, scratch = sys.argv[2], float(sys.argv[3])
versions = [int(r[0]) for r in rows]
frozen = [float(r[1]) for r in rows]
follow = [float(r[2]) for r in rows]
lo = min(frozen + follow + [scratch]) - 0.05
hi = max(frozen + follow + [scratch]) + 0.05
W, H, L, B = 520, 300, 60, 40
def x(v): return L + (W - L - 20) * (v - versions[0]) / max(1, versions[-1] - versions[0])
def y(a): return H - B - (H - B - 20) * (a - lo) / (hi - lo)
def line(vals, color, name, dy):
    pts = " ".join(f"{x(v):.1f},{y(a):.1f}" for v, a in zip(versions, vals))
    dots = "".join(f'<circle cx="{x(v):.1f}" cy="{y(a):.1f}" r="3" fill="{color}"/>' for v, a in zip(versions, vals))
    return (f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>{dots}'
            f'<text x="{L + 10}" y="{20 + dy}" fill="{color}" font-size="12">{name}</text>')
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif">',
       f'<line x1="{L}" y1="{H - B}" x2="{W - 10}" y2="{H - B}" stroke="#444"/>',
       f'<line x1="{L}" y1="20" x2="{L}" y2="{H - B}" stroke="#444"/>',
       f'<text x="{W / 2}" y="{H - 8}" font-size="12" text-anchor="middle">policy version</text>',
       f'<text x="14" y="{H / 2}" font-size="12" transform="rotate(-90 14 {H / 2})" text-anchor="middle">AR (3 drafted)</text>']
for v in versions:
    svg.append(f'<text x="{x(v):.1f}" y="{H - B + 16}" font-size="11" text-anchor="middle">v{v}</text>')
for i in range(5):
    a = lo + (hi - lo) * i / 4
    svg.append(f'<text x="{L - 6}" y="{y(a) + 4:.1f}" font-size="11" text-anchor="end">{a:.2f}</text>')
svg.append(line(frozen, "#c0392b", "(a) frozen, trained on v0", 0))
svg.append(line(follow, "#2471a3", "(b) eagle-train follow (serving version)", 16))
svg.append(f'<circle cx="{x(versions[-1]):.1f}" cy="{y(scratch):.1f}" r="5" fill="none" stroke="#27ae60" stroke-width="2"/>'
           f'<text x="{L + 10}" y="52" fill="#27ae60" font-size="12">(c) from scratch on v{versions[-1]}, same steps</text>')
svg.append("</svg>")
open(out, "w").write("\n".join(svg) + "\n")
print(f"wrote {out}")
