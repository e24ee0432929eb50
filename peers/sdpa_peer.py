#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention as a peer of the lessons, on the lessons' shapes.

    python3 peers/sdpa_peer.py --csv plots/data/<gpu>/peers_sdpa.csv [--quick] [--shape NAME]...

Backends, each forced with torch.nn.attention.sdpa_kernel, each a CSV variant:
  sdpa_flash  SDPBackend.FLASH_ATTENTION
  sdpa_cudnn  SDPBackend.CUDNN_ATTENTION
on contiguous K/V ([B, Hkv, ctx, D], no pages) with enable_gqa=True:
  decode   one query token per sequence over Tables A, B and C (common/shapes.cpp), no mask;
  prefill  lesson 06's prompt shapes, causal, no cached prefix (prefix 0), bf16.

Measured as the lessons measure (common/timer.cu): each call is captured once in a CUDA graph
(so the host's launch cost stays out), every timed replay sits between its own pair of events,
behind a GPU sleep that lets the host queue them, after warm-up replays; median and minimum.
L2-hot replays one graph over the same tensors; L2-cold rotates among graphs over copies of the
inputs whose total exceeds twice the L2. Each backend is checked against a float64 reference
(same bounds as the lessons: relative norm error and max-abs error tied to the dtype), before
the timing and again on the output of a timed replay.

The shapes, the GPU's short name, its L2 size and its two measured ceilings (streaming-read
bandwidth, dense bf16 GEMM rate) come from the C++ side, `peer_info` (peers/info_main.cu), so
that the rows are set against the same ceilings as the lessons'. scripts/reproduce.sh builds
and runs it; by hand, point --peer-info at build/bin/peer_info.

CSV columns: the lessons' (gpu, lesson, variant, shape, dtype, B, H, Hkv, D, ctx, block_size,
l2, us_median, us_min, bytes, gbps, pct_read_bw, flops, tflops, pct_mma_peak, check, rel_err,
read_bw_gbps, mma_peak_tflops: the two ceilings the percentages are of), then ctas, ctas_per_sm, waves (empty: PyTorch does not say) and prefix; lesson = `peer`.
`bytes`: what the call must move (K and V of the context, q, out; for prefill q, K, V, out);
`block_size` is empty (no pages).

A backend that refuses a shape is named in one line and left out. Exit codes: 0; 1 a check
failed; 2 bad arguments; 3 no usable GPU; 4 PyTorch not importable.
"""

import argparse
import csv
import math
import os
import subprocess
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

COLUMNS = ["gpu", "lesson", "variant", "shape", "dtype", "B", "H", "Hkv", "D", "ctx", "block_size", "l2",
           "us_median", "us_min", "bytes", "gbps", "pct_read_bw", "flops", "tflops", "pct_mma_peak", "check",
           "rel_err", "read_bw_gbps", "mma_peak_tflops", "ctas", "ctas_per_sm", "waves", "prefix"]
# common/check.cpp: bounds on ||out - ref|| / ||ref|| and on max |out - ref| / max(1, max |ref|).
TOLERANCE = {"fp16": 2e-3, "bf16": 1.6e-2}
EXIT_BAD_INPUT, EXIT_NO_GPU, EXIT_NO_TORCH = 2, 3, 4


def run_peer_info(exe, *args):
    """`key value` lines (or shape lines) from peer_info; exits with its code when it fails."""
    if not os.path.isfile(exe):
        print(f"sdpa_peer: {os.path.relpath(exe, REPO)} not found: build it first "
              f"(cmake --build build --target peer_info), or pass --peer-info")
        sys.exit(EXIT_BAD_INPUT)
    p = subprocess.run([exe, *args], capture_output=True, text=True)
    if p.returncode != 0:
        print((p.stdout + p.stderr).strip().splitlines()[-1] if (p.stdout + p.stderr).strip() else
              f"sdpa_peer: peer_info exited with {p.returncode}")
        sys.exit(p.returncode)
    return p.stdout.splitlines()


def read_shapes(exe, quick):
    shapes = []
    for line in run_peer_info(exe, "--shapes", *(["--quick"] if quick else [])):
        kind, name, dtype, B, H, Hkv, D, bs, n = line.split()
        shapes.append(dict(kind=kind, name=name, dtype=dtype, B=int(B), H=int(H), Hkv=int(Hkv), D=int(D),
                           block_size=int(bs), n=int(n)))
    return shapes


def cold_copies(bytes_per_copy, l2_bytes):
    """common/timer.cu's cold_copies: enough copies that one pass over them exceeds 2 x L2."""
    if bytes_per_copy <= 0:
        return 2
    need = (2 * l2_bytes + bytes_per_copy - 1) // bytes_per_copy
    return max(2, need + 1)


