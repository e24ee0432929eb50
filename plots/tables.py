#!/usr/bin/env python3
"""Writes the results tables of README.md and lessons/*/README.md from the committed CSVs.

A README holds a generated table between two marker lines:

    <!-- table:NAME -->
    ...written by this script, replaced whole...
    <!-- /table:NAME -->

NAME is one of the tables below (`--list` names them): a grid (one row per shape) is a spec
given to `grid` (its CSV, shapes, columns and caption); a table that writes sentences or is
irregular is a function, most of them of one GPU's CSV (`per_gpu`). Each reads
plots/data/<gpu>/lessonNN.csv and states, inside its block, which GPU and which CSV its numbers
come from. Text outside the markers is never touched. The shapes, the GPUs' names, the lessons'
variants and the posts' published numbers come from plots/catalog.py.

    python3 plots/tables.py            rewrite every block that differs from the CSVs
    python3 plots/tables.py --check    rewrite nothing; exit 1, one line per block that
                                       differs (CI runs this: CTest test `readme_tables`)
    python3 plots/tables.py --list     the table names and what each shows
    python3 plots/test_tables.py       tests this script on tiny CSVs (CTest test
                                       `readme_tables_self_test`)

Unknown table names, unbalanced markers, a missing CSV, a missing row or a row whose
check FAILed are errors (exit 1, one line each), never an empty table.
Python 3 standard library only; no GPU.
"""

import argparse
import csv
import io
import math
import re
import statistics
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from catalog import *  # noqa: E402,F401,F403  (plots/catalog.py: the shapes, GPUs, variants and posts' numbers)

REPO = Path(__file__).resolve().parent.parent

class TableError(Exception):
    """A table cannot be written from the CSVs; the message names what is missing."""


# ---------------------------------------------------------------------------------------
# Reading the CSVs

class Keyed:
    """Rows of a CSV by the columns KEY (l2, where a key has it, last and "cold" unless given): those of
    lesson LESSON (None: every row). ROW names a key's row in messages (a missing or duplicated row),
    FAILED a FAILed row ({shape_of_row}: its shape); a subclass may check more in row()."""
    LESSON, KEY, NEED, NONE, EAGER_DUP, MISSING, ROW, FAILED = None, (), (), None, False, "", "", ""

    def __init__(self, c):
        self.c = c
        rows = [r for r in c.rows if self.LESSON in (None, r.get("lesson")) and self.keep(r)]
        if not rows and self.NONE:
            raise TableError(f"{c.rel}: no lesson {self.LESSON} {self.NONE}")
        for col in self.NEED:
            if col not in rows[0]:
                raise TableError(f"{c.rel}: no column '{col}'")
        self.rows, self.by_key, self.dup = rows, {}, set()
        for r in rows:
            key = self.key(r)
            if key in self.by_key:
                if self.EAGER_DUP:
                    raise TableError(f"{c.rel}: more than one {self.name(self.ROW, key)}")
                self.dup.add(key)
            self.by_key[key] = r
        self.have = {k[0] for k in self.by_key}

    def keep(self, r):
        return True

    def key(self, r):
        return tuple(r.get(col) for col in self.KEY)

    def name(self, template, key, r=None):
        return template.format(**dict(zip(self.KEY, key)), shape_of_row=(r or {}).get("shape"))

    def expected_check(self, key):
        """What a row's check column must say: PASS, unless a subclass knows rows that are never checked."""
        return "PASS"

    def find(self, *key):
        """The row, or None when the CSV has none; a duplicated or FAILed row is an error."""
        key = key + ("cold",) * (len(self.KEY) - len(key))
        if key in self.dup:
            raise TableError(f"{self.c.rel}: more than one {self.name(self.ROW, key)}")
        r = self.by_key.get(key)
        if r is not None and r.get("check") != (want := self.expected_check(key)):
            raise TableError(f"{self.c.rel}: {self.name(self.FAILED, key, r)} has check '{r.get('check')}', not {want}")
        return r

    def row(self, *key):
        r = self.find(*key)
        if r is None:
            key = key + ("cold",) * (len(self.KEY) - len(key))
            raise TableError(f"{self.c.rel}: no {self.name(self.ROW + self.MISSING, key)}")
        return r


class Csv(Keyed):
    """One lessonNN.csv: rows by (lesson, variant, shape, l2)."""
    KEY = ("lesson", "variant", "shape", "l2")
    ROW, FAILED = "{l2} row for lesson {lesson} {variant} on {shape}", "lesson {lesson} {variant} on {shape} ({l2})"

    def __init__(self, rel, text):
        self.rel = rel  # "plots/data/h200/lesson01.csv"
        self.rows = list(csv.DictReader(io.StringIO(text)))
        super().__init__(self)

    def variants(self, lesson):
        return {r["variant"] for r in self.rows if r.get("lesson") == lesson}

    def read_bw(self):
        """The run's streaming-read bandwidth, GB/s, as text: the CSV's read_bw_gbps column (the
        ceiling measured in the run); in a CSV written before that column, each row's bytes /
        us_median over its pct_read_bw (printed to 0.1) brackets it."""
        bw = bracket(self.rows, "pct_read_bw", 0, "read_bw_gbps")
        if bw is None:
            raise TableError(f"{self.rel}: its bytes, us_median and pct_read_bw do not give one read bandwidth")
        return bw


def bracket(rows, pct_col, min_pct, stored_col):
    """The bandwidth (text, GB/s) that the rows' `pct_col` is a percentage of: their `stored_col`
    (the ceiling the run measured) when every row with a percentage has it, else the value that
    every row's bytes / us_median over its `pct_col` (printed to 0.1) brackets; None when they give
    no one value. Rows at or under `min_pct` are skipped."""
    rows = [r for r in rows if r.get(pct_col) and float(r[pct_col]) > min_pct]
    stored = {r.get(stored_col) or "" for r in rows}
    if rows and "" not in stored:
        return f"{round(float(stored.pop()))} GB/s" if len(stored) == 1 else None
    lo, hi = 0.0, math.inf
    for r in rows:
        try:
            nbytes, us, p = float(r["bytes"]), float(r["us_median"]), float(r[pct_col])
        except (KeyError, TypeError, ValueError):
            continue
        if p <= min_pct or us <= 0.0005:
            continue
        lo = max(lo, nbytes / (us + 0.0005) / 1e3 * 100 / (p + 0.05))
        if p > 0.05:
            hi = min(hi, nbytes / (us - 0.0005) / 1e3 * 100 / (p - 0.05))
    if lo == 0 or hi == math.inf or hi < lo:
        return None
    a, b = math.ceil(lo), math.floor(hi)
    return f"{round((lo + hi) / 2)} GB/s" if a >= b else f"{a} to {b} GB/s"


class Data:
    """plots/data/<gpu>/*.csv under `root`, read once each."""

    def __init__(self, data_dir, root, only=None, cache=None):
        self.dir = Path(data_dir)
        self.root = Path(root)
        self.cache = {} if cache is None else cache
        self.only = only  # None: every GPU folder; else the GPUs a table block may show

    def restricted(self, gpus):
        """The same data (one cache), its tables limited to `gpus` (None: every GPU)."""
        return Data(self.dir, self.root, tuple(gpus) if gpus is not None else None, self.cache)

    def gpus(self, filename):
        """GPU folders that hold `filename`, in GPU_ORDER first (only those a block may show)."""
        if not self.dir.is_dir():
            return []
        have = sorted(p.name for p in self.dir.iterdir() if (p / filename).is_file())
        out = [g for g in GPU_ORDER if g in have] + [g for g in have if g not in GPU_ORDER]
        return out if self.only is None else [g for g in out if g in self.only]

    def get(self, gpu, filename):
        key = (gpu, filename)
        if key not in self.cache:
            path = self.dir / gpu / filename
            rel = rel_posix(path, self.root)
            if not path.is_file():
                raise TableError(f"{rel} not found")
            c = Csv(rel, path.read_text())
            others = sorted({r.get("gpu") for r in c.rows} - {gpu})
            if others:
                raise TableError(f"{rel}: rows of another GPU ({', '.join(map(str, others))}) in the {gpu} folder")
            self.cache[key] = c
        return self.cache[key]

    def get_if_any(self, gpu, filename):
        """That GPU's `filename` (as get), or None when the folder has none (a peer run, another mode)."""
        return self.get(gpu, filename) if (self.dir / gpu / filename).is_file() else None

    def gpus_or_error(self, filename):
        gpus = self.gpus(filename)
        if not gpus:
            which = "any GPU" if self.only is None else "GPU " + ", ".join(self.only)
            raise TableError(f"no {rel_posix(self.dir, self.root)}/<gpu>/{filename} for {which}")
        return gpus


def rel_posix(path, start):
    try:
        return Path(path).resolve().relative_to(Path(start).resolve()).as_posix()
    except ValueError:
        return Path(path).resolve().as_posix()


class Ctx:
    """What a table function gets: the data, and the README it writes into (for links)."""

    def __init__(self, data, readme):
        self.data = data
        self.readme = Path(readme)

    def link(self, c):
        target = Path(c.rel) if Path(c.rel).is_absolute() else self.data.root / c.rel
        href = Path(_relpath(target, self.readme.parent)).as_posix()
        return f"[`{c.rel}`]({href})"


def _relpath(target, start):
    import os.path
    return os.path.relpath(Path(target).resolve(), Path(start).resolve())


# ---------------------------------------------------------------------------------------
# Formatting, as the READMEs have it

def us1(x):
    return f"{float(x):.1f}"


def us2(x):
    return f"{float(x):.2f}"


def us_ladder(x):  # about four significant digits: 9.86, 139.5
    return f"{float(x):.2f}" if float(x) < 100 else f"{float(x):.1f}"


def pct(r):
    return f"{float(r['pct_read_bw']):.1f}"


def mib(nbytes, digits=0):
    return f"{float(nbytes) / 1048576:.{digits}f}"


