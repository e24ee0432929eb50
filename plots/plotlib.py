"""What every plot script shares: its command line, reading the CSVs, the title's GPU name and
date, and the one line that says a missing CSV was skipped.

Every plot script takes
    --gpu NAME   which plots/data/<gpu>/ to read (default h200)
    --data DIR   the folder holding <gpu>/ (default plots/data)
    --out DIR    where the PNGs go (default plots/)
    --date D     the date of the data for the title (default: the newest of its CSVs' dates:
                 the commit that last changed a CSV when it is committed and unchanged since,
                 else the file's modification date)
and exits 0 when a CSV it needs is missing, after one line saying so: a GPU where a lesson has
not run yet simply has fewer plots. Standard library and matplotlib only; no GPU.
"""

import argparse
import csv
import datetime
import os
import re
import subprocess

import matplotlib

import catalog  # plots/catalog.py: the GPU names, the shapes, the posts' numbers

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402,F401  (re-exported for the plot scripts)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
GPU_NAMES = catalog.GPU_DEVICE_NAMES
# The peers' CSVs (scripts/reproduce.sh): PyTorch SDPA and FlashInfer, lesson `peer`.
PEER_FILES = ("peers_sdpa.csv", "peers_flashinfer.csv")
# Each peer variant's colour and marker, the same in every plot.
PEER_STYLE = {
    "sdpa_flash": ("#7f7f7f", "s"), "sdpa_cudnn": ("#17becf", "D"),
    "flashinfer_decode": ("#bcbd22", "^"), "flashinfer_decode_tc": ("#8c564b", "v"),
    "flashinfer_prefill": ("#bcbd22", "^"), "flashinfer_prefill_sm90": ("#e377c2", "P"),
}


def parse_args(description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--gpu", default="h200", help="which plots/data/<gpu>/ to read (default h200)")
    ap.add_argument("--data", default=os.path.join(HERE, "data"), help="the folder holding <gpu>/ (default plots/data)")
    ap.add_argument("--out", default=HERE, help="where the PNGs go (default plots/)")
    ap.add_argument("--date", default=None, help="the date of the data for the title (default: from git or the files)")
    args = ap.parse_args()
    args.dir = os.path.join(args.data, args.gpu)
    return args


def gpu_name(gpu):
    return GPU_NAMES.get(gpu, gpu.upper())


def csv_path(args, name):
    return os.path.join(args.dir, name)


def display(path):
    """A path as the messages print it: relative to the repository when inside it."""
    rel = os.path.relpath(path, REPO)
    return path if rel.startswith("..") else rel


def skip_missing(args, name, what):
    """True (after one line) when plots/data/<gpu>/<name> does not exist."""
    path = csv_path(args, name)
    if os.path.isfile(path):
        return False
    print(f"{what}: skipped: no {display(path)}")
    return True


def read_rows(path, lesson=None, l2="cold"):
    """Rows of a CSV (of one lesson, in one L2 regime), leaving out rows whose check did not
    PASS, with one line when there are any."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if lesson is not None:
        rows = [r for r in rows if r.get("lesson") == lesson]
    if l2 is not None:
        rows = [r for r in rows if r.get("l2") == l2]
    bad = [r for r in rows if r.get("check") != "PASS"]
    if bad:
        print(f"{os.path.basename(path)}: leaving out {len(bad)} rows whose check did not PASS")
    return [r for r in rows if r.get("check") == "PASS"]


def read_peers(args, l2="cold"):
    """The peers' rows (lesson `peer`) from whichever peer CSVs exist; one line for each missing."""
    rows = []
    for name in PEER_FILES:
        path = csv_path(args, name)
        if os.path.isfile(path):
            rows += read_rows(path, lesson="peer", l2=l2)
        else:
            print(f"peers: no {display(path)}: not plotted")
    return rows


def file_date(path):
    """The date of a CSV: its last commit when it is committed and unchanged since, else its mtime."""
    try:
        def git(*a):
            return subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(path)), *a], capture_output=True,
                                  text=True, check=True).stdout.strip()
        name = os.path.basename(path)
        if git("log", "-1", "--format=%cs", "--", name) and not git("status", "--porcelain", "--", name):
            return git("log", "-1", "--format=%cs", "--", name)
    except (OSError, subprocess.CalledProcessError):
        pass
    return datetime.datetime.fromtimestamp(os.path.getmtime(path), tz=datetime.timezone.utc).strftime("%Y-%m-%d")


def data_date(args, paths):
    """--date, else the newest date among the CSVs that exist of `paths`."""
    if args.date:
        return args.date
    dates = [file_date(p) for p in paths if os.path.isfile(p)]
    return max(dates) if dates else "undated"


def title(args, paths, what):
    """'<what> on NVIDIA H200, data of 2026-11-23'."""
    return f"{what} on {gpu_name(args.gpu)}, data of {data_date(args, paths)}"


def save(fig, args, suffix):
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{args.gpu}_{suffix}.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {display(path)}")
    return path


def prompt_len(shape):
    """T of a prefill shape name B<b>-T<t>-H<h>-Hkv<hkv>[-P<prefix>], or None."""
    m = re.search(r"-T(\d+)-", shape)
    return int(m.group(1)) if m else None


def us(r):
    return float(r["us_median"])
