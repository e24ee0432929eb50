#!/usr/bin/env python3
"""Lesson 06 and the peers: prefill TFLOPS against the prompt length.

Reads plots/data/<gpu>/lesson06.csv (variants <method>_<policy>: methods as_decode, mma_sync,
wgmma, wgmma_ws and the last step, wgmma_v_pages; policies softmax and gate; a `prefix`
column) and the peers' prefill rows (sdpa_flash, sdpa_cudnn from peers_sdpa.csv;
flashinfer_prefill and its Hopper backend flashinfer_prefill_sm90 from peers_flashinfer.csv),
and writes plots/<gpu>_prefill.png: one panel per policy, L2-cold TFLOPS of each step against
the prompt length T of lesson 06's shapes with no cached prefix (prefix 0), log x axis, with
the measured dense bf16 GEMM rate (each row's tflops over its pct_mma_peak) as a dashed line.
The peers compute softmax attention, so they are drawn on the softmax panel only.

Usage: python3 plots/plot_prefill.py [--gpu h200] [--data DIR] [--out DIR] [--date YYYY-MM-DD]
Needs matplotlib only (no GPU). Without lesson06.csv the peers' prefill rows are drawn alone
(one line says so); with neither, it is skipped with one line.
"""

import os
import sys

import matplotlib.ticker

import plotlib
from plotlib import plt

METHODS = (("as_decode", "#9467bd", "x"), ("mma_sync", "#ff7f0e", "o"), ("wgmma", "#2ca02c", "s"),
           ("wgmma_ws", "#d62728", "D"), ("wgmma_v_pages", "#1f77b4", "*"))
POLICIES = ("softmax", "gate")
PEERS = ("sdpa_flash", "sdpa_cudnn", "flashinfer_prefill", "flashinfer_prefill_sm90")


def prefix0(r):
    return r.get("prefix", "0") in ("0", "")


def main():
    args = plotlib.parse_args("Plot prefill TFLOPS against prompt length, lesson 06 and peers (no GPU needed).")
    path = plotlib.csv_path(args, "lesson06.csv")
    rows = []
    if os.path.isfile(path):
        rows = [r for r in plotlib.read_rows(path, lesson="06") if prefix0(r) and plotlib.prompt_len(r["shape"])]
    else:
        print(f"prefill plot: no {plotlib.display(path)}: the peers alone")
    peers = [r for r in plotlib.read_peers(args) if r["variant"] in PEERS and plotlib.prompt_len(r["shape"])]
    if not rows and not peers:
        print("prefill plot: skipped: no lesson 06 rows with prefix 0 and no peer prefill rows")
        return 0
    policies = [p for p in POLICIES if any(r["variant"].endswith("_" + p) for r in rows)] or ["softmax"]

    def points(rs):
        return sorted((plotlib.prompt_len(r["shape"]), float(r["tflops"])) for r in rs)

    fig, axes = plt.subplots(1, len(policies), figsize=(6.5 * len(policies), 5.6), squeeze=False, sharey=True)
    peaks = [float(r["tflops"]) * 100 / float(r["pct_mma_peak"]) for r in rows + peers
             if r.get("pct_mma_peak") and float(r["pct_mma_peak"]) > 0]
    shapes = {}
    for ax, policy in zip(axes[0], policies):
        for method, color, marker in METHODS:
            pts = points([r for r in rows if r["variant"] == f"{method}_{policy}"])
            if pts:
                ax.plot(*zip(*pts), color=color, marker=marker, label=f"lesson 06 {method}_{policy}")
        if policy == "softmax":
            for v in PEERS:
                pts = points([r for r in peers if r["variant"] == v])
                if pts:
                    color, marker = plotlib.PEER_STYLE[v]
                    ax.plot(*zip(*pts), color=color, marker=marker, linestyle="--", label=f"peer {v}")
        if peaks:
            peak = sum(peaks) / len(peaks)
            ax.axhline(peak, color="black", linestyle=":", linewidth=1,
                       label=f"dense bf16 GEMM, measured ({peak:.0f})")
        for r in rows + peers:
            shapes[plotlib.prompt_len(r["shape"])] = r["shape"]
        ax.set_xscale("log", base=2)
        ticks = sorted(shapes)
        ax.set_xticks(ticks, [f"{shapes[t]}" for t in ticks], rotation=20, ha="right", fontsize=7)
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("prompt length T (shape), prefix 0, causal")
        ax.set_title(f"{policy} attention", fontsize=10)
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    axes[0][0].set_ylabel("TFLOP/s (L2-cold; causal FLOPs)")
    axes[0][0].set_ylim(bottom=0)
    paths = [path] + [plotlib.csv_path(args, p) for p in plotlib.PEER_FILES]
    fig.suptitle(plotlib.title(args, paths, "Prefill, lesson 06 steps and peers")
                 + ": TFLOPS vs prompt length (bf16, D 128, page 16)", fontsize=11)
    fig.tight_layout()
    plotlib.save(fig, args, "prefill")
    return 0


if __name__ == "__main__":
    sys.exit(main())
