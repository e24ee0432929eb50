// lesson07_kv_staging: checks every way of handing a request's KV cache from a prefill
// server to a decode server of another TP size (bit-exact, with a simulated server loop),
// then measures them against this GPU's device-to-device copy bandwidth.
//
//   lesson07_kv_staging                 check (N/N PASS), then the table
//   lesson07_kv_staging --check         check only (what the sanitizer tests run)
//   lesson07_kv_staging --bench --shape T4096-L32-tp4to2 --variant staged
//   lesson07_kv_staging --tokens 1000 --layers 8 --tp 2to8 --kv-heads 4
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "copy_ceiling.cuh"
#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "device_info.cuh"
#include "flags.h"
#include "handoff.h"
#include "nccl_link.h"
#include "random.h"
#include "server_loop.h"
#include "staging_plan.h"
#include "table.h"
#include "timer.cuh"

namespace {

using namespace lesson07;

const char* kProgram = "lesson07_kv_staging";
const std::vector<std::string> kVariants = {"per_token", "per_layer", "staged", "staged_peer", "staged_nccl"};
constexpr int kPerTokenMaxTokens = 4096;  // above it one run is millions of copy calls
constexpr int kPerTokenReps = 3;          // timed runs of per_token (each is already many calls)
constexpr int kWarmup = 3;

[[noreturn]] void bad_input(const std::string& msg) {
    std::fprintf(stderr, "error: %s: %s\n", kProgram, msg.c_str());
    std::exit(pa::kExitBadInput);
}

[[noreturn]] void cannot_run(const std::string& msg) {
    std::fprintf(stderr, "%s: %s\n", kProgram, msg.c_str());
    std::exit(pa::kExitNoGpu);
}

std::string usage() {
    return pa::common_usage_line(kProgram) +
           "       " + std::string(kProgram) + " [--check | --bench] --tokens N [--layers N] [--tp PsToPd] [--kv-heads N] ...\n"
           "Hands one request's KV cache (D 128, page 16) from prefill ranks at TP Ps to decode ranks at TP Pd.\n"
           "Shapes: T<tokens>-L<layers>-tp<Ps>to<Pd>[-kv<heads>] (8 KV heads unless -kv says otherwise). The table:\n"
           "  T{256,4096,32768}-L32-tp4to2, -tp2to4 and -tp1to4-kv2.\n"
           "Variants: per_token (one copy call per token per layer per K/V), per_layer (gather, transfer and\n"
           "  scatter one layer at a time), staged (one gather per prefill rank, one copy per rank pair, one\n"
           "  scatter per decode rank), staged_peer and staged_nccl (the decode side on a second GPU, through\n"
           "  cudaMemcpyPeerAsync / NCCL send-recv; need two GPUs, staged_nccl a build with NCCL).\n"
           "The decode-lesson flags (--B --H --Hkv --ctx --D --block-size) do not apply here.\n";
}

std::vector<pa::LessonFlag> lesson_flags() {
    return {
        {"--tokens", true, "--tokens N      tokens handed off: one shape from --tokens/--layers/--tp/--kv-heads", {"--shape"}},
        {"--layers", true, "--layers N      layers of that shape (default 32)", {"--shape"}},
        {"--tp", true, "--tp PsToPd     prefill and decode TP of that shape, e.g. 4to2 (default 4to2)", {"--shape"}},
        {"--kv-heads", true, "--kv-heads N    the model's KV heads of that shape (default 8)", {"--shape"}},
        {"--requests", true, "--requests N    requests in the check's server loop (default 96)", {"--bench"}},
    };
}

// The decode lessons' shape flags mean nothing here; parse_flags would read them as a
// half-given decode shape, so they are refused before it sees them.
void refuse_decode_flags(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        a = a.substr(0, a.find('='));
        for (const char* f : {"--B", "--H", "--Hkv", "--ctx", "--D", "--block-size"})
            if (a == f)
                bad_input(a + " is a decode-lesson flag; lesson 07 takes --shape T4096-L32-tp4to2 or "
                              "--tokens/--layers/--tp/--kv-heads");
    }
}

struct Selection {
    std::vector<StagingShape> check_shapes, bench_shapes;
    std::vector<std::string> variants;  // asked for (all when --variant is not given)
    bool variant_given = false;
    int requests = 96;
};

