#!/usr/bin/env python3
"""Plots lesson 07's KV hand-off times against the number of tokens handed off.

Reads plots/data/<gpu>/lesson07.csv (written by `bash scripts/run_lessons.sh`) and writes
plots/<gpu>_staging.png: one panel per TP pair, log-log, the median time of one hand-off
against tokens for `per_token` (one copy call per token per layer per K/V per rank pair),
`per_layer` and `staged` (their `total` stage: gather + transfer + scatter), and the two-GPU
`staged_peer` and `staged_nccl` where the CSV has them. A dashed line marks three plain
device-to-device copies of the hand-off's bytes (the `memcpy` rows): the least a total of
three stages that each move those bytes once can take on this GPU.

Usage: python3 plots/plot_staging.py [--gpu h200] [--data DIR] [--out DIR] [--date YYYY-MM-DD]
The title names the GPU and the date of the data: --date, else the date of the commit that
last changed the CSV (when it is committed and unchanged since), else the CSV file's date.
Needs matplotlib only (no GPU). A missing lesson07.csv is skipped with one line; rows whose
check FAILed and variants the CSV lacks are left out, each with a one-line message.
"""

import csv
import os
import re
import sys

import matplotlib.ticker

import plotlib
from plotlib import plt
# (variant, legend label, colour, marker); two-GPU variants last.
VARIANTS = [
    ("per_token", "per_token (one call per token, layer, K/V, rank pair)", "#d62728", "s"),
    ("per_layer", "per_layer total (gather + transfer + scatter, one layer per call)", "#ff7f0e", "^"),
    ("staged", "staged total (one gather, copy, scatter per rank / pair)", "#1f77b4", "o"),
    ("staged_peer", "staged_peer total (decode side on GPU 1, peer copies)", "#2ca02c", "D"),
    ("staged_nccl", "staged_nccl total (decode side on GPU 1, NCCL send / recv)", "#9467bd", "v"),
]
TP_TITLES = {"tp4to2": "TP 4 -> 2, 8 KV heads", "tp2to4": "TP 2 -> 4, 8 KV heads", "tp1to4-kv2": "TP 1 -> 4, 2 KV heads"}
SHAPE = re.compile(r"^T(\d+)-L(\d+)-(tp\d+to\d+(?:-kv\d+)?)$")


def read_rows(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("lesson") == "07"]
    failed = [r for r in rows if r.get("check") != "PASS"]
    if failed:
        print(f"{os.path.basename(path)}: leaving out {len(failed)} rows whose check did not PASS")
    return [r for r in rows if r.get("check") == "PASS"]


def series(rows, variant, stage, pair):
    """[(tokens, us_median)] of `variant`'s `stage` rows for one TP pair, by tokens."""
    out = []
    for r in rows:
        m = SHAPE.match(r["shape"])
        if m and m.group(3) == pair and r["variant"] == variant and r.get("stage") == stage:
            out.append((int(m.group(1)), float(r["us_median"])))
    return sorted(out)


def plot(rows, args, path):
    pairs = []
    for r in rows:
        m = SHAPE.match(r["shape"])
        if m and m.group(3) not in pairs:
            pairs.append(m.group(3))
    if not pairs:
        print("no lesson 07 shapes (T<tokens>-L<layers>-tp<Ps>to<Pd>) in the CSV: nothing to plot")
        return False
    layers = sorted({SHAPE.match(r["shape"]).group(2) for r in rows if SHAPE.match(r["shape"])})
    have = {r["variant"] for r in rows}
    for v, *_ in VARIANTS:
        if v not in have:
            print(f"lesson07.csv: no {v} rows: not plotted"
                  + (" (they need two GPUs)" if v.startswith("staged_") else ""))

    fig, axes = plt.subplots(1, len(pairs), figsize=(5.2 * len(pairs), 5.6), sharey=True, squeeze=False)
    for ax, pair in zip(axes[0], pairs):
        ceiling = [(t, 3 * us) for t, us in series(rows, "memcpy", "transfer", pair)]
        if ceiling:
            ax.plot(*zip(*ceiling), color="grey", linestyle="--", linewidth=1,
                    label="3 x memcpy of the hand-off's bytes")
        for v, label, color, marker in VARIANTS:
            pts = series(rows, v, "total", pair)
            if pts:
                ax.plot(*zip(*pts), color=color, marker=marker, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        tokens = sorted({t for t, _ in series(rows, "memcpy", "transfer", pair)}
                        | {t for v, *_ in VARIANTS for t, _ in series(rows, v, "total", pair)})
        ax.set_xticks(tokens, [str(t) for t in tokens])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("tokens handed off")
        ax.set_title(TP_TITLES.get(pair, pair), fontsize=10)
        ax.grid(which="both", alpha=0.3)
    axes[0][0].set_ylabel("median time of one hand-off, us (log scale)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle(plotlib.title(args, [path], "Lesson 07") + ": KV hand-off time vs tokens "
                 f"({', '.join(layers)} layers, D 128, bf16, page 16)", fontsize=11)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    plotlib.save(fig, args, "staging")
    return True


def main():
    args = plotlib.parse_args("Plot lesson 07's hand-off times against tokens (no GPU needed).")
    if plotlib.skip_missing(args, "lesson07.csv", "staging plot"):
        return 0
    path = plotlib.csv_path(args, "lesson07.csv")
    print(f"date of the data: {plotlib.data_date(args, [path])} (--date overrides)")
    return 0 if plot(read_rows(path), args, path) else 1


if __name__ == "__main__":
    sys.exit(main())
