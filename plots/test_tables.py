#!/usr/bin/env python3
"""Tests plots/tables.py on tiny made-up CSVs in a temporary folder: a stale block is found and
rewritten whole, text outside the markers kept; missing rows, rows of another GPU, FAILed checks,
unknown names and unbalanced markers are errors; lessons 04 and 07's tables from consistent rows.

    python3 plots/test_tables.py     (CTest test `readme_tables_self_test`, label cpu)

Exit 0 and "self-test passed", or one line per failed expectation and exit 1.
Python 3 standard library only; no GPU.
"""

import io
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import catalog as C  # noqa: E402
from catalog import LESSON01_SHAPES, LESSON07_PAIRS, LESSON07_TOKENS, LONG_SHAPES, TABLE_A, TABLE_B  # noqa: E402
from tables import (LESSON04_FIXES, LESSON04_SPLITS, LESSON06_POST, LESSON07_PER_TOKEN_MAX,  # noqa: E402
                    LESSON07_STAGES, REPO, Csv, Lesson06Csv, Lesson06FloorCsv, TableError, l06_absent, l07_shape,
                    ladder_steps, run, us_ladder, variant_list)

HEADER = ("gpu,lesson,variant,shape,dtype,B,H,Hkv,D,ctx,block_size,l2,us_median,us_min,bytes,gbps,"
          "pct_read_bw,flops,tflops,pct_mma_peak,check,rel_err,ctas,ctas_per_sm,waves")


def _fake_row(shape, variant, l2, us, read_bw=4000.0, lesson="01"):
    nbytes = 16 * 1048576
    gbps = nbytes / us / 1e3
    return (f"h200,{lesson},{variant},{shape},fp16,1,32,32,128,1024,16,{l2},{us:.3f},{us:.3f},{nbytes},"
            f"{gbps:.1f},{100 * gbps / read_bw:.1f},,,,PASS,1e-4,32,1,0.1")


HEADER07 = ("gpu,lesson,variant,shape,dtype,B,H,Hkv,D,ctx,block_size,l2,us_median,us_min,bytes,gbps,pct_read_bw,"
            "flops,tflops,pct_mma_peak,check,rel_err,stage,copies,pct_copy_bw,gpus,tp,layers")


def _fake_lesson07_csv(two_gpus, copy_bw=4000.0, peer_bw=700.0, drop=()):
    """A lesson07.csv of made-up but consistent rows; `drop` leaves out (variant, shape, stage) rows."""
    rows = [HEADER07]

    def add(variant, shape, tokens, stage, us, nbytes, copies, gpus, ceiling):
        if (variant, shape, stage) in drop:
            return
        gbps = nbytes / us / 1e3
        rows.append(f"h200,07,{variant},{shape},bf16,1,0,8,128,{tokens},16,hot,{us:.3f},{us:.3f},{nbytes:.0f},"
                    f"{gbps:.1f},,,,,PASS,,{stage},{copies},{100 * gbps / ceiling:.1f},{gpus},x,32")

    for t in LESSON07_TOKENS:
        for pair, _ in LESSON07_PAIRS:
            s = l07_shape(t, pair)
            S = t * 8 * 256 * 64.0
            add("memcpy", s, t, "transfer", 2 * S / copy_bw / 1e3, 2 * S, 1, 1, copy_bw)
            if t <= LESSON07_PER_TOKEN_MAX:
                add("per_token", s, t, "total", 4.0 * 4 * 64 * t, 2 * S, 4 * 64 * t, 1, copy_bw)
            variants = [("per_layer", 0.5, 64, 1), ("staged", 0.9, 1, 1)]
            if two_gpus:
                variants += [("staged_peer", 0.85, 1, 2), ("staged_nccl", 0.8, 1, 2)]
            for v, eff, mult, gpus in variants:
                for stage in LESSON07_STAGES[:3]:
                    peer = gpus == 2 and stage == "transfer"
                    ceiling = peer_bw if peer else copy_bw
                    add(v, s, t, stage, 2 * S / (eff * ceiling) / 1e3, 2 * S, 4 * mult, gpus, ceiling)
                add(v, s, t, "total", 6 * S / (eff * copy_bw) / 1e3, 6 * S, 12 * mult, gpus, copy_bw)
            if two_gpus:
                add("memcpy_peer", s, t, "transfer", 2 * S / peer_bw / 1e3, 2 * S, 1, 2, peer_bw)
    return "\n".join(rows) + "\n"


