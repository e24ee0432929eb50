// lesson06_wgmma_prefill: checks every step of the prefill ladder (prefill as decode, mma.sync,
// wgmma, wgmma with TMA and warp specialisation), each with the softmax and the gate, against
// the CPU reference, then measures them: time, TFLOPS (causal FLOPs) and % of this GPU's
// measured dense bf16 GEMM rate.
//
//   lesson06_wgmma_prefill                         check (N/N PASS), then the table
//   lesson06_wgmma_prefill --check                 check only (what the sanitizer tests run)
//   lesson06_wgmma_prefill --bench --shape B32-T256-H8-Hkv4 --variant wgmma_ws_softmax
//   lesson06_wgmma_prefill --B 3 --H 8 --Hkv 2 --ctx 100,7,300 --prefix 0,17,1000 --sigma 2.9
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ceilings.cuh"
#include "decode_driver.cuh"  // write_csv_or_exit
#include "check.h"
#include "cuda_check.cuh"
#include "device_info.cuh"
#include "flags.h"
#include "gated_reference.h"
#include "lesson06.h"
#include "table.h"
#include "timer.cuh"

namespace {

using namespace lesson06;

const char* kProgram = "lesson06_wgmma_prefill";
constexpr double kTimeBudgetUs = 300e3;  // per variant, shape and L2 regime: fewer launches for slow steps
constexpr int kMinIters = 3;
constexpr int kBenchRowStride = 32;      // the measured shapes are checked on every 32nd row (and the ends)
constexpr double kFullCheckPairs = 3e8;  // above this many (row, key) pairs x heads, a check samples rows

// The H200 post (B32-T256-H8-Hkv4, bf16, gated attention; FA3 is softmax), us, beside the
// variant of this lesson that does the same thing.
struct PostRow {
    const char* kernel;
    double us;  // 0: the post has no such kernel
    const char* ours;
};
const std::vector<PostRow> kPostH200 = {
    {"MMA (mma.sync)", 584, "mma_sync_gate"},
    {"WGMMA, first correct version", 219, "wgmma_gate"},
    {"WGMMA, FIR gate from the fragment, m64n16", 165, "wgmma_gate"},
    {"-", 0, "wgmma_ws_gate"},
    {"FA3 (softmax)", 52, "wgmma_ws_softmax"}};

[[noreturn]] void bad_input(const std::string& msg) {
    std::fprintf(stderr, "error: %s: %s\n", kProgram, msg.c_str());
    std::exit(pa::kExitBadInput);
}

std::string usage() {
    return pa::common_usage_line(kProgram) +
           "Causal prefill over the paged KV cache (D 128, pages of 16 tokens, bf16), softmax and gated.\n"
           "Shapes: B<b>-T<t>-H<h>-Hkv<hkv>[-P<prefix>] (T new tokens per sequence after a cached prefix), or\n"
           "  --B N --H N --Hkv N --ctx n[,n...] [--prefix p[,p...]]: --ctx is the NEW tokens of each sequence\n"
           "  (its prompt, T), --prefix the tokens already cached before them; one value for all, or B values.\n"
           "Variants (<method>_<policy>, policy softmax or gate): as_decode (each token a decode: lesson 03's\n"
           "  decode for the softmax, lesson 05's for the gate),\n"
           "  mma_sync (mma.sync.m16n8k16, sm_80+), wgmma (wgmma from shared memory, sm_90a),\n"
           "  wgmma_ws (+ TMA, producer warp, ping-pong consumers, setmaxnreg; sm_90a).\n"
           "The gate: --sigma S (0 <= S < 3, default 1.5: about 72 % zeros) and --gamma G (default 1).\n"
           "D 128, pages of 16 tokens and bf16 are built in (--D, --block-size, --dtype accept only those).\n"
           "Exit codes: 0 ok, 1 a check failed, 2 invalid input, 3 no usable GPU.\n";
}

std::vector<pa::LessonFlag> lesson_flags() {
    return {
        {"--prefix", true, "--prefix p[,p...] cached tokens before them (default 0)", {"--shape"}},
        {"--sigma", true, "--sigma S        the gate's sparsity knob, 0 <= S < 3 (default 1.5)", {}},
        {"--gamma", true, "--gamma G        the gate's scale, > 0 (default 1)", {}},
    };
}

std::vector<int> int_list(const std::string& flag, const std::string& text, int lo, int hi) {
    std::vector<int> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        char* end = nullptr;
        const long v = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || v < lo || v > hi)
            bad_input(flag + " expects integers in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" +
                      text + "'");
        out.push_back(static_cast<int>(v));
    }
    if (out.empty() || text.back() == ',') bad_input(flag + " expects a comma-separated list, got '" + text + "'");
    return out;
}

