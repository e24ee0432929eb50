#!/usr/bin/env python3
"""Plots the decode measurements that scripts/run_lessons.sh and scripts/reproduce.sh write.

Reads plots/data/<gpu>/lessonNN.csv (lessons 01 to 04, whichever exist) and the peers'
CSVs (peers_sdpa.csv, peers_flashinfer.csv, where they exist), and writes, into plots/:
  <gpu>_decode_bandwidth.png  the progress chart: Table A shapes (llama7b-*, llama70b-*,
                              mqa-*), % of the measured streaming-read bandwidth, L2-cold,
                              per lesson (lesson 01 naive; lesson 02 best of its steps and its
                              auto pick; lessons 03 and 04: best variant and auto) and per peer
                              (PyTorch SDPA flash / cuDNN, FlashInfer decode / tensor-core decode).
  <gpu>_tgs_sweep.png         h8kv4-* shapes: L2-cold median time of lesson 02's
                              wide_loads and grouped steps at TGS 4, 8, 16 and of the
                              tensor-core grouped_mma and grouped_mma_ws, and each one's
                              time over the best of them.
Each title names the GPU and the date of the data.

Usage: python3 plots/plot_decode.py [--gpu h200] [--data DIR] [--out DIR] [--date YYYY-MM-DD]
Needs matplotlib only (no GPU). Missing CSVs, and lesson-02 variants missing from its CSV,
are skipped with a one-line message.
"""

import csv
import glob
import os
import re
import sys

import matplotlib.ticker

import catalog
import plotlib
from plotlib import plt

# Table A (plots/catalog.py): the bandwidth plot leaves out the long-context shapes
# (llama70b-B16-mixed, *-ctx128k) that lesson 03 adds under the same model names.
TABLE_A = catalog.TABLE_A
TGS = catalog.TGS
# Lesson 02's steps, every TGS of the CUDA-core ones (plots/catalog.py).
LESSON02_STEPS = catalog.LESSON02_STEP_VARIANTS
# The TGS-sweep plot: the per-head and grouped CUDA-core steps at every TGS, and the
# tensor-core steps for reference.
TGS_SWEEP_CONFIGS = [f"{step}_tgs{tgs}" for step in ("wide_loads", "grouped") for tgs in TGS] + [
    "grouped_mma", "grouped_mma_ws"]


# The softmax decode lessons; lesson 05 decodes the gated attention, another function.
DECODE_LESSONS = ("01", "02", "03", "04")


def read_lessons(data_dir):
    """{lesson number: [row dicts]} for lessons 01-04's lessonNN.csv in data_dir; L2-cold, passing rows."""
    lessons = {}
    for path in sorted(glob.glob(os.path.join(data_dir, "lesson[0-9][0-9].csv"))):
        nn = re.search(r"lesson(\d\d)\.csv$", path).group(1)
        if nn not in DECODE_LESSONS:
            continue
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        failed = [r for r in rows if r.get("check") == "FAIL"]
        if failed:
            print(f"{os.path.basename(path)}: leaving out {len(failed)} rows whose check FAILed")
        lessons[nn] = [r for r in rows if r.get("l2") == "cold" and r.get("check") != "FAIL"]
    return lessons


def shapes_in_order(rows, keep):
    """Shape names in the order they first appear in the CSV (the catalogue's order)."""
    seen = []
    for r in rows:
        if keep(r["shape"]) and r["shape"] not in seen:
            seen.append(r["shape"])
    return seen


def row_of(rows, shape, variant):
    for r in rows:
        if r["shape"] == shape and r["variant"] == variant:
            return r
    return None


def best_row(rows, shape, variants):
    """The row with the lowest us_median among `variants` for `shape`, or None."""
    cands = [r for r in rows if r["shape"] == shape and r["variant"] in variants]
    return min(cands, key=lambda r: float(r["us_median"])) if cands else None