class Peer:
    def __init__(self, torch, info, iters, warmup, seed):
        self.torch = torch
        self.info = info
        self.iters, self.warmup, self.seed = iters, warmup, seed
        from torch.nn.attention import SDPBackend, sdpa_kernel
        self.sdpa_kernel = sdpa_kernel
        self.backends = [("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)]
        self.pool = torch.cuda.graph_pool_handle()

    # -- inputs and reference ----------------------------------------------------------------

    def inputs(self, s):
        """q [B, H, Tq, D], k and v [B, Hkv, Tk, D], drawn as the lessons draw them (K, V in [-1, 1),
        q in [-3, 3), so that the logits have a standard deviation near 1), rounded to the dtype."""
        torch = self.torch
        dt = torch.float16 if s["dtype"] == "fp16" else torch.bfloat16
        g = torch.Generator(device="cuda")
        g.manual_seed(self.seed)
        tq = 1 if s["kind"] == "decode" else s["n"]
        B, H, Hkv, D, n = s["B"], s["H"], s["Hkv"], s["D"], s["n"]
        q = (torch.rand(B, H, tq, D, generator=g, device="cuda") * 6 - 3).to(dt)
        k = (torch.rand(B, Hkv, n, D, generator=g, device="cuda") * 2 - 1).to(dt)
        v = (torch.rand(B, Hkv, n, D, generator=g, device="cuda") * 2 - 1).to(dt)
        return q, k, v

    def reference(self, q, k, v, causal):
        """softmax(scale q.K^T) V in float64, one (sequence, KV head) at a time, query rows in chunks."""
        torch = self.torch
        B, H, tq, D = q.shape
        Hkv, tk = k.shape[1], k.shape[2]
        group = H // Hkv
        scale = 1.0 / math.sqrt(D)
        out = torch.empty(B, H, tq, D, dtype=torch.float64, device="cuda")
        rows = max(1, (1 << 27) // max(1, group * tk))  # about 1 GiB of float64 scores at a time
        for b in range(B):
            for h in range(Hkv):
                kk, vv = k[b, h].double(), v[b, h].double()  # [tk, D]
                for r0 in range(0, tq, rows):
                    r1 = min(tq, r0 + rows)
                    qq = q[b, h * group:(h + 1) * group, r0:r1].double()  # [group, rows, D]
                    s = (qq @ kk.T) * scale  # [group, rows, tk]
                    if causal:  # query i (of tq, aligned to the end of the keys) sees keys <= tk - tq + i
                        i = torch.arange(r0, r1, device="cuda")[:, None]
                        j = torch.arange(tk, device="cuda")[None, :]
                        s = s.masked_fill(j > (tk - tq) + i, float("-inf"))
                    out[b, h * group:(h + 1) * group, r0:r1] = torch.softmax(s, dim=-1) @ vv
        return out

    def compare(self, out, ref, dtype):
        torch = self.torch
        o = out.double()
        if not torch.isfinite(o).all():
            return False, float("nan")
        rel = (torch.linalg.vector_norm(o - ref) / torch.linalg.vector_norm(ref)).item()
        max_abs = (o - ref).abs().max().item()
        tol = TOLERANCE[dtype]
        return rel <= tol and max_abs <= tol * max(1.0, ref.abs().max().item()), rel

    # -- timing ------------------------------------------------------------------------------

    def capture(self, fn):
        torch = self.torch
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=self.pool):
            out = fn()
        return g, out

    def time_graphs(self, graphs):
        """Median and minimum us of single replays, rotating through `graphs`."""
        torch = self.torch
        n = len(graphs)
        for i in range(self.warmup):
            graphs[i % n].replay()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        torch.cuda.synchronize()
        # Hold the GPU (about 100 us a replay at 2 GHz, at most 200 ms) while the host queues the
        # replays and their events behind it, as common/timer.cu does with its spin kernel. Python
        # queues a replay and its two events in some 20 us, not the C++ timer's few: with 20 us a
        # replay, a host stall once let the GPU drain the queue, and half of one shape's cold
        # replays timed the host (an H100 run: median 108 us, minimum 15).
        torch.cuda._sleep(int(min(200e-3, 100e-6 * self.iters) * 2e9))
        for i in range(self.iters):
            starts[i].record()
            graphs[(self.warmup + i) % n].replay()
            ends[i].record()
        torch.cuda.synchronize()
        us = sorted(a.elapsed_time(b) * 1000.0 for a, b in zip(starts, ends))
        m = len(us)
        median = us[m // 2] if m % 2 else 0.5 * (us[m // 2 - 1] + us[m // 2])
        return median, us[0]

    # -- one shape ----------------------------------------------------------------------------

    def run_shape(self, s, only, skipped):
        torch = self.torch
        F = torch.nn.functional
        causal = s["kind"] == "prefill"
        q, k, v = self.inputs(s)
        ref = self.reference(q, k, v, causal)
        elem = q.element_size()
        B, H, Hkv, D, n = s["B"], s["H"], s["Hkv"], s["D"], s["n"]
        tq = q.shape[2]
        nbytes = elem * (2 * B * H * tq * D + 2 * B * Hkv * n * D)  # q, out; K, V
        # causal FLOPs as lesson 06 counts them: QK^T and PV over the i + 1 keys of query row i
        flops = 4.0 * B * H * D * tq * (tq + 1) / 2 if causal else None
        # Copies for L2-cold: K and V (and q for prefill), rotated.
        copy_bytes = elem * (2 * B * Hkv * n * D + (B * H * tq * D if causal else 0))
        ncopies = cold_copies(copy_bytes, self.info["l2_bytes"])
        sets = [(q, k, v)] + [((q.clone() if causal else q), k.clone(), v.clone()) for _ in range(ncopies - 1)]
        rows = []
        for variant, backend in self.backends:
            if only and variant != only:
                continue

            def call(qq, kk, vv, backend=backend):
                with self.sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(qq, kk, vv, is_causal=causal, enable_gqa=True)

            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):  # warm-up outside the graph (plans, handles)
                        for _ in range(2):
                            call(*sets[0])
                    torch.cuda.current_stream().wait_stream(side)
                    torch.cuda.synchronize()
                    graphs = [self.capture(lambda st=st: call(*st)) for st in sets]
            except RuntimeError as e:
                # SDPA says why in warnings ("... not used because ..."), then raises "No available kernel".
                why = "; ".join(" ".join(str(w.message).split()) for w in caught)
                skipped.append(f"{variant} on {s['name']}: {(why or ' '.join(str(e).split()))[:300]}")
                torch.cuda.synchronize()
                continue
            hot_g, hot_out = graphs[0]
            hot_out.fill_(float("nan"))  # poison, then one replay must write every element
            hot_g.replay()
            torch.cuda.synchronize()
            ok_before, rel_before = self.compare(hot_out, ref, s["dtype"])
            hot = self.time_graphs([hot_g])
            cold = self.time_graphs([g for g, _ in graphs])
            # the output of a timed replay of copy 0, checked again
            ok_after, rel_after = self.compare(hot_out, ref, s["dtype"])
            ok = ok_before and ok_after
            rel = max(rel_before, rel_after) if ok else (rel_after if ok_before else rel_before)
            if not ok:
                print(f"FAIL {variant} {s['name']}: relative error {rel:.3e} (bound {TOLERANCE[s['dtype']]:.1e})")
            for l2, (med, mn) in (("hot", hot), ("cold", cold)):
                gbps = nbytes / (med * 1e-6) / 1e9
                row = {"gpu": self.info["gpu"], "lesson": "peer", "variant": variant, "shape": s["name"],
                       "dtype": s["dtype"], "B": B, "H": H, "Hkv": Hkv, "D": D, "ctx": n, "block_size": "", "l2": l2,
                       "us_median": f"{med:.3f}", "us_min": f"{mn:.3f}", "bytes": nbytes, "gbps": f"{gbps:.1f}",
                       "pct_read_bw": f"{100 * gbps / self.info['read_bw_gbps']:.1f}",
                       "check": "PASS" if ok else "FAIL", "rel_err": f"{rel:.3e}",
                       "read_bw_gbps": f"{self.info['read_bw_gbps']:.1f}",
                       "prefix": 0 if causal else ""}
                if flops is not None:
                    tflops = flops / (med * 1e-6) / 1e12
                    row.update(flops=f"{flops:.0f}", tflops=f"{tflops:.1f}",
                               pct_mma_peak=f"{100 * tflops / self.info['bf16_tflops']:.1f}",
                               mma_peak_tflops=f"{self.info['bf16_tflops']:.1f}")
                rows.append(row)
            del graphs, hot_out
        del sets
        torch.cuda.empty_cache()
        return rows


def main():
    ap = argparse.ArgumentParser(description="Time PyTorch's SDPA (flash and cuDNN backends) on the lessons' shapes.")
    ap.add_argument("--csv", help="write the rows here (the lessons' columns)")
    ap.add_argument("--quick", action="store_true", help="a few shapes only (peer_info --shapes --quick)")
    ap.add_argument("--shape", action="append", default=[], help="only these shapes (repeatable)")
    ap.add_argument("--variant", choices=["sdpa_flash", "sdpa_cudnn"], help="only this backend")
    ap.add_argument("--iters", type=int, default=100, help="timed replays per measurement (default 100)")
    ap.add_argument("--seed", type=int, default=20241121, help="seed of the random inputs")
    ap.add_argument("--peer-info", default=os.path.join(REPO, "build", "bin", "peer_info"),
                    help="the peer_info executable (default build/bin/peer_info)")
    args = ap.parse_args()
    if args.iters < 1:
        print("sdpa_peer: --iters must be at least 1")
        return EXIT_BAD_INPUT

    shapes = read_shapes(args.peer_info, args.quick)
    if args.shape:
        names = {s["name"] for s in shapes}
        unknown = [n for n in args.shape if n not in names]
        if unknown:
            print(f"sdpa_peer: unknown shape {', '.join(unknown)} (peer_info --shapes lists them)")
            return EXIT_BAD_INPUT
        shapes = [s for s in shapes if s["name"] in args.shape]

    try:
        import torch
    except ImportError as e:
        print(f"sdpa_peer: PyTorch is not importable ({e}); pip install torch")
        return EXIT_NO_TORCH
    if not torch.cuda.is_available():
        print("sdpa_peer: PyTorch sees no CUDA GPU; nothing to run")
        return EXIT_NO_GPU
    info = {}
    for line in run_peer_info(args.peer_info):
        key, _, value = line.partition(" ")
        info[key] = value
    for key in ("l2_bytes", "read_bw_gbps", "bf16_tflops"):
        info[key] = float(info[key])
    info["l2_bytes"] = int(info["l2_bytes"])
    print(f"PyTorch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}) on "
          f"{info['name']}; measured streaming read {info['read_bw_gbps']:.0f} GB/s, dense bf16 GEMM "
          f"{info['bf16_tflops']:.0f} TFLOP/s")

    peer = Peer(torch, info, args.iters, warmup=10, seed=args.seed)
    rows, skipped = [], []
    for i, s in enumerate(shapes, 1):
        print(f"[{i}/{len(shapes)}] {s['name']}", flush=True)
        rows += peer.run_shape(s, args.variant, skipped)

    # The table: one line per (variant, shape), hot and cold side by side.
    print(f"{'shape':<22} {'variant':<11} {'hot us':>9} {'cold us':>9} {'cold GB/s':>9} {'% read':>7} "
          f"{'TFLOPS':>7} {'check':>5}")
    for hot, cold in zip(rows[0::2], rows[1::2]):
        print(f"{cold['shape']:<22} {cold['variant']:<11} {float(hot['us_median']):>9.2f} "
              f"{float(cold['us_median']):>9.2f} {float(cold['gbps']):>9.0f} {float(cold['pct_read_bw']):>7.1f} "
              f"{cold.get('tflops', '') or '-':>7} {cold['check']:>5}")
    for line in skipped:
        print(f"not run: {line}")
    if args.csv:
        os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS, restval="")
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {len(rows)} rows to {args.csv}")
    return 1 if any(r["check"] == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
