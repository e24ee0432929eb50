// lesson06_wgmma_prefill: checks every step of the prefill ladder (prefill as decode, mma.sync,
// wgmma, wgmma with TMA and warp specialisation), each with the softmax and the gate, against
// the CPU reference, then measures them: time, TFLOPS (causal FLOPs) and % of this GPU's
// measured dense bf16 GEMM rate.
//
//   lesson06_wgmma_prefill                         check (N/N PASS), then the table
//   lesson06_wgmma_prefill --check                 check only (what the sanitizer tests run)
//   lesson06_wgmma_prefill --bench --shape B32-T256-H8-Hkv4 --variant wgmma_ws_softmax
//   lesson06_wgmma_prefill --B 3 --H 8 --Hkv 2 --ctx 100,7,300 --prefix 0,17,1000 --sigma 2.9
//   lesson06_wgmma_prefill --floor                 the last step beside its MMA floor (mma_floor.h)
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ceilings.cuh"
#include "decode_driver.cuh"  // write_csv_or_exit
#include "lesson_driver.cuh"
#include "check.h"
#include "cuda_check.cuh"
#include "device_info.cuh"
#include "flags.h"
#include "gated_reference.h"
#include "lesson06.h"
#include "mma_floor.h"
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

std::string usage() {
    std::string u = pa::common_usage_line(kProgram) +
                    "Causal prefill over the paged KV cache (D 128, pages of 16 tokens, bf16), softmax and gated.\n"
                    "Shapes: B<b>-T<t>-H<h>-Hkv<hkv>[-P<prefix>] (T new tokens per sequence after a cached prefix), or\n"
                    "  --B N --H N --Hkv N --ctx n[,n...] [--prefix p[,p...]]: --ctx is the NEW tokens of each sequence\n"
                    "  (its prompt, T), --prefix the tokens already cached before them; one value for all, or B values.\n"
                    "Variants, the ladder's steps in order (<method>_<policy>, policy softmax or gate; step 1, as_decode,\n"
                    "  runs each new token as a decode: lesson 03's decode for the softmax, lesson 05's for the gate):\n";
    // one line per step, from the variant list itself
    const std::vector<PrefillVariant> all = all_variants();
    for (size_t i = 0; i < all.size();) {
        size_t j = i;
        std::string names;
        while (j < all.size() && all[j].method == all[i].method) names += (names.empty() ? "" : ", ") + all[j++].name;
        u += "  " + names + " (" + all[i].needs + (all[i].not_built.empty() ? "" : "; " + all[i].not_built) + ")\n";
        i = j;
    }
    return u +
           "The gate: --sigma S (0 <= S < 3, default 1.5: about 72 % zeros) and --gamma G (default 1).\n"
           "D 128, pages of 16 tokens and bf16 are built in (--D, --block-size, --dtype accept only those).\n"
           "Exit codes: 0 ok, 1 a check failed, 2 invalid input, 3 no usable GPU.\n";
}

const pa::LessonFlag kFloorFlag{"--floor", false,
                                "--floor          the last step's softmax beside its MMA floor (its kernel with P = S: the copies and "
                                "MMAs alone), L2-hot and cold (lesson06_floor.csv)",
                                {"--check", "--variant"}};

std::vector<pa::LessonFlag> lesson_flags() {
    return {
        kFloorFlag,
        {"--prefix", true, "--prefix p[,p...] cached tokens before them (default 0)", {"--shape"}},
        {"--sigma", true, "--sigma S        the gate's sparsity knob, 0 <= S < 3 (default 1.5)", {}},
        {"--gamma", true, "--gamma G        the gate's scale, > 0 (default 1)", {}},
    };
}

struct Selection {
    std::vector<PrefillShape> check, bench;
    std::vector<PrefillVariant> variants;  // selected (all, or the --variant one)
    GateSetting gate;
};

