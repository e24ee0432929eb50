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
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "copy_ceiling.cuh"
#include "decode_driver.cuh"  // write_csv_or_exit
#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "device_info.cuh"
#include "flags.h"
#include "handoff.h"
#include "lesson_driver.cuh"
#include "nccl_link.h"
#include "random.h"
#include "server_loop.h"
#include "staging_plan.h"
#include "table.h"
#include "timer.cuh"

namespace {

using namespace lesson07;

const char* kProgram = "lesson07_kv_staging";

// The lesson's variants, in ladder order: the baselines, the staged path, the staged path across two GPUs.
struct StagingVariant {
    std::string name;
    int gpus = 1;      // 2: the decode ranks on a second GPU
    std::string what;  // one line for --help
};
const std::vector<StagingVariant> kVariants = {
    {"per_token", 1, "one copy call per token per layer per K/V"},
    {"per_layer", 1, "gather, transfer and scatter one layer at a time"},
    {"staged", 1, "one gather per prefill rank, one copy per rank pair, one scatter per decode rank"},
    {"staged_peer", 2, "staged, the decode side on a second GPU, through cudaMemcpyPeerAsync"},
    {"staged_nccl", 2, "staged, the decode side on a second GPU, through NCCL send / recv (a build with NCCL)"},
};
constexpr int kPerTokenMaxTokens = 4096;  // above it one run is millions of copy calls
constexpr int kPerTokenReps = 3;          // timed runs of per_token (each is already many calls)
constexpr int kWarmup = 3;

void bad_input(const std::string& msg) { pa::exit_bad_input(kProgram, msg); }

std::string usage() {
    std::string u = pa::common_usage_line(kProgram) +
                    "       " + std::string(kProgram) + " [--check | --bench] --tokens N [--layers N] [--tp PsToPd] [--kv-heads N] ...\n"
                    "Hands one request's KV cache (D 128, page 16) from prefill ranks at TP Ps to decode ranks at TP Pd.\n"
                    "Shapes: T<tokens>-L<layers>-tp<Ps>to<Pd>[-kv<heads>] (8 KV heads unless -kv says otherwise). The table:\n"
                    "  T{256,4096,32768}-L32-tp4to2, -tp2to4 and -tp1to4-kv2.\n"
                    "Variants:\n";
    for (const auto& v : kVariants)
        u += pa::strf("  %-12s %s%s\n", v.name.c_str(), v.what.c_str(), v.gpus > 1 ? "; needs two GPUs" : "");
    return u + "The measurement adds the ceiling rows memcpy (one plain device copy of the request's bytes) and, with two\n"
               "GPUs, memcpy_peer (the same bytes from one GPU to the other).\n"
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
    std::vector<StagingVariant> variants;  // asked for (all when --variant is not given)
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
    sel.variants = pa::select_variant_or_exit(kProgram, f.variant, kVariants);
    sel.variant_given = !f.variant.empty();
    return sel;
}

bool wants(const std::vector<StagingVariant>& vs, const std::string& name) {
    return std::any_of(vs.begin(), vs.end(), [&](const StagingVariant& v) { return v.name == name; });
}

std::vector<StagingVariant> on_gpus(const std::vector<StagingVariant>& vs, int gpus) {
    std::vector<StagingVariant> out;
    for (const auto& v : vs)
        if (v.gpus == gpus) out.push_back(v);
    return out;
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

std::string mismatch_detail(uint64_t staging_bad, const PoolCheck& pools) {
    if (!staging_bad && !pools.mismatches) return "";
    return pa::strf("(%llu wrong in staging, %llu wrong in the decode pools%s%s)", static_cast<unsigned long long>(staging_bad),
                    static_cast<unsigned long long>(pools.mismatches), pools.first.empty() ? "" : "; first: ",
                    pools.first.c_str());
}

// "name", or "name (what went wrong)"
std::string with(const std::string& name, const std::string& detail) { return detail.empty() ? name : name + " " + detail; }

void sync_all(int devices) {
    for (int d = 0; d < devices; ++d) {
        DeviceGuard g(d);
        CUDA_CHECK(cudaDeviceSynchronize());
    }
}

// What the measurement shares: the measured ceilings, the timing settings, the rows so far.
struct BenchContext {
    pa::DeviceInfo info;
    pa::MeasureSetup setup;
    double copy_gbps = 0;  // measured device-to-device, bytes read + written
    double peer_gbps = 0;  // measured GPU 0 -> GPU 1, bytes read + written (two GPUs only)
    pa::DType dtype = pa::DType::bf16;
    std::vector<pa::ResultRow> rows;
};

// The columns that name a row and lesson 07's own (the timing columns are already filled).
void name_row(const BenchContext& ctx, const StagingShape& s, const std::string& variant, const std::string& stage,
              int64_t copies, double ceiling_gbps, int gpus, pa::ResultRow& r) {
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
    r.set_extra("stage", stage);
    r.set_extra("copies", std::to_string(copies));
    r.set_extra("pct_copy_bw", pa::strf("%.1f", 100.0 * *r.gbps / ceiling_gbps));
    r.set_extra("copy_bw_gbps", pa::strf("%.1f", ceiling_gbps));  // the ceiling pct_copy_bw is of
    r.set_extra("gpus", std::to_string(gpus));
    r.set_extra("tp", pa::strf("%dto%d", s.tp.prefill_tp, s.tp.decode_tp));
    r.set_extra("layers", std::to_string(s.layers));
}

// One shape's hand-off as the driver (lesson_driver.cuh) runs it: the prefill ranks on GPU
// 0, the decode ranks on GPU 0 or (two_gpus) GPU 1. The check compares bit for bit with the
// hashes the pools were filled with; staging starts poisoned and the decode pools at their
// background, so a missed or misplaced byte shows.
class StagingRun {
  public:
    using Variant = StagingVariant;

    // ctx: null for the check (no timing)
    StagingRun(const StagingShape& s, int prefix, uint64_t seed, bool two_gpus, NcclPair* nccl, const BenchContext* ctx)
        : h_(s, prefix, seed, 0, two_gpus ? 1 : 0),
          nccl_(nccl),
          ctx_(ctx),
          name_(pa::strf("%s (cached prefix %d)", s.name.c_str(), prefix)) {
        h_.fill_prefill();
        if (!ctx_) return;
        DeviceGuard g0(0);
        CUDA_CHECK(cudaStreamCreateWithFlags(&s0_, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&on0_, cudaEventDisableTiming));
        DeviceGuard gd(h_.decode_device());
        CUDA_CHECK(cudaEventCreateWithFlags(&on1_, cudaEventDisableTiming));
        if (two()) CUDA_CHECK(cudaStreamCreateWithFlags(&s1_, cudaStreamNonBlocking));
        else s1_ = s0_;
    }
    ~StagingRun() {
        if (!ctx_) return;
        {
            DeviceGuard g(0);
            cudaEventDestroy(on0_);
            cudaStreamDestroy(s0_);
        }
        DeviceGuard g(h_.decode_device());
        cudaEventDestroy(on1_);
        if (two()) cudaStreamDestroy(s1_);
    }
    StagingRun(const StagingRun&) = delete;
    StagingRun& operator=(const StagingRun&) = delete;

    const Handoff& handoff() const { return h_; }

    std::string why_not(const Variant& v) const {
        if (v.gpus != (two() ? 2 : 1)) return v.name + ": runs on " + std::to_string(v.gpus) + " GPU(s)";
        if (v.name == "staged_nccl" && !nccl_) return "staged_nccl: no NCCL communicator";
        if (ctx_ && v.name == "per_token" && h_.shape().tokens > kPerTokenMaxTokens)
            return pa::strf("per_token is measured up to %d tokens", kPerTokenMaxTokens);
        return "";
    }

    // The two kernels on their own: gather into poisoned staging, and scatter from a staging
    // buffer filled with what a correct transfer delivers.
    void check_kernels(pa::CheckTally& tally) {
        h_.poison_staging();
        h_.gather(nullptr, all());
        sync_all(1);
        const uint64_t g = h_.check_prefill_staging();
        tally.line(g == 0, pa::strf("%-12s %s", "gather",
                                    (name_ + (g ? pa::strf(" (%llu wrong)", static_cast<unsigned long long>(g)) : "")).c_str()));
        h_.reset_decode();
        h_.fill_decode_staging_expected();
        h_.scatter(nullptr, all());
        sync_all(1);
        const PoolCheck p = h_.check_decode_pools();
        tally.line(p.mismatches == 0, pa::strf("%-12s %s", "scatter", with(name_, mismatch_detail(0, p)).c_str()));
    }

    // From fresh pools, on each device's legacy stream.
    pa::CheckResult check(const Variant& v) {
        h_.reset_decode();
        if (v.name == "per_token") {
            h_.per_token(nullptr);
            return recheck(v);
        }
        h_.poison_staging();
        h_.gather(nullptr, layers_per_launch(v));
        transfer(v, nullptr, nullptr);
        sync_all(devices());
        h_.scatter(nullptr, layers_per_launch(v));
        return recheck(v);
    }
    pa::CheckResult recheck(const Variant& v) {
        sync_all(devices());
        const uint64_t staging_bad = v.name == "per_token" ? 0 : h_.check_prefill_staging() + h_.check_decode_staging();
        const PoolCheck pools = h_.check_decode_pools();
        pa::CheckResult r;
        r.pass = staging_bad == 0 && pools.mismatches == 0;
        r.message = mismatch_detail(staging_bad, pools);
        return r;
    }

    // per_token: one row, the whole hand-off. The staged variants: gather, transfer, scatter
    // and the total, timed on s0 (the decode side's work joins back into it).
    std::vector<pa::TimedPart> parts(const Variant& v) {
        const double S = static_cast<double>(h_.plan().total_bytes());
        if (v.name == "per_token") {
            pa::TimedPart t;
            t.stage = "total";
            t.launch = [this](int) { h_.per_token(nullptr); };
            t.bytes = 2 * S;
            t.warmup = 1;
            t.max_iters = kPerTokenReps;
            return {t};
        }
        const int lpl = layers_per_launch(v);
        auto part = [&](const char* stage, double bytes, std::function<void(int)> launch) {
            pa::TimedPart t;
            t.stage = stage;
            t.launch = std::move(launch);
            t.stream = s0_;
            t.bytes = bytes;
            return t;
        };
        return {
            part("gather", 2 * S, [this, lpl](int) { h_.gather(s0_, lpl); }),
            part("transfer", 2 * S, [this, v](int) {
                prefill_to_decode();
                transfer(v, s0_, s1_);
                join_decode_into_s0();
            }),
            part("scatter", 2 * S, [this, lpl](int) {
                prefill_to_decode();
                h_.scatter(s1_, lpl);
                join_decode_into_s0();
            }),
            part("total", 6 * S, [this, v, lpl](int) {
                h_.gather(s0_, lpl);
                prefill_to_decode();
                transfer(v, s0_, s1_);
                prefill_to_decode();  // the scatter waits for the whole transfer (NCCL's recv is already on s1)
                h_.scatter(s1_, lpl);
                join_decode_into_s0();
            }),
        };
    }
    int copies() const { return 1; }  // L2-hot only: a hand-off reads its bytes once
    std::string label() const { return h_.shape().name; }
    std::string check_line(const Variant& v, const pa::CheckResult& r) const {
        return pa::strf("%-12s %s", v.name.c_str(), with(name_, r.message).c_str());
    }
    void describe(const Variant& v, const pa::TimedPart& part, pa::ResultRow& r) const {
        const int lpl = layers_per_launch(v);
        const int64_t gc = h_.gather_calls(lpl), sc = h_.scatter_calls(lpl);
        const int64_t tc = v.name == "staged_nccl" ? 2 * static_cast<int64_t>(h_.plan().pairs.size()) : h_.transfer_calls(lpl);
        int64_t calls = gc + tc + sc;
        if (v.name == "per_token") calls = h_.per_token_calls();
        else if (part.stage == "gather") calls = gc;
        else if (part.stage == "transfer") calls = tc;
        else if (part.stage == "scatter") calls = sc;
        const double ceiling = part.stage == "transfer" && two() ? ctx_->peer_gbps : ctx_->copy_gbps;
        name_row(*ctx_, h_.shape(), v.name, part.stage, calls, ceiling, two() ? 2 : 1, r);
    }

  private:
    bool two() const { return h_.two_devices(); }
    int devices() const { return two() ? 2 : 1; }
    int all() const { return 2 * h_.shape().layers; }
    int layers_per_launch(const Variant& v) const { return v.name == "per_layer" ? 1 : all(); }
    void transfer(const Variant& v, cudaStream_t a, cudaStream_t b) {
        if (v.name == "staged_nccl") h_.transfer_nccl(*nccl_, a, b);
        else h_.transfer(a, layers_per_launch(v));
    }
    // cross-stream hand-over points (two GPUs only)
    void join_decode_into_s0() {
        if (!two()) return;
        DeviceGuard g(1);
        CUDA_CHECK(cudaEventRecord(on1_, s1_));
        CUDA_CHECK(cudaStreamWaitEvent(s0_, on1_, 0));
    }
    void prefill_to_decode() {
        if (!two()) return;
        DeviceGuard g(0);
        CUDA_CHECK(cudaEventRecord(on0_, s0_));
        CUDA_CHECK(cudaStreamWaitEvent(s1_, on0_, 0));
    }

    Handoff h_;
    NcclPair* nccl_;
    const BenchContext* ctx_;
    std::string name_;
    cudaStream_t s0_ = nullptr, s1_ = nullptr;
    cudaEvent_t on0_ = nullptr, on1_ = nullptr;
};

// A cached prefix on the decode side, per shape: FNV-1a of the name, the same everywhere.
int check_prefix(const StagingShape& shape, uint64_t seed) {
    uint64_t name_hash = 1469598103934665603ULL;
    for (char c : shape.name) name_hash = (name_hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    pa::Rng rng(seed, name_hash);
    return kPageSize * static_cast<int>(rng.below(4));
}

// The ceiling row: one plain copy of the bytes a stage moves (S), on one GPU or GPU 0 -> 1.
pa::ResultRow bench_plain_copy(const BenchContext& ctx, const StagingShape& s, bool peer) {
    const int64_t S = make_transfer_plan(s.tp, s.layers, s.tokens).total_bytes();
    pa::DeviceBuffer<uint8_t> dst;
    {
        DeviceGuard g(peer ? 1 : 0);
        dst.allocate(static_cast<size_t>(S));
    }
    DeviceGuard g(0);
    pa::DeviceBuffer<uint8_t> src(static_cast<size_t>(S));
    src.fill_bytes(0x3c);
    pa::TimedPart part;
    part.stage = "transfer";
    part.bytes = 2.0 * static_cast<double>(S);
    part.launch = [&](int) {
        if (peer) CUDA_CHECK(cudaMemcpyPeerAsync(dst.get(), 1, src.get(), 0, static_cast<size_t>(S)));
        else CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), static_cast<size_t>(S), cudaMemcpyDeviceToDevice));
    };
    pa::ResultRow r;
    pa::fill_timing(r, pa::time_part(part, 1, ctx.setup), false, part, ctx.setup);
    r.check = "PASS";
    name_row(ctx, s, peer ? "memcpy_peer" : "memcpy", "transfer", 1, peer ? ctx.peer_gbps : ctx.copy_gbps, peer ? 2 : 1, r);
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

// The check: the two kernels alone, each variant from fresh pools, the server loop.
int run_checks(const Selection& sel, const std::vector<StagingVariant>& variants, uint64_t seed, NcclPair* nccl) {
    std::printf("\ncorrectness check (seed %llu): bit-exact, every element a hash of (request, layer, K/V, head, "
                "token, d); cached-prefix and unowned pages must keep their background\n",
                static_cast<unsigned long long>(seed));
    pa::CheckTally tally;
    // one GPU: the staged path first, then the baselines
    std::vector<StagingVariant> one = on_gpus(variants, 1);
    std::reverse(one.begin(), one.end());
    const std::vector<StagingVariant> two = on_gpus(variants, 2);
    for (const auto& s : sel.check_shapes) {
        const int prefix = check_prefix(s, seed);
        {
            StagingRun run(s, prefix, seed, false, nullptr, nullptr);
            if (wants(variants, "staged") || wants(variants, "per_layer")) run.check_kernels(tally);
            pa::check_variants(run, one, tally);
        }
        if (!two.empty()) {
            StagingRun run(s, prefix, seed, true, nccl, nullptr);
            pa::check_variants(run, two, tally);
        }
    }
    if (wants(variants, "staged")) {
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
            cfg.seed = seed;
            const ServerLoopResult r = run_server_loop(cfg);
            tally.line(r.pass(), pa::strf("%-12s %s", "server loop",
                       pa::strf("tp%dto%d-kv%d: %d requests, %lld tokens, ring %.1f MiB per decode rank, %lld rounds, "
                                "%lld waits on the watermark%s%s%s",
                                s.tp.prefill_tp, s.tp.decode_tp, s.tp.kv_heads, r.requests, static_cast<long long>(r.tokens),
                                r.ring_bytes / 1048576.0, static_cast<long long>(r.rounds), static_cast<long long>(r.waits),
                                r.failure.empty() ? "" : "; ", r.failure.c_str(),
                                r.mismatches ? pa::strf("; %llu wrong, first: %s", static_cast<unsigned long long>(r.mismatches), r.first.c_str()).c_str() : "").c_str()));
        }
    }
    return tally.finish();
}

