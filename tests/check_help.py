#!/usr/bin/env python3
"""Every lesson's --help runs without a GPU (exit 0) and names every variant that lesson's
committed CSVs hold (plots/data/<gpu>/lessonNN.csv, the lesson's own rows), so the help cannot
go stale against what the lesson measures.

    python3 tests/check_help.py BIN_DIR [REPO]
"""
import csv
import re
import subprocess
import sys
from pathlib import Path


def main():
    bin_dir = Path(sys.argv[1])
    repo = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parent.parent
    # the lessons' executables, not the exercises' graders (lessonNN_exercise*)
    exes = sorted(p for p in bin_dir.glob("lesson[0-9][0-9]_*") if p.is_file() and "_exercise" not in p.name)
    if not exes:
        print(f"check_help: no lesson executables in {bin_dir}")
        return 1
    failures = 0
    for exe in exes:
        nn = exe.name[6:8]
        r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            print(f"FAIL {exe.name} --help: exit {r.returncode}: {(r.stderr or r.stdout).strip()[:200]}")
            failures += 1
            continue
        words = set(re.findall(r"[A-Za-z0-9_]+", r.stdout))
        missing = {}
        for path in sorted(repo.glob(f"plots/data/*/lesson{nn}.csv")):
            with open(path, newline="", encoding="utf-8") as f:
                for row in csv.DictReader(f):
                    if row.get("lesson") == nn and row.get("variant") and row["variant"] not in words:
                        missing.setdefault(row["variant"], path.relative_to(repo).as_posix())
        if missing:
            failures += 1
            for v, p in sorted(missing.items()):
                print(f"FAIL {exe.name} --help does not name variant {v} (in {p})")
        else:
            print(f"ok   {exe.name} --help names every variant of its CSVs")
    print(f"{len(exes) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