double real_flag(const pa::Flags& f, const std::string& flag, double fallback) {
    auto it = f.lesson.find(flag);
    if (it == f.lesson.end()) return fallback;
    char* end = nullptr;
    const double v = std::strtod(it->second.c_str(), &end);
    if (it->second.empty() || *end != '\0' || !std::isfinite(v)) bad_input(flag + " expects a number, got '" + it->second + "'");
    return v;
}

struct Selection {
    std::vector<PrefillShape> check, bench;
    std::vector<PrefillVariant> variants;  // selected (all, or the --variant one)
    GateSetting gate;
};

Selection select_or_exit(const pa::Flags& f) {
    Selection sel;
    if (f.dtype && *f.dtype != pa::DType::bf16) bad_input("lesson 06 is bf16 only (--dtype bf16)");
    try {
        if (!f.shapes.empty()) {
            if (f.has("--prefix")) bad_input("--prefix belongs to an explicit shape; a named shape says -P<prefix>");
            for (const auto& n : f.shapes) sel.check.push_back(parse_prefill_shape(n));
            sel.bench = sel.check;
        } else if (f.explicit_shape()) {  // parse_flags checked that --B, --H, --Hkv and --ctx are all there
            const int B = *f.B;
            std::vector<int> T = f.ctx;
            std::vector<int> P = f.has("--prefix") ? int_list("--prefix", f.lesson.at("--prefix"), 0, 1 << 20) : std::vector<int>{0};
            if (T.size() == 1) T.assign(B, T[0]);
            if (P.size() == 1) P.assign(B, P[0]);
            if (static_cast<int>(P.size()) != B)
                bad_input("--prefix gives " + std::to_string(P.size()) + " values but --B is " + std::to_string(B) +
                          " (give one, or one per sequence)");
            const bool uniform = std::all_of(T.begin(), T.end(), [&](int t) { return t == T[0]; });
            const std::string name = uniform ? prefill_shape_name(B, T[0], *f.H, *f.Hkv)
                                             : "B" + std::to_string(B) + "-mixed-H" + std::to_string(*f.H) + "-Hkv" +
                                                   std::to_string(*f.Hkv);
            PrefillShape s = make_mixed_prefill_shape(name, *f.H, *f.Hkv, T, P);
            s.D = f.D.value_or(kHeadSize);
            s.block_size = f.block_size.value_or(kPageSize);
            validate_prefill_shape(s);
            sel.check = {s};
            sel.bench = sel.check;
        } else if (f.has("--prefix")) {
            bad_input("--prefix belongs to an explicit shape (--B --H --Hkv --ctx)");
        } else {
            sel.check = check_shapes();
            sel.bench = bench_shapes();
        }
    } catch (const pa::FlagError& e) {
        bad_input(e.what());
    }
    sel.gate.sigma = real_flag(f, "--sigma", sel.gate.sigma);
    sel.gate.gamma = real_flag(f, "--gamma", sel.gate.gamma);
    try {
        pa::reference::GateParams g;
        g.sigma = sel.gate.sigma;
        g.gamma = sel.gate.gamma;
        pa::reference::validate_gate(g);
    } catch (const std::exception& e) {
        bad_input(e.what());
    }
    const std::vector<PrefillVariant> all = all_variants();
    if (f.variant.empty()) {
        sel.variants = all;
    } else {
        std::string names;
        for (const auto& v : all) {
            if (v.name == f.variant) sel.variants = {v};
            names += (names.empty() ? "" : ", ") + v.name;
        }
        if (sel.variants.empty()) bad_input("unknown variant '" + f.variant + "' (this lesson has: " + names + ")");
        if (!sel.variants[0].not_built.empty()) bad_input(sel.variants[0].name + ": " + sel.variants[0].not_built);
    }
    return sel;
}