Selection select_or_exit(const pa::Flags& f) {
    Selection sel;
    try {
        if (!f.shapes.empty()) {
            for (const auto& name : f.shapes) sel.check_shapes.push_back(parse_staging_shape(name));
            sel.bench_shapes = sel.check_shapes;
        } else if (f.has("--tokens") || f.has("--layers") || f.has("--tp") || f.has("--kv-heads")) {
            if (!f.has("--tokens")) bad_input("--layers, --tp and --kv-heads describe a shape together with --tokens N");
            const int heads = static_cast<int>(f.lesson_int("--kv-heads", 1, 1024, kDefaultKvHeads));
            const TpConfig tp = f.has("--tp") ? parse_tp_pair(f.lesson.at("--tp"), heads) : TpConfig{4, 2, heads};
            const int tokens = static_cast<int>(f.lesson_int("--tokens", 1, 1 << 20, 0));
            const int layers = static_cast<int>(f.lesson_int("--layers", 1, 256, 32));
            sel.check_shapes = {make_staging_shape(tokens, layers, tp)};
            sel.bench_shapes = sel.check_shapes;
        } else {
            sel.check_shapes = check_shapes();
            sel.bench_shapes = bench_shapes();
        }
        sel.requests = static_cast<int>(f.lesson_int("--requests", 1, 100000, 96));
    } catch (const pa::FlagError& e) {
        bad_input(e.what());
    } catch (const PlanError& e) {
        bad_input(e.what());
    }
    if (!f.variant.empty()) {
        if (std::find(kVariants.begin(), kVariants.end(), f.variant) == kVariants.end()) {
            std::string all;
            for (const auto& v : kVariants) all += (all.empty() ? "" : ", ") + v;
            bad_input("unknown variant '" + f.variant + "' (this lesson has: " + all + ")");
        }
        sel.variants = {f.variant};
        sel.variant_given = true;
    } else {
        sel.variants = kVariants;
    }
    return sel;
}

bool wants(const Selection& sel, const std::string& v) {
    return std::find(sel.variants.begin(), sel.variants.end(), v) != sel.variants.end();
}

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

// Refuses, by name, a shape whose buffers do not fit on the GPU(s) that would hold them.
void refuse_too_large(const std::vector<StagingShape>& shapes, const pa::DeviceInfo& info) {
    const double usable = 0.9 * static_cast<double>(info.global_mem_bytes);
    for (const auto& s : shapes) {
        const HandoffBytes b = handoff_bytes(s, 3 * kPageSize);
        const int64_t one_gpu = std::max(b.prefill + b.decode, 2 * make_transfer_plan(s.tp, s.layers, s.tokens).total_bytes());
        if (static_cast<double>(one_gpu) > usable)
            bad_input(pa::strf("shape %s needs %.1f GiB on one GPU; %s has %.1f GiB", s.name.c_str(), gib(one_gpu),
                               info.name.c_str(), gib(info.global_mem_bytes)));
    }
}

// ---------------------------------------------------------------- check

struct CheckTally {
    int passed = 0, total = 0;
    void line(bool pass, const std::string& what, const std::string& detail = "") {
        ++total;
        passed += pass;
        std::printf("  %s %-12s %s\n", pass ? "PASS" : "FAIL", what.c_str(), detail.c_str());
    }
    // "name", or "name (what went wrong)"
    static std::string with(const std::string& name, const std::string& detail) {
        return detail.empty() ? name : name + " " + detail;
    }
};

std::string mismatch_detail(uint64_t staging_bad, const PoolCheck& pools) {
    if (!staging_bad && !pools.mismatches) return "";
    return pa::strf("(%llu wrong in staging, %llu wrong in the decode pools%s%s)", static_cast<unsigned long long>(staging_bad),
                    static_cast<unsigned long long>(pools.mismatches), pools.first.empty() ? "" : "; first: ",
                    pools.first.c_str());
}

void sync_all(int devices) {
    for (int d = 0; d < devices; ++d) {
        DeviceGuard g(d);
        CUDA_CHECK(cudaDeviceSynchronize());
    }
}

