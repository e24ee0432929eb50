#!/usr/bin/env python3
"""Single pass against split-k, and the peers, over the context length (Table B).

Reads plots/data/<gpu>/lesson03_sweep.csv and the peers' CSVs (peers_sdpa.csv,
peers_flashinfer.csv, where they exist) and writes plots/<gpu>_split_k.png: one panel per
model of Table B (qwen1.5b H12/Hkv2, qwen7b H28/Hkv4; B 1, fp16, D 128, block 16), L2-cold
median time against ctx, log-log, for lesson 03's single pass (`single_pass`, lesson 02's
auto), its fastest split-k variant at each ctx, its `auto`, and each peer variant. The RTX 4090
post's published times (its GPU, its kernels) are drawn dashed in grey for their shape: the
same crossover, not the same experiment.

Usage: python3 plots/plot_split_k.py [--gpu h200] [--data DIR] [--out DIR] [--date YYYY-MM-DD]
Needs matplotlib only (no GPU). A missing lesson03_sweep.csv is skipped with one line; missing peer
CSVs are named and left out.
"""

import re
import sys

import matplotlib.ticker

import catalog
import plotlib
from plotlib import plt

MODELS = (("qwen1.5b", "qwen1.5b: H 12, Hkv 2"), ("qwen7b", "qwen7b: H 28, Hkv 4"))
SHAPE = re.compile(r"^(qwen1\.5b|qwen7b)-B1-ctx(\d+k?)$")
# The RTX 4090 post (fp16, B 1; plots/catalog.py, in ms), us: base (single pass) and split-k, by shape.
POST_4090_US = {s: (round(base * 1000), round(split * 1000)) for s, (base, split, _) in catalog.POST_4090_MS.items()}


def ctx_of(shape):
    m = SHAPE.match(shape)
    if not m:
        return None
    c = m.group(2)
    return int(c[:-1]) * 1024 if c.endswith("k") else int(c)


def series(rows, model, pick):
    """[(ctx, us)] for one model; `pick(rows of one shape)` returns the row to plot or None."""
    by = {}
    for r in rows:
        m = SHAPE.match(r["shape"])
        if m and m.group(1) == model:
            by.setdefault(r["shape"], []).append(r)
    pts = []
    for shape, rs in by.items():
        r = pick(rs)
        if r is not None:
            pts.append((ctx_of(shape), plotlib.us(r)))
    return sorted(pts)


def main():
    args = plotlib.parse_args("Plot single pass vs split-k vs the peers over ctx, Table B (no GPU needed).")
    if plotlib.skip_missing(args, "lesson03_sweep.csv", "split-k plot"):
        return 0
    l3 = plotlib.read_rows(plotlib.csv_path(args, "lesson03_sweep.csv"), lesson="03")
    peers = plotlib.read_peers(args)
    splits = sorted({r["variant"] for r in l3 if r["variant"].startswith("split_k")})
    if not any(SHAPE.match(r["shape"]) for r in l3):
        print("split-k plot: skipped: lesson03_sweep.csv has no Table B rows (qwen1.5b-B1-ctx*, qwen7b-B1-ctx*)")
        return 0

    def only(v):
        return lambda rs: next((r for r in rs if r["variant"] == v), None)

    def best_split(rs):
        c = [r for r in rs if r["variant"] in splits]
        return min(c, key=plotlib.us) if c else None

    lines = [("lesson 03 single_pass (lesson 02 auto)", only("single_pass"), dict(color="#1f77b4", marker="o")),
             ("lesson 03 best split_k_*", best_split, dict(color="#d62728", marker="o")),
             ("lesson 03 auto", only("auto"), dict(color="#9467bd", marker="x", linestyle=":"))]
    fig, axes = plt.subplots(1, len(MODELS), figsize=(13, 5.4), sharey=True)
    for ax, (model, label) in zip(axes, MODELS):
        for name, pick, style in lines:
            pts = series(l3, model, pick)
            if pts:
                ax.plot(*zip(*pts), label=name, **style)
        for v, (color, marker) in plotlib.PEER_STYLE.items():
            pts = series(peers, model, only(v))
            if pts:
                ax.plot(*zip(*pts), label=f"peer {v}", color=color, marker=marker, linestyle="--")
        for k, (name, style) in enumerate((("RTX 4090 post: base", "-."), ("RTX 4090 post: split-k", ":"))):
            pts = sorted((ctx_of(s), v[k]) for s, v in POST_4090_US.items() if s.startswith(model + "-"))
            ax.plot(*zip(*pts), label=name, color="grey", linestyle=style, linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ticks = sorted({c for c in (ctx_of(r["shape"]) for r in l3) if c} | {ctx_of(s) for s in POST_4090_US})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.set_xlabel("context length (B 1)")
        ax.set_title(label, fontsize=10)
        ax.grid(which="both", alpha=0.3)
    axes[0].set_ylabel("median time, us (L2-cold; the post: its own GPU)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    paths = [plotlib.csv_path(args, "lesson03_sweep.csv")] + [plotlib.csv_path(args, p) for p in plotlib.PEER_FILES]
    fig.suptitle(plotlib.title(args, paths, "Single pass vs split-k vs peers")
                 + ": Table B (fp16, D 128, block 16)", fontsize=11)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    plotlib.save(fig, args, "split_k")
    return 0


if __name__ == "__main__":
    sys.exit(main())