def present_variants(rows, wanted, csv_name):
    """The variants of `wanted` that `rows` have; one line names those it lacks."""
    have = {r["variant"] for r in rows}
    missing = [v for v in wanted if v not in have]
    if missing:
        print(f"{csv_name}: no rows for {', '.join(missing)}: skipped")
    return [v for v in wanted if v in have]


def bandwidth_series(lessons):
    """[(label, {shape: row})] for the bandwidth plot, one entry per bar series."""
    series = []
    for nn, rows in sorted(lessons.items()):
        own = [r for r in rows if r["lesson"] == nn]  # lesson 02's CSV also repeats lesson 01
        shapes = shapes_in_order(own, lambda s: s in TABLE_A)
        if not shapes:
            print(f"lesson{nn}.csv: no Table A shapes, not in the bandwidth plot")
            continue
        if nn == "01":
            series.append(("lesson 01 naive", {s: row_of(own, s, "naive") for s in shapes}))
            continue
        if nn == "02":
            variants = present_variants(own, LESSON02_STEPS, "lesson02.csv")
            if not variants:
                continue
        else:
            variants = sorted({r["variant"] for r in own} - {"auto"})
        what = "best step" if nn == "02" else "best variant"
        series.append((f"lesson {nn} {what}", {s: best_row(own, s, variants) for s in shapes}))
        if any(r["variant"] == "auto" for r in own):
            series.append((f"lesson {nn} auto", {s: row_of(own, s, "auto") for s in shapes}))
    return series


def peer_series(peers):
    """[(label, {shape: row})], one per peer variant with Table A rows."""
    out = []
    for v in plotlib.PEER_STYLE:
        by = {r["shape"]: r for r in peers if r["variant"] == v and r["shape"] in TABLE_A}
        if by:
            out.append((f"peer {v}", by))
    return out