// The variants this GPU runs; the others are named in one line each reason.
std::vector<PrefillVariant> runnable(const std::vector<PrefillVariant>& variants, const pa::DeviceInfo& info) {
    std::vector<PrefillVariant> out;
    std::map<std::string, std::vector<std::string>> skipped;  // reason -> names
    for (const auto& v : variants) {
        if (!v.not_built.empty()) skipped[v.not_built].push_back(v.name);
        else if (info.cc() < v.min_cc)
            skipped["needs " + v.needs + "; this GPU is sm_" + std::to_string(info.cc())].push_back(v.name);
        else out.push_back(v);
    }
    for (const auto& [why, names] : skipped) {
        std::string list;
        for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
        std::printf("unavailable: %s (%s)\n", list.c_str(), why.c_str());
    }
    return out;
}

// Compares `out` ([total_new, H, D]) on `rows` with the reference of those rows.
pa::CheckResult compare_rows(const std::vector<uint16_t>& out, const std::vector<double>& ref,
                             const std::vector<long long>& rows, const PrefillShape& s) {
    const size_t row_elems = static_cast<size_t>(s.H) * s.D;
    if (rows.size() * row_elems == out.size()) return pa::compare_output(out, ref, s.dtype);
    std::vector<uint16_t> picked(rows.size() * row_elems);
    for (size_t r = 0; r < rows.size(); ++r)
        std::copy_n(out.begin() + rows[r] * row_elems, row_elems, picked.begin() + r * row_elems);
    return pa::compare_output(picked, ref, s.dtype);
}

struct PolicyRef {
    std::vector<long long> rows;
    std::vector<double> ref;
};

PolicyRef make_ref(const PrefillProblem& p, Policy policy, const GateSetting& g, int stride) {
    PolicyRef r;
    r.rows = checked_rows(p.shape, stride);
    r.ref = reference_rows(p, policy, g, r.rows);
    return r;
}

int check_stride(const PrefillShape& s) {
    return static_cast<double>(causal_pairs(s)) * s.H > kFullCheckPairs ? kBenchRowStride : 1;
}

