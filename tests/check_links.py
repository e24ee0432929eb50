#!/usr/bin/env python3
"""Every relative link of the repository's Markdown files resolves: the file it names exists,
and a `#anchor` into a Markdown file names one of its headings (as GitHub writes a heading's
anchor: lower case, punctuation but `-` and `_` dropped, spaces to `-`, `-1`, `-2` ... for
repeats) or an `<a id="...">`. Text moves between a lesson's README.md and its NOTES.md, and a
link left pointing at a heading that moved goes nowhere without an error anywhere else.
Links in code blocks and inline code, and links with a scheme (https:, mailto:) are not checked;
build trees (any folder holding a CMakeCache.txt) and hidden folders are skipped.

    python3 tests/check_links.py [REPO]
"""
import functools
import re
import sys
from pathlib import Path

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"#{1,6}\s+(.*)")
ANCHOR_TAG = re.compile(r'<a id="([^"]+)"')


def prose(text):
    """(line number, line) outside fenced code, inline code removed."""
    in_code = False
    for i, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if not in_code:
            yield i, re.sub(r"`[^`]*`", "", line)


def slug(heading):
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(path):
    """The anchors a Markdown file defines: its headings' (outside code) and its <a id>s."""
    found, seen = set(), {}
    in_code = False
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        m = HEADING.match(line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else f"{s}-{n}")
        found.update(ANCHOR_TAG.findall(line))
    return found


def markdown_files(root):
    skip = {p.parent for p in root.rglob("CMakeCache.txt")}
    for p in sorted(root.rglob("*.md")):
        rel = p.relative_to(root)
        if any(part.startswith(".") for part in rel.parts[:-1]):
            continue
        if any(parent in skip for parent in p.parents):
            continue
        yield p


def main(argv):
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parent.parent).resolve()
    files = list(markdown_files(root))
    bad = []
    for f in files:
        for i, line in prose(f.read_text(encoding="utf-8")):
            for target in LINK.findall(line):
                if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                    continue
                path, _, anchor = target.partition("#")
                dest = (f.parent / path).resolve() if path else f
                where = f"{f.relative_to(root)}:{i}"
                if not dest.exists():
                    bad.append(f"{where}: {target}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    bad.append(f"{where}: {target}: no heading or <a id> '{anchor}' in {dest.relative_to(root)}")
    for b in bad:
        print(b)
    print(f"check_links: {len(files)} Markdown files, {len(bad)} broken link(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
