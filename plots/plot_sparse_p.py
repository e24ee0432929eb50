#!/usr/bin/env python3
"""Lesson 05: speedup of the sparse-P decodes over the dense one against the share of zeros.

Reads plots/data/<gpu>/lesson05.csv (columns `sigma`, `zero_share`, `limit_speedup` beside the
usual ones; variants dense, zero_skip, compact_atomic, compact_ordered, split_k_compact and,
on sm_90, split_k_cluster) and
writes plots/<gpu>_sparse_p.png: one panel per shape, the measured share of zeros in P on the
x axis (one point per sigma), each variant's L2-cold speedup over `dense` at the same shape and
sigma on the y axis, and the byte model's limit (`limit_speedup`: dense bytes over the bytes a
kernel that skips every unused V row must still read) as a dashed line.

Usage: python3 plots/plot_sparse_p.py [--gpu h200] [--data DIR] [--out DIR] [--date YYYY-MM-DD]
Needs matplotlib only (no GPU). A missing lesson05.csv is skipped with one line.
"""

import math
import re
import sys

import plotlib
from plotlib import plt

VARIANTS = (("zero_skip", "#ff7f0e", "s"), ("compact_atomic", "#2ca02c", "o"), ("compact_ordered", "#1f77b4", "D"),
            ("split_k_compact", "#d62728", "^"), ("split_k_cluster", "#9467bd", "v"),  # split_k_cluster: sm_90 only
            ("branchless_gate", "#8c564b", "P"))
NEEDS = ("sigma", "zero_share", "limit_speedup")


def main():
    args = plotlib.parse_args("Plot lesson 05's speedups against the share of zeros (no GPU needed).")
    if plotlib.skip_missing(args, "lesson05.csv", "sparse-P plot"):
        return 0
    path = plotlib.csv_path(args, "lesson05.csv")
    rows = plotlib.read_rows(path, lesson="05")
    missing = [c for c in NEEDS if rows and c not in rows[0]]
    if not rows or missing:
        print(f"sparse-P plot: skipped: {plotlib.display(path)} has "
              + (f"no column {', '.join(missing)}" if rows else "no passing L2-cold lesson 05 rows"))
        return 0
    by = {}  # (shape, sigma) -> {variant: row}; split_k_compact: the fastest of its partition sizes
    for r in rows:
        v = "split_k_compact" if re.fullmatch(r"split_k_compact(_\d+)?", r["variant"]) else r["variant"]
        cur = by.setdefault((r["shape"], r["sigma"]), {}).get(v)
        if cur is None or plotlib.us(r) < plotlib.us(cur):
            by[(r["shape"], r["sigma"])][v] = r
    shapes = []
    for r in rows:
        if r["shape"] not in shapes and any(k[0] == r["shape"] and "dense" in v for k, v in by.items()):
            shapes.append(r["shape"])
    if not shapes:
        print(f"sparse-P plot: skipped: {plotlib.display(path)} has no `dense` rows to compare with")
        return 0

    cols = min(4, len(shapes))
    nrows = math.ceil(len(shapes) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(max(10.0, 4.2 * cols), 3.6 * nrows + 1.2), squeeze=False, sharey=True)
    for ax, shape in zip(axes.flat, shapes):
        points = sorted(((float(v["dense"]["zero_share"]), v) for (s, _), v in by.items() if s == shape and "dense" in v),
                        key=lambda p: p[0])
        points = [(z / 100 if z > 1 else z, v) for z, v in points]  # a share, whether written as 0.72 or 72
        share = [100 * z for z, _ in points]
        ax.plot(share, [float(v["dense"]["limit_speedup"]) for _, v in points], color="black", linestyle="--",
                linewidth=1, label="byte-model limit")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        for name, color, marker in VARIANTS:
            pts = [(100 * z, plotlib.us(v["dense"]) / plotlib.us(v[name])) for z, v in points if name in v]
            if pts:
                ax.plot(*zip(*pts), color=color, marker=marker, label=name)
        ax.set_title(shape, fontsize=9)
        ax.set_xlabel("zeros in P, % (measured)", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(shapes):]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("speedup over dense (L2-cold)", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle(plotlib.title(args, [path], "Lesson 05, sparse P of the gated decode")
                 + "\nspeedup over dense against the share of zeros, L2-cold", fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    plotlib.save(fig, args, "sparse_p")
    return 0


if __name__ == "__main__":
    sys.exit(main())
