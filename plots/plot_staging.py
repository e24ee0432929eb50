#!/usr/bin/env python3
"""Plots lesson 07's KV hand-off times against the number of tokens handed off.

Reads plots/data/<gpu>/lesson07.csv (written by `bash scripts/run_lessons.sh`) and writes
plots/<gpu>_staging.png: one panel per TP pair, log-log, the median time of one hand-off
against tokens for `per_token` (one copy call per token per layer per K/V per rank pair),
`per_layer` and `staged` (their `total` stage: gather + transfer + scatter), and the two-GPU
`staged_peer` and `staged_nccl` where the CSV has them. A dashed line marks three plain
device-to-device copies of the hand-off's bytes (the `memcpy` rows): the least a total of
three stages that each move those bytes once can take on this GPU.

Usage: python3 plots/plot_staging.py [--gpu h200] [--date YYYY-MM-DD]
The title names the GPU and the date of the data: --date, else the date of the commit that
last changed the CSV (when it is committed and unchanged since), else the CSV file's date.
Needs matplotlib only (no GPU). Rows whose check FAILed and variants the CSV lacks are
left out, each with a one-line message.
"""

import argparse
import csv
import datetime
import os
import re
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
GPU_NAMES = {"h200": "NVIDIA H200", "h100": "NVIDIA H100 80GB HBM3"}
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


def data_date(path):
    """(date, where it came from) of the CSV: its last commit when unchanged since, else its mtime."""
    rel = os.path.relpath(path, os.path.dirname(HERE))
    try:
        def git(*args):
            return subprocess.run(["git", "-C", os.path.dirname(HERE), *args], capture_output=True, text=True,
                                  check=True).stdout.strip()
        if git("log", "-1", "--format=%cs", "--", rel) and not git("status", "--porcelain", "--", rel):
            return git("log", "-1", "--format=%cs", "--", rel), "the commit that last changed it"
    except (OSError, subprocess.CalledProcessError):
        pass
    mtime = datetime.datetime.fromtimestamp(os.path.getmtime(path), tz=datetime.timezone.utc)
    return mtime.strftime("%Y-%m-%d"), "the file's modification time"


def series(rows, variant, stage, pair):
    """[(tokens, us_median)] of `variant`'s `stage` rows for one TP pair, by tokens."""
    out = []
    for r in rows:
        m = SHAPE.match(r["shape"])
        if m and m.group(3) == pair and r["variant"] == variant and r.get("stage") == stage:
            out.append((int(m.group(1)), float(r["us_median"])))
    return sorted(out)


def plot(rows, gpu, date, out_path):
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
    fig.suptitle(f"Lesson 07 on {GPU_NAMES.get(gpu, gpu.upper())}, data of {date}: KV hand-off time vs tokens "
                 f"({', '.join(layers)} layers, D 128, bf16, page 16)", fontsize=11)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    print(f"wrote {os.path.relpath(out_path)}")
    return True


def main():
    ap = argparse.ArgumentParser(description="Plot lesson 07's hand-off times against tokens (no GPU needed).")
    ap.add_argument("--gpu", default="h200", help="which plots/data/<gpu>/ to read (default h200)")
    ap.add_argument("--date", default=None, help="the date of the data for the title (default: from git or the file)")
    args = ap.parse_args()

    path = os.path.join(HERE, "data", args.gpu, "lesson07.csv")
    if not os.path.isfile(path):
        print(f"no plots/data/{args.gpu}/lesson07.csv: nothing to plot")
        return 1
    if args.date:
        date = args.date
    else:
        date, source = data_date(path)
        print(f"date of the data: {date} (from {source}; --date overrides)")
    rows = read_rows(path)
    return 0 if plot(rows, args.gpu, date, os.path.join(HERE, f"{args.gpu}_staging.png")) else 1


if __name__ == "__main__":
    sys.exit(main())