int run_bench(const Selection& sel, const std::vector<StagingVariant>& variants, const pa::Flags& f,
              const pa::DeviceInfo& info, NcclPair* nccl) {
    BenchContext ctx;
    ctx.info = info;
    ctx.setup.info = info;
    ctx.setup.iters = f.iters;
    ctx.setup.warmup = kWarmup;
    ctx.setup.cold = false;     // the same buffers every repetition
    ctx.setup.rel_err = false;  // bit-exact: PASS or FAIL
    ctx.dtype = f.dtype.value_or(pa::DType::bf16);
    const std::vector<StagingVariant> one = on_gpus(variants, 1), two = on_gpus(variants, 2);
    ctx.copy_gbps = pa::measured_copy_bandwidth_gbps(info);
    if (!two.empty()) ctx.peer_gbps = pa::measured_peer_bandwidth_gbps(0, 1);
    std::printf("\nmeasurement (seed %llu, medians of %d timed repetitions after %d warm-up; per_token %d)\n",
                static_cast<unsigned long long>(f.seed), f.iters, kWarmup, std::min(f.iters, kPerTokenReps));
    std::printf("measured device-to-device copy: %.0f GB/s (bytes read + written)", ctx.copy_gbps);
    if (ctx.peer_gbps > 0) std::printf("; GPU 0 -> GPU 1 peer copy: %.0f GB/s (read + written)", ctx.peer_gbps);
    std::printf("\nGB/s counts bytes read + bytes written; a stage moves S bytes (2S counted), total = 6S; "
                "%% copy BW is of the device-to-device copy, of the peer copy on two-GPU transfer rows\n");
    int failures = 0;
    bool said_per_token = false;
    for (const auto& s : sel.bench_shapes) {
        std::vector<pa::ResultRow> rows;
        if (!one.empty()) {
            rows.push_back(bench_plain_copy(ctx, s, false));
            StagingRun run(s, 0, f.seed, false, nullptr, &ctx);
            if (wants(one, "per_token") && s.tokens > kPerTokenMaxTokens && !said_per_token) {
                std::printf("(per_token is run up to %d tokens: above, one run is %lld+ copy calls)\n", kPerTokenMaxTokens,
                            static_cast<long long>(run.handoff().per_token_calls()));
                said_per_token = true;
            }
            const auto r = pa::measure_variants(run, one, ctx.setup, &failures);
            rows.insert(rows.end(), r.begin(), r.end());
        }
        if (!two.empty()) {
            rows.push_back(bench_plain_copy(ctx, s, true));
            StagingRun run(s, 0, f.seed, true, nccl, &ctx);
            const auto r = pa::measure_variants(run, two, ctx.setup, &failures);
            rows.insert(rows.end(), r.begin(), r.end());
        }
        std::printf("\n%s: %d tokens x %d layers, TP %d -> %d, %d KV heads, S = %.1f MiB per stage\n", s.name.c_str(),
                    s.tokens, s.layers, s.tp.prefill_tp, s.tp.decode_tp, s.tp.kv_heads,
                    make_transfer_plan(s.tp, s.layers, s.tokens).total_bytes() / 1048576.0);
        print_rows(rows);
        ctx.rows.insert(ctx.rows.end(), rows.begin(), rows.end());
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
    pa::write_csv_or_exit(kProgram, f.csv, ctx.rows);
    return failures;
}

}  // namespace