HEADER04 = HEADER + ",splits,partition_size,scratch_bytes,stage"


def _fake_lesson04_csv(batches, drop=()):
    """A lesson04.csv of made-up rows for LESSON04_SPLITS at each B in `batches`; `drop` leaves out
    (variant, B, splits, stage) rows."""
    rows = [HEADER04]
    for B in batches:
        for n in LESSON04_SPLITS:
            ctx = 32 * (n - 1) + 1
            for k, v in enumerate(LESSON04_FIXES):
                parts = 1 << (n - 1).bit_length() if v == "pad_scratch" else n
                for stage, us in (("reduce", 5.0 + k), ("total", 10.0 + 2 * k)):
                    if (v, B, n, stage) in drop:
                        continue
                    for l2 in ("hot", "cold"):
                        rows.append(f"h200,04,{v},h8kv4-B{B}-ctx{ctx},bf16,{B},8,4,128,{ctx},16,{l2},{us:.3f},"
                                    f"{us:.3f},1000,1.0,0.1,,,,PASS,0,,,,{n},32,{B * 8 * parts * 520},{stage}")
    return "\n".join(rows) + "\n"


def self_test():
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    rows = [HEADER]
    for k, s in enumerate(LESSON01_SHAPES):
        rows.append(_fake_row(s, "naive", "hot", 10.0 + k))
        rows.append(_fake_row(s, "naive", "cold", 20.0 + k))
    good_csv = "\n".join(rows) + "\n"
    readme = ("# Title\n\nprose before, kept\n\n<!-- table:lesson01_results -->\nstale\n"
              "<!-- /table:lesson01_results -->\n\nprose after, kept\n")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "plots/data/h200").mkdir(parents=True)
        csv_path = root / "plots/data/h200/lesson01.csv"
        csv_path.write_text(good_csv)
        (root / "README.md").write_text(readme)

        def go(check):
            buf = io.StringIO()
            rc = run(root, root / "plots/data", check, out=buf)
            return rc, buf.getvalue()

        rc, msg = go(True)
        expect(rc == 1 and "README.md: table lesson01_results differs" in msg,
               f"--check on a stale block: exit 1 and name it (got {rc}: {msg!r})")
        expect((root / "README.md").read_text() == readme, "--check must not write")

        rc, msg = go(False)
        text = (root / "README.md").read_text()
        expect(rc == 0, f"rewrite exits 0 (got {rc}: {msg!r})")
        expect(text.startswith("# Title\n\nprose before, kept\n\n<!-- table:lesson01_results -->\n\n")
               and text.endswith("\n\n<!-- /table:lesson01_results -->\n\nprose after, kept\n"),
               "text outside the markers is kept, the block replaced whole")
        expect("stale" not in text, "the old block content is gone")
        expect("| llama7b-B1-ctx1k | 16 | 32 | 10.0 | 20.0 |" in text, "a row formatted as the README has it")
        expect("| h8kv4-B32-ctx256 (fp16) |" not in text, "dtype suffix only for non-fp16 rows")
        expect("4000 GB/s" in text, f"read bandwidth derived from gbps and pct_read_bw: {text[:400]!r}")
        expect("plots/data/h200/lesson01.csv" in text and "NVIDIA H200" in text, "the block names its GPU and CSV")

        rc, msg = go(True)
        expect(rc == 0 and "match" in msg, f"--check after a rewrite exits 0 (got {rc}: {msg!r})")

        # A missing row is an error in both modes, and leaves the block as it was.
        csv_path.write_text("\n".join(r for r in rows if ",mqa-B1-ctx4k," not in r or ",cold," not in r) + "\n")
        rc, msg = go(True)
        expect(rc == 1 and "no cold row for lesson 01 naive on mqa-B1-ctx4k" in msg,
               f"missing row: exit 1 naming it (got {rc}: {msg!r})")
        rc, msg = go(False)
        expect(rc == 1 and (root / "README.md").read_text() == text, "a failing table is not rewritten")

        # Rows of another GPU in a GPU's folder are an error.
        csv_path.write_text(good_csv.replace("\nh200,", "\nh100,", 1))
        rc, msg = go(True)
        expect(rc == 1 and "rows of another GPU (h100)" in msg, f"wrong GPU: exit 1 (got {rc}: {msg!r})")

        # A FAILed check is an error, not a number.
        csv_path.write_text(good_csv.replace("PASS", "FAIL", 1))
        rc, msg = go(True)
        expect(rc == 1 and "not PASS" in msg, f"FAILed row: exit 1 (got {rc}: {msg!r})")

        # A row given twice is an error: the table cannot tell which to show.
        csv_path.write_text(good_csv + rows[2] + "\n")
        rc, msg = go(True)
        expect(rc == 1 and f"more than one cold row for lesson 01 naive on {LESSON01_SHAPES[0]}" in msg,
               f"duplicated row: exit 1 naming it (got {rc}: {msg!r})")

        # Unknown names and unbalanced markers.
        csv_path.write_text(good_csv)
        (root / "README.md").write_text(text + "\n<!-- table:no_such_table -->\n<!-- /table:no_such_table -->\n"
                                        "<!-- table:lesson01_posts -->\nno end\n")
        rc, msg = go(True)
        expect(rc == 1 and "unknown table 'no_such_table'" in msg and "no closing marker" in msg,
               f"unknown name and unclosed marker: exit 1 (got {rc}: {msg!r})")

        # A CSV that does not exist is an error when its block is present.
        (root / "README.md").write_text("<!-- table:lesson02_arch -->\n<!-- /table:lesson02_arch -->\n")
        rc, msg = go(True)
        expect(rc == 1 and "lesson02_sm80.csv for any GPU" in msg, f"missing CSV: exit 1 (got {rc}: {msg!r})")

    # Lesson 07: its rows carry a stage; the two-GPU rows are named when absent, never an error.
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "plots/data/h200").mkdir(parents=True)
        csv07 = root / "plots/data/h200/lesson07.csv"
        (root / "README.md").write_text("<!-- table:lesson07 -->\n<!-- /table:lesson07 -->\n\n"
                                        "<!-- table:lesson07_speedup -->\n<!-- /table:lesson07_speedup -->\n\n"
                                        "<!-- table:lesson07_targets -->\n<!-- /table:lesson07_targets -->\n")

        def go07(text):
            csv07.write_text(text)
            buf = io.StringIO()
            rc = run(root, root / "plots/data", False, out=buf)
            return rc, buf.getvalue(), (root / "README.md").read_text()

        rc, msg, text = go07(_fake_lesson07_csv(False))
        expect(rc == 0, f"lesson07 tables from a one-GPU CSV (got {rc}: {msg!r})")
        m = re.search(r"device-to-device\s+copy\s+(\d+)(?:\s+to\s+(\d+))?\s+GB/s", text)
        expect(m and int(m.group(1)) <= 4000 <= int(m.group(2) or m.group(1)),
               f"lesson07: copy bandwidth from GB/s over % copy BW ({m.group(0) if m else text[:300]!r})")
        expect("`staged_nccl` (needs two GPUs and a build with NCCL)" in text and "`gpus` 1" in text,
               "lesson07: absent two-GPU rows are named in a line")
        expect("| T4096-L32-tp2to4 | 512 |" in text and "| - / 64 / 1 |" not in text,
               "lesson07: the totals table has every shape")
        expect("| T32768-L32-tp4to2 | 4096 | 2147.5 | - |" in text, "lesson07: per_token not run above 4096 tokens is '-'")
        expect("| T4096-L32-tp4to2 | 1,048,576 | 4,194,304 | 4.00 | 12 |" in text, "lesson07_speedup row")
        expect("staged_peer` total" not in text, "lesson07: no two-GPU columns without two-GPU rows")
        expect("| 90.0 | 90.0 | 90.0 | met (aim: met) |" in text and "| 4687x | 4687x | 4687x | met |" in text
               and "| - | - | - | not in this CSV (needs two GPUs) |" in text, "lesson07_targets rows")

        rc, msg, text = go07(_fake_lesson07_csv(True))
        expect(rc == 0 and re.search(r"peer\s+copy\s+(69\d\s+to\s+70\d|700)\s+GB/s", text) and "`staged_nccl` total" in text
               and "Not in this CSV" not in text, f"lesson07 with two-GPU rows (got {rc}: {msg!r})")
        expect("| `staged_peer` | 4 + 4 + 4 |" in text and "(85.0)" in text, "lesson07: a two-GPU stage row")
        expect("| 85.0 | 85.0 | 85.0 | met |" in text and "| 80.0 | 80.0 | 80.0 | met |" in text,
               "lesson07_targets: two-GPU rows judged against the peer bandwidth")

        for drop, what in [((("staged", "T4096-L32-tp2to4", "scatter"),), "no lesson 07 staged scatter row on T4096-L32-tp2to4"),
                           ((("per_token", "T256-L32-tp1to4-kv2", "total"),), "no lesson 07 per_token total row on T256-L32-tp1to4-kv2"),
                           ((("memcpy", "T32768-L32-tp2to4", "transfer"),), "no lesson 07 memcpy transfer row on T32768-L32-tp2to4")]:
            rc, msg, _ = go07(_fake_lesson07_csv(False, drop=drop))
            expect(rc == 1 and what in msg, f"lesson07 missing row: exit 1 naming it (got {rc}: {msg!r})")
        rc, msg, _ = go07(_fake_lesson07_csv(True, drop=(("staged_peer", "T256-L32-tp4to2", "total"),)))
        expect(rc == 1 and "no lesson 07 staged_peer total row on T256-L32-tp4to2" in msg,
               f"lesson07: a two-GPU variant present for some shapes must be there for all (got {rc}: {msg!r})")
        rc, msg, _ = go07(_fake_lesson07_csv(False).replace("PASS", "FAIL", 3))
        expect(rc == 1 and "not PASS" in msg, f"lesson07 FAILed row: exit 1 (got {rc}: {msg!r})")

    # Lesson 04: rows carry a stage; a B without rows is named in a line, a missing split of a B
    # that has rows is an error.
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "plots/data/h200").mkdir(parents=True)
        csv04 = root / "plots/data/h200/lesson04.csv"
        (root / "README.md").write_text("<!-- table:lesson04 -->\n<!-- /table:lesson04 -->\n")

        def go04(text):
            csv04.write_text(text)
            buf = io.StringIO()
            rc = run(root, root / "plots/data", False, out=buf)
            return rc, buf.getvalue(), (root / "README.md").read_text()

        rc, msg, text = go04(_fake_lesson04_csv((1, 16)))
        expect(rc == 0, f"lesson04 table (got {rc}: {msg!r})")
        expect("| 513 | 16385 | 66560.0 / 33345.0 | 5.00 / 6.00 / 7.00 | 10.00 / 12.00 / 14.00 | 0.83 |" in text
               and "| 3 | 65 | 16.2 / 12.2 |" in text, "lesson04: rows formatted, scratch in KiB")
        expect(text.index("**B 16**") < text.index("**B 1**") and "Not in this CSV" not in text,
               "lesson04: B 16 before B 1")
        rc, msg, text = go04(_fake_lesson04_csv((16,)))
        expect(rc == 0 and "**B 1**" not in text and "Not in this CSV: the B 1 sweep." in text,
               f"lesson04: a B without rows is named, not an error (got {rc}: {msg!r})")
        rc, msg, _ = go04(_fake_lesson04_csv((1, 16), drop=(("loop", 16, 129, "total"),)))
        expect(rc == 1 and "no lesson 04 loop total cold row at B 16, 129 splits" in msg,
               f"lesson04 missing row: exit 1 naming it (got {rc}: {msg!r})")
        rc, msg, _ = go04(_fake_lesson04_csv((1, 16)).replace("PASS", "FAIL"))
        expect(rc == 1 and "not PASS" in msg, f"lesson04 FAILed row: exit 1 (got {rc}: {msg!r})")
        text04 = _fake_lesson04_csv((1, 16))
        dup = next(r for r in text04.splitlines() if r.startswith("h200,04,loop,h8kv4-B16-ctx4097,") and ",cold," in r
                   and r.endswith(",total"))
        rc, msg, _ = go04(text04 + dup + "\n")
        expect(rc == 1 and "more than one lesson 04 loop total cold row at B 16, 129 splits" in msg,
               f"lesson04 duplicated row: exit 1 naming it (got {rc}: {msg!r})")

    # Lesson 04's plans: auto against lesson 03's auto and FlashInfer; auto_pick required; the
    # peers are optional; right and within-1.10x counted.
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "plots/data/h200").mkdir(parents=True)
        plans = root / "plots/data/h200/lesson04_plans.csv"
        peers = root / "plots/data/h200/peers_flashinfer.csv"
        (root / "README.md").write_text("<!-- table:lesson04_plans -->\n<!-- /table:lesson04_plans -->\n")

        def plans_csv(auto_us, pick="split_k_128 + pow2_lanes"):
            rows = [HEADER + ",auto_pick"]
            for i, s in enumerate(TABLE_A + TABLE_B + LONG_SHAPES):
                rows.append(_fake_row(s, "lesson03_auto", "cold", 20.0, lesson="04") + ",")
                rows.append(_fake_row(s, "auto", "cold", auto_us, lesson="04") + f",{pick}")
                rows.append(_fake_row(s, "split_pow2_256", "cold", 19.0 + (i % 2) * 2, lesson="04") + ",")
            return "\n".join(rows) + "\n"

        def go_plans(text, peer_us=None):
            plans.write_text(text)
            if peer_us is None:
                peers.unlink(missing_ok=True)
            else:
                peers.write_text("\n".join([HEADER] + [_fake_row(s, "flashinfer_decode", "cold", peer_us, lesson="peer")
                                                       for s in TABLE_A]) + "\n")
            buf = io.StringIO()
            rc = run(root, root / "plots/data", False, out=buf)
            return rc, buf.getvalue(), " ".join((root / "README.md").read_text().split())  # captions wrap anywhere

        rc, msg, text = go_plans(plans_csv(18.0), peer_us=17.0)
        expect(rc == 0 and "| llama7b-B1-ctx1k | 20.00 | `split_k_128 + pow2_lanes` | 18.00 |" in text
               and "| 1.11x | `split_pow2_256` 19.00 | + | 17.00 | 1.06 |" in text
               and "(21 of 21)" in text and "within 1.10x of it: 10 of 10" in text,
               f"lesson04_plans: rows, right and FlashInfer counts (got {rc}: {msg!r})")
        rc, msg, text = go_plans(plans_csv(20.5), peer_us=17.0)
        expect(rc == 0 and "(10 of 21)" in text and "within 1.10x of it: 0 of 10" in text,
               f"lesson04_plans: auto > 5 % behind the best is not right (got {rc}: {msg!r})")
        rc, msg, text = go_plans(plans_csv(18.0))
        expect(rc == 0 and "No FlashInfer measurement for this GPU." in text and "| - | - |" in text,
               f"lesson04_plans: no peers CSV is a line, not an error (got {rc}: {msg!r})")
        rc, msg, _ = go_plans(plans_csv(18.0, pick=""))
        expect(rc == 1 and "has no auto_pick" in msg, f"lesson04_plans: auto_pick required (got {rc}: {msg!r})")

    expect(variant_list(["a_tgs4", "a_tgs8", "a_tgs16", "b"]) == "`a_tgs{4,8,16}`, `b`", "variant_list")

    # The catalogue: each post's shapes are shapes the tables measure, its tuples complete.
    expect(set(C.POST_L4_MS) <= set(TABLE_A) and C.POST_L4_MQA["shape"] in C.POST_L4_MS,
           "catalog: the L4 post's shapes are Table A shapes")
    expect(list(C.POST_4090_MS) == TABLE_B and all(len(v) == 3 for v in C.POST_4090_MS.values()),
           "catalog: the RTX 4090 post's shapes are Table B, each (base, split, splits)")
    expect(list(C.POST_H200_TGS_SWEEP_US) == C.TABLE_C_TGS_SWEEP and set(C.TABLE_C_TGS_SWEEP) <= set(C.TABLE_C)
           and all(len(v) == len(C.TGS) for v in C.POST_H200_TGS_SWEEP_US.values()),
           "catalog: the H200 post's TGS sweep covers the sweep's Table C shapes at every TGS")
    expect(set(C.POST_H200_ABLATION_US) <= set(C.TABLE_C) and C.POST_H200_SPLIT_K_FIX_US[0] in C.TABLE_C,
           "catalog: the H200 post's decode shapes are Table C shapes")
    expect(C.POST_H200_PREFILL_SHAPE in C.PREFILL_SHAPES and len({k for k, *_ in C.POST_H200_PREFILL_US}) == 4,
           "catalog: the H200 post's prefill shape is a lesson 06 prompt shape, four kernels")
    expect(set(C.GPU_ORDER) == set(C.GPU_NAMES) == set(C.GPU_SHORT) and set(C.GPU_ORDER) <= set(C.GPU_DEVICE_NAMES),
           "catalog: every GPU in GPU_ORDER is named")
    # Lesson 06: the ladder table reads every step file (the last, step 11, reuses step 10's kernel
    # and adds only its policy: a few lines, not 0 and not the whole kernel); the results table's
    # last column and the post's FA3 row are the last step; a Hopper run without the last step's
    # rows is an error, a run with no sm_90a steps at all a note.
    steps = ladder_steps(REPO / "lessons" / "06_wgmma_prefill")
    last_n, _, _, last_variant, last_added = steps[-1]
    expect([n for n, *_ in steps] == sorted(n for n, *_ in steps) and len({n for n, *_ in steps}) == len(steps),
           "lesson 06 ladder: steps in order, each once")
    expect(last_variant.rsplit("_", 1) == [C.LESSON06_METHODS[-1], last_variant.rsplit("_", 1)[1]]
           and last_variant.rsplit("_", 1)[1] in C.LESSON06_POLICIES and 0 < last_added < 80,
           f"lesson 06 ladder: the last step is {C.LESSON06_METHODS[-1]}, adding a few lines (got {steps[-1]})")
    expect(set(C.LESSON06_METHODS) <= {v.rsplit("_", 1)[0] for *_, v, _ in steps} | {"as_decode"},
           "catalog: every lesson 06 method of the results table is a step of the ladder")
    expect(C.LESSON06_POST_OURS["fa3"] == f"{C.LESSON06_METHODS[-1]}_softmax" and LESSON06_POST[-1][2] == C.LESSON06_POST_OURS["fa3"],
           "catalog: the post's FA3 sits beside the last step's softmax")

    def l06(methods):
        head = "gpu,lesson,variant,shape,prefix,l2,us_median,check"
        return Lesson06Csv(Csv("plots/data/x/lesson06.csv", "\n".join(
            [head] + [f"x,06,{m}_{p},B1-T8192-H32-Hkv8,0,cold,1.0,PASS" for m in methods for p in C.LESSON06_POLICIES])))

    expect(l06_absent(l06(C.LESSON06_METHODS)) == "", "lesson 06: every method present, no note")
    expect("built for sm_90a only" in l06_absent(l06(["as_decode", "mma_sync"])), "lesson 06: a run without sm_90a steps: a note")
    before_last = list(dict.fromkeys([*C.LESSON06_METHODS[:-1], *C.LESSON06_HOPPER[:-1]]))  # a run from before the last step
    note = l06_absent(l06(before_last))
    expect(f"before `{C.LESSON06_METHODS[-1]}`" in note and f"`{C.LESSON06_HOPPER[-2]}`" in note,
           f"lesson 06: a Hopper run from before the last step is said so, its newest step named (got {note!r})")
    gap = [m for m in before_last if m != C.LESSON06_HOPPER[1]]
    try:
        l06_absent(l06(gap))
        expect(False, "lesson 06: a Hopper run without a step older than its newest is an error")
    except TableError as e:
        expect(f"{C.LESSON06_HOPPER[1]}_softmax" in str(e), f"lesson 06: the error names the missing step (got {e})")

    # lesson06_floor.csv: the floor's rows carry check '-' (never checked), the step's must PASS
    def floor_csv(floor_check, step_check):
        head = "gpu,lesson,variant,shape,prefix,l2,us_median,check"
        return Lesson06FloorCsv(Csv("plots/data/x/lesson06_floor.csv", "\n".join(
            [head, f"x,06,mma_floor,B1-T8192-H32-Hkv8,0,cold,1.0,{floor_check}",
             f"x,06,{C.LESSON06_METHODS[-1]}_softmax,B1-T8192-H32-Hkv8,0,cold,1.2,{step_check}"])))

    try:
        good = floor_csv("-", "PASS")
        expect(good.row("mma_floor", "B1-T8192-H32-Hkv8", "0")["us_median"] == "1.0"
               and good.row(f"{C.LESSON06_METHODS[-1]}_softmax", "B1-T8192-H32-Hkv8", "0")["us_median"] == "1.2",
               "lesson 06 floor: a floor row with check '-' and a step row with PASS are read")
    except TableError as e:
        expect(False, f"lesson 06 floor: a floor row with check '-' and a step row with PASS are read (got {e})")
    for bad, what in ((("PASS", "PASS"), "a floor row that claims a check"), (("-", "FAIL"), "a FAILed step row")):
        try:
            c = floor_csv(*bad)
            c.row("mma_floor", "B1-T8192-H32-Hkv8", "0")
            c.row(f"{C.LESSON06_METHODS[-1]}_softmax", "B1-T8192-H32-Hkv8", "0")
            expect(False, f"lesson 06 floor: {what} is an error")
        except TableError:
            pass

    # The ladder table of a run from before the newest steps: '-' for them and a note; a step
    # missing below one the run has is an error.
    import shutil
    folder, _, ladder_shape, ladder_prefix = C.LADDERS["06"]
    steps06 = ladder_steps(REPO / "lessons" / folder)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "plots/data/h200").mkdir(parents=True)
        (root / "lessons" / folder).mkdir(parents=True)
        for f in (REPO / "lessons" / folder).glob("step*_*.cuh"):  # the step files alone: no README blocks
            shutil.copy(f, root / "lessons" / folder / f.name)
        (root / "README.md").write_text("<!-- table:lesson06_ladder_steps -->\n<!-- /table:lesson06_ladder_steps -->\n")

        def go_ladder(variants):
            head = "gpu,lesson,variant,shape,prefix,l2,us_median,check"
            (root / "plots/data/h200/lesson06.csv").write_text("\n".join(
                [head] + [f"h200,06,{v},{ladder_shape},{ladder_prefix},cold,{100.0 - k:.1f},PASS"
                          for k, v in enumerate(variants)]) + "\n")
            buf = io.StringIO()
            rc = run(root, root / "plots/data", False, out=buf)
            return rc, buf.getvalue(), (root / "README.md").read_text()

        ladder_variants = [v for *_, v, _ in steps06]

        def companions(vs):
            """The step before's variant of a step's own policy, where the two steps' policies differ."""
            return [f"{a.rsplit('_', 1)[0]}_{b.rsplit('_', 1)[1]}" for a, b in zip(vs, vs[1:])
                    if a.rsplit("_", 1)[1] != b.rsplit("_", 1)[1]]

        rc, msg, text = go_ladder(ladder_variants[:-1] + companions(ladder_variants[:-1]))
        expect(rc == 0 and f"This run is from before `{ladder_variants[-1]}` (`-`)." in text.replace("\n", " ")
               and f"| `{ladder_variants[-1]}` | - |  |" in text,
               f"lesson 06 ladder: a run from before the last step shows '-' and says so (got {rc}: {msg!r})")
        # a step whose variant is another policy's than the step before's: its speedup is over the
        # step before's variant of its own policy (the last step's, here)
        last_m, last_p = ladder_variants[-1].rsplit("_", 1)
        prev_m, prev_p = ladder_variants[-2].rsplit("_", 1)
        if last_p != prev_p:
            run_variants = ladder_variants + companions(ladder_variants)
            rc, msg, text = go_ladder(run_variants)
            n = len(ladder_variants)
            base = 100.0 - run_variants.index(f"{prev_m}_{last_p}")
            want = f"| `{ladder_variants[-1]}` | {us_ladder(100.0 - (n - 1))} | {base / (100.0 - (n - 1)):.2f}x |"
            expect(rc == 0 and want in text and "over the step before's variant of that policy" in text.replace("\n", " "),
                   f"lesson 06 ladder: a step of one policy is set against the step before's same policy ({want!r}; got {rc}: {msg!r})")
        rc, msg, _ = go_ladder([v for v in ladder_variants if v != ladder_variants[-3]])
        expect(rc == 1 and f"no {ladder_variants[-3]} row, though the run has a later step's" in msg,
               f"lesson 06 ladder: a step missing below a later one is an error naming it (got {rc}: {msg!r})")

    # The results table: a run without sm_90a steps keeps the last step's column, as '-'; a Hopper
    # run from before the last step shows its newest step in that column.
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "plots/data/h200").mkdir(parents=True)
        (root / "README.md").write_text("<!-- table:lesson06 -->\n<!-- /table:lesson06 -->\n")

        def go_results(methods):
            head = "gpu,lesson,variant,shape,prefix,l2,us_median,tflops,pct_mma_peak,ctas,check"
            (root / "plots/data/h200/lesson06.csv").write_text("\n".join(
                [head] + [f"h200,06,{m}_{p},{shape},{prefix},cold,100.0,50.0,10.0,132,PASS"
                          for m in methods for p in C.LESSON06_POLICIES for shape, prefix in C.LESSON06_SHAPES])
                + "\n")
            buf = io.StringIO()
            rc = run(root, root / "plots/data", False, out=buf)
            return rc, buf.getvalue(), (root / "README.md").read_text()

        rc, msg, text = go_results(["as_decode", "mma_sync"])
        header = next((ln for ln in text.splitlines() if ln.startswith("| shape |")), "")
        expect(rc == 0 and header.count("`mma_sync`") == 1 and f"`{C.LESSON06_METHODS[-1]}`" in header
               and "built for sm_90a only" in text.replace("\n", " "),
               f"lesson 06 results: a run without sm_90a steps keeps the last column as '-' (got {rc}: {header!r} {msg!r})")
        rc, msg, text = go_results(list(dict.fromkeys([*C.LESSON06_METHODS[:-1], *C.LESSON06_HOPPER[:-1]])))
        header = next((ln for ln in text.splitlines() if ln.startswith("| shape |")), "")
        expect(rc == 0 and f"`{C.LESSON06_HOPPER[-2]}`" in header and f"`{C.LESSON06_METHODS[-1]}`" not in header,
               f"lesson 06 results: a run from before the last step shows its newest step (got {rc}: {header!r} {msg!r})")

    for f in failures:
        print(f"self-test FAILED: {f}")
    if not failures:
        print("self-test passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(self_test())