def plot_bandwidth(lessons, peers, args, paths):
    series = bandwidth_series(lessons)
    if not series:
        print("bandwidth plot skipped: no lesson CSV has Table A shapes")
        return False
    series += peer_series(peers)
    shapes = []
    for _, by_shape in series:
        shapes += [s for s, r in by_shape.items() if r is not None and s not in shapes]

    fig, ax = plt.subplots(figsize=(16, 6))
    width = 0.85 / len(series)
    for i, (label, by_shape) in enumerate(series):
        xs, ys = [], []
        for j, s in enumerate(shapes):
            r = by_shape.get(s)
            if r is not None and r["pct_read_bw"]:
                xs.append(j + (i - (len(series) - 1) / 2) * width)
                ys.append(float(r["pct_read_bw"]))
        peer = label.startswith("peer ")
        style = dict(color=plotlib.PEER_STYLE[label[5:]][0], hatch="//", edgecolor="white") if peer else {}
        bars = ax.bar(xs, ys, width, label=label, **style)
        ax.bar_label(bars, labels=[f"{y:.0f}" for y in ys], fontsize=5.5, padding=1, rotation=90)

    # Name the winning lesson-02 configuration under each shape.
    best02 = dict(series).get("lesson 02 best step", {})
    ticks = []
    for s in shapes:
        r = best02.get(s)
        ticks.append(f"{s}\n({r['variant']})" if r is not None else s)
    ax.set_xticks(range(len(shapes)), ticks, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("% of measured streaming-read bandwidth (L2-cold)")
    ax.set_ylim(0, 110)
    ax.set_title(plotlib.title(args, paths, "Paged decode, lessons 01 -> 04 and peers")
                 + ": Table A shapes (fp16, D 128, block 16), share of the read bandwidth reached", fontsize=10)
    ax.legend(loc="upper left", fontsize=7, ncol=3)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    plotlib.save(fig, args, "decode_bandwidth")
    return True


def plot_tgs_sweep(lessons, args, paths):
    if "02" not in lessons:
        print("TGS sweep plot skipped: no lesson02.csv")
        return False
    configs = present_variants([r for r in lessons["02"] if r["lesson"] == "02"], TGS_SWEEP_CONFIGS, "lesson02.csv")
    rows = [r for r in lessons["02"] if r["lesson"] == "02" and r["variant"] in configs]
    shapes = shapes_in_order(rows, lambda s: s.startswith("h8kv4-"))
    if not shapes:
        print("TGS sweep plot skipped: lesson02.csv has no h8kv4-* rows")
        return False
    size = {r["shape"]: (int(r["B"]), int(r["ctx"])) for r in rows}
    shapes.sort(key=lambda s: size[s])  # by batch, then context

    fig, (ax_us, ax_rel) = plt.subplots(2, 1, figsize=(13, 8.5), sharex=True,
                                        gridspec_kw={"height_ratios": [3, 2]})
    width = 0.8 / len(configs)
    palette = dict(zip(TGS_SWEEP_CONFIGS, ["#9ecae1", "#4292c6", "#08519c", "#fdae6b", "#f16913", "#a63603",
                                           "#31a354", "#006d2c"]))
    for i, variant in enumerate(configs):
        color = palette[variant]
        xs, us, rel = [], [], []
        for j, s in enumerate(shapes):
            r = row_of(rows, s, variant)
            if r is None:
                continue
            xs.append(j + (i - (len(configs) - 1) / 2) * width)
            us.append(float(r["us_median"]))
            rel.append(us[-1] / float(best_row(rows, s, configs)["us_median"]))
        ax_us.bar(xs, us, width, label=variant, color=color)
        ax_rel.bar(xs, rel, width, color=color)

    for j, s in enumerate(shapes):  # the best time, above the shape's tallest bar
        r = best_row(rows, s, configs)
        top = max(float(x["us_median"]) for x in rows if x["shape"] == s)
        ax_us.annotate(f"best {float(r['us_median']):.1f}", (j, top), xytext=(0, 4),
                       textcoords="offset points", ha="center", fontsize=7)
    ax_us.set_yscale("log")
    ax_us.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax_us.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax_us.tick_params(axis="y", which="minor", labelsize=7)
    ax_us.set_ylabel("median time, us (L2-cold, log scale)")
    ax_us.set_title(plotlib.title(args, paths, "Lesson 02") + ": thread-group size sweep, h8kv4 shapes "
                    "(H 8, Hkv 4, D 128, bf16, block 16)", fontsize=10)
    ax_us.legend(ncol=4, fontsize=8, loc="upper left")
    ax_us.grid(axis="y", which="both", alpha=0.3)
    ax_us.set_ylim(top=ax_us.get_ylim()[1] * 2.0)

    ax_rel.axhline(1.0, color="black", linewidth=0.8)
    ax_rel.set_ylabel("time / best of those shown")
    ax_rel.set_ylim(0.9, max(1.3, ax_rel.get_ylim()[1]))
    ax_rel.grid(axis="y", alpha=0.3)
    ax_rel.set_xticks(range(len(shapes)), shapes, rotation=30, ha="right", fontsize=8)
    fig.tight_layout()
    plotlib.save(fig, args, "tgs_sweep")
    return True


def main():
    args = plotlib.parse_args("Plot the decode lessons' and the peers' CSV measurements (no GPU needed).")
    if not os.path.isdir(args.dir):
        print(f"decode plots: skipped: no {plotlib.display(args.dir)}/")
        return 0
    lessons = read_lessons(args.dir)
    for nn in DECODE_LESSONS:
        if nn not in lessons:
            print(f"lesson{nn}.csv not found in {plotlib.display(args.dir)}/: not plotted")
    if not lessons:
        print(f"decode plots: skipped: no lesson 01-04 CSV in {plotlib.display(args.dir)}/")
        return 0
    print(f"{plotlib.display(args.dir)}/: lessons {', '.join(sorted(lessons))}")
    peers = plotlib.read_peers(args)
    paths = [os.path.join(args.dir, f"lesson{nn}.csv") for nn in lessons]
    plot_bandwidth(lessons, peers, args, paths + [os.path.join(args.dir, p) for p in plotlib.PEER_FILES])
    plot_tgs_sweep(lessons, args, [os.path.join(args.dir, "lesson02.csv")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