int main(int argc, char** argv) {
    refuse_decode_flags(argc, argv);
    const pa::Flags f = pa::parse_flags_or_exit(argc, argv, usage(), lesson_flags());
    const Selection sel = select_or_exit(f);
    const pa::DeviceInfo info = pa::require_gpu(kProgram);
    try {
        const int devices = visible_devices();
        refuse_too_large(f.bench_only ? sel.bench_shapes : sel.check_shapes, info);
        if (!f.check_only) refuse_too_large(sel.bench_shapes, info);

        std::printf("Lesson 07: KV staging between a prefill and a decode server of different TP\n");
        std::printf("GPU: %s\n", info.summary().c_str());
        std::printf("%d GPU%s visible; %s\n", devices, devices == 1 ? "" : "s", nccl_description());
        // one line for each variant this machine or build cannot run
        std::vector<StagingVariant> variants =
            pa::runnable_variants_or_exit(kProgram, sel.variants, [&](const StagingVariant& v) -> std::string {
                if (v.gpus > devices) return pa::strf("%s: unavailable: needs two GPUs, %d visible", v.name.c_str(), devices);
                if (v.name == "staged_nccl" && !nccl_built()) return "staged_nccl: unavailable: " + std::string(nccl_description());
                return "";
            });
        std::unique_ptr<NcclPair> nccl;
        if (!on_gpus(variants, 2).empty()) {
            const bool peer_ok = enable_peer_access(0, 1);
            std::printf("two-GPU rows: prefill ranks on GPU 0, decode ranks on GPU 1 (peer access %s)\n",
                        peer_ok ? "enabled" : "not available: peer copies go through the host");
            if (wants(variants, "staged_nccl")) {
                try {
                    nccl = std::make_unique<NcclPair>(0, 1);
                } catch (const pa::CudaError& e) {
                    if (sel.variant_given) throw;
                    std::printf("staged_nccl skipped: %s\n", e.what());
                    variants.erase(std::remove_if(variants.begin(), variants.end(),
                                                  [](const StagingVariant& v) { return v.name == "staged_nccl"; }),
                                   variants.end());
                }
            }
        }

        int failures = 0;
        if (!f.bench_only) failures += run_checks(sel, variants, f.seed, nccl.get());
        if (!f.check_only) failures += run_bench(sel, variants, f, info, nccl.get());
        return failures ? 1 : 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s: %s\n", kProgram, e.what());
        return 1;
    }
}