pa::CheckResult run_once(const PrefillVariant& v, DevicePrefillProblem& dev, const PrefillShape& s, const GateSetting& g,
                         const PolicyRef& ref, int copy = 0) {
    dev.poison_output();
    launch(v, dev.args(g, copy), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    return compare_rows(dev.download_output(), ref.ref, ref.rows, s);
}

int run_checks(const Selection& sel, const std::vector<PrefillVariant>& variants, uint64_t seed, const pa::DeviceInfo& info) {
    int total = 0, passed = 0, skipped = 0;
    std::printf("correctness check (seed %llu; gate sigma %.2f, gamma %.2f): reference in double from the rounded inputs\n",
                static_cast<unsigned long long>(seed), sel.gate.sigma, sel.gate.gamma);
    for (const auto& s : sel.check) {
        const PrefillProblem p = make_prefill_problem(s, seed);
        DevicePrefillProblem dev(p);
        const int stride = check_stride(s);
        for (Policy policy : {Policy::softmax, Policy::gate}) {
            bool any = false;
            for (const auto& v : variants) any = any || v.policy == policy;
            if (!any) continue;
            const PolicyRef ref = make_ref(p, policy, sel.gate, stride);
            for (const auto& v : variants) {
                if (v.policy != policy) continue;
                if (!why_not(v, s, info).empty()) {
                    ++skipped;
                    continue;
                }
                const pa::CheckResult r = run_once(v, dev, s, sel.gate, ref);
                ++total;
                passed += r.pass;
                std::printf("  %s %-18s %-34s prefix %-6s rel %.2e max abs %.2e%s%s%s\n", r.pass ? "PASS" : "FAIL",
                            v.name.c_str(), s.name.c_str(), s.prefix_label().c_str(), r.rel_err, r.max_abs_err,
                            stride > 1 ? " (sampled rows)" : "", r.pass ? "" : "  ", r.message.c_str());
            }
        }
    }
    if (skipped > 0) std::printf("  (%d variant/shape pairs not run: the variant cannot run the shape here)\n", skipped);
    std::printf("%d/%d %s\n", passed, total, passed == total ? "PASS" : "FAIL");
    return total - passed;
}

struct Measured {
    PrefillShape shape;
    PrefillVariant variant;
    pa::Timing hot, cold;
    pa::CheckResult check;
    Geometry geo;
};

pa::Timing time_variant(const PrefillVariant& v, DevicePrefillProblem& dev, const GateSetting& g, int copies, int max_iters) {
    // one launch with events sizes the run: slow steps (as_decode on 8k prompts) get fewer launches
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaEventRecord(e0));
    launch(v, dev.args(g, 0), nullptr);
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    const int iters = std::clamp(static_cast<int>(kTimeBudgetUs / std::max(1.0, ms * 1e3)), kMinIters, max_iters);
    const int warmup = std::min(10, iters);
    return pa::time_kernel([&](int c) { launch(v, dev.args(g, c % copies), nullptr); }, copies, warmup, iters);
}

pa::ResultRow make_row(const pa::DeviceInfo& info, const Measured& m, bool cold, double read_bw, double gemm_tflops) {
    const PrefillShape& s = m.shape;
    pa::ResultRow r;
    r.gpu = info.short_name;
    r.lesson = "06";
    r.variant = m.variant.name;
    r.shape = s.name;
    r.dtype = pa::dtype_name(s.dtype);
    r.B = s.B();
    r.H = s.H;
    r.Hkv = s.Hkv;
    r.D = s.D;
    r.ctx = s.ctx_label();
    r.block_size = s.block_size;
    r.l2 = cold ? "cold" : "hot";
    const pa::Timing& t = cold ? m.cold : m.hot;
    r.us_median = t.us_median;
    r.us_min = t.us_min;
    const double bytes = static_cast<double>(prefill_bytes(s)), flops = causal_flops(s);
    r.bytes = bytes;
    r.gbps = bytes / (t.us_median * 1e-6) / 1e9;
    r.pct_read_bw = 100.0 * *r.gbps / read_bw;
    r.flops = flops;
    r.tflops = flops / (t.us_median * 1e-6) / 1e12;
    r.pct_mma_peak = 100.0 * *r.tflops / gemm_tflops;
    r.check = m.check.pass ? "PASS" : "FAIL";
    r.rel_err = m.check.rel_err;
    r.set_extra("method", method_name(m.variant.method));
    r.set_extra("policy", policy_name(m.variant.policy));
    r.set_extra("prefix", s.prefix_label());
    r.set_extra("ctas", std::to_string(m.geo.ctas));
    r.set_extra("ctas_per_sm", std::to_string(m.geo.ctas_per_sm));
    return r;
}

std::string key(const std::string& shape, const std::string& prefix) { return shape + " P" + prefix; }