// The checks of one shape on one pair of devices: each variant from fresh pools.
void check_shape(const StagingShape& shape, const Selection& sel, uint64_t seed, bool two_gpus, NcclPair* nccl,
                 CheckTally& tally) {
    uint64_t name_hash = 1469598103934665603ULL;  // FNV-1a of the name: a prefix per shape, the same everywhere
    for (char c : shape.name) name_hash = (name_hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    pa::Rng rng(seed, name_hash);
    const int prefix = kPageSize * static_cast<int>(rng.below(4));  // cached on the decode side
    const int decode_device = two_gpus ? 1 : 0;
    Handoff h(shape, prefix, seed, 0, decode_device);
    const int all = 2 * shape.layers;
    const std::string name = pa::strf("%s (cached prefix %d)", shape.name.c_str(), prefix);
    h.fill_prefill();
    cudaStream_t s0 = nullptr, s1 = nullptr;  // the legacy stream of each device

    auto run_staged = [&](const std::string& variant, const std::function<void()>& transfer, int layers_per_launch) {
        h.poison_staging();
        h.reset_decode();
        h.gather(s0, layers_per_launch);
        transfer();
        sync_all(two_gpus ? 2 : 1);
        h.scatter(s1, layers_per_launch);
        sync_all(two_gpus ? 2 : 1);
        const uint64_t staging_bad = h.check_prefill_staging() + h.check_decode_staging();
        const PoolCheck pools = h.check_decode_pools();
        tally.line(staging_bad == 0 && pools.mismatches == 0, variant, CheckTally::with(name, mismatch_detail(staging_bad, pools)));
    };

    if (!two_gpus) {
        if (wants(sel, "staged") || wants(sel, "per_layer")) {
            // the two kernels on their own first: gather into poisoned staging...
            h.poison_staging();
            h.gather(s0, all);
            sync_all(1);
            const uint64_t g = h.check_prefill_staging();
            tally.line(g == 0, "gather", name + (g ? pa::strf(" (%llu wrong)", static_cast<unsigned long long>(g)) : ""));
            // ...and scatter from a staging buffer filled with what a correct transfer delivers
            h.reset_decode();
            h.fill_decode_staging_expected();
            h.scatter(s0, all);
            sync_all(1);
            const PoolCheck p = h.check_decode_pools();
            tally.line(p.mismatches == 0, "scatter", CheckTally::with(name, mismatch_detail(0, p)));
        }
        if (wants(sel, "staged")) run_staged("staged", [&] { h.transfer(s0, all); }, all);
        if (wants(sel, "per_layer")) run_staged("per_layer", [&] { h.transfer(s0, 1); }, 1);
        if (wants(sel, "per_token")) {
            h.reset_decode();
            h.per_token(s0);
            sync_all(1);
            const PoolCheck p = h.check_decode_pools();
            tally.line(p.mismatches == 0, "per_token", CheckTally::with(name, mismatch_detail(0, p)));
        }
        return;
    }
    if (wants(sel, "staged_peer")) run_staged("staged_peer", [&] { h.transfer(s0, all); }, all);
    if (wants(sel, "staged_nccl") && nccl) run_staged("staged_nccl", [&] { h.transfer_nccl(*nccl, s0, s1); }, all);
}

// ---------------------------------------------------------------- bench

struct BenchContext {
    pa::DeviceInfo info;
    double copy_gbps = 0;  // measured device-to-device, bytes read + written
    double peer_gbps = 0;  // measured GPU 0 -> GPU 1, bytes read + written (two GPUs only)
    int iters = 100;
    pa::DType dtype = pa::DType::bf16;
    std::vector<pa::ResultRow> rows;
};

pa::ResultRow make_row(const BenchContext& ctx, const StagingShape& s, const std::string& variant, const std::string& stage,
                       int64_t copies, double bytes, const pa::Timing& t, double ceiling_gbps, int gpus, bool pass) {
    pa::ResultRow r;
    r.gpu = ctx.info.short_name;
    r.lesson = "07";
    r.variant = variant;
    r.shape = s.name;
    r.dtype = pa::dtype_name(ctx.dtype);
    r.B = 1;           // one request
    r.H = 0;           // no query heads: the hand-off moves KV only
    r.Hkv = s.tp.kv_heads;
    r.D = kHeadDim;
    r.ctx = std::to_string(s.tokens);
    r.block_size = kPageSize;
    r.l2 = "hot";      // the same buffers every repetition
    r.us_median = t.us_median;
    r.us_min = t.us_min;
    r.bytes = bytes;
    r.gbps = bytes / (t.us_median * 1e-6) / 1e9;
    r.check = pass ? "PASS" : "FAIL";
    r.set_extra("stage", stage);
    r.set_extra("copies", std::to_string(copies));
    r.set_extra("pct_copy_bw", pa::strf("%.1f", 100.0 * *r.gbps / ceiling_gbps));
    r.set_extra("gpus", std::to_string(gpus));
    r.set_extra("tp", pa::strf("%dto%d", s.tp.prefill_tp, s.tp.decode_tp));
    r.set_extra("layers", std::to_string(s.layers));
    return r;
}

void print_rows(const std::vector<pa::ResultRow>& rows) {
    pa::TextTable t({"variant", "stage", "copies", "MiB r+w", "us", "us min", "GB/s", "% copy BW", "check"});
    for (const auto& r : rows)
        t.add_row({r.variant, r.get_extra("stage"), r.get_extra("copies"), pa::strf("%.1f", *r.bytes / 1048576.0),
                   pa::strf("%.1f", r.us_median), pa::strf("%.1f", r.us_min), pa::strf("%.0f", *r.gbps),
                   r.get_extra("pct_copy_bw"), r.check});
    t.print();
}

// Times the stages of one staged variant and adds its four rows.
void bench_stages(BenchContext& ctx, Handoff& h, const std::string& variant, int layers_per_launch,
                  const std::function<void(cudaStream_t, cudaStream_t)>& transfer, int64_t transfer_calls,
                  std::vector<pa::ResultRow>& out) {
    const StagingShape& s = h.shape();
    const bool two = h.two_devices();
    const double S = static_cast<double>(h.plan().total_bytes());
    cudaStream_t s0 = nullptr, s1 = nullptr;
    {
        DeviceGuard g(0);
        CUDA_CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    }
    if (two) {
        DeviceGuard g(1);
        CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    } else {
        s1 = s0;
    }
    cudaEvent_t on1 = nullptr, on0 = nullptr;  // cross-stream hand-over points
    {
        DeviceGuard g(h.decode_device());
        CUDA_CHECK(cudaEventCreateWithFlags(&on1, cudaEventDisableTiming));
    }
    {
        DeviceGuard g(0);
        CUDA_CHECK(cudaEventCreateWithFlags(&on0, cudaEventDisableTiming));
    }
    // The decode side's work joins back into s0, so that the timer's events (on s0) see it.
    auto join_decode_into_s0 = [&] {
        if (!two) return;
        DeviceGuard g(1);
        CUDA_CHECK(cudaEventRecord(on1, s1));
        CUDA_CHECK(cudaStreamWaitEvent(s0, on1, 0));
    };
    auto prefill_to_decode = [&] {
        if (!two) return;
        DeviceGuard g(0);
        CUDA_CHECK(cudaEventRecord(on0, s0));
        CUDA_CHECK(cudaStreamWaitEvent(s1, on0, 0));
    };

    h.poison_staging();
    h.reset_decode();
    DeviceGuard g0(0);
    const pa::Timing tg = pa::time_kernel([&](int) { h.gather(s0, layers_per_launch); }, 1, kWarmup, ctx.iters, s0);
    const pa::Timing tt = pa::time_kernel(
        [&](int) {
            prefill_to_decode();
            transfer(s0, s1);
            join_decode_into_s0();
        },
        1, kWarmup, ctx.iters, s0);
    const pa::Timing ts = pa::time_kernel(
        [&](int) {
            prefill_to_decode();
            h.scatter(s1, layers_per_launch);
            join_decode_into_s0();
        },
        1, kWarmup, ctx.iters, s0);
    const pa::Timing total = pa::time_kernel(
        [&](int) {
            h.gather(s0, layers_per_launch);
            prefill_to_decode();
            transfer(s0, s1);
            prefill_to_decode();  // the scatter waits for the whole transfer (NCCL's recv is already on s1)
            h.scatter(s1, layers_per_launch);
            join_decode_into_s0();
        },
        1, kWarmup, ctx.iters, s0);
    sync_all(two ? 2 : 1);
    // re-check after the timing loop: every repetition wrote the same bytes
    const uint64_t staging_bad = h.check_prefill_staging() + h.check_decode_staging();
    const PoolCheck pools = h.check_decode_pools();
    const bool pass = staging_bad == 0 && pools.mismatches == 0;
    if (!pass) std::printf("FAIL %s %s after timing: %s\n", variant.c_str(), s.name.c_str(), mismatch_detail(staging_bad, pools).c_str());
    const int gpus = two ? 2 : 1;
    const double transfer_ceiling = two ? ctx.peer_gbps : ctx.copy_gbps;
    const int64_t gc = h.gather_calls(layers_per_launch), sc = h.scatter_calls(layers_per_launch);
    out.push_back(make_row(ctx, s, variant, "gather", gc, 2 * S, tg, ctx.copy_gbps, gpus, pass));
    out.push_back(make_row(ctx, s, variant, "transfer", transfer_calls, 2 * S, tt, transfer_ceiling, gpus, pass));
    out.push_back(make_row(ctx, s, variant, "scatter", sc, 2 * S, ts, ctx.copy_gbps, gpus, pass));
    out.push_back(make_row(ctx, s, variant, "total", gc + transfer_calls + sc, 6 * S, total, ctx.copy_gbps, gpus, pass));
    CUDA_CHECK(cudaEventDestroy(on0));
    CUDA_CHECK(cudaStreamDestroy(s0));
    if (two) {
        DeviceGuard g(1);
        CUDA_CHECK(cudaEventDestroy(on1));
        CUDA_CHECK(cudaStreamDestroy(s1));
    } else {
        CUDA_CHECK(cudaEventDestroy(on1));
    }
}

// The ceiling row: one plain copy of the bytes a stage moves (S), on one GPU or GPU 0 -> 1.
pa::ResultRow bench_plain_copy(BenchContext& ctx, const StagingShape& s, bool peer) {
    const int64_t S = make_transfer_plan(s.tp, s.layers, s.tokens).total_bytes();
    pa::DeviceBuffer<uint8_t> dst;
    {
        DeviceGuard g(peer ? 1 : 0);
        dst.allocate(static_cast<size_t>(S));
    }
    DeviceGuard g(0);
    pa::DeviceBuffer<uint8_t> src(static_cast<size_t>(S));
    src.fill_bytes(0x3c);
    const pa::Timing t = pa::time_kernel(
        [&](int) {
            if (peer) CUDA_CHECK(cudaMemcpyPeerAsync(dst.get(), 1, src.get(), 0, static_cast<size_t>(S)));
            else CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), static_cast<size_t>(S), cudaMemcpyDeviceToDevice));
        },
        1, kWarmup, ctx.iters);
    return make_row(ctx, s, peer ? "memcpy_peer" : "memcpy", "transfer", 1, 2.0 * static_cast<double>(S), t,
                    peer ? ctx.peer_gbps : ctx.copy_gbps, peer ? 2 : 1, true);
}

}  // namespace

