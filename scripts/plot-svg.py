#!/usr/bin/env python3
"""Draws a CSV of benchmark figures as an SVG line chart, with nothing but the standard library.

Usage: plot-svg.py CSV SVG TITLE Y-LABEL [log]

With "log", the y axis is logarithmic (one grid line a decade), for figures spanning decades.

The CSV's first row names the columns: the x labels' column, then one series per column. Each
further row is one x position (drawn evenly spaced, in order); an empty cell is a figure that
was not measured and leaves a gap in its line.
"""
import csv
import math
import sys
from xml.sax.saxutils import escape

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]
W, H, LEFT, RIGHT, TOP, BOTTOM = 760, 420, 70, 190, 40, 60


def main(src, dst, title, ylabel, scale="linear"):
    with open(src, newline="") as f:
        rows = list(csv.reader(f))
    head, body = rows[0], rows[1:]
    series = [(name, [float(r[i]) if i < len(r) and r[i] else None for r in body]) for i, name in enumerate(head[1:], 1)]
    values = [v for _, vs in series for v in vs if v is not None and (scale != "log" or v > 0)]
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    x = lambda i: LEFT + (pw * i / max(len(body) - 1, 1))
    if scale == "log":
        lo = math.floor(math.log10(min(values, default=1)))
        hi = max(math.ceil(math.log10(max(values, default=10))), lo + 1)
        y = lambda v: TOP + ph - ph * (math.log10(v) - lo) / (hi - lo)
        ticks = [10.0 ** e for e in range(lo, hi + 1)]
        series = [(name, [v if v is None or v > 0 else None for v in vs]) for name, vs in series]
    else:
        top = max(values + [1e-9]) * 1.1
        y = lambda v: TOP + ph - ph * v / top
        ticks = [top * k / 5 for k in range(6)]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>',
           f'<line x1="{LEFT}" y1="{TOP + ph}" x2="{LEFT + pw}" y2="{TOP + ph}" stroke="black"/>',
           f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + ph}" stroke="black"/>',
           f'<text x="18" y="{TOP + ph / 2}" transform="rotate(-90 18 {TOP + ph / 2})" text-anchor="middle">{escape(ylabel)}</text>']
    for v in ticks:
        out.append(f'<line x1="{LEFT - 4}" y1="{y(v):.1f}" x2="{LEFT + pw}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    for i, r in enumerate(body):
        out.append(f'<text x="{x(i):.1f}" y="{TOP + ph + 20}" text-anchor="middle">{escape(r[0])}</text>')
    for n, (name, vs) in enumerate(series):
        colour = COLOURS[n % len(COLOURS)]
        runs, run = [], []
        for i, v in enumerate(vs):
            if v is None:
                runs, run = runs + [run] if run else runs, []
            else:
                run.append((x(i), y(v)))
        runs += [run] if run else []
        for r in runs:
            pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in r)
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2"/>')
            out += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{colour}"/>' for a, b in r]
        ly = TOP + 10 + 18 * n
        out.append(f'<line x1="{W - RIGHT + 15}" y1="{ly}" x2="{W - RIGHT + 35}" y2="{ly}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{W - RIGHT + 40}" y="{ly + 4}">{escape(name)}</text>')
    out.append("</svg>")
    with open(dst, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6) or sys.argv[5:] not in ([], ["log"]):
        sys.exit(__doc__)
    main(*sys.argv[1:])