void print_summary(const std::vector<Measured>& ms, double gemm_tflops) {
    std::map<std::string, const Measured*> by;  // "shape Pprefix|variant"
    for (const auto& m : ms) by[key(m.shape.name, m.shape.prefix_label()) + "|" + m.variant.name] = &m;
    auto us = [&](const std::string& k, const std::string& v, bool cold) -> double {
        auto it = by.find(k + "|" + v);
        return it == by.end() ? NAN : (cold ? it->second->cold.us_median : it->second->hot.us_median);
    };
    const std::string post = key("B32-T256-H8-Hkv4", "0");
    std::printf("\nThe H200 post at B32-T256-H8-Hkv4 (gated attention; FA3 is softmax), beside this run (us, L2-hot / cold):\n");
    pa::TextTable t({"post's kernel", "post us", "ours", "hot us", "cold us"});
    for (const auto& row : kPostH200) {
        const double h = us(post, row.ours, false), c = us(post, row.ours, true);
        t.add_row({row.kernel, row.us > 0 ? pa::strf("%.0f", row.us) : "-", row.ours,
                   std::isnan(h) ? "-" : pa::strf("%.1f", h), std::isnan(c) ? "-" : pa::strf("%.1f", c)});
    }
    t.print();

    std::printf("\nTargets (softmax unless named; cold medians; GEMM ceiling %.0f TFLOPS):\n", gemm_tflops);
    auto tflops_of = [&](const std::string& shape) {
        auto it = by.find(key(shape, "0") + "|wgmma_ws_softmax");
        return it == by.end() ? NAN : causal_flops(it->second->shape) / (it->second->cold.us_median * 1e-6) / 1e12;
    };
    for (const char* shape : {"B1-T8192-H32-Hkv8", "B4-T4096-H32-Hkv8"}) {
        const double tf = tflops_of(shape);
        if (!std::isnan(tf))
            std::printf("  %s wgmma_ws_softmax: %.0f TFLOPS (floor 300, aim 450): %s\n", shape, tf,
                        tf >= 450 ? "aim met" : tf >= 300 ? "floor met" : "NOT met");
    }
    const double ws = us(post, "wgmma_ws_softmax", true), mma = us(post, "mma_sync_softmax", true);
    if (!std::isnan(ws) && !std::isnan(mma))
        std::printf("  B32-T256-H8-Hkv4 wgmma_ws_softmax: %.1f us, %.2fx faster than mma_sync_softmax (floor 2.5x, under 52 us): %s\n",
                    ws, mma / ws, ws < 52 && mma / ws >= 2.5 ? "met" : "NOT met");
    for (const auto& m : ms) {
        if (m.variant.name != "wgmma_ws_gate") continue;
        const std::string k = key(m.shape.name, m.shape.prefix_label());
        const double soft = us(k, "wgmma_ws_softmax", true);
        if (!std::isnan(soft))
            std::printf("  %s prefix %s: gate / softmax time %.2f (within 1.15): %s\n", m.shape.name.c_str(),
                        m.shape.prefix_label().c_str(), m.cold.us_median / soft, m.cold.us_median <= 1.15 * soft ? "met" : "NOT met");
    }
}