int main(int argc, char** argv) {
    refuse_decode_flags(argc, argv);
    const pa::Flags f = pa::parse_flags_or_exit(argc, argv, usage(), lesson_flags());
    const Selection sel = select_or_exit(f);
    const pa::DeviceInfo info = pa::require_gpu(kProgram);
    try {
        const int devices = visible_devices();
        const bool two_gpus = devices >= 2;
        const bool want_two = wants(sel, "staged_peer") || wants(sel, "staged_nccl");
        if (sel.variant_given && want_two && !two_gpus)
            cannot_run(sel.variants[0] + " needs two GPUs; " + std::to_string(devices) + " visible");
        if (sel.variant_given && wants(sel, "staged_nccl") && !nccl_built()) cannot_run(std::string("staged_nccl: ") + nccl_description());
        refuse_too_large(f.bench_only ? sel.bench_shapes : sel.check_shapes, info);
        if (!f.check_only) refuse_too_large(sel.bench_shapes, info);

        std::printf("Lesson 07: KV staging between a prefill and a decode server of different TP\n");
        std::printf("GPU: %s\n", info.summary().c_str());
        std::printf("%d GPU%s visible; %s\n", devices, devices == 1 ? "" : "s", nccl_description());
        bool peer_ok = false;
        if (two_gpus && want_two) {
            peer_ok = enable_peer_access(0, 1);
            std::printf("two-GPU rows: prefill ranks on GPU 0, decode ranks on GPU 1 (peer access %s)\n",
                        peer_ok ? "enabled" : "not available: peer copies go through the host");
        } else if (want_two) {
            std::printf("two-GPU rows (staged_peer, staged_nccl) skipped: they need two GPUs, %d visible\n", devices);
        }
        const bool run_nccl = two_gpus && wants(sel, "staged_nccl") && nccl_built();
        if (two_gpus && wants(sel, "staged_nccl") && !nccl_built())
            std::printf("staged_nccl skipped: %s\n", nccl_description());
        std::unique_ptr<NcclPair> nccl;
        if (run_nccl) {
            try {
                nccl = std::make_unique<NcclPair>(0, 1);
            } catch (const pa::CudaError& e) {
                if (sel.variant_given) throw;
                std::printf("staged_nccl skipped: %s\n", e.what());
            }
        }

        int failures = 0;
        if (!f.bench_only) {
            std::printf("\ncorrectness check (seed %llu): bit-exact, every element a hash of (request, layer, K/V, head, "
                        "token, d); cached-prefix and unowned pages must keep their background\n",
                        f.seed);
            CheckTally tally;
            for (const auto& s : sel.check_shapes) {
                check_shape(s, sel, f.seed, false, nullptr, tally);
                if (two_gpus && want_two) check_shape(s, sel, f.seed, true, nccl.get(), tally);
            }
            if (wants(sel, "staged")) {
                // the server loop for the first three TP configurations among the checked shapes
                // (with the default shapes: 4 -> 2, 2 -> 4 and 1 -> 4 with 2 heads, the table's)
                std::vector<StagingShape> loops;
                for (const auto& s : sel.check_shapes) {
                    bool seen = false;
                    for (const auto& l : loops)
                        seen |= l.tp.prefill_tp == s.tp.prefill_tp && l.tp.decode_tp == s.tp.decode_tp && l.tp.kv_heads == s.tp.kv_heads;
                    if (!seen && loops.size() < 3) loops.push_back(s);
                }
                for (const auto& s : loops) {
                    ServerLoopConfig cfg;
                    cfg.tp = s.tp;
                    cfg.requests = sel.requests;
                    cfg.seed = f.seed;
                    const ServerLoopResult r = run_server_loop(cfg);
                    tally.line(r.pass(), "server loop",
                               pa::strf("tp%dto%d-kv%d: %d requests, %lld tokens, ring %.1f MiB per decode rank, %lld rounds, "
                                        "%lld waits on the watermark%s%s%s",
                                        s.tp.prefill_tp, s.tp.decode_tp, s.tp.kv_heads, r.requests, static_cast<long long>(r.tokens),
                                        r.ring_bytes / 1048576.0, static_cast<long long>(r.rounds), static_cast<long long>(r.waits),
                                        r.failure.empty() ? "" : "; ", r.failure.c_str(),
                                        r.mismatches ? pa::strf("; %llu wrong, first: %s", static_cast<unsigned long long>(r.mismatches), r.first.c_str()).c_str() : ""));
                }
            }
            std::printf("%d/%d %s\n", tally.passed, tally.total, tally.passed == tally.total ? "PASS" : "FAIL");
            failures += tally.total - tally.passed;
        }

        if (!f.check_only) {
            BenchContext ctx;
            ctx.info = info;
            ctx.iters = f.iters;
            ctx.dtype = f.dtype.value_or(pa::DType::bf16);
            ctx.copy_gbps = pa::measured_copy_bandwidth_gbps(info);
            if (two_gpus && want_two) ctx.peer_gbps = pa::measured_peer_bandwidth_gbps(0, 1);
            std::printf("\nmeasurement (seed %llu, medians of %d timed repetitions after %d warm-up; per_token %d)\n", f.seed,
                        f.iters, kWarmup, std::min(f.iters, kPerTokenReps));
            std::printf("measured device-to-device copy: %.0f GB/s (bytes read + written)", ctx.copy_gbps);
            if (ctx.peer_gbps > 0) std::printf("; GPU 0 -> GPU 1 peer copy: %.0f GB/s (read + written)", ctx.peer_gbps);
            std::printf("\nGB/s counts bytes read + bytes written; a stage moves S bytes (2S counted), total = 6S; "
                        "%% copy BW is of the device-to-device copy, of the peer copy on two-GPU transfer rows\n");
            bool said_per_token = false;
            for (const auto& s : sel.bench_shapes) {
                std::vector<pa::ResultRow> rows;
                const int all = 2 * s.layers;
                if (wants(sel, "staged") || wants(sel, "per_layer") || wants(sel, "per_token"))
                    rows.push_back(bench_plain_copy(ctx, s, false));
                {
                    Handoff h(s, 0, f.seed, 0, 0);
                    h.fill_prefill();
                    if (wants(sel, "per_token")) {
                        if (s.tokens <= kPerTokenMaxTokens) {
                            h.reset_decode();
                            DeviceGuard g(0);
                            const pa::Timing t = pa::time_kernel([&](int) { h.per_token(nullptr); }, 1, 1,
                                                                 std::min(f.iters, kPerTokenReps));
                            const PoolCheck p = h.check_decode_pools();
                            rows.push_back(make_row(ctx, s, "per_token", "total", h.per_token_calls(),
                                                    2.0 * static_cast<double>(h.plan().total_bytes()), t, ctx.copy_gbps, 1,
                                                    p.mismatches == 0));
                        } else if (!said_per_token) {
                            std::printf("(per_token is run up to %d tokens: above, one run is %lld+ copy calls)\n",
                                        kPerTokenMaxTokens, static_cast<long long>(h.per_token_calls()));
                            said_per_token = true;
                        }
                    }
                    if (wants(sel, "per_layer"))
                        bench_stages(ctx, h, "per_layer", 1, [&](cudaStream_t a, cudaStream_t) { h.transfer(a, 1); },
                                     h.transfer_calls(1), rows);
                    if (wants(sel, "staged"))
                        bench_stages(ctx, h, "staged", all, [&](cudaStream_t a, cudaStream_t) { h.transfer(a, all); },
                                     h.transfer_calls(all), rows);
                }
                if (two_gpus && want_two) {
                    rows.push_back(bench_plain_copy(ctx, s, true));
                    Handoff h(s, 0, f.seed, 0, 1);
                    h.fill_prefill();
                    if (wants(sel, "staged_peer"))
                        bench_stages(ctx, h, "staged_peer", all, [&](cudaStream_t a, cudaStream_t) { h.transfer(a, all); },
                                     h.transfer_calls(all), rows);
                    if (nccl)
                        bench_stages(ctx, h, "staged_nccl", all,
                                     [&](cudaStream_t a, cudaStream_t b) { h.transfer_nccl(*nccl, a, b); },
                                     2 * static_cast<int64_t>(h.plan().pairs.size()), rows);
                }
                std::printf("\n%s: %d tokens x %d layers, TP %d -> %d, %d KV heads, S = %.1f MiB per stage\n", s.name.c_str(),
                            s.tokens, s.layers, s.tp.prefill_tp, s.tp.decode_tp, s.tp.kv_heads,
                            make_transfer_plan(s.tp, s.layers, s.tokens).total_bytes() / 1048576.0);
                print_rows(rows);
                for (const auto& r : rows) {
                    failures += r.check != "PASS";
                    ctx.rows.push_back(r);
                }
            }
            // staged against per_token, where both ran
            for (const auto& s : sel.bench_shapes) {
                const pa::ResultRow *pt = nullptr, *st = nullptr;
                for (const auto& r : ctx.rows)
                    if (r.shape == s.name && r.get_extra("stage") == "total") {
                        if (r.variant == "per_token") pt = &r;
                        if (r.variant == "staged") st = &r;
                    }
                if (pt && st)
                    std::printf("%s: staged %.1f us vs per_token %.1f us: %.1fx faster, %s vs %s copy calls\n", s.name.c_str(),
                                st->us_median, pt->us_median, pt->us_median / st->us_median, st->get_extra("copies").c_str(),
                                pt->get_extra("copies").c_str());
            }
            if (!f.csv.empty()) {
                std::string err;
                if (!pa::write_csv(f.csv, ctx.rows, &err)) bad_input(err);
                std::printf("wrote %zu rows to %s\n", ctx.rows.size(), f.csv.c_str());
            }
        }
        return failures ? 1 : 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s: %s\n", kProgram, e.what());
        return 1;
    }
}
