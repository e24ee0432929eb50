#!/usr/bin/env python3
"""No measured figure in README prose: a number with a unit of measurement (us, ms, %, x as in
1.8x, GB/s, TB/s, TFLOPS) in a README.md (the top one, each lesson's and each exercise's) or in
TEACHING.md outside the generated table blocks (<!-- table:NAME -->
... <!-- /table:NAME -->), code blocks and inline code is a figure someone copied by hand, and goes
stale with the next run. It belongs in a generated block, or in the lesson's NOTES.md (the lab
notebook, dated) if it is history. Fixed facts (a page is 16 tokens, 99 KiB of shared memory)
have other units and pass, and so do a rule's thresholds ("90 % of the SMs") and tolerances
("within 5 %").

    python3 tests/check_prose_numbers.py [REPO]
"""
import re
import sys
from pathlib import Path

FIGURE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:\s*(?:us|ms|µs|GB/s|TB/s|TFLOPS)\b|x\b|\s*%(?! of the SMs))")
# A percentage that is a tolerance or a rule's threshold, not a measurement: "within 5 %".
ALLOWED = re.compile(r"within \d+ %")
OPEN = re.compile(r"^<!-- table:(\S+) -->$")
CLOSE = re.compile(r"^<!-- /table:(\S+) -->$")


def prose_lines(text):
    """(line number, line) of a README outside table blocks and fenced code, inline code removed."""
    in_block = in_code = False
    for i, line in enumerate(text.split("\n"), 1):
        if OPEN.match(line):
            in_block = True
            continue
        if CLOSE.match(line):
            in_block = False
            continue
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_block or in_code:
            continue
        yield i, ALLOWED.sub("", re.sub(r"`[^`]*`", "", line))


def main():
    repo = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    files = ([repo / "README.md", repo / "TEACHING.md"] + sorted((repo / "lessons").glob("*/README.md"))
             + sorted((repo / "lessons").glob("*/exercise/README.md")))
    hits = 0
    for f in files:
        for n, line in prose_lines(f.read_text(encoding="utf-8")):
            for m in FIGURE.finditer(line):
                hits += 1
                print(f"{f.relative_to(repo).as_posix()}:{n}: measured figure '{m.group(0).strip()}' in prose "
                      f"(put it in a generated table block, or in NOTES.md)")
    if hits:
        print(f"check_prose_numbers: {hits} figure(s) in README prose outside the generated blocks")
        return 1
    print(f"check_prose_numbers: no measured figure in the prose of {len(files)} READMEs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