int run_bench(const Selection& sel, const std::vector<PrefillVariant>& variants, const pa::Flags& f,
              const pa::DeviceInfo& info, int* failures) {
    const double read_bw = pa::measured_read_bandwidth_gbps(info);
    const double gemm = pa::measured_bf16_gemm_tflops();
    std::printf("\nmeasurement (seed %llu; medians of timed launches, at most %d, fewer for slow steps; L2-cold rotates\n"
                "K/V copies over > 2x L2). Ceilings measured now: streaming read %.0f GB/s, cuBLAS bf16 GEMM %.0f TFLOPS.\n"
                "TFLOPS count 4 * D * H * (causal (row, key) pairs); measured shapes are checked on every %dth row.\n",
                static_cast<unsigned long long>(f.seed), f.iters, read_bw, gemm, kBenchRowStride);
    std::vector<Measured> ms;
    std::vector<pa::ResultRow> rows;
    for (const auto& s : sel.bench) {
        const PrefillProblem p = make_prefill_problem(s, f.seed);
        int copies = pa::cold_copies(2LL * static_cast<long long>(p.cache.k.size()) * 2, info.l2_bytes);
        DevicePrefillProblem dev(p, copies);
        const int stride = check_stride(s);
        for (Policy policy : {Policy::softmax, Policy::gate}) {
            std::vector<PrefillVariant> vs;
            for (const auto& v : variants)
                if (v.policy == policy && why_not(v, s, info).empty()) vs.push_back(v);
            if (vs.empty()) continue;
            const PolicyRef ref = make_ref(p, policy, sel.gate, stride);
            for (const auto& v : vs) {
                Measured m;
                m.shape = s;
                m.variant = v;
                const pa::CheckResult before = run_once(v, dev, s, sel.gate, ref);
                m.hot = time_variant(v, dev, sel.gate, 1, f.iters);
                m.cold = time_variant(v, dev, sel.gate, dev.copies(), f.iters);
                CUDA_CHECK(cudaDeviceSynchronize());
                const pa::CheckResult after = compare_rows(dev.download_output(), ref.ref, ref.rows, s);  // the last timed launch
                m.check = before.pass ? after : before;
                m.check.rel_err = std::max(before.rel_err, after.rel_err);
                m.geo = geometry(v, s);
                if (!m.check.pass) {
                    ++*failures;
                    std::fprintf(stderr, "FAIL %s %s prefix %s: %s\n", v.name.c_str(), s.name.c_str(),
                                 s.prefix_label().c_str(), m.check.message.c_str());
                }
                ms.push_back(m);
                rows.push_back(make_row(info, m, false, read_bw, gemm));
                rows.push_back(make_row(info, m, true, read_bw, gemm));
            }
        }
    }
    pa::TextTable t({"shape", "prefix", "variant", "CTAs", "CTA/SM", "hot us", "cold us", "cold min", "TFLOPS", "% GEMM",
                     "check", "rel err"});
    for (size_t i = 0; i + 1 < rows.size(); i += 2) {
        const pa::ResultRow& hot = rows[i];
        const pa::ResultRow& cold = rows[i + 1];
        t.add_row({hot.shape, hot.get_extra("prefix"), hot.variant, hot.get_extra("ctas"), hot.get_extra("ctas_per_sm"),
                   pa::strf("%.1f", hot.us_median), pa::strf("%.1f", cold.us_median), pa::strf("%.1f", cold.us_min),
                   pa::strf("%.0f", *cold.tflops), pa::strf("%.1f", *cold.pct_mma_peak), cold.check,
                   pa::strf("%.1e", *cold.rel_err)});
    }
    std::printf("\n");
    t.print();
    std::printf("(%s; TFLOPS and %% GEMM from the L2-cold median; %% GEMM = over the measured %.0f TFLOPS)\n",
                info.name.c_str(), gemm);
    if (f.variant.empty()) print_summary(ms, gemm);
    pa::write_csv_or_exit(kProgram, f.csv, rows);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const pa::Flags f = pa::parse_flags_or_exit(argc, argv, usage(), lesson_flags());
    const Selection sel = select_or_exit(f);
    const pa::DeviceInfo info = pa::require_gpu(kProgram);
    try {
        std::printf("Lesson 06: causal prefill over the paged cache (D 128, page 16, bf16), softmax and gate\n");
        std::printf("GPU: %s\n", info.summary().c_str());
        const std::vector<PrefillVariant> variants = runnable(sel.variants, info);
        if (variants.empty()) {
            std::fprintf(stderr, "error: %s: no selected variant runs on this GPU\n", kProgram);
            return pa::kExitNoGpu;
        }
        for (const auto& s : f.bench_only ? sel.bench : sel.check) {
            bool any = false;
            std::string why;
            for (const auto& v : variants) {
                const std::string w = why_not(v, s, info);
                if (w.empty()) any = true;
                else if (why.empty()) why = w;
            }
            if (!any) bad_input(why);
        }
        int failures = 0;
        if (!f.bench_only) failures += run_checks(sel, variants, f.seed, info);
        if (f.check_only) return failures == 0 ? 0 : 1;
        run_bench(sel, variants, f, info, &failures);
        return failures == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s: %s\n", kProgram, e.what());
        return 1;
    }
}