Selection select_or_exit(const pa::Flags& f) {
    Selection sel;
    auto bad_input = [](const std::string& msg) { pa::exit_bad_input(kProgram, msg); };
    if (f.dtype && *f.dtype != pa::DType::bf16) bad_input("lesson 06 is bf16 only (--dtype bf16)");
    try {
        if (!f.shapes.empty()) {
            if (f.has("--prefix")) bad_input("--prefix belongs to an explicit shape; a named shape says -P<prefix>");
            for (const auto& n : f.shapes) sel.check.push_back(parse_prefill_shape(n));
            sel.bench = sel.check;
        } else if (f.explicit_shape()) {  // parse_flags checked that --B, --H, --Hkv and --ctx are all there
            const int B = *f.B;
            std::vector<int> T = f.ctx;
            std::vector<int> P = f.lesson_int_list("--prefix", 0, 1 << 20, {0});
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
        // the range is the gate's to check (validate_gate says why a value is refused)
        sel.gate.sigma = f.lesson_real("--sigma", -DBL_MAX, DBL_MAX, sel.gate.sigma);
        sel.gate.gamma = f.lesson_real("--gamma", -DBL_MAX, DBL_MAX, sel.gate.gamma);
    } catch (const pa::FlagError& e) {
        bad_input(e.what());
    }
    try {
        pa::reference::GateParams g;
        g.sigma = sel.gate.sigma;
        g.gamma = sel.gate.gamma;
        pa::reference::validate_gate(g);
    } catch (const std::exception& e) {
        bad_input(e.what());
    }
    sel.variants = pa::select_variant_or_exit(kProgram, f.variant, all_variants());
    if (!f.variant.empty() && !sel.variants[0].not_built.empty()) bad_input(sel.variants[0].name + ": " + sel.variants[0].not_built);
    // the check and the table run the softmax variants first, then the gated ones
    std::stable_partition(sel.variants.begin(), sel.variants.end(),
                          [](const PrefillVariant& v) { return v.policy == Policy::softmax; });
    return sel;
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

// One shape's batch on the GPU and its reference, as the driver (lesson_driver.cuh) runs it.
// The reference of a policy is made when a variant of it first needs it; a shape with more
// than kFullCheckPairs (row, key) pairs x heads is checked on every kBenchRowStride-th row.
class PrefillRun {
  public:
    using Variant = PrefillVariant;

    // `cold`: K/V in enough copies for the L2-cold timing.
    PrefillRun(const PrefillShape& s, uint64_t seed, const GateSetting& g, const pa::DeviceInfo& info, bool cold)
        : p_(make_prefill_problem(s, seed)),
          dev_(p_, cold ? pa::l2_cold_copies(cache_shape(p_.shape), info) : 1),
          gate_(g),
          info_(info),
          stride_(static_cast<double>(causal_pairs(s)) * s.H > kFullCheckPairs ? kBenchRowStride : 1) {}

    std::string why_not(const Variant& v) const { return lesson06::why_not(v, p_.shape, info_); }
    pa::CheckResult check(const Variant& v) {
        dev_.poison_output();
        launch(v, dev_.args(gate_, 0), nullptr);
        return recheck(v);
    }
    pa::CheckResult recheck(const Variant& v) {
        CUDA_CHECK(cudaDeviceSynchronize());
        const Reference& r = reference(v.policy);
        return compare_rows(dev_.download_output(), r.ref, r.rows, p_.shape);
    }
    PrefillArgs args(int copy) { return dev_.args(gate_, copy); }
    std::vector<pa::TimedPart> parts(const Variant& v) {
        pa::TimedPart t;
        t.launch = [this, v](int copy) { launch(v, args(copy), nullptr); };
        t.bytes = static_cast<double>(prefill_bytes(p_.shape));
        t.flops = causal_flops(p_.shape);
        return {t};
    }
    int copies() const { return dev_.copies(); }
    std::string label() const { return p_.shape.name + " prefix " + p_.shape.prefix_label(); }
    std::string check_line(const Variant& v, const pa::CheckResult& r) const {
        return pa::strf("%-18s %-34s prefix %-6s rel %.2e max abs %.2e%s%s%s", v.name.c_str(), p_.shape.name.c_str(),
                        p_.shape.prefix_label().c_str(), r.rel_err, r.max_abs_err, stride_ > 1 ? " (sampled rows)" : "",
                        r.pass ? "" : "  ", r.message.c_str());
    }
    void describe(const Variant& v, const pa::TimedPart&, pa::ResultRow& r) const {
        const PrefillShape& s = p_.shape;
        r.gpu = info_.short_name;
        r.lesson = "06";
        r.variant = v.name;
        r.shape = s.name;
        r.dtype = pa::dtype_name(s.dtype);
        r.B = s.B();
        r.H = s.H;
        r.Hkv = s.Hkv;
        r.D = s.D;
        r.ctx = s.ctx_label();
        r.block_size = s.block_size;
        const Geometry geo = geometry(v, s);
        r.set_extra("method", method_name(v.method));
        r.set_extra("policy", policy_name(v.policy));
        r.set_extra("prefix", s.prefix_label());
        r.set_extra("ctas", std::to_string(geo.ctas));
        r.set_extra("ctas_per_sm", std::to_string(geo.ctas_per_sm));
    }

  private:
    struct Reference {
        std::vector<long long> rows;
        std::vector<double> ref;
    };
    const Reference& reference(Policy policy) {
        Reference& r = refs_[policy];
        if (r.rows.empty()) {
            r.rows = checked_rows(p_.shape, stride_);
            r.ref = reference_rows(p_, policy, gate_, r.rows);
        }
        return r;
    }

    PrefillProblem p_;
    DevicePrefillProblem dev_;
    GateSetting gate_;
    pa::DeviceInfo info_;
    int stride_;
    std::map<Policy, Reference> refs_;
};

int run_checks(const Selection& sel, const std::vector<PrefillVariant>& variants, uint64_t seed, const pa::DeviceInfo& info) {
    std::printf("correctness check (seed %llu; gate sigma %.2f, gamma %.2f): reference in double from the rounded inputs\n",
                static_cast<unsigned long long>(seed), sel.gate.sigma, sel.gate.gamma);
    pa::CheckTally tally;
    for (const auto& s : sel.check) {
        PrefillRun run(s, seed, sel.gate, info, false);
        pa::check_variants(run, variants, tally);
    }
    return tally.finish();
}

std::string key(const std::string& shape, const std::string& prefix) { return shape + " P" + prefix; }

// The post's table beside this run, and each shape's fastest step of each policy against the
// measured GEMM ceiling.
void print_summary(const std::vector<pa::ResultRow>& rows, double gemm_tflops) {
    std::map<std::string, const pa::ResultRow*> by;  // "shape Pprefix|variant|l2"
    for (const auto& r : rows) by[key(r.shape, r.get_extra("prefix")) + "|" + r.variant + "|" + r.l2] = &r;
    auto us = [&](const std::string& k, const std::string& v, bool cold) -> double {
        auto it = by.find(k + "|" + v + "|" + (cold ? "cold" : "hot"));
        return it == by.end() ? NAN : it->second->us_median;
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

    std::printf("\nThe fastest step of each policy against the measured cuBLAS bf16 GEMM (%.0f TFLOPS; L2-cold medians):\n",
                gemm_tflops);
    std::vector<std::string> keys;  // measured shapes, in order
    std::map<std::string, std::map<std::string, const pa::ResultRow*>> best;  // shape key -> policy -> row
    for (const auto& r : rows) {
        if (r.l2 != "cold") continue;
        const std::string k = key(r.shape, r.get_extra("prefix"));
        if (!best.count(k)) keys.push_back(k);
        const pa::ResultRow*& b = best[k][r.get_extra("policy")];
        if (!b || r.us_median < b->us_median) b = &r;
    }
    for (const auto& k : keys)
        for (const auto& [policy, r] : best[k])
            std::printf("  %s prefix %s, %s: %s %.1f us, %.0f TFLOPS, %.1f %% of the GEMM ceiling\n", r->shape.c_str(),
                        r->get_extra("prefix").c_str(), policy.c_str(), r->variant.c_str(), r->us_median, *r->tflops,
                        *r->pct_mma_peak);
}

pa::MeasureSetup measure_setup(const pa::Flags& f, const pa::DeviceInfo& info) {
    pa::MeasureSetup setup;
    setup.info = info;
    setup.iters = f.iters;
    setup.budget_us = kTimeBudgetUs;
    setup.min_iters = kMinIters;
    setup.read_bw_gbps = pa::measured_read_bandwidth_gbps(info);
    setup.gemm_tflops = pa::measured_bf16_gemm_tflops();
    return setup;
}

int run_bench(const Selection& sel, const std::vector<PrefillVariant>& variants, const pa::Flags& f,
              const pa::DeviceInfo& info, int* failures) {
    const pa::MeasureSetup setup = measure_setup(f, info);
    std::printf("\nmeasurement (seed %llu; medians of timed launches, at most %d, fewer for slow steps; L2-cold rotates\n"
                "K/V copies over > 2x L2). Ceilings measured now: streaming read %.0f GB/s, cuBLAS bf16 GEMM %.0f TFLOPS.\n"
                "TFLOPS count 4 * D * H * (causal (row, key) pairs); measured shapes are checked on every %dth row.\n",
                static_cast<unsigned long long>(f.seed), f.iters, setup.read_bw_gbps, setup.gemm_tflops, kBenchRowStride);
    std::vector<pa::ResultRow> rows;
    for (const auto& s : sel.bench) {
        PrefillRun run(s, f.seed, sel.gate, info, true);
        const std::vector<pa::ResultRow> r = pa::measure_variants(run, variants, setup, failures);
        rows.insert(rows.end(), r.begin(), r.end());
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
                info.name.c_str(), setup.gemm_tflops);
    if (f.variant.empty()) print_summary(rows, setup.gemm_tflops);
    pa::write_csv_or_exit(kProgram, f.csv, rows);
    return 0;
}

// --floor: on each shape, the last step's softmax (checked and timed as the bench does) and then its MMA
// floor, the same kernel with P = S (mma_floor.h), timed the same way on the same inputs; rows of
// both go to the CSV, the floor's as variant mma_floor with check "-" (its output is not checked).
void run_floor(const Selection& sel, const pa::Flags& f, const pa::DeviceInfo& info, int* failures) {
#if PA_BUILT_SM90A
    const std::vector<PrefillVariant> all = all_variants();
    const auto step = std::find_if(all.begin(), all.end(), [](const PrefillVariant& v) {
        return v.method == kLastStep && v.policy == Policy::softmax;
    });
    if (info.cc() < step->min_cc) {
        std::printf("--floor: the MMA floor is the last step's kernel (%s), which needs %s; %s is sm_%d: nothing "
                    "measured\n",
                    step->name.c_str(), step->needs.c_str(), info.name.c_str(), info.cc());
        return;
    }
    const pa::MeasureSetup setup = measure_setup(f, info);
    std::printf("\nthe MMA floor (seed %llu; L2-cold rotates K/V copies over > 2x L2): the last step's kernel (%s) with\n"
                "P = S (no max, exponent, mask or rescale), timed like the step on the same inputs; cuBLAS bf16 GEMM %.0f\n"
                "TFLOPS\n",
                static_cast<unsigned long long>(f.seed), step->name.c_str(), setup.gemm_tflops);
    std::vector<pa::ResultRow> rows;
    pa::TextTable t({"shape", "prefix", "last step us", "floor us", "step / floor", "floor TFLOPS", "% GEMM"});
    for (const auto& s : sel.bench) {
        const std::string why = why_not(*step, s, info);
        if (!why.empty()) {
            std::printf("%s: skipped (%s)\n", s.name.c_str(), why.c_str());
            continue;
        }
        PrefillRun run(s, f.seed, sel.gate, info, true);
        const std::vector<pa::ResultRow> measured = pa::measure_variants(run, {*step}, setup, failures);
        rows.insert(rows.end(), measured.begin(), measured.end());
        pa::TimedPart part = run.parts(*step)[0];
        part.launch = [&run](int copy) { launch_mma_floor(run.args(copy), nullptr); };
        for (const bool cold : {false, true}) {
            pa::ResultRow r;
            pa::fill_timing(r, pa::time_part(part, cold ? run.copies() : 1, setup), cold, part, setup);
            r.check = "-";
            run.describe(*step, part, r);
            r.variant = "mma_floor";
            r.set_extra("method", "mma_floor");
            r.set_extra("policy", "none");
            rows.push_back(r);
        }
        const pa::ResultRow& step_cold = rows[rows.size() - 3];
        const pa::ResultRow& floor_cold = rows.back();
        t.add_row({s.name, s.prefix_label(), pa::strf("%.1f", step_cold.us_median), pa::strf("%.1f", floor_cold.us_median),
                   pa::strf("%.2f", step_cold.us_median / floor_cold.us_median), pa::strf("%.0f", *floor_cold.tflops),
                   pa::strf("%.1f", *floor_cold.pct_mma_peak)});
    }
    std::printf("\n");
    t.print();
    std::printf("(%s; L2-cold medians)\n", info.name.c_str());
    pa::write_csv_or_exit(kProgram, f.csv, rows);
#else
    (void)sel;
    (void)f;
    (void)failures;
    std::printf("--floor: not built: this build's CUDA architectures do not include 90a (the floor is the last step's kernel); "
                "nothing measured on %s\n", info.name.c_str());
#endif
}

}  // namespace

int main(int argc, char** argv) {
    const pa::Flags f = pa::parse_flags_or_exit(argc, argv, usage(), lesson_flags());
    const Selection sel = select_or_exit(f);
    const pa::DeviceInfo info = pa::require_gpu(kProgram);
    try {
        std::printf("Lesson 06: causal prefill over the paged cache (D 128, page 16, bf16), softmax and gate\n");
        std::printf("GPU: %s\n", info.summary().c_str());
        // Shapes whose K and V pools (with a timed run's L2-cold copies) do not fit, before they are built.
        // A run builds the check's shapes unless --bench, and the measurement's unless --check.
        for (const bool timed : {false, true}) {
            if (timed ? f.check_only : f.bench_only) continue;
            for (const auto& s : timed ? sel.bench : sel.check) {
                const pa::DecodeShape d = cache_shape(s);
                const int copies = timed ? pa::l2_cold_copies(d, info) : 1;
                const std::string memory = pa::pools_why_not(d, info, copies, pa::host_memory_bytes());
                if (!memory.empty()) pa::exit_bad_input(kProgram, memory);
            }
        }
        if (f.has(kFloorFlag.name)) {
            int failures = 0;
            run_floor(sel, f, info, &failures);
            return failures == 0 ? 0 : 1;
        }
        // one line for each variant this build lacks or this GPU cannot run
        const std::vector<PrefillVariant> variants =
            pa::runnable_variants_or_exit(kProgram, sel.variants, [&](const PrefillVariant& v) -> std::string {
                if (!v.not_built.empty()) return v.name + ": " + v.not_built;
                if (info.cc() < v.min_cc)
                    return v.name + ": unavailable on " + info.name + " (sm_" + std::to_string(info.cc()) + "): needs " + v.needs;
                return "";
            });
        auto runs = [&](const PrefillVariant& v, const PrefillShape& s) { return why_not(v, s, info); };
        pa::refuse_unrunnable_shapes_or_exit(kProgram, f.bench_only ? sel.bench : sel.check, variants, runs);
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
