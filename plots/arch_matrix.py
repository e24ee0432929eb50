#!/usr/bin/env python3
"""Turns the `--check` logs of scripts/arch_matrix.sh into plots/data/<gpu>/arch_matrix.csv: per
(build, shared-memory cap, lesson, variant), on how many check shapes the variant passed or failed,
on how many it was refused and why, and the check's exit code. A log is named
<build>__<cap>__<program>.log (build: native or sm80; cap: none, 99 or 163) and ends with
`exit N`.

    python3 plots/arch_matrix.py --gpu h200 --out plots/data/h200/arch_matrix.csv LOG...

--lessons 03,05 replaces only those lessons' rows of an existing CSV."""
import argparse
import csv
import os
import re
import sys

COLUMNS = ["gpu", "build", "cap_kib", "lesson", "program", "variant", "passed", "failed", "refused", "reason", "exit"]

PASS = re.compile(r"^\s+(PASS|FAIL)\s+(\S+)\s")
NOT_RUN = re.compile(r"^\s+\((\S+) not run on (\d+) shapes?: (.*)\)\s*$")
UNAVAILABLE = re.compile(r"^unavailable: (.*) \((.*)\)\s*$")
UNAVAILABLE_ONE = re.compile(r"^(\w+): ((?:not built|unavailable)\b.*)$")
SKIPPED_ROWS = re.compile(r"^(.*) skipped: (.*)$")
EXIT = re.compile(r"^exit (\d+)\s*$")
NAME = re.compile(r"^(native|sm80)__(none|\d+)__(lesson(\d\d)_\w+)\.log$")


def parse_log(path, gpu):
    m = NAME.match(os.path.basename(path))
    if not m:
        raise SystemExit(f"arch_matrix.py: {path}: expected <native|sm80>__<cap>__lessonNN_name.log")
    build, cap, program, lesson = m.groups()
    variants = {}  # name -> [passed, failed, refused, reason, {reason: shapes}]
    order = []
    exit_code = None

    def entry(name):
        if name not in variants:
            variants[name] = [0, 0, 0, "", {}]
            order.append(name)
        return variants[name]

    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if (p := PASS.match(line)):
                entry(p.group(2))[0 if p.group(1) == "PASS" else 1] += 1
            elif (n := NOT_RUN.match(line)):
                e = entry(n.group(1))
                e[2] += int(n.group(2))
                e[4][n.group(3)] = e[4].get(n.group(3), 0) + int(n.group(2))
                e[3] = max(e[4], key=e[4].get)  # the reason of the most shapes
            elif (u := UNAVAILABLE.match(line)):
                for name in u.group(1).split(", "):
                    e = entry(name.strip())
                    e[3] = e[3] or u.group(2)
            elif (u := UNAVAILABLE_ONE.match(line)):
                e = entry(u.group(1))
                e[3] = e[3] or u.group(2)
            elif (x := EXIT.match(line)):
                exit_code = int(x.group(1))
    if exit_code is None:
        raise SystemExit(f"arch_matrix.py: {path} has no final 'exit N' line")
    rows = []
    for name in order:
        passed, failed, refused, reason, _ = variants[name]
        rows.append({"gpu": gpu, "build": build, "cap_kib": cap, "lesson": lesson, "program": program, "variant": name,
                     "passed": passed, "failed": failed, "refused": refused, "reason": reason, "exit": exit_code})
    if not rows:  # a program refused whole (an exit before its check): one row that says so
        rows.append({"gpu": gpu, "build": build, "cap_kib": cap, "lesson": lesson, "program": program, "variant": "",
                     "passed": 0, "failed": 0, "refused": 0, "reason": last_error(path), "exit": exit_code})
    return rows


def last_error(path):
    """The program's one-line error (`...: error: ...`), else its last line."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [l.strip() for l in f if l.strip() and not EXIT.match(l.strip())]
    errors = [l for l in lines if "error:" in l]
    return (errors or lines or [""])[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--lessons", default="")
    ap.add_argument("logs", nargs="+")
    a = ap.parse_args()
    rows = [r for path in a.logs for r in parse_log(path, a.gpu)]
    if a.lessons and os.path.exists(a.out):
        keep = set(a.lessons.split(","))
        with open(a.out, newline="", encoding="utf-8") as f:
            old = [r for r in csv.DictReader(f) if r["lesson"] not in keep]
        rows = old + rows
    order = {"native": 0, "sm80": 1}
    rows.sort(key=lambda r: (r["lesson"], order[r["build"]], r["cap_kib"] != "none", -int(r["cap_kib"]) if r["cap_kib"] != "none" else 0))
    with open(a.out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