def table(header, rows, right=()):
    """A markdown table; columns whose index is in `right` are right-aligned."""
    align = ["---:" if i in right else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def gpu_name(gpu):
    return GPU_NAMES.get(gpu, gpu)


def variant_list(variants):
    """`a_tgs{4,8,16}`, `b` for a list of variant names."""
    out, done = [], set()
    for v in variants:
        m = re.fullmatch(r"(.+)_tgs(\d+)", v)
        if m:
            fam = m.group(1)
            if fam in done:
                continue
            done.add(fam)
            tgs = [re.fullmatch(rf"{re.escape(fam)}_tgs(\d+)", w).group(1) for w in variants
                   if re.fullmatch(rf"{re.escape(fam)}_tgs(\d+)", w)]
            out.append(f"`{fam}_tgs{{{','.join(tgs)}}}`" if len(tgs) > 1 else f"`{fam}_tgs{tgs[0]}`")
        else:
            out.append(f"`{v}`")
    return ", ".join(out)


def shape_kinds(c, lesson, variant, shapes):
    """'fp16, D 128, block 16' for the rows of `shapes` (each distinct combination once)."""
    kinds = []
    for s in shapes:
        r = c.row(lesson, variant, s)
        k = f"{r['dtype']}, D {r['D']}, block {r['block_size']}"
        if k not in kinds:
            kinds.append(k)
    return "; ".join(kinds)


def lesson02_steps_present(c):
    """Lesson 02's step variants in this CSV, in ladder order (absent ones are named apart)."""
    have = c.variants("02")
    present = [v for v in LESSON02_STEP_VARIANTS if v in have]
    if not present:
        raise TableError(f"{c.rel}: no lesson 02 step variant ({variant_list(LESSON02_STEP_VARIANTS)})")
    return present, [v for v in LESSON02_STEP_VARIANTS if v not in have]


def best_of(c, lesson, variants, shape, may_lack=frozenset()):
    """The fastest (L2-cold median) of `variants` on `shape`; every one must have a row, except those
    in `may_lack` (steps that refuse some shapes by design). None when no variant has one."""
    rows = [r for v in variants if (r := c.find(lesson, v, shape) if v in may_lack else c.row(lesson, v, shape))]
    return min(rows, key=lambda r: float(r["us_median"])) if rows else None


def auto_row(c, lesson, shape):
    """The L2-cold `auto` row of a shape, which must name its pick (CSV column auto_pick)."""
    a = c.row(lesson, "auto", shape)
    if not a.get("auto_pick"):
        raise TableError(f"{c.rel}: the auto row of {shape} has no auto_pick")
    return a


def absent_note(absent):
    return f"; not in this CSV: {variant_list(absent)}" if absent else ""


def wrap_prose(md):
    """Wraps the paragraphs of a table's markdown (not its tables) as the READMEs are."""
    return "\n\n".join(p if p.startswith("|") else textwrap.fill(p, width=92, break_long_words=False,
                                                                 break_on_hyphens=False)
                        for p in md.split("\n\n"))


# ---------------------------------------------------------------------------------------
# The tables. Each takes a Ctx and returns the markdown between its markers.

TABLES = {}


def register(name):
    def deco(fn):
        TABLES[name] = fn
        return fn
    return deco


def per_gpu(name, csvname, none=None):
    """Registers table `name`: one part per GPU with `csvname`, fn(ctx, gpu, c) giving that GPU's markdown
    or None (no part; `none` is the error when no GPU gives one)."""
    def deco(fn):
        def table_fn(ctx):
            parts = [p for gpu in ctx.data.gpus_or_error(csvname) if (p := fn(ctx, gpu, ctx.data.get(gpu, csvname)))]
            if not parts:
                raise TableError(none)
            return "\n\n".join(parts)
        table_fn.__doc__ = fn.__doc__
        register(name)(table_fn)
        return fn
    return deco


# ---------------------------------------------------------------------------------------
# Grid tables: one row per shape, one column per kind of cell, one table per GPU with the CSV.
# A spec names its CSV, lesson, shapes, columns and caption; `grid` makes the table function.

class At:
    """One shape of one CSV, as a column reads it. A variant may be a name or a function of this
    (e.g. the fastest of a list)."""

    def __init__(self, c, lesson, shape, data=None, gpu=None):
        self.c, self.lesson, self.shape, self.data, self.gpu = c, lesson, shape, data, gpu

    def where(self, variant):
        """(CSV, lesson, name) of `variant`: a name, (lesson, name) for another lesson's rows, (csv,
        lesson, name) for another CSV of the same GPU, or a function of this giving one of those."""
        v = variant(self) if callable(variant) else variant
        v = v if isinstance(v, tuple) else (self.lesson, v)
        return (self.data.get(self.gpu, v[0]) if len(v) == 3 else self.c), *v[-2:]

    def find(self, variant, l2="cold"):
        c, lesson, v = self.where(variant)
        return c.find(lesson, v, self.shape, l2)

    def row(self, variant, l2="cold"):
        c, lesson, v = self.where(variant)
        return c.row(lesson, v, self.shape, l2)

    def us(self, variant, l2="cold"):
        return float(self.row(variant, l2)["us_median"])


class Col:
    """A column: its heading, whether it is right-aligned, and its cell as a function of an At."""

    def __init__(self, head, cell, right=True):
        self.head, self.cell, self.right = head, cell, right


def c_shape(head="shape"):
    return Col(head, lambda at: at.shape, right=False)


def c_time(head, variant, l2="cold", fmt=us1):
    return Col(head, lambda at: fmt(at.us(variant, l2)))


def c_opt(head, variant, fmt):
    """The time of `variant`, or "-" where the CSV has no row of it."""
    return Col(head, lambda at: fmt(r["us_median"]) if (r := at.find(variant)) else "-")


def c_pct(variant, head="% read BW"):
    return Col(head, lambda at: pct(at.row(variant)))


def c_time_pct(head, variant, fmt=us1, right=False):
    return Col(head, lambda at: f"{fmt(at.us(variant))} ({pct(at.row(variant))})", right)


def c_name(head, variant, column="variant", right=False):
    """A row's text column in backticks: the variant a best-of chose, or auto's auto_pick."""
    return Col(head, lambda at: f"`{at.row(variant)[column]}`", right)


def c_ratio(head, num, den, fmt="{:.2f}", num_l2="cold", den_l2="cold"):
    return Col(head, lambda at: fmt.format(at.us(num, num_l2) / at.us(den, den_l2)))


def c_mib(variant, head="MiB"):
    return Col(head, lambda at: mib(at.row(variant)["bytes"]))


def c_post(head, posts, index, fmt, right=True):
    """A post's published number for the shape: posts is one dict or several (the first holding it)."""
    def cell(at):
        for p in posts if isinstance(posts, (list, tuple)) else [posts]:
            if at.shape in p:
                return fmt(p[at.shape][index])
        raise TableError(f"no post's number for {at.shape}")
    return Col(head, cell, right)


def fill(caption, ctx, gpu, c):
    """The caption with {gpu} (its name), {data} (a link to the CSV) and {bw} (the run's read
    bandwidth) put in; any other braces are left as they are. A function gives the caption itself."""
    if callable(caption):
        return caption(ctx, gpu, c)
    out = caption.replace("{gpu}", gpu_name(gpu)).replace("{data}", ctx.link(c))
    return out.replace("{bw}", c.read_bw()) if "{bw}" in out else out


def grid(name, doc, csvname, lesson, shapes, cols, caption, footer=None):
    """Registers table `name`: per GPU with `csvname`, the caption, then a row per shape (and the row
    footer(rows) where given). `shapes` and `cols` may be functions of the CSV (the shapes it has;
    columns for the variants it has)."""
    def fn(ctx, gpu, c):
        cs = cols(c) if callable(cols) else cols
        rows = [[col.cell(At(c, lesson, s, ctx.data, gpu)) for col in cs] for s in (shapes(c) if callable(shapes) else shapes)]
        rows += [footer(rows)] if footer else []
        return (fill(caption, ctx, gpu, c) + "\n\n"
                + table([col.head for col in cs], rows, right={i for i, col in enumerate(cs) if col.right}))
    fn.__doc__ = doc
    return per_gpu(name, csvname)(fn)


def lesson02_best(at):
    """The fastest of lesson 02's steps that the CSV has, on the shape."""
    return best_of(at.c, "02", lesson02_steps_present(at.c)[0], at.shape, LESSON02_REFUSING)["variant"]


def results_so_far_caption(ctx, gpu, c2):
    c1, (steps, absent) = ctx.data.get(gpu, "lesson01.csv"), lesson02_steps_present(c2)
    return (f"**{gpu_name(gpu)}.** Lesson 01 from {ctx.link(c1)} (that run's streaming read: "
            f"{c1.read_bw()}); lesson 02 from {ctx.link(c2)} ({c2.read_bw()}); each % is against its "
            f"own run's figure. Table A shapes, {shape_kinds(c1, '01', 'naive', TABLE_A)}; L2-cold "
            f"medians, us. \"Best\" is the fastest of lesson 02's steps ({variant_list(steps)}"
            f"{absent_note(absent)}); `auto` is the lesson's own choice (CSV column `auto_pick`).")


NAIVE = ("01", "naive")  # lesson 01's rows in a later lesson's CSV
NAIVE01 = ("lesson01.csv", "01", "naive")  # lesson 01's rows in its own CSV
grid("results_so_far",
     """README.md: Table A, L2-cold: lesson 01 (lesson01.csv) beside lesson 02's fastest step and
    its auto choice (lesson02.csv), with % of read bandwidth; one table per GPU with a lesson02.csv.""",
     "lesson02.csv", "02", TABLE_A,
     [c_shape(), Col("H / Hkv", lambda at: f"{at.row(NAIVE01)['H']} / {at.row(NAIVE01)['Hkv']}", right=False),
      c_time("lesson 01 us", NAIVE01), c_pct(NAIVE01), Col("lesson 02 best", lesson02_best, right=False),
      c_time("us", lesson02_best), c_pct(lesson02_best), Col("CTAs", lambda at: at.row(lesson02_best).get("ctas", "")),
      Col("auto pick", lambda at: auto_row(at.c, "02", at.shape)["auto_pick"], right=False), c_time("auto us", "auto"),
      c_pct("auto")],
     results_so_far_caption)


grid("lesson01_results",
     """Lesson 01 README: the naive kernel on Table A and two Table C shapes, L2-hot and L2-cold,
    with MiB moved, CTAs, cold GB/s and % of read bandwidth; one table per GPU with a lesson01.csv.""",
     "lesson01.csv", "01", LESSON01_SHAPES,
     [Col("shape", lambda at: at.shape if at.row("naive")["dtype"] == "fp16" else f"{at.shape} ({at.row('naive')['dtype']})",
          right=False),
      c_mib("naive"), Col("CTAs", lambda at: at.row("naive").get("ctas", "")), c_time("hot us", "naive", "hot"),
      c_time("cold us", "naive"), Col("cold GB/s", lambda at: f"{float(at.row('naive')['gbps']):.0f}"), c_pct("naive")],
     "**{gpu}**, data {data}; streaming read bandwidth measured in that run: {bw} (from the rows' GB/s over their "
     "% read BW).")


@register("lesson01_best_worst")
def t_lesson01_best_worst(ctx):
    """Lesson 01 README: one sentence per GPU, the highest and lowest L2-cold % of read bandwidth
    among the shapes of lesson01_results."""
    lines = []
    for gpu in ctx.data.gpus_or_error("lesson01.csv"):
        c = ctx.data.get(gpu, "lesson01.csv")
        rows = [c.row("01", "naive", s) for s in LESSON01_SHAPES]
        hi = max(float(r["pct_read_bw"]) for r in rows)
        lo = min(float(r["pct_read_bw"]) for r in rows)
        at = lambda v: ", ".join(r["shape"] for r in rows if float(r["pct_read_bw"]) == v)  # noqa: E731
        lines.append(f"On the {GPU_SHORT.get(gpu, gpu)} ({c.rel}), the best row of the table uses {hi:.1f} % "
                     f"of the read bandwidth ({at(hi)}); the worst, {lo:.1f} % ({at(lo)}).")
    return "\n".join(lines)




@register("lesson01_posts")
def t_lesson01_posts(ctx):
    """Lesson 01 README: the L4 post's single-pass kernel (published ms) beside lesson 01's naive
    kernel, L2-cold, one column per GPU with a lesson01.csv."""
    gpus = ctx.data.gpus_or_error("lesson01.csv")
    cs = [ctx.data.get(g, "lesson01.csv") for g in gpus]
    rows, slower = [], {g: 0 for g in gpus}
    for s in LESSON01_POST_SHAPES:
        post = POST_L4_MS[s][0]
        ours = [float(c.row("01", "naive", s)["us_median"]) / 1000 for c in cs]
        for g, ms in zip(gpus, ours):
            slower[g] += ms > post
        rows.append([s, f"{post:.3f}"] + [f"{ms:.3f}" for ms in ours])
    src = "; ".join(f"{GPU_SHORT.get(g, g)}: {ctx.link(c)}" for g, c in zip(gpus, cs))
    n = len(LESSON01_POST_SHAPES)
    verdict = " ".join(
        f"On the {GPU_SHORT.get(g, g)}, the naive kernel is slower than the post's kernel on the L4 on "
        f"{'every one' if k == n else f'{k}'} of these {n} shapes." for g, k in slower.items())
    return (f"The L4 post's times are as it published them; ours are L2-cold medians ({src}).\n\n"
            + table(["shape", "L4 post, single pass, ms"]
                    + [f"lesson 01 naive, {GPU_SHORT.get(g, g)}, ms" for g in gpus], rows,
                    right=set(range(1, 2 + len(gpus))))
            + "\n\n" + verdict)


def lesson02_table_a_caption(ctx, gpu, c):
    steps, absent = lesson02_steps_present(c)
    return (f"**{gpu_name(gpu)}**, data {ctx.link(c)} (lesson 01 and lesson 02 from the same run; streaming read "
            f"{c.read_bw()}). Table A shapes, {shape_kinds(c, '01', 'naive', TABLE_A)}; L2-cold medians, us. "
            f"\"Best\" is the fastest of {variant_list(steps)}{absent_note(absent)}.")


grid("lesson02_table_a",
     """Lesson 02 README: Table A, L2-cold: lesson 01 (its rows in lesson02.csv), lesson 02's
    fastest step with its time, speedup and % of read bandwidth, and auto's pick and time.""",
     "lesson02.csv", "02", TABLE_A,
     [c_shape(), Col("H / Hkv", lambda at: f"{at.row(NAIVE)['H']} / {at.row(NAIVE)['Hkv']}", right=False),
      c_time("lesson 01 us", NAIVE), Col("lesson 02 best", lambda at: lesson02_best(at), right=False),
      c_time("us", lesson02_best), c_ratio("speedup", NAIVE, lesson02_best, "{:.1f}x"), c_pct(lesson02_best),
      Col("auto pick", lambda at: auto_row(at.c, "02", at.shape)["auto_pick"], right=False), c_time("auto us", "auto")],
     lesson02_table_a_caption)


def ladder02_cols(c):
    """Lesson 01's naive, then a column per lesson-02 step this CSV has (its fastest TGS, named)."""
    have = c.variants("02")
    steps = [(step, fam, tgs) for step, fam, tgs in LESSON02_STEPS if any(v in have for v in family_variants(fam, tgs))]
    if not steps:
        raise TableError(f"{c.rel}: no lesson 02 step variant ({variant_list(LESSON02_STEP_VARIANTS)})")

    def cell(at, vs, tgs):
        b = best_of(at.c, "02", vs, at.shape, LESSON02_REFUSING)
        if b is None:
            return "-"
        return us_ladder(b["us_median"]) + (f" ({b['variant'].rsplit('_tgs', 1)[1]})" if tgs else "")
    return [c_shape(), c_time("lesson 01 `naive`", NAIVE, fmt=us_ladder)] + [
        Col(f"{step}. `{fam}`", lambda at, vs=[v for v in family_variants(fam, tgs) if v in have], tgs=tgs: cell(at, vs, tgs))
        for step, fam, tgs in steps]


def ladder02_caption(ctx, gpu, c):
    absent = [v for v in LESSON02_STEP_VARIANTS if v not in c.variants("02")]
    kinds = f"Table A: {shape_kinds(c, '01', 'naive', TABLE_A)}; Table C: {shape_kinds(c, '01', 'naive', TABLE_C)}"
    return (f"**{gpu_name(gpu)}**, data {ctx.link(c)}. L2-cold medians, us ({kinds}); "
            f"for a step with a thread-group size, its fastest TGS in parentheses{absent_note(absent)}.")


grid("lesson02_ladder",
     """Lesson 02 README: per shape (Table A, then Table C), the L2-cold time of lesson 01 and of
    each lesson-02 step (a step with a TGS: its fastest TGS, named), to show what each idea bought.""",
     "lesson02.csv", "02", TABLE_A + TABLE_C, ladder02_cols, ladder02_caption)


def tgs_sweep_post(at):
    """The H200 post's times at TGS 4 / 8 / 16 and (in parentheses) its best TGS."""
    post = POST_H200_TGS_SWEEP_US[at.shape]
    return " / ".join(f"{p:.2f}" for p in post) + f" ({TGS[min(range(3), key=lambda i: post[i])]})"


def tgs_sweep_best(at):
    b = min((at.row(v) for fam in ("wide_loads", "grouped") for v in family_variants(fam, True)),
            key=lambda r: float(r["us_median"]))
    return f"`{b['variant']}` {us2(b['us_median'])}"


grid("lesson02_tgs_sweep",
     """Lesson 02 README: Table C TGS-sweep shapes, L2-cold, wide_loads and grouped at TGS 4/8/16,
    the fastest of the six, and the H200 post's TGS 4/8/16 (published us) beside.""",
     "lesson02.csv", "02", TABLE_C_TGS_SWEEP,
     [c_shape()] + [Col(f"`{fam}` TGS 4 / 8 / 16", lambda at, fam=fam: " / ".join(
         us2(at.us(v)) for v in family_variants(fam, True)), right=False) for fam in ("wide_loads", "grouped")]
     + [Col("best of the six", tgs_sweep_best, right=False), Col("H200 post TGS 4 / 8 / 16", tgs_sweep_post, right=False)],
     lambda ctx, gpu, c: f"**{gpu_name(gpu)}**, data {ctx.link(c)}: L2-cold medians, us "
     f"({shape_kinds(c, '02', 'grouped_tgs4', TABLE_C_TGS_SWEEP)}). The post's numbers are the H200 "
     f"post's, as published (its gated attention kernel; best TGS in parentheses).")


NATIVE_AUTO = ("lesson02.csv", "02", "auto")  # auto's rows of the native build beside the sm_80 build's


def lesson02_arch_caption(ctx, gpu, c80):
    cn = ctx.data.get(gpu, "lesson02.csv")
    return (f"**{gpu_name(gpu)}**: native build {ctx.link(cn)} (streaming read {cn.read_bw()}), sm_80 build "
            f"{ctx.link(c80)} ({c80.read_bw()}). `auto`, L2-cold medians, us.")


grid("lesson02_arch",
     """Lesson 02 README: Table A, auto's pick and L2-cold time in the native build (lesson02.csv)
    beside the sm_80 build (lesson02_sm80.csv), one table per GPU with a lesson02_sm80.csv.""",
     "lesson02_sm80.csv", "02", TABLE_A,
     [c_shape(), Col("native: auto pick", lambda at: at.row(NATIVE_AUTO).get("auto_pick", ""), right=False),
      c_time("us", NATIVE_AUTO), Col("sm_80: auto pick", lambda at: at.row("auto").get("auto_pick", ""), right=False),
      c_time("us", "auto"), c_ratio("sm_80 / native", "auto", NATIVE_AUTO)],
     lesson02_arch_caption)




@register("arch_matrix")
def t_arch_matrix(ctx):
    """README.md: what each lesson's --check runs in the native build, and in an sm_80 build under a
    shared-memory cap of 163 KiB (an A100) and 99 KiB (sm_86/89) (arch_matrix.csv, written by
    scripts/arch_matrix.sh): per lesson and configuration, the steps that passed on some shape out
    of the steps it lists; then the steps refused on every shape, grouped by the reason printed."""
    gpu = ctx.data.gpus_or_error("arch_matrix.csv")[0]
    c = ctx.data.get(gpu, "arch_matrix.csv")
    by = {}
    for r in c.rows:
        by.setdefault((r["lesson"], r["build"], r["cap_kib"]), []).append(r)
    rows, refused = [], {}  # refused: (lesson, reason) -> {variant: [config headings]}
    for lesson in sorted({r["lesson"] for r in c.rows}):
        program = next(r["program"] for r in c.rows if r["lesson"] == lesson)
        cells = [f"{lesson} `{program}`"]
        for build, cap, head in ARCH_CONFIGS:
            rs = by.get((lesson, build, cap))
            if not rs:
                raise TableError(f"{c.rel}: no rows for lesson {lesson}, {build} build, cap {cap}")
            bad = [r["variant"] for r in rs if int(r["failed"]) > 0]
            if bad:
                raise TableError(f"{c.rel}: lesson {lesson} ({build}, cap {cap}): {', '.join(bad)} FAILed its check")
            steps = [r for r in rs if r["variant"] and r["variant"] != "auto"]
            if not steps:
                cells.append("refused whole")
                refused.setdefault((lesson, arch_reason(rs[0]["reason"])), {}).setdefault("(every step)", []).append(head)
                continue
            ran = [r for r in steps if int(r["passed"]) > 0]
            cells.append(f"{len(ran)} of {len(steps)}")
            for r in steps:
                if int(r["passed"]) == 0:
                    refused.setdefault((lesson, arch_reason(r["reason"])), {}).setdefault(r["variant"], []).append(head)
        rows.append(cells)
    why = []
    for (lesson, reason), variants in refused.items():
        groups = {}  # the same configurations -> variants
        for v, heads in variants.items():
            groups.setdefault(tuple(heads), []).append(v)
        for heads, vs in groups.items():
            names = "every step" if vs == ["(every step)"] else variant_list(vs)
            why.append([lesson, names, "; ".join(h.split(" (")[0] for h in heads), reason])
    out = (f"From {ctx.link(c)} ({gpu_name(gpu)}): what each lesson's `--check` ran in the native build, "
           "and in an sm_80 build (the driver compiles its PTX: no sm_90 instruction) under "
           "`PA_SMEM_CAP_KIB=163` and `PA_SMEM_CAP_KIB=99`. A step counts when it passed on some of the "
           "check's shapes (`auto` is not counted): steps that ran, of the steps the lesson lists.\n\n"
           + table(["lesson"] + [h for _, _, h in ARCH_CONFIGS], rows))
    if why:
        out += ("\n\nThe steps that ran on none of the check's shapes, and the reason the program printed "
                "(up to its first clause):\n\n" + table(["lesson", "steps", "where", "why"], why))
    return out


def arch_reason(reason):
    """A refusal's first clause: 'stages K/V through 112 KiB of shared memory per CTA'."""
    for cut in ("; ", ", and this build", ", which needs"):
        if cut in reason:
            reason = reason[:reason.index(cut)]
    return reason.replace("|", "/")


# ---------------------------------------------------------------------------------------
# Ladder tables: each step file of a lesson (lessons/NN_*/stepN_<idea>.cuh), its one idea (the
# header's first sentence), the lines of code it adds over the step before, and the L2-cold time
# of its variant (the header's `--variant NAME`) on the lesson's headline shape.

def code_lines(path):
    """A file's lines of code: comments and blank lines dropped, each stripped."""
    out, block = [], False
    for ln in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        t = ln.strip()
        if block:
            if "*/" in t:
                block = False
            continue
        if t.startswith("/*"):
            block = "*/" not in t
            continue
        t = re.sub(r"//.*", "", t).strip()
        if t:
            out.append(t)
    return out


def added_lines(before, after):
    """Lines of code `after` adds over `before` (a line-level diff, as a reader's diff shows)."""
    import difflib
    return sum(1 for l in difflib.ndiff(code_lines(before), code_lines(after)) if l.startswith("+ "))


def ladder_steps(lesson_dir):
    """[(n, file, idea, variant, lines added)] for the step files of a lesson, in step order."""
    files = sorted(Path(lesson_dir).glob("step*_*.cuh"), key=lambda p: int(re.match(r"step(\d+)", p.name).group(1)))
    steps, prev = [], None
    for f in files:
        n = int(re.match(r"step(\d+)", f.name).group(1))
        header = []
        for ln in f.read_text(encoding="utf-8").splitlines():
            if not ln.startswith("//"):
                break
            header.append(ln[2:].strip())
        first = " ".join(header[:4])
        m = re.match(r"Lesson \d+, step \d+(?: \([^)]*\))?: (.*?\.)(?:\s|$)", first)
        if not m:
            raise TableError(f"{f}: its header does not open with 'Lesson NN, step N: <the idea>.'")
        v = re.search(r"--variant (\w+)", "\n".join(header))
        if not v or v.group(1) == "NAME":
            raise TableError(f"{f}: its header names no `--variant <its variant>` (the Run: line)")
        # a step built on another lesson's file says so: `diff ../NN_x/stepK_y.cuh stepN_z.cuh`
        base = re.search(r"`diff (\S+) " + re.escape(f.name) + "`", "\n".join(header))
        before = (f.parent / base.group(1)) if base else prev
        if base and not before.is_file():
            raise TableError(f"{f}: its header diffs against {base.group(1)}, which does not exist")
        steps.append((n, f.name, m.group(1), v.group(1), added_lines(before, f) if before else len(code_lines(f))))
        prev = f
    if not steps:
        raise TableError(f"{lesson_dir}: no step files")
    return steps




def ladder_us(ctx, gpu, lesson, variant):
    folder, csvname, shape, extra = LADDERS[lesson]
    c = ctx.data.get(gpu, csvname)
    if lesson == "05":
        return Lesson05Csv(c).us(variant, shape, extra)
    if lesson == "06":
        return Lesson06Csv(c).us(variant, shape, extra)
    return float(c.row(lesson, variant, shape)["us_median"])


def ladder_table(ctx, lesson):
    folder, csvname, shape, extra = LADDERS[lesson]
    gpu = ctx.data.gpus_or_error(csvname)[0]
    c = ctx.data.get(gpu, csvname)
    rows, prev_us, prev_variant, newer, other_policy = [], None, None, [], False
    for n, name, idea, variant, added in ladder_steps(ctx.data.root / "lessons" / folder):
        try:
            us = ladder_us(ctx, gpu, lesson, variant)
        except TableError:
            if prev_us is None:
                raise
            newer.append(variant)  # a run from before this step; every later step must be missing too
            rows.append([n, f"`{name}`", idea, added, f"`{variant}`", "-", ""])
            continue
        if newer:
            raise TableError(f"{c.rel}: no {newer[0]} row, though the run has a later step's ({variant})")
        base_us = prev_us
        if lesson == "06" and prev_variant and variant.rsplit("_", 1)[1] != prev_variant.rsplit("_", 1)[1]:
            # a step that changes one policy (its Run: line names that policy's variant): over the
            # step before's variant of the same policy
            base_us = ladder_us(ctx, gpu, lesson, prev_variant.rsplit("_", 1)[0] + "_" + variant.rsplit("_", 1)[1])
            other_policy = True
        rows.append([n, f"`{name}`", idea, added, f"`{variant}`", us_ladder(us),
                     f"{base_us / us:.2f}x" if base_us else ""])
        prev_us, prev_variant = us, variant
    before = (f" This run is from before {', '.join(f'`{v}`' for v in newer)} (`-`)." if newer else "")
    where = {"05": f" at sigma {extra}", "06": f", prefix {extra}, causal"}.get(lesson, "")
    return (f"The ladder: each step file, the idea it adds (its header's first sentence), the lines of code it "
            f"adds over the step before (comments and blank lines dropped; step 1: all of its own; a step "
            f"whose header diffs it against another file: over that file), and its "
            f"variant's L2-cold median on {shape}{where} from {ctx.link(c)} ({gpu_name(gpu)}), with the "
            f"speedup over the step before"
            + (" (a step whose variant is another policy's: over the step before's variant of that policy)"
               if other_policy else "") + f".{before}\n\n"
            + table(["step", "file", "the idea", "lines added", "variant", "us", "speedup"], rows, right={0, 3, 5, 6}))


def _ladder_fn(lesson):
    def fn(ctx):
        return ladder_table(ctx, lesson)
    fn.__doc__ = (f"Lesson {lesson} README: its ladder of step files, each step's idea, the lines of code it adds "
                  f"over the step before and its variant's L2-cold time on {LADDERS[lesson][2]} with the speedup.")
    return fn


for _lesson in LADDERS:
    register(f"lesson{_lesson}_ladder_steps")(_ladder_fn(_lesson))


@per_gpu("lesson02_timeline", "lesson02_timeline.csv")
def t_lesson02_timeline(ctx, gpu, c):
    """Lesson 02 README: where step 5's time goes (lesson02_timeline.csv, `--timeline`): per
    Table A shape, the first tile, when 10/90/100 % of the bytes had landed, the CTA ends, the
    steady rate, one CTA's rate and the split of the last CTA's end."""
    variants = sorted(c.variants("02"))
    if len(variants) != 1:
        raise TableError(f"{c.rel}: expected the rows of one timeline build, found {variants}")
    v = variants[0]
    bw = float(c.read_bw().split()[0])
    rows = []
    for s in TABLE_A:
        r = c.row("02", v, s)
        steady = r.get("steady_gbps", "")
        rows.append([
            s, f"{r['ctas']} ({r['ctas_per_sm']})", f"{float(r['first_tile_p50_us']):.1f}",
            " / ".join(f"{float(r[k]):.1f}" for k in ("landed_10_us", "landed_90_us", "landed_all_us")),
            " / ".join(f"{float(r[k]):.1f}" for k in ("end_first_us", "end_p50_us", "us_median")),
            f"{float(steady):.0f} ({100 * float(steady) / bw:.1f})" if steady else "-",
            " / ".join(f"{float(r[k]):.1f}" for k in ("cta_gbps_p10", "cta_gbps_p50", "cta_gbps_p90")),
            " + ".join(f"{float(r[k]):.1f}" for k in ("at_steady_us", "startup_us", "tail_us"))
            if steady else "-"])
    return (
        f"**{gpu_name(gpu)}**, data {ctx.link(c)} (`{v}`; streaming read {c.read_bw()}). Times in us from the "
        f"first CTA's start, of the L2-cold launch whose last CTA ended in the middle of seven; a span here "
        f"leaves out the launch's own overhead, so it is a little shorter than the timed medians. \"-\": no "
        f"steady state (the 10-90 % window is under half of the run).\n\n"
        + table(["shape", "CTAs (per SM)", "first tile lands (p50)", "bytes landed 10 / 90 / 100 %",
                 "CTA ends first / p50 / last", "steady GB/s (% read BW)", "one CTA's GB/s p10 / p50 / p90",
                 "at steady + start-up + tail"], rows, right={2}))


@per_gpu("lesson02_copy_rate", "lesson02_copy_rate.csv")
def t_lesson02_copy_rate(ctx, gpu, c):
    """Lesson 02 NOTES: what one CTA's copies read (lesson02_copy_rate.csv, `--copy-rate`): per
    reader, one CTA's GB/s alone, and per CTA and in all at one and two CTAs per SM."""
    rows = [r for r in c.rows if r.get("lesson") == "02" and r.get("l2") == "cold" and r["shape"].startswith("read-")]
    if not rows:
        raise TableError(f"{c.rel}: no lesson 02 rows of the contiguous readers")
    bw = float(c.read_bw().split()[0])
    readers, by = [], {}
    for r in rows:
        if r["variant"] not in readers:
            readers.append(r["variant"])
        ctas, per_sm = int(r["ctas"]), int(r["ctas_per_sm"])
        by[(r["variant"], "one" if ctas == 1 else f"{per_sm}/SM")] = r
    out = []
    for v in readers:
        one = by.get((v, "one"))
        if one is None:
            raise TableError(f"{c.rel}: no one-CTA row of {v}")
        cells = [f"`{v}`", one["copy_bytes"], one["issuers"], f"{int(one['inflight_bytes']) // 1024}",
                 f"{float(one['gbps_per_cta']):.1f}"]
        for k in ("1/SM", "2/SM"):
            r = by.get((v, k))
            if r is None:
                raise TableError(f"{c.rel}: no {k} row of {v}")
            cells.append(f"{float(r['gbps_per_cta']):.1f} / {float(r['gbps']):.0f} ({100 * float(r['gbps']) / bw:.1f})")
        out.append(cells)
    return (
        f"**{gpu_name(gpu)}**, data {ctx.link(c)} (streaming read {c.read_bw()}). Each CTA reads its own "
        f"contiguous bytes (32 MiB alone, 8 MiB in a grid) into shared memory and drops them; L2-cold medians of "
        f"seven launches. GB/s per CTA / in all (% of the streaming read).\n\n"
        + table(["reader", "bytes a copy", "threads issuing", "in flight a CTA, KiB", "one CTA alone, GB/s",
                 "one CTA per SM", "two CTAs per SM"], out, right={1, 2, 3, 4, 5, 6}))


COPY_ITEMS = ("items_contiguous", "items_pages16", "items_pages16_pad16", "items_loads_pages16", "shares_pages16_1",
              "shares_pages16_2")


@per_gpu("lesson02_copy_items", "lesson02_copy_rate.csv")
def t_lesson02_copy_items(ctx, gpu, c):
    """Lesson 02 NOTES: step 12's copies without its math on the big Table A shapes (the item rows of
    lesson02_copy_rate.csv), beside steps 12 and 13 themselves (lesson02.csv) and cuDNN SDPA
    (peers_sdpa.csv), each from its own run on the same GPU kind."""
    rows = [r for r in c.rows if r.get("lesson") == "02" and r.get("l2") == "cold" and r["variant"] in COPY_ITEMS]
    if not rows:
        raise TableError(f"{c.rel}: no item-reader rows")
    by, shapes = {}, []
    for r in rows:
        if r["shape"] not in shapes:
            shapes.append(r["shape"])
        by[(r["variant"], r["shape"])] = r
    l2 = ctx.data.get_if_any(gpu, "lesson02.csv")
    peers = ctx.data.get_if_any(gpu, "peers_sdpa.csv")

    def cell(r):
        return f"{us1(r['us_median'])} ({float(r['pct_read_bw']):.1f})" if r else "-"

    out = []
    for shape in shapes:
        first = next(r for r in rows if r["shape"] == shape)
        cells = [shape, f"{first['ctas']} ({first['ctas_per_sm']})"]
        for v in COPY_ITEMS:
            cells.append(cell(by.get((v, shape))))
        cells.append(cell(l2.find("02", "grouped_mma_units", shape) if l2 else None))
        cells.append(cell(l2.find("02", "grouped_mma_aligned", shape) if l2 else None))
        cells.append(cell(l2.find("02", "grouped_mma_two_streams", shape) if l2 else None))
        cells.append(cell(peers.find("peer", "sdpa_cudnn", shape) if peers else None))
        out.append(cells)
    src = "; ".join(f"{what} from {ctx.link(x)} ({x.read_bw()})" for what, x in
                    (("steps 12 to 14", l2), ("cuDNN SDPA", peers)) if x is not None)
    return (
        f"**{gpu_name(gpu)}**, data {ctx.link(c)} (streaming read {c.read_bw()}); {src}, each its own run. "
        f"L2-cold medians, us (% of that run's streaming read). The readers copy each (sequence, KV head)'s K and V "
        f"in 128-token tiles, K and V in turn, into a ring of three tiles and drop them: a 4 KiB unit per thread "
        f"from 8 threads, 128-byte aligned, from contiguous K and V or from pages of 16 tokens; the same with the "
        f"units 16 bytes apart modulo 128 (step 12's layout); the same pages in 16-byte `cp.async` from 128 "
        f"threads; the same aligned units in equal shares of the batch's tiles, one or two CTAs per SM (a share "
        f"may run from one (sequence, KV head) into the next). cuDNN reads contiguous K and V.\n\n"
        + table(["shape", "CTAs (per SM)", "contiguous", "pages", "pages, step 12's layout", "pages, `cp.async`",
                 "pages, shares 1 per SM", "pages, shares 2 per SM", "step 12", "step 13", "step 14", "cuDNN SDPA"],
                out, right=set(range(1, 12))))


# ---------------------------------------------------------------------------------------
# Lesson 04: pow2 padding of the split-k reduce. Its CSV has, per (variant, shape, l2), a
# `reduce` row (the reduce alone) and a `total` row (partition kernel + reduce), so rows are
# looked up with the stage as well; the sweep's shapes are h8kv4-B<B>-ctx<32 * (splits - 1) + 1>.

LESSON04_SHAPE = re.compile(r"h8kv4-B(\d+)-ctx(\d+)")


class Lesson04Csv(Keyed):
    """lesson04.csv's segment-sweep rows by (variant, B, splits, stage, l2)."""
    LESSON, KEY, NONE = "04", ("variant", "B", "splits", "stage", "l2"), "rows on h8kv4-B<B>-ctx<N> shapes"
    NEED = ("splits", "partition_size", "scratch_bytes", "stage")
    ROW, MISSING = "lesson 04 {variant} {stage} {l2} row at B {B}, {splits} splits", " (it has other B {B} rows)"
    FAILED = "lesson 04 {variant} {stage} {l2} at B {B}, {splits} splits ({shape_of_row})"

    def keep(self, r):
        return bool(LESSON04_SHAPE.fullmatch(r.get("shape", "")))

    def key(self, r):
        try:
            return (r["variant"], int(r["B"]), int(r["splits"]), r["stage"], r["l2"])
        except (TypeError, ValueError):
            raise TableError(f"{self.c.rel}: lesson 04 row on {r.get('shape')} has B '{r.get('B')}', "
                             f"splits '{r.get('splits')}'") from None

    def batches(self):
        return {int(r["B"]) for r in self.rows}

    def kinds(self, columns):
        """Each distinct combination of the values of `columns` among the rows, in row order."""
        seen = []
        for r in self.rows:
            k = tuple(r.get(col, "") for col in columns)
            if k not in seen:
                seen.append(k)
        return seen


def l04_kib(nbytes):
    return f"{float(nbytes) / 1024:.1f}"


@per_gpu("lesson04", "lesson04.csv")
def t_lesson04(ctx, gpu, c):
    """Lesson 04 README: the segment sweep (lesson04.csv), B 16 then B 1, L2-cold medians: per
    segment count (splits 1, 2, 3 and each side of the powers of two from 16 to 1024), the scratch
    of pad_scratch and of the real count, the reduce alone and partition + reduce for pad_scratch,
    pow2_lanes and loop, and pad_scratch's total over pow2_lanes'."""
    parts = []
    l4 = Lesson04Csv(c)
    kinds = "; ".join(f"{dt}, H {h} / Hkv {hkv}, D {d}, page {bs}, partition {ps}"
                      for dt, h, hkv, d, bs, ps in l4.kinds(("dtype", "H", "Hkv", "D", "block_size",
                                                              "partition_size")))
    have = l4.batches()
    absent = [B for B in LESSON04_BATCHES if B not in have]
    absent_line = (f" Not in this CSV: the B {' and B '.join(map(str, absent))} sweep." if absent else "")
    parts.append(
        f"**{gpu_name(gpu)}**, data {ctx.link(c)}: {kinds}, ctx = partition x (splits - 1) + 1 (one "
        f"token in the last segment). L2-cold medians, us: `reduce` is the reduce alone over a filled "
        f"scratch (rotating copies of it), `total` is lesson 03's partition kernel followed by the reduce "
        f"(rotating K/V copies). Scratch: `m`, `l` and `acc` for every entry; `pad_scratch` has next_pow2(splits) "
        f"entries per head, the others splits.{absent_line}")
    for B in LESSON04_BATCHES:
        if B not in have:
            continue
        rows = []
        for n in LESSON04_SPLITS:
            red = {v: l4.row(v, B, n, "reduce") for v in LESSON04_FIXES}
            tot = {v: l4.row(v, B, n, "total") for v in LESSON04_FIXES}
            if red["loop"]["scratch_bytes"] != red["pow2_lanes"]["scratch_bytes"]:
                raise TableError(f"{c.rel}: loop and pow2_lanes have different scratch_bytes at B {B}, "
                                 f"{n} splits")
            rows.append([str(n), tot["pow2_lanes"]["ctx"],
                         f"{l04_kib(red['pad_scratch']['scratch_bytes'])} / "
                         f"{l04_kib(red['pow2_lanes']['scratch_bytes'])}",
                         " / ".join(us_ladder(red[v]["us_median"]) for v in LESSON04_FIXES),
                         " / ".join(us_ladder(tot[v]["us_median"]) for v in LESSON04_FIXES),
                         f"{float(tot['pad_scratch']['us_median']) / float(tot['pow2_lanes']['us_median']):.2f}"])
        parts.append(
            f"**B {B}**\n\n"
            + table(["splits", "ctx", "scratch KiB pad / real", "reduce us pad / pow2 / loop",
                     "total us pad / pow2 / loop", "pad / pow2 (total)"], rows, right={0, 1, 2, 3, 4, 5}))
    return "\n\n".join(parts)




@per_gpu("lesson04_plans", "lesson04_plans.csv")
def t_lesson04_plans(ctx, gpu, c):
    """Lesson 04 README: lesson 03's plans with pow2_lanes as the reduce (lesson04_plans.csv, the
    --plans run), L2-cold, on Table A, Table B and the long shapes: lesson 03's auto and this
    lesson's auto measured in one run, the best fixed partition size under pow2_lanes, and
    FlashInfer's faster decode from peers_flashinfer.csv (another run) where the GPU has one."""
    peers = ctx.data.get_if_any(gpu, "peers_flashinfer.csv")
    rows, right, near, counted_a = [], 0, 0, 0
    shapes = TABLE_A + TABLE_B + LONG_SHAPES
    for s in shapes:
        l3, a = c.row("04", "lesson03_auto", s), c.row("04", "auto", s)
        if not a.get("auto_pick"):
            raise TableError(f"{c.rel}: the auto row of {s} has no auto_pick")
        fixed = min((c.row("04", v, s) for v in LESSON04_PLAN_FIXED if c.find("04", v, s)),
                    key=lambda r: float(r["us_median"]), default=None)
        best = min([float(l3["us_median"]), float(a["us_median"])] + ([float(fixed["us_median"])] if fixed else []))
        ok = float(a["us_median"]) <= 1.05 * best
        right += ok
        fi = None
        if peers is not None:
            have = [r for v in LESSON04_PEERS for r in [peers.find("peer", v, s)] if r]
            fi = min(have, key=lambda r: float(r["us_median"]), default=None)
        ratio_fi = float(a["us_median"]) / float(fi["us_median"]) if fi else None
        if s in TABLE_A and ratio_fi is not None:
            counted_a += 1
            near += ratio_fi <= 1.10
        rows.append([s, us2(l3["us_median"]), f"`{a['auto_pick']}`", us2(a["us_median"]), pct(a),
                     f"{float(l3['us_median']) / float(a['us_median']):.2f}x",
                     f"`{fixed['variant']}` {us2(fixed['us_median'])}" if fixed else "-",
                     "+" if ok else "-", us2(fi["us_median"]) if fi else "-",
                     f"{ratio_fi:.2f}" if ratio_fi is not None else "-"])
    peer_note = (f"FlashInfer: the faster of `flashinfer_decode` and `flashinfer_decode_tc` in {ctx.link(peers)} "
                 f"(its own run, same GPU kind); Table A shapes within 1.10x of it: {near} of {counted_a}."
                 if peers is not None else "No FlashInfer measurement for this GPU.")
    return (
        f"**{gpu_name(gpu)}**, data {ctx.link(c)} (streaming read {c.read_bw()}), one `--plans` run: L2-cold "
        f"medians, us; fp16, D 128, block 16. `lesson03_auto` is lesson 03's `auto` as it is; `auto` is lesson 03's "
        f"rule told that the reduce is parallel (no floor of 1/16 of the context, no 64-token partitions, one partition CTA per SM for groups up to 8), "
        f"unfused, with `pow2_lanes` launched as a programmatic dependent of the partitions; right (+) = "
        f"`auto` within 5 % of the fastest of the run ({right} of {len(shapes)}). {peer_note}\n\n"
        + table(["shape", "lesson 03 auto us", "auto runs", "auto us", "% read BW", "speedup",
                 "best split_pow2 us", "right", "FlashInfer us", "auto / FlashInfer"], rows,
                right={1, 3, 4, 5, 8, 9}))


CUDNN = ("peers_sdpa.csv", "peer", "sdpa_cudnn")  # cuDNN SDPA's rows in the GPU's peer CSV


def lesson04_cudnn_caption(ctx, gpu, c):
    return (f"**{gpu_name(gpu)}**, data {ctx.link(c)} (streaming read {c.read_bw()}) and "
            f"{ctx.link(ctx.data.get(gpu, 'peers_sdpa.csv'))}: Table A, L2-cold medians, us; fp16, D 128, block 16 "
            f"(cuDNN reads contiguous K/V). `lesson03_auto` is lesson 03's `auto`, `auto` this lesson's; a ratio "
            f"under 1 is faster than cuDNN SDPA.")


LESSON04_CUDNN_COLUMNS = [
    c_shape(), c_time("lesson 03 `auto` us", "lesson03_auto", fmt=us2),
    c_ratio("/ cuDNN", "lesson03_auto", CUDNN, fmt="{:.3f}"), c_time("`auto` us", "auto", fmt=us2), c_pct("auto"),
    c_time("cuDNN us", CUDNN, fmt=us2), c_ratio("`auto` / cuDNN", "auto", CUDNN, fmt="{:.3f}")]


def lesson04_cudnn_footer(rows):
    """Under each ratio column (its head ends in "/ cuDNN"), how many shapes are at or under 1."""
    cells = ["at or under cuDNN"] + [""] * (len(LESSON04_CUDNN_COLUMNS) - 1)
    for i, col in enumerate(LESSON04_CUDNN_COLUMNS):
        if col.head.endswith("/ cuDNN"):
            cells[i] = f"{sum(float(r[i]) <= 1.0 for r in rows)} of {len(rows)}"
    return cells


grid("lesson04_cudnn",
     """Lesson 04 NOTES: Table A, L2-cold: lesson 03's auto and this lesson's auto (lesson04_plans.csv)
    beside cuDNN SDPA (peers_sdpa.csv of the same GPU) and the ratios; a last row counts the shapes
    at or under cuDNN's time.""",
     "lesson04_plans.csv", "04", TABLE_A, LESSON04_CUDNN_COLUMNS, lesson04_cudnn_caption, lesson04_cudnn_footer)


# ---------------------------------------------------------------------------------------
# Lesson 05: the gated decode with sparse P compaction. Its CSV has one row per (variant,
# shape, sigma), so rows are looked up with the gate's sigma as well.

# The H200 post's gains for the same ideas, as its text gives them.
LESSON05_POST = {"zero_skip": f"+{POST_H200_SPARSE_GAIN['zero_skip']:.0f} %",
                 "compaction": f"~{POST_H200_SPARSE_GAIN['compaction']:.0f} %",
                 "split_k": f"up to {POST_H200_SPARSE_GAIN['split_k_compact']:.0f} % over its split-k without "
                            "compaction (some shapes)"}


class Lesson05Csv(Keyed):
    """lesson05.csv's rows by (variant, shape, sigma, l2)."""
    LESSON, KEY, NONE, EAGER_DUP = "05", ("variant", "shape", "sigma", "l2"), "rows", True
    ROW, FAILED = "lesson 05 {variant} {l2} row on {shape} at sigma {sigma}", "lesson 05 {variant} on {shape} at sigma {sigma} ({l2})"

    def __init__(self, c):
        super().__init__(c)
        # the steps of this GPU's CSV: every one, less the sm_90 ones where none ran
        self.steps = tuple(v for v in LESSON05_STEPS if v not in LESSON05_HOPPER or v in self.have)
        self.compaction = tuple(v for v in LESSON05_COMPACTION if v in self.steps)

    def row(self, variant, shape, sigma, l2="cold"):
        r = super().row(variant, shape, sigma, l2)
        for col in ("zero_share", "row_zero_share", "bytes_needed", "limit_speedup"):
            if not r.get(col):
                raise TableError(f"{self.c.rel}: lesson 05 {variant} on {shape} at sigma {sigma} has no {col}")
        return r

    def us(self, variant, shape, sigma):
        return float(self.row(variant, shape, sigma)["us_median"])

    def speedup(self, variant, shape, sigma, over="dense"):
        return self.us(over, shape, sigma) / self.us(variant, shape, sigma)

    def gather_us(self, shape, sigma, needed=False):
        """A gather of the rows a step reads, at their places in the pages: every K and V row (dense), or
        every K row and the V rows some head uses (needed); from the shape's dense row."""
        col = "needed_gather_us" if needed else "dense_gather_us"
        v = self.row("dense", shape, sigma).get(col)
        if not v:
            raise TableError(f"{self.c.rel}: lesson 05 dense on {shape} at sigma {sigma} has no {col}")
        return float(v)

    def fastest_compaction(self, shape, sigma):
        """(us, variant) of the fastest compaction step."""
        return min((self.us(v, shape, sigma), v) for v in self.compaction)

    def pct_of_limit(self, variant, shape, sigma):
        return 100 * self.speedup(variant, shape, sigma) / float(self.row("dense", shape, sigma)["limit_speedup"])


def l05_intro(ctx, gpu, c):
    return (f"**{gpu_name(gpu)}**, data {ctx.link(c)} (streaming read {c.read_bw()}); bf16, H 8 / Hkv 4, D 128, "
            f"page 16, gamma 1; L2-cold medians, us.")


@per_gpu("lesson05_table_c", "lesson05.csv")
def t_lesson05_table_c(ctx, gpu, c):
    """Lesson 05 README: Table C (B 1/32/64/128 x ctx 256..2k) at sigma 0, 1.5 and 2.9, L2-cold: the
    zeros the gate left (per query head, per KV row), the byte model (MiB dense and needed, the
    limit), each step's time and its speedup over dense, and compact_ordered's share of the limit."""
    parts = []
    l5 = Lesson05Csv(c)
    parts.append(l05_intro(ctx, gpu, c) + " zeros/head: share of p = 0 over every (sequence, query head, token); "
                 "zeros/row: share of V rows no query head of the CTA uses; needed: all of K and the V rows some "
                 "head uses (plus q, out, table); limit = dense MiB / needed MiB; gather: a kernel that reads every K "
                 "and V row where the steps read it, in pages of 4 KiB, and does nothing else, timed the same way; "
                 "needed gather: the same for every K row and only the V rows some head uses, 256 bytes each (the "
                 "floor for a step that skips the zero rows); a step's time is followed by its speedup over "
                 "`dense` (x); \"% lim\" = compact_ordered's speedup over the limit.")
    for sigma in LESSON05_SIGMAS:
        rows = []
        for s in LESSON05_GRID:
            d = l5.row("dense", s, sigma)
            cells = [s, f"{100 * float(d['zero_share']):.1f}", f"{100 * float(d['row_zero_share']):.1f}",
                     mib(d["bytes"], 1), mib(d["bytes_needed"], 1), f"{float(d['limit_speedup']):.2f}",
                     us2(l5.gather_us(s, sigma)), us2(l5.gather_us(s, sigma, needed=True)),
                     f"{us2(d['us_median'])} ({pct(d)})"]
            for v in l5.steps[1:]:
                cells.append(f"{us2(l5.us(v, s, sigma))} ({l5.speedup(v, s, sigma):.2f}x)")
            cells.append(f"{l5.pct_of_limit('compact_ordered', s, sigma):.0f}")
            rows.append(cells)
        head = (["shape", "zeros/head %", "zeros/row %", "MiB", "needed MiB", "limit", "gather", "needed gather",
                 "dense (% BW)"] + list(l5.steps[1:]) + ["% lim"])
        parts.append(f"**sigma {sigma}**\n\n" + table(head, rows, right=set(range(1, len(head)))))
    return "\n\n".join(parts)


def l05_targets(l5):
    """(target, measured, met) rows for the issue's targets, from one GPU's rows."""
    out = []
    for s in ("h8kv4-B64-ctx1k", "h8kv4-B128-ctx512"):
        d = l5.row("dense", s, "1.5")
        out.append((f"`dense` >= 80 % of read BW on {s}", f"{pct(d)} %", float(d["pct_read_bw"]) >= 80))
    for s in ("h8kv4-B32-ctx1k", "h8kv4-B64-ctx512"):
        x = {v: l5.speedup(v, s, "1.5") for v in l5.compaction}
        cluster = f", {x['split_k_cluster']:.2f}x cluster" if "split_k_cluster" in x else ""
        out.append((f"compaction >= 1.25x `dense` at sigma 1.5 on {s}",
                    f"{x['compact_ordered']:.2f}x ordered, {x['compact_atomic']:.2f}x atomic, "
                    f"{x['split_k_compact']:.2f}x split-k{cluster}; 1.25x is {l5.us('dense', s, '1.5') / 1.25:.1f} us, "
                    f"the needed gather {l5.gather_us(s, '1.5', needed=True):.1f} us", max(x.values()) >= 1.25))
    # per shape and sigma: compact_ordered's share of the limit, and the best compaction step's
    worst_ordered, worst_best = None, None
    for sigma in LESSON05_SIGMAS:
        for s in LESSON05_GRID:
            d = l5.row("dense", s, sigma)
            if not l05_big(d):
                continue  # under 64 MiB of K and V
            p = l5.pct_of_limit("compact_ordered", s, sigma)
            b = max(l5.pct_of_limit(v, s, sigma) for v in l5.compaction)
            if worst_ordered is None or p < worst_ordered[0]:
                worst_ordered = (p, s, sigma)
            if worst_best is None or b < worst_best[0]:
                worst_best = (b, s, sigma)
    _, ws, wsg = worst_best
    asked = l5.us("dense", ws, wsg) / (0.8 * float(l5.row("dense", ws, wsg)["limit_speedup"]))
    out.append(("compaction >= 80 % of the byte model's limit on every shape with >= 64 MiB of K/V",
                f"the fastest compaction step: lowest {worst_best[0]:.0f} % ({ws}, sigma {wsg}: 80 % is {asked:.1f} us, "
                f"the needed gather {l5.gather_us(ws, wsg, needed=True):.1f} us); "
                f"`compact_ordered`: lowest {worst_ordered[0]:.0f} % ({worst_ordered[1]}, sigma {worst_ordered[2]})",
                worst_best[0] >= 80))
    ratios = [l5.us("compact_ordered", s, sg) / l5.us("compact_atomic", s, sg)
              for sg in LESSON05_SIGMAS for s in LESSON05_GRID]
    out.append(("`compact_ordered` within 5 % of `compact_atomic`",
                f"ordered / atomic {min(ratios):.3f} .. {max(ratios):.3f} (median {statistics.median(ratios):.3f})",
                max(ratios) <= 1.05))
    for s in ("h8kv4-B1-ctx2k", "h8kv4-B32-ctx2k"):
        cells = [f"{l5.us('split_k_compact', s, sg) / l5.us('compact_ordered', s, sg):.2f}" for sg in LESSON05_SIGMAS]
        ok = all(l5.us("split_k_compact", s, sg) < l5.us("compact_ordered", s, sg) for sg in LESSON05_SIGMAS)
        out.append((f"`split_k_compact` faster than single-pass compaction on {s}",
                    f"split / ordered {' / '.join(cells)} at sigma 0 / 1.5 / 2.9", ok))
    return out


def l05_big(d):
    """Whether a shape (its dense row) has at least 64 MiB of K and V."""
    return int(d["B"]) * int(d["ctx"]) * int(d["Hkv"]) * int(d["D"]) * 4 >= 64 * 2**20


@per_gpu("lesson05_floors", "lesson05.csv")
def t_lesson05_floors(ctx, gpu, c):
    """Lesson 05 README: each shape of 64 MiB or more against its gathers, at sigma 1.5 and 2.9: dense
    over the gather of every row, the fastest compaction step over the gather of the needed rows, and
    what the targets ask over that same gather (1.25x over dense on the two target shapes at sigma
    1.5; 80 % of the limit everywhere)."""
    l5 = Lesson05Csv(c)
    rows = []
    for sigma in ("1.5", "2.9"):
        for s in LESSON05_GRID:
            d = l5.row("dense", s, sigma)
            if not l05_big(d):
                continue
            dense, gather, needed = float(d["us_median"]), l5.gather_us(s, sigma), l5.gather_us(s, sigma, True)
            best, v = l5.fastest_compaction(s, sigma)
            at_80 = dense / (0.8 * float(d["limit_speedup"]))
            asked = [f"80 % of the limit: {at_80:.1f} us ({at_80 / needed:.2f}x)"]
            if sigma == "1.5" and s in ("h8kv4-B32-ctx1k", "h8kv4-B64-ctx512"):
                asked.append(f"1.25x: {dense / 1.25:.1f} us ({dense / 1.25 / needed:.2f}x)")
            rows.append([s, sigma, us2(dense), us2(gather), f"{dense / gather:.2f}x", f"`{v}` {us2(best)}",
                         us2(needed), f"{best / needed:.2f}x", "; ".join(asked)])
    return (l05_intro(ctx, gpu, c) + " Each time over its gather (the same rows read where the steps "
            "read them, nothing else, timed the same way): dense over the gather of every row, the fastest "
            "compaction step over the gather of the needed rows; the last column gives what a target asks, "
            "as a time and over the needed gather.\n\n"
            + table(["shape", "sigma", "dense", "gather", "dense / gather", "fastest compaction",
                     "needed gather", "compaction / needed gather", "asked"], rows,
                    right={2, 3, 4, 5, 6, 7}))


@per_gpu("lesson05_targets", "lesson05.csv")
def t_lesson05_targets(ctx, gpu, c):
    """Lesson 05 README: the lesson's targets (dense bandwidth, compaction speedups, share of the
    byte model's limit, ordered against atomic, split-k against single pass), each with what was
    measured and whether it was met."""
    rows = [[t, m, "met" if ok else "**missed**"] for t, m, ok in l05_targets(Lesson05Csv(c))]
    return (l05_intro(ctx, gpu, c) + "\n\n" + table(["target", "measured", ""], rows))


@per_gpu("lesson05_posts", "lesson05.csv")
def t_lesson05_posts(ctx, gpu, c):
    """Lesson 05 README: the H200 post's gains for zero-skip, compaction and compaction inside split-k
    beside ours at sigma 1.5 (about the post's 70 % zeros): the median and the range over Table C,
    and split-k's gain over single-pass compaction where it helps most."""
    l5 = Lesson05Csv(c)

    def spread(values):
        v = sorted(values)
        return f"{100 * (statistics.median(v) - 1):+.0f} % (median; {100 * (v[0] - 1):+.0f} to {100 * (v[-1] - 1):+.0f} %)"

    zs = [l5.speedup("zero_skip", s, "1.5") for s in LESSON05_GRID]
    co = [l5.speedup("compact_ordered", s, "1.5") for s in LESSON05_GRID]
    best_co = max(LESSON05_GRID, key=lambda s: l5.speedup("compact_ordered", s, "1.5"))
    best = max(LESSON05_GRID, key=lambda s: l5.speedup("split_k_compact", s, "1.5"))
    lim = [float(l5.row("dense", s, "1.5")["limit_speedup"]) for s in LESSON05_GRID]
    by_sigma = " / ".join(f"{l5.speedup('split_k_compact', best, sg):.2f}x" for sg in LESSON05_SIGMAS)
    over_sp = " / ".join(f"{l5.speedup('split_k_compact', best, sg, over='compact_ordered'):.2f}x"
                         for sg in LESSON05_SIGMAS)
    rows = [
        ["zero-skip over dense", LESSON05_POST["zero_skip"], spread(zs)],
        ["compaction over dense", LESSON05_POST["compaction"],
         f"{spread(co)}; best {100 * (l5.speedup('compact_ordered', best_co, '1.5') - 1):+.0f} % ({best_co})"],
        ["the byte model's limit for any V-row skipping", "",
         f"{min(lim):.2f}x to {max(lim):.2f}x ({100 * (min(lim) - 1):+.0f} to {100 * (max(lim) - 1):+.0f} %)"],
        ["compaction inside split-k (here: over dense)", LESSON05_POST["split_k"],
         f"{100 * (l5.speedup('split_k_compact', best, '1.5') - 1):+.0f} % at most ({best}); "
         f"{spread([l5.speedup('split_k_compact', s, '1.5') for s in LESSON05_GRID])}"],
        [f"split-k on {best}, sigma 0 / 1.5 / 2.9: over dense; over single-pass compaction", "",
         f"{by_sigma}; {over_sp}"],
    ]
    return (l05_intro(ctx, gpu, c) + " Ours at sigma 1.5 over the 16 shapes of Table C; the post's as "
            "published, on its own kernels and serving shapes, set beside ours, not measured here.\n\n"
            + table(["what", "H200 post", "here"], rows))


# ---------------------------------------------------------------------------------------
# Lesson 06: causal prefill on tensor cores. Its CSV has one row per (variant, shape, prefix,
# l2): the same shape name runs with prefixes 0 and 1024, so rows are looked up with the prefix.

# The H200 post's prefill kernels beside ours (kernel, published us, our variant), and ("-") the
# steps of ours the post has no kernel for: the ping-pong's gate and the last step's gate.
LESSON06_POST = [(name, us, LESSON06_POST_OURS[k]) for k, name, _, us in POST_H200_PREFILL_US]
LESSON06_POST[3:3] = [("-", None, "wgmma_ws_gate"), ("-", None, f"{LESSON06_METHODS[-1]}_gate")]


class Lesson06Csv(Keyed):
    """lesson06.csv's rows by (variant, shape, prefix, l2)."""
    LESSON, KEY, NONE, EAGER_DUP = "06", ("variant", "shape", "prefix", "l2"), "rows", True
    ROW, FAILED = "lesson 06 {variant} {l2} row on {shape} prefix {prefix}", "lesson 06 {variant} on {shape} prefix {prefix} ({l2})"

    def us(self, variant, shape, prefix, l2="cold"):
        return float(self.row(variant, shape, prefix, l2)["us_median"])

    def methods(self, policy):
        """The methods with rows for this policy, in ladder order; the ones absent are named apart."""
        have = [m for m in LESSON06_METHODS if f"{m}_{policy}" in self.have]
        return have, [m for m in LESSON06_METHODS if m not in have]

    def gemm_tflops(self):
        """The run's measured dense bf16 GEMM rate: each row's tflops over its pct_mma_peak."""
        xs = sorted(float(r["tflops"]) * 100 / float(r["pct_mma_peak"]) for r in self.by_key.values()
                    if r.get("tflops") and r.get("pct_mma_peak") and float(r["pct_mma_peak"]) >= 5)
        if not xs:
            raise TableError(f"{self.c.rel}: no row gives the GEMM rate (tflops over pct_mma_peak)")
        return f"{xs[len(xs) // 2]:.0f}"


def l06_cell(r):
    """'1169 (470)': L2-cold median us and TFLOPS."""
    us = float(r["us_median"])
    return f"{us:.1f} ({float(r['tflops']):.0f})" if us < 100 else f"{us:,.0f} ({float(r['tflops']):.0f})"


def l06_last(l6, policy):
    """The newest step this CSV has rows of, for this policy: the ladder's last in a run that has it;
    in a run from before the newest steps (l06_absent names them), the newest sm_90a step it has."""
    for m in reversed(LESSON06_HOPPER):
        if f"{m}_{policy}" in l6.have:
            return m
    have = l6.methods(policy)[0]
    if not have:
        raise TableError(f"{l6.c.rel}: no lesson 06 rows of the {policy} policy")
    return have[-1]


def l06_last_column(l6, policy):
    """The method of the results table's last column: the ladder's last step, or in a Hopper run from
    before it, that run's newest step (a run without sm_90a steps keeps the column, as '-')."""
    last = l06_last(l6, policy)
    return last if last in LESSON06_HOPPER else LESSON06_METHODS[-1]


def l06_absent(l6):
    """' Not in this CSV (why): ...' for the table's methods the CSV lacks. A CSV with some sm_90a
    methods must have every sm_90a step up to its newest: a run from before the ladder's newest steps
    is said so (its last step is named, and the newer ones are '-'); any other gap is an error."""
    missing = sorted({f"{m}_{p}" for p in LESSON06_POLICIES for m in l6.methods(p)[1]},
                     key=lambda v: [f"{m}_{p}" for m in LESSON06_METHODS for p in LESSON06_POLICIES].index(v))
    if not missing:
        return ""
    hopper_run = any(v.rsplit("_", 1)[0] in LESSON06_HOPPER for v in l6.have)
    if hopper_run:
        for p in LESSON06_POLICIES:
            newest = LESSON06_HOPPER.index(l06_last(l6, p))
            gap = [m for m in LESSON06_HOPPER[:newest] if f"{m}_{p}" not in l6.have]
            if gap:
                raise TableError(f"{l6.c.rel}: no lesson 06 {gap[0]}_{p} rows, though the run has newer sm_90a "
                                 f"steps (rerun lesson 06)")
        last = l06_last(l6, LESSON06_POLICIES[0])
        newer = LESSON06_HOPPER[LESSON06_HOPPER.index(last) + 1:]
        return (f" This run is from before {', '.join(f'`{m}`' for m in newer)}: its last step, `{last}`, "
                f"stands in the last step's place.")
    why = ("built for sm_90a only" if all(v.rsplit("_", 1)[0] in LESSON06_HOPPER for v in missing)
           else "the run could not make them; its printout says why")
    return f" Not in this CSV ({why}): {', '.join(f'`{v}`' for v in missing)}."


@per_gpu("lesson06", "lesson06.csv")
def t_lesson06(ctx, gpu, c):
    """Lesson 06 README: the prefill ladder (lesson06.csv), per shape, prefix and policy: each step's
    L2-cold median us and TFLOPS (causal FLOPs), and the last step's % of the measured GEMM rate."""
    l6 = Lesson06Csv(c)
    absent = l06_absent(l6)
    # per policy: the methods with rows, the last column's variant, the newest step's variant
    per_policy = {p: (l6.methods(p)[0], f"{l06_last_column(l6, p)}_{p}", f"{l06_last(l6, p)}_{p}")
                  for p in LESSON06_POLICIES}
    rows = []
    for shape, prefix in LESSON06_SHAPES:
        for policy in LESSON06_POLICIES:
            methods, col, newest = per_policy[policy]
            cells = []
            for m in LESSON06_METHODS[:-1]:
                cells.append(l06_cell(l6.row(f"{m}_{policy}", shape, prefix)) if m in methods else "-")
            cells.append(l06_cell(l6.row(col, shape, prefix)) if col in l6.have else "-")
            last = l6.row(newest, shape, prefix)
            rows.append([shape, prefix, policy, *cells, f"{float(last['pct_mma_peak']):.1f}",
                         last.get("ctas", "")])
    for i in range(len(rows) - 1, 0, -1):  # name each shape and prefix once
        if rows[i][:2] == rows[i - 1][:2]:
            rows[i][0] = rows[i][1] = ""
    return (
        f"**{gpu_name(gpu)}**, data {ctx.link(c)} (dense bf16 GEMM through cuBLAS measured in the same run: "
        f"{l6.gemm_tflops()} TFLOPS). Each cell: L2-cold median us (TFLOPS, causal FLOPs "
        f"4 D H pairs). bf16, D 128, pages of 16; the gate at sigma 1.5.{absent}\n\n"
        + table(["shape", "prefix", "policy", *[f"`{m}`" for m in LESSON06_METHODS[:-1]],
                 f"`{per_policy[LESSON06_POLICIES[0]][1].rsplit('_', 1)[0]}`",
                 "last step, % of GEMM", "its CTAs"], rows, right=set(range(3, 5 + len(LESSON06_METHODS)))))


@per_gpu("lesson06_post", "lesson06.csv")
def t_lesson06_post(ctx, gpu, c):
    """Lesson 06 README: the H200 post's prefill kernels at B32-T256-H8-Hkv4 (published us) beside the
    lesson's variant that does the same thing, L2-hot and L2-cold medians (lesson06.csv)."""
    l6 = Lesson06Csv(c)
    absent = l06_absent(l6)  # a gap in the ladder is an error; a run from before the newest steps, said so
    rows = []
    for kernel, post_us, ours in LESSON06_POST:
        m, policy = ours.rsplit("_", 1)
        if m == LESSON06_METHODS[-1]:
            ours = f"{l06_last(l6, policy)}_{policy}"  # a run from before the last step: its newest
        r_hot, r_cold = l6.find(ours, POST_H200_PREFILL_SHAPE, "0", "hot"), l6.find(ours, POST_H200_PREFILL_SHAPE, "0")
        rows.append([kernel, f"{post_us}" if post_us else "-", f"`{ours}`",
                     us1(r_hot["us_median"]) if r_hot else "-", us1(r_cold["us_median"]) if r_cold else "-"])
    return (f"**{gpu_name(gpu)}**, data {ctx.link(c)}. B32-T256-H8-Hkv4, prefix 0, bf16; the post's "
            f"kernels on an H200, ours on this GPU.{absent}\n\n"
            + table(["the post's kernel", "post, us", "lesson 06", "hot us", "cold us"], rows,
                    right={1, 3, 4}))


class Lesson06FloorCsv(Lesson06Csv):
    """lesson06_floor.csv (the --floor run): the last step's softmax rows, checked, and its MMA
    floor's (variant mma_floor), whose output is not attention and is never checked (check '-')."""

    def expected_check(self, key):
        return "-" if key[0] == "mma_floor" else "PASS"


@per_gpu("lesson06_floor", "lesson06_floor.csv")
def t_lesson06_floor(ctx, gpu, c):
    """Lesson 06 NOTES: the last step's softmax beside its MMA floor (the same kernel with P = S: its
    copies, MMAs and stores alone), one --floor run, L2-cold; cuDNN SDPA from peers_sdpa.csv (its own
    run) where it has the shape."""
    l6 = Lesson06FloorCsv(c)
    step = f"{l06_last(l6, 'softmax')}_softmax"  # the ladder's last, or the newest of a run from before it
    newer = LESSON06_HOPPER[LESSON06_HOPPER.index(step.rsplit("_", 1)[0]) + 1:]
    which = ("the last step" if not newer
             else f"the last step of this run, which is from before {', '.join(f'`{m}`' for m in newer)}")
    peers = ctx.data.get_if_any(gpu, "peers_sdpa.csv")
    rows = []
    for shape, prefix in LESSON06_SHAPES:
        step_us, f = l6.us(step, shape, prefix), l6.row("mma_floor", shape, prefix)
        floor_us = float(f["us_median"])
        cu = peers.find("peer", "sdpa_cudnn", shape) if peers is not None and prefix == "0" else None
        rows.append([shape, prefix, us1(step_us), us1(floor_us), f"{step_us / floor_us:.2f}", f"{float(f['tflops']):.0f}",
                     us1(cu["us_median"]) if cu else "-", f"{floor_us / float(cu['us_median']):.2f}" if cu else "-"])
    for i in range(len(rows) - 1, 0, -1):  # name each shape once
        if rows[i][0] == rows[i - 1][0]:
            rows[i][0] = ""
    peer_note = (f"cuDNN: `sdpa_cudnn` in {ctx.link(peers)} (its own run), prefix 0 only."
                 if peers is not None else "No cuDNN measurement for this GPU.")
    return (f"**{gpu_name(gpu)}**, data {ctx.link(c)}, one `--floor` run: L2-cold medians, us; bf16, D 128, "
            f"pages of 16. `{step}` is {which} (checked); the floor is its kernel with P = S "
            f"(TFLOPS: causal FLOPs over its time). {peer_note}\n\n"
            + table(["shape", "prefix", "last step us", "floor us", "step / floor", "floor TFLOPS", "cuDNN us",
                     "floor / cuDNN"], rows, right={2, 3, 4, 5, 6, 7}))


# ---------------------------------------------------------------------------------------
# Lesson 07: the KV hand-off. Its CSV has one row per (variant, shape, stage), so rows are
# looked up with the stage as well; its percentages are of the measured copy bandwidth
# (`pct_copy_bw`), not of the read bandwidth.



def l07_shape(tokens, pair):
    return f"T{tokens}-L{LESSON07_LAYERS}-{pair}"


class Lesson07Csv(Keyed):
    """lesson07.csv's rows by (variant, shape, stage)."""
    LESSON, KEY, NONE, NEED = "07", ("variant", "shape", "stage"), "rows", ("stage", "copies", "pct_copy_bw", "gpus")
    ROW, FAILED = "lesson 07 {variant} {stage} row on {shape}", "lesson 07 {variant} {stage} on {shape}"

    def has(self, variant):
        return variant in self.have

    def per_token_tokens(self):
        """Token counts with a per_token row: every one up to LESSON07_PER_TOKEN_MAX must have it."""
        have = [t for t in LESSON07_TOKENS if any(self.find("per_token", l07_shape(t, p), "total")
                                                    for p, _ in LESSON07_PAIRS)]
        for t in LESSON07_TOKENS:
            if t <= LESSON07_PER_TOKEN_MAX or t in have:
                for p, _ in LESSON07_PAIRS:
                    self.row("per_token", l07_shape(t, p), "total")
        return [t for t in LESSON07_TOKENS if t <= LESSON07_PER_TOKEN_MAX or t in have]

    def two_gpu(self):
        """The two-GPU variants (and the memcpy_peer ceiling) this CSV has, and those it lacks."""
        allv = ("memcpy_peer",) + LESSON07_TWO_GPU
        return [v for v in allv if self.has(v)], [v for v in allv if not self.has(v)]

    def bandwidth(self, peer):
        """The run's copy bandwidth (peer: GPU 0 -> GPU 1), GB/s as text, bracketed from each row's
        bytes / us_median over its pct_copy_bw (printed to 0.1), as Csv.read_bw does."""
        bw = bracket([r for r in self.by_key.values() if (r.get("gpus") == "2" and r.get("stage") == "transfer") == peer],
                     "pct_copy_bw", 0.05, "copy_bw_gbps")
        if bw is None:
            raise TableError(f"{self.c.rel}: its bytes, us_median and pct_copy_bw do not give one "
                             f"{'peer' if peer else 'copy'} bandwidth")
        return bw


def l07_cell(r):
    """'2072.2 (97.4)': median us and % of the copy bandwidth."""
    return f"{l07_us(r['us_median'])} ({float(r['pct_copy_bw']):.1f})"


def l07_us(x):
    """Median us: one decimal, and thousands separated from 10,000 us on (per_token's seconds)."""
    return f"{float(x):,.0f}" if float(x) >= 10000 else us1(x)


def l07_absent_line(l7, absent):
    """One line naming the two-GPU rows the CSV lacks: a run cannot make them without a second GPU
    (or, for staged_nccl, without NCCL); that is not an error."""
    if not absent:
        return ""
    names = ", ".join(f"`{v}` (needs {LESSON07_NEEDS[v]})" for v in absent)
    one_gpu = all(r.get("gpus") == "1" for r in l7.by_key.values())
    why = "every row of this run has `gpus` 1" if one_gpu else "this run did not make them"
    return f" Not in this CSV ({why}): {names}."


def l07_intro(ctx, gpu, l7, c):
    present, absent = l7.two_gpu()
    bw = f"measured device-to-device copy {l7.bandwidth(False)}"
    if any(l7.find(v, l07_shape(t, p), "transfer") for v in present for t in LESSON07_TOKENS for p, _ in LESSON07_PAIRS):
        bw += f", GPU 0 -> GPU 1 peer copy {l7.bandwidth(True)}"
    return (f"**{gpu_name(gpu)}**, data {ctx.link(c)} ({bw}, bytes read + written; from the rows' GB/s over "
            f"their % copy BW). Medians of the run's repetitions, buffers reused (`l2` hot); D 128, bf16, "
            f"page 16, {LESSON07_LAYERS} layers.{l07_absent_line(l7, absent)}")


@per_gpu("lesson07", "lesson07.csv")
def t_lesson07(ctx, gpu, c):
    """Lesson 07 README: the KV hand-off (lesson07.csv). Per TP pair at the largest token count: each
    variant's copy calls and time per stage (gather / transfer / scatter / total) with % of the measured
    copy bandwidth, and the memcpy ceiling; then, at every token count, the totals of every variant.
    Two-GPU rows (staged_peer, staged_nccl, memcpy_peer) where the CSV has them, else named in a line."""
    parts = []
    l7 = Lesson07Csv(c)
    present, _ = l7.two_gpu()
    pt_tokens = l7.per_token_tokens()
    variants = list(LESSON07_ONE_GPU) + [v for v in LESSON07_TWO_GPU if v in present]
    big = LESSON07_TOKENS[-1]

    # 1. every stage, at the largest token count
    rows = []
    for pair, what in LESSON07_PAIRS:
        s = l07_shape(big, pair)
        m = l7.row("memcpy", s, "transfer")
        label = f"{what} (S = {mib(float(m['bytes']) / 2)} MiB)"
        rows.append([label, "`memcpy` of S", "1", "", l07_cell(m), "", "", f"{float(m['gbps']):.0f}"])
        if "memcpy_peer" in present:
            mp = l7.row("memcpy_peer", s, "transfer")
            rows.append([label, "`memcpy_peer` of S", "1", "", l07_cell(mp), "", "", f"{float(mp['gbps']):.0f}"])
        if big in pt_tokens:
            pt = l7.row("per_token", s, "total")
            rows.append([label, "`per_token`", f"{int(pt['copies']):,}", "", "", "", l07_cell(pt),
                         f"{float(pt['gbps']):.1f}"])
        for v in variants:
            st = {k: l7.row(v, s, k) for k in LESSON07_STAGES}
            calls = " + ".join(st[k]["copies"] for k in LESSON07_STAGES[:3])
            rows.append([label, f"`{v}`", calls] + [l07_cell(st[k]) for k in LESSON07_STAGES]
                        + [f"{float(st['total']['gbps']):.0f}"])
    for i in range(len(rows) - 1, 0, -1):  # name each TP pair once
        if rows[i][0] == rows[i - 1][0]:
            rows[i][0] = ""
    peer_note = (" On the two-GPU rows, `transfer` and `memcpy_peer` are against the peer copy; their "
                 "gather, scatter and total against the device-to-device copy." if present else "")
    parts.append(
        l07_intro(ctx, gpu, l7, c) + "\n\n"
        + f"**Every stage at {big} tokens.** Each cell: median us (% of the measured copy bandwidth). A "
        f"stage moves the hand-off's S bytes once (2S read + written); `total` runs the three stages "
        f"in a row (6S); `per_token` moves S once, pool to pool (2S). Copy calls: launches or copies "
        f"of gather + transfer + scatter.{peer_note}\n\n"
        + table(["TP pair", "variant", "copy calls", "gather", "transfer", "scatter", "total", "GB/s"], rows,
                right={2, 3, 4, 5, 6, 7}))

    # 2. totals at every token count
    head = ["shape", "S, MiB", "`memcpy` of S, us", "`per_token` us"] + [f"`{v}` total" for v in variants] \
        + ["`staged` % copy BW: gather / transfer / scatter", "copy calls: " + " / ".join(
            ["`per_token`"] + [f"`{v}`" for v in variants])]
    rows = []
    for t in LESSON07_TOKENS:
        for pair, _ in LESSON07_PAIRS:
            s = l07_shape(t, pair)
            m = l7.row("memcpy", s, "transfer")
            pt = l7.row("per_token", s, "total") if t in pt_tokens else None
            tot = [l7.row(v, s, "total") for v in variants]
            stg = [l7.row("staged", s, k) for k in LESSON07_STAGES[:3]]
            rows.append([s, mib(float(m["bytes"]) / 2), us1(m["us_median"]),
                         l07_us(pt["us_median"]) if pt else "-"] + [l07_cell(r) for r in tot]
                        + [" / ".join(f"{float(r['pct_copy_bw']):.1f}" for r in stg),
                           " / ".join([f"{int(pt['copies']):,}" if pt else "-"] + [r["copies"] for r in tot])])
    not_run = [t for t in LESSON07_TOKENS if t not in pt_tokens]
    pt_note = (f" `per_token` is not run above {LESSON07_PER_TOKEN_MAX} tokens (\"-\"): one run would be "
               f"millions of copy calls." if not_run else "")
    parts.append(
        f"**Totals at every token count.** `total` cells: median us (% of the copy bandwidth, 6S over "
        f"the time); `per_token`: median us of one hand-off (it moves S once); the `staged` stages as % "
        f"of the copy bandwidth.{pt_note}\n\n"
        + table(head, rows, right=set(range(1, len(head)))))
    return "\n\n".join(parts)


@per_gpu("lesson07_speedup", "lesson07.csv")
def t_lesson07_speedup(ctx, gpu, c):
    """Lesson 07 README: staged (total of gather, transfer, scatter) against per_token at every token
    count where per_token was run (lesson07.csv): copy calls, times, time per per_token call, speedup."""
    l7 = Lesson07Csv(c)
    rows = []
    for t in l7.per_token_tokens():
        for pair, _ in LESSON07_PAIRS:
            s = l07_shape(t, pair)
            pt, st = l7.row("per_token", s, "total"), l7.row("staged", s, "total")
            n_pt, n_st = int(pt["copies"]), int(st["copies"])
            rows.append([s, f"{n_pt:,}", l07_us(pt["us_median"]), f"{float(pt['us_median']) / n_pt:.2f}",
                         f"{n_st}", us1(st["us_median"]),
                         f"{float(pt['us_median']) / float(st['us_median']):.0f}x"])
    return (
        f"**{gpu_name(gpu)}**, data {ctx.link(c)}. Median us of one hand-off; `staged` is its `total` "
        f"(gather, transfer and scatter: S moved three times), `per_token` one copy call per token per "
        f"layer per K/V per rank pair (S moved once).\n\n"
        + table(["shape", "`per_token` calls", "`per_token` us", "us per call", "`staged` calls",
                 "`staged` us", "speedup"], rows, right={1, 2, 3, 4, 5, 6}))




@per_gpu("lesson07_targets", "lesson07.csv")
def t_lesson07_targets(ctx, gpu, c):
    """Lesson 07 README: the lesson's targets against lesson07.csv, per TP pair: gather and scatter at
    the largest token count (% of copy bandwidth), staged against per_token at 4096 tokens (speedup,
    copy calls), the two-GPU transfers (% of peer bandwidth) or a row saying the CSV has none."""
    l7 = Lesson07Csv(c)
    big = LESSON07_TOKENS[-1]
    pairs = [p for p, _ in LESSON07_PAIRS]

    def met(values, target):
        return "met" if min(values) >= target else "**not met**"

    rows = []
    for stage in ("gather", "scatter"):
        pcts = [float(l7.row("staged", l07_shape(big, p), stage)["pct_copy_bw"]) for p in pairs]
        rows.append([f"`staged` {stage} at {big} tokens, % of copy BW: at least "
                     f"{LESSON07_KERNEL_TARGET_PCT:.0f} (aim {LESSON07_KERNEL_AIM_PCT:.0f})"]
                    + [f"{x:.1f}" for x in pcts]
                    + [f"{met(pcts, LESSON07_KERNEL_TARGET_PCT)} (aim: {met(pcts, LESSON07_KERNEL_AIM_PCT)})"])
    speed, calls = [], []
    for p in pairs:
        s = l07_shape(LESSON07_SPEEDUP_TOKENS, p)
        pt, st = l7.row("per_token", s, "total"), l7.row("staged", s, "total")
        speed.append(float(pt["us_median"]) / float(st["us_median"]))
        calls.append(f"{int(st['copies'])} / {int(pt['copies']):,}")
    rows.append([f"`staged` against `per_token` at {LESSON07_SPEEDUP_TOKENS} tokens: at least "
                 f"{LESSON07_SPEEDUP_TARGET:.0f}x faster"] + [f"{x:.0f}x" for x in speed]
                + [met(speed, LESSON07_SPEEDUP_TARGET)])
    rows.append([f"copy calls at {LESSON07_SPEEDUP_TOKENS} tokens, `staged` / `per_token`: O(1) per rank "
                 f"pair against O(tokens x layers)"] + calls + ["-"])
    present, _ = l7.two_gpu()
    for v in LESSON07_TWO_GPU:
        what = f"`{v}` transfer at {big} tokens, % of peer BW: at least {LESSON07_PEER_TARGET_PCT:.0f}"
        if v in present:
            pcts = [float(l7.row(v, l07_shape(big, p), "transfer")["pct_copy_bw"]) for p in pairs]
            rows.append([what] + [f"{x:.1f}" for x in pcts] + [met(pcts, LESSON07_PEER_TARGET_PCT)])
        else:
            rows.append([what] + ["-"] * len(pairs) + [f"not in this CSV (needs {LESSON07_NEEDS[v]})"])
    return (
        f"**{gpu_name(gpu)}**, data {ctx.link(c)}.\n\n"
        + table(["target", *pairs, "verdict"], rows, right=set(range(1, 1 + len(pairs)))))




def lesson03_optional(variant):
    """Variants a lesson03_sweep.csv may lack: head rows (groups of 9 to 32 only) and unit copies (sm_90
    only, pages of at least one unit)."""
    return variant.startswith("split_k_rows_") or "_units_" in variant
def lesson03_best(c, shape, variants):
    """The fastest of `variants` on `shape`. The head-row variants (split_k_rows_<P>) run only
    groups of 9 to 32, the unit copies only on sm_90: counted where their row exists; the others must."""
    rows = [c.row("03", v, shape) for v in variants if not lesson03_optional(v)]
    rows += [r for v in variants if lesson03_optional(v) for r in [c.find("03", v, shape)] if r]
    return min(rows, key=lambda r: float(r["us_median"]))




def steps03_fastest(at):
    return f"`{min((float(r['us_median']), v) for v in LESSON03_LADDER[1:-1] if (r := at.find(v)))[1]}`"


grid("lesson03_steps",
     """Lesson 03 README: the ladder on every measured shape (lesson03.csv), L2-cold medians: single
    pass, each step at its plan for the shape, auto; '-' where a step refuses the shape (head rows:
    groups of 9 to 32; unit copies: sm_90; the cluster merge: at most 4 partitions).""",
     "lesson03.csv", "03", lambda c: list(dict.fromkeys(r["shape"] for r in c.rows if r["lesson"] == "03")),
     [c_shape()] + [c_opt(f"`{v}`", v, us2) for v in LESSON03_LADDER]
     + [Col("fastest step", steps03_fastest, right=False), c_ratio("auto vs SP", "single_pass", "auto", "{:.1f}x")],
     "**{gpu}**, data {data}: each step at its plan for the shape (the CSV's `plan` column), L2-cold medians, us; "
     "`-`: the step refuses the shape (head rows take groups of 9 to 32; the cluster merge at most 4 partitions). "
     "Table A, Table B, then the long contexts.")


def dispatch_best(at):
    """The faster of single pass and the best split-k variant."""
    return min(at.us("single_pass"), float(lesson03_best(at.c, at.shape, LESSON03_SPLIT)["us_median"]))


def dispatch_rule(head, col):
    """What a published rule (the auto row's column `col`) would run: SP or SK, right (+) within 5 %."""
    def cell(at):
        v = auto_row(at.c, "03", at.shape).get(col)
        if not v:
            raise TableError(f"{at.c.rel}: the auto row of {at.shape} has no {col}")
        return ("SP " if v == "single_pass" else "SK ") + ("+" if at.us(v) <= 1.05 * dispatch_best(at) else "-")
    return Col(head, cell, right=False)


grid("lesson03_dispatch",
     """Lesson 03 README: Table A and Table B, L2-cold: single pass (lesson 02's auto) against the
    best split-k variant, auto (this lesson's rule) and what each published rule would run
    (CSV columns rule_*), each marked right (+) when within 5 % of the best measured variant.""",
     "lesson03_sweep.csv", "03", TABLE_A + TABLE_B,
     [c_shape(), Col("B*Hkv", lambda at: str(int(auto_row(at.c, "03", at.shape)["B"]) * int(at.row("auto")["Hkv"]))),
      c_time("SP us", "single_pass", fmt=us2),
      Col("best SK us", lambda at: f"`{best_split_k(at)}` {us2(at.us(best_split_k))}", right=False),
      c_name("auto pick", "auto", "auto_pick"), c_time("auto us", "auto", fmt=us2),
      Col("auto / best", lambda at: f"{at.us('auto') / dispatch_best(at):.2f}"),
      c_ratio("auto vs SP", "single_pass", "auto", "{:.1f}x"), c_pct("auto")]
     + [dispatch_rule(head, col) for head, col in LESSON03_RULES]
     + [Col("ours", lambda at: "+" if at.us("auto") <= 1.05 * dispatch_best(at) else "-", right=False)],
     "**{gpu}**, data {data} (streaming read {bw}). Table A (fp16, D 128, block 16) and Table B (fp16, B 1); L2-cold "
     "medians, us. SP = `single_pass` (lesson 02's `auto`); \"best SK\" = the fastest of "
     + variant_list(LESSON03_SPLIT) + " (the `split_k_rows_` ones where the CSV has them: groups of 9 to 32; the "
     "`_units_` ones on sm_90); a rule's pick is right (+) within 5 % of the best of SP and SK; \"ours\" is `auto`.",
     lambda rows: ["**right**"] + [""] * 8 + [f"{sum(r[j].endswith('+') for r in rows)} of {len(rows)}"
                                              for j in range(9, 10 + len(LESSON03_RULES))])


grid("lesson03_long",
     """Lesson 03 README: a batch of mixed lengths and 128k contexts, L2-cold: single pass, one split
    count for the whole batch (split_k_even), each fixed partition size, and auto, with % of read BW.""",
     "lesson03_sweep.csv", "03", LONG_SHAPES,
     [c_shape(), c_mib("single_pass"), c_time_pct("single pass", "single_pass"),
      c_time_pct("split_k_even", "split_k_even")]
     + [c_time_pct(f"P {v.rsplit('_', 1)[1]}", v) for v in LESSON03_FIXED]
     + [c_name("auto pick", "auto", "auto_pick"), c_time_pct("auto", "auto")],
     "**{gpu}**, data {data} (streaming read {bw}). L2-cold medians, us (% of read bandwidth); fp16, D 128, block "
     "16. `split_k_even` cuts every sequence into the same number of pieces (the split-count rule's); "
     "`split_k_<P>` gives every sequence its own count of P-token partitions.")


@per_gpu("lesson03_longest_first", "lesson03_sweep.csv",
         none="no lesson03_sweep.csv has the longest-first rows (split_k_units_lpt_<P>; sm_90 only)")
def t_lesson03_longest_first(ctx, gpu, c):
    """Lesson 03 README: the batch of mixed lengths with its partition CTAs in the grid's own order
    (split_k_units_<P>) and longest first (split_k_units_lpt_<P>), L2-cold, one run per GPU."""
    shape, rows = "llama70b-B16-mixed", []
    for size in (1024, 2048, 4096, 8192):
        grid, lpt = c.find("03", f"split_k_units_{size}", shape), c.find("03", f"split_k_units_lpt_{size}", shape)
        if grid and lpt:
            rows.append([str(size), grid["ctas"], f"{us1(grid['us_median'])} ({pct(grid)})",
                         f"{us1(lpt['us_median'])} ({pct(lpt)})",
                         f"{float(lpt['us_median']) / float(grid['us_median']):.2f}"])
    if not rows:
        return None  # this GPU did not run the unit copies
    a = c.row("03", "auto", shape)
    return (
        f"**{gpu_name(gpu)}**, data {ctx.link(c)} (streaming read {c.read_bw()}). `{shape}`, L2-cold medians, us "
        f"(% of read bandwidth), unit copies, lesson 03's reduce; `auto` runs `{a['auto_pick']}`: "
        f"{us1(a['us_median'])} us ({pct(a)} %).\n\n"
        + table(["P", "CTAs", "grid order", "longest first", "longest / grid"], rows, right={0, 1, 2, 3, 4}))


grid("lesson03_fused",
     """Lesson 03 README: the fused merge (last CTA, no second launch) against partitions + reduce, at
    128 and 512 tokens, L2-cold, on Table A and Table B.""",
     "lesson03_sweep.csv", "03", TABLE_A + TABLE_B,
     [c_shape(), Col("group", lambda at: str(int(at.row("split_k_128")["H"]) // int(at.row("split_k_128")["Hkv"]))),
      c_time("P 128: two kernels", "split_k_128", fmt=us2), c_time("fused", "split_k_fused_128", fmt=us2),
      c_time("P 512: two kernels", "split_k_512", fmt=us2), c_time("fused", "split_k_fused_512", fmt=us2),
      c_ratio("fused / two (128)", "split_k_fused_128", "split_k_128"),
      c_ratio("fused / two (512)", "split_k_fused_512", "split_k_512")],
     "**{gpu}**, data {data}. L2-cold medians, us; \"fused / two\" below 1 means the fused merge won.")


def best_split_k(at):
    """The fastest split-k variant of lesson03_sweep.csv on the shape (lesson03_best)."""
    return lesson03_best(at.c, at.shape, LESSON03_SPLIT)["variant"]


grid("lesson03_hot_cold",
     """Lesson 03 README: L2-hot against L2-cold for single pass, the best split-k variant and auto on
    Table A, with the K/V size beside the L2 (does split-k fix occupancy; what is left, L2?).""",
     "lesson03_sweep.csv", "03", TABLE_A,
     [c_shape(), c_mib("single_pass"), c_time("SP hot", "single_pass", "hot"), c_time("SP cold", "single_pass"),
      c_name("best SK (cold)", best_split_k), c_time("SK hot", best_split_k, "hot"), c_time("SK cold", best_split_k),
      c_ratio("SK cold / hot", best_split_k, best_split_k, den_l2="hot")],
     "**{gpu}**, data {data}; medians, us. Hot: the same K/V every launch (it stays in L2 when it fits); cold: "
     "K/V copies rotated over more than twice the L2.")


PARTITION_KERNEL = [v for v in LESSON03_SPLIT if not v.startswith("split_k_rows_") and v != "split_k_even"]
HEAD_ROWS = [v for v in LESSON03_SPLIT if v.startswith("split_k_rows_")]


@per_gpu("lesson03_head_rows", "lesson03_sweep.csv")
def t_lesson03_head_rows(ctx, gpu, c):
    """Lesson 03 README: the head-row kernel against the partition kernel on every shape whose
    group it serves (the MQA shapes of Table A and the 128k one), L2-hot and cold, one run."""
    rows = []
    for s in TABLE_A + LONG_SHAPES:
        if not any(c.find("03", v, s) for v in HEAD_ROWS):
            continue
        old, new = lesson03_best(c, s, PARTITION_KERNEL), lesson03_best(c, s, HEAD_ROWS)
        old_h, new_h = c.row("03", old["variant"], s, "hot"), c.row("03", new["variant"], s, "hot")
        rows.append([s, mib(new["bytes"]), f"`{old['variant']}`", us1(old_h["us_median"]), us1(old["us_median"]), pct(old),
                     f"`{new['variant']}`", us1(new_h["us_median"]), us1(new["us_median"]), pct(new),
                     f"{float(old['us_median']) / float(new['us_median']):.2f}x"])
    if not rows:
        raise TableError(f"{c.rel}: no split_k_rows_* rows (measured before the head-row kernel?)")
    return (f"**{gpu_name(gpu)}**, data {ctx.link(c)} (streaming read {c.read_bw()}); medians, us; % read BW of the "
            f"L2-cold time. Partition kernel: the fastest of {variant_list(PARTITION_KERNEL)}; head rows: the fastest "
            f"of {variant_list(HEAD_ROWS)}.\n\n"
            + table(["shape", "MiB", "partition kernel", "hot", "cold", "% read BW", "head rows", "hot", "cold",
                     "% read BW", "speedup (cold)"], rows, right={1, 3, 4, 5, 7, 8, 9, 10}))


grid("results_split_k",
     """README.md: Table A, L2-cold: lesson 02's auto (single pass) against lesson 03's auto (single
    pass or split-k), with % of read bandwidth (both from lesson03_sweep.csv, one run).""",
     "lesson03_sweep.csv", "03", TABLE_A + LONG_SHAPES[:2],
     [c_shape(), c_time("lesson 02 us", "single_pass"), c_pct("single_pass"),
      c_name("lesson 03 pick", "auto", "auto_pick"), c_time("lesson 03 us", "auto"), c_pct("auto"),
      c_ratio("speedup", "single_pass", "auto", "{:.1f}x")],
     "**{gpu}**, data {data} (streaming read {bw}): lesson 02's `auto` (single pass) and lesson 03's `auto` "
     "measured in one run; L2-cold medians, us; fp16, D 128, block 16.")


grid("lesson03_posts",
     """Lesson 03 README: the L4 and RTX 4090 posts' published times beside ours (single pass, best
    split-k, auto), L2-cold.""",
     "lesson03_sweep.csv", "03", list(POST_L4_MS) + list(POST_4090_MS),
     [c_shape(), Col("post's GPU", lambda at: "L4" if at.shape in POST_L4_MS else "RTX 4090", right=False),
      c_time("our SP", "single_pass"), c_time("our best SK", best_split_k), c_time("our auto", "auto"),
      c_post("post SP / base", [POST_L4_MS, POST_4090_MS], 0, lambda ms: f"{ms * 1000:.0f}"),
      c_post("post split-k", [POST_L4_MS, POST_4090_MS], 1, lambda ms: f"{ms * 1000:.0f}"),
      Col("post splits", lambda at: str(POST_4090_MS[at.shape][2]) if at.shape in POST_4090_MS else "")],
     "**{gpu}**, data {data}; L2-cold medians, us. The posts' columns are their published times (ms as us), on "
     "their GPUs (an L4 and an RTX 4090) with their Triton kernels: set beside ours, not compared as the same "
     "experiment.")


# ---------------------------------------------------------------------------------------
# The READMEs

OPEN = re.compile(r"^<!-- table:(\S+) -->$")
CLOSE = re.compile(r"^<!-- /table:(\S+) -->$")
# A block's name may end in @gpu[,gpu...]: the table for those GPUs only (e.g. lesson04@h100 in a
# lab notebook). Without it, a lesson's README shows the lesson's GPU, README_GPU, and every other
# file (the top README, the lab notebooks) every GPU with data.
README_GPU = "h200"


def block_gpus(name, path):
    """(table name, the GPUs its block shows or None for all) for a block name in file `path`."""
    base, at, gpus = name.partition("@")
    if at:
        return base, tuple(g for g in gpus.split(",") if g)
    path = Path(path)
    if path.name == "README.md" and path.parent.parent.name == "lessons":
        return base, (README_GPU,)
    return base, None


def render(text, ctx, where):
    """(new text, [(name, changed)], [error lines]) for one README's text."""
    lines = text.split("\n")
    out, blocks, errors = [], [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        m_close = CLOSE.match(line)
        if m_close:
            errors.append(f"{where}:{i + 1}: closing marker of table '{m_close.group(1)}' without its opening marker")
            out.append(line)
            i += 1
            continue
        m = OPEN.match(line)
        if not m:
            out.append(line)
            i += 1
            continue
        name = m.group(1)
        j = i + 1
        while j < len(lines) and not CLOSE.match(lines[j]) and not OPEN.match(lines[j]):
            j += 1
        if j == len(lines) or OPEN.match(lines[j]) or CLOSE.match(lines[j]).group(1) != name:
            errors.append(f"{where}:{i + 1}: table '{name}' has no closing marker <!-- /table:{name} -->")
            out.extend(lines[i:j])
            i = j
            continue
        old = lines[i + 1:j]
        base, only = block_gpus(name, ctx.readme)
        fn = TABLES.get(base)
        if fn is None:
            errors.append(f"{where}:{i + 1}: unknown table '{name}' (python3 plots/tables.py --list names them)")
            new = old
        else:
            try:
                new = ["", *wrap_prose(fn(Ctx(ctx.data.restricted(only), ctx.readme))).split("\n"), ""]
            except TableError as e:
                errors.append(f"{where}:{i + 1}: table {name}: {e}")
                new = old
            else:
                blocks.append((name, new != old))
        out += [line, *new, lines[j]]
        i = j + 1
    return "\n".join(out), blocks, errors


def readmes(root):
    """The files whose table blocks this script writes: the READMEs and each lesson's lab notebook."""
    root = Path(root)
    files = [root / "README.md"] + sorted((root / "lessons").glob("*/README.md")) + sorted((root / "lessons").glob("*/NOTES.md"))
    return [f for f in files if f.is_file()]


def notebook_gaps(root, data):
    """A lesson README shows README_GPU's tables only; each table it shows that another GPU's CSVs
    can also make must appear as NAME@gpu in the lesson's NOTES.md (moved, not lost). One line per
    missing block."""
    gaps = []
    for readme in sorted((Path(root) / "lessons").glob("*/README.md")):
        notes = readme.parent / "NOTES.md"
        have = {m for m in re.findall(r"^<!-- table:(\S+) -->$", notes.read_text(), re.M)} if notes.is_file() else set()
        for name in re.findall(r"^<!-- table:(\S+) -->$", readme.read_text(), re.M):
            base, only = block_gpus(name, readme)
            fn = TABLES.get(base)
            if fn is None or only != (README_GPU,):
                continue
            for gpu in GPU_ORDER:
                if gpu == README_GPU or f"{base}@{gpu}" in have:
                    continue
                try:
                    fn(Ctx(data.restricted((gpu,)), notes))
                except TableError:
                    continue  # no data of that GPU for this table
                gaps.append(f"{rel_posix(notes, root)}: no block <!-- table:{base}@{gpu} --> for the {gpu} table "
                            f"that {rel_posix(readme, root)} leaves out")
    return gaps


def run(root, data_dir, check, out=sys.stdout):
    data = Data(data_dir, root)
    problems, count, rewritten = 0, 0, 0
    for path in readmes(root):
        where = rel_posix(path, root)
        text = path.read_text()
        new, blocks, errors = render(text, Ctx(data, path), where)
        for e in errors:
            print(e, file=out)
        problems += len(errors)
        count += len(blocks)
        for name, changed in blocks:
            if not changed:
                continue
            if check:
                print(f"{where}: table {name} differs from the CSVs (python3 plots/tables.py rewrites it)", file=out)
                problems += 1
            else:
                print(f"{where}: table {name} rewritten", file=out)
                rewritten += 1
        if not check and new != text:
            path.write_text(new)
    for e in notebook_gaps(root, data):
        print(e, file=out)
        problems += 1
    if problems == 0:
        if check:
            print(f"README tables match the CSVs ({count} tables)", file=out)
        else:
            print(f"{count} tables, {rewritten} rewritten", file=out)
    return 1 if problems else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write the README results tables from the committed CSVs.")
    ap.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if any table differs")
    ap.add_argument("--list", action="store_true", help="name the tables and what each shows")
    ap.add_argument("--root", default=str(REPO), help="repository whose READMEs to process (default: this one)")
    ap.add_argument("--data", default=None, help="the plots/data folder to read (default: ROOT/plots/data)")
    args = ap.parse_args(argv)
    if args.list:
        for name, fn in TABLES.items():
            print(f"{name}: {' '.join(fn.__doc__.split())}")
        return 0
    root = Path(args.root)
    return run(root, Path(args.data) if args.data else root / "plots" / "data", args.check)


if __name__ == "__main__":
    sys.exit(main())
