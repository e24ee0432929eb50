#include "harness.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "decode_driver.cuh"
#include "device_info.cuh"
#include "flags.h"
#include "launch_utils.cuh"
#include "lesson05.h"
#include "sparsity.h"
#include "table.h"

namespace lesson05_exercise {

using pa::exercise::GradeCase;
using pa::exercise::Suspect;

std::string GateCase::label() const {
    std::string s = pa::strf("sigma=%g", gate.sigma);
    if (gate.gamma != 1.0) s += pa::strf(" gamma=%g", gate.gamma);
    if (alpha != 0.0) s += pa::strf(" alpha=%g", alpha);
    return s;
}

namespace {

GateCase gate_of(double sigma, double gamma, double alpha) {
    GateCase g;
    g.gate.sigma = sigma;
    g.gate.gamma = gamma;
    g.alpha = alpha;
    return g;
}

// The gates (indices into gate_table()) each exercise checks at. The fill-in: the lesson's three
// sparsities (about 50, 72 and 87 % zeros). The floor: two gammas other than 1 (a floor that
// ignores gamma is wrong at both) and two alphas.
std::vector<int> gates_for(const std::string& exercise) {
    if (exercise == "gate") return {3, 4};
    return {0, 1, 2};
}

const std::vector<pa::exercise::KernelInstance>& instances() {
    static const std::vector<pa::exercise::KernelInstance> list = {{pa::DType::fp16, 128}, {pa::DType::bf16, 128}};
    return list;
}

// n short lengths around pages and tiles, as the lesson's check: a batch large enough that a
// CTA streams two sequences where two CTAs fit an SM.
std::vector<int> many_short(int n) {
    const int lengths[] = {1, 127, 128, 129, 256, 300, 77, 384};
    std::vector<int> ctx(n);
    for (int i = 0; i < n; ++i) ctx[i] = lengths[i % 8];
    return ctx;
}

// The named edge cases (pa::exercise::decode_edge_cases' list, for a CTA of at most 8 query
// heads and D 128, with the tile of 128 tokens in place of lesson 01's CTA of 128 threads).
std::vector<GradeCase> edge_cases() {
    std::vector<GradeCase> out;
    auto make = [&](const std::string& name, int H, int Hkv, std::vector<int> ctx, int block_size, pa::DType t,
                    const std::string& teaches) {
        GradeCase c;
        c.name = name + (t == pa::DType::bf16 ? "-bf16" : "");
        c.group = "edge";
        c.shape = pa::make_shape(c.name, H, Hkv, std::move(ctx), 128, block_size, t);
        c.teaches = teaches;
        out.push_back(c);
    };
    const pa::DType f = pa::DType::fp16, b = pa::DType::bf16;
    make("ctx-1", 8, 8, {1, 1}, 16, f, "one token: the list of its only tile has one entry or none");
    make("partial-last-page", 8, 2, {17, 31, 40}, 16, f,
         "the last page is partly filled; its other slots hold NaN and must never be listed");
    make("pow2-pm1-warp", 4, 4, {31, 32, 33, 63, 64, 65}, 16, f,
         "lengths around a gate warp: tokens in only some lanes of the last warp");
    make("pow2-pm1-tile", 8, 4, {127, 128, 129, 255, 256, 257}, 16, f,
         "lengths around a tile of 128 tokens: some gate warps have no token at all");
    make("pow2-pm1-long", 4, 2, {1023, 1024, 1025}, 32, f, "lengths around 2^10");
    make("mixed-lengths", 8, 2, {1, 2000, 17, 640, 129, 3}, 16, f,
         "one batch of very different lengths: each CTA must use its own sequence's length");
    make("mixed-lengths", 8, 2, {1, 2000, 17, 640, 129, 3}, 16, b, "the same in bf16");
    make("mqa", 8, 1, {300, 1000}, 16, f,
         "MQA: 8 query heads share one KV head, and a token is needed when ANY of them needs it");
    make("pages-random-order", 8, 8, {777, 1500}, 8, f,
         "many small pages in random order: every token's page comes from the block table");
    make("two-seqs-per-cta", 4, 2, many_short(265), 16, b,
         "a batch where a CTA streams two sequences: the list of a tile belongs to one sequence");
    return out;
}

}  // namespace

const std::vector<GateCase>& gate_table() {
    static const std::vector<GateCase> table = {
        gate_of(0.0, 1.0, 0.0),  gate_of(1.5, 1.0, 0.0),  gate_of(2.9, 1.0, 0.0),  // the fill-in's
        gate_of(0.0, 2.0, 0.25), gate_of(1.5, 0.5, 0.4),                          // the floor's
    };
    return table;
}

lesson05::GateArgs gate_args(const GateCase& g) {
    lesson05::GateArgs a;
    a.gamma = static_cast<float>(g.gate.gamma);
    a.sigma = static_cast<float>(g.gate.sigma);
    return a;
}

Plan plan_for(int B, int Hkv, int max_ctx, int block_size) {
    using lesson05::Layout;
    const int sms = pa::current_sm_count(), optin = pa::current_max_smem_optin();
    auto fits = [&](int smem) { return smem + 1024 <= optin; };  // 1 KiB for the static arrays
    Plan plan;
    const bool ring2 = !fits(Layout<2>::kSmemBytes);
    plan.seqs = ring2 ? 1 : lesson05::seqs_per_cta(B, Hkv, max_ctx, block_size, sms, Layout<2>::kPageSlots);
    plan.ctas = static_cast<long long>((B + plan.seqs - 1) / plan.seqs) * Hkv;
    if (ring2) {
        plan.ring = Ring::small;
        plan.smem_bytes = Layout<1, lesson05::kSmallStages>::kSmemBytes;
    } else if (plan.ctas > sms || !fits(Layout<1>::kSmemBytes)) {
        plan.ring = Ring::two_per_sm;
        plan.smem_bytes = Layout<2>::kSmemBytes;
    } else {
        plan.ring = Ring::one_per_sm;
        plan.smem_bytes = Layout<1>::kSmemBytes;
    }
    return plan;
}

std::vector<GradeCase> grade_cases(const std::string& exercise, uint64_t seed) {
    std::vector<GradeCase> base;
    for (const char* name : {"h8kv4-B1-ctx2k", "h8kv4-B32-ctx1k", "h8kv4-B64-ctx256", "h8kv4-B128-ctx512"}) {
        GradeCase c;
        c.name = name;
        c.group = "catalogue";
        c.shape = *pa::find_shape(name);
        c.teaches = "a Table C shape";
        base.push_back(c);
    }
    for (GradeCase c : pa::exercise::seeded_cases(seed, 6, instances())) base.push_back(c);
    for (const GradeCase& c : edge_cases()) base.push_back(c);
    std::vector<GradeCase> cases;
    for (int gate : gates_for(exercise))
        for (GradeCase c : base) {
            c.name += " " + gate_table()[static_cast<size_t>(gate)].label();
            c.shape.name = c.name;  // a shape refused on this GPU is named with its gate
            c.windows = {pa::exercise::kFullWindow};
            c.param = gate;
            cases.push_back(c);
        }
    return cases;
}

std::vector<double> reference(const std::string& exercise, const pa::DecodeProblem& p, const GateCase& g) {
    if (exercise == "gate") return pa::reference::floor_gated_decode(p, g.gate, g.alpha);
    return pa::reference::gated_decode(p, g.gate);
}

std::vector<Suspect> suspects(const std::string& exercise, const pa::DecodeProblem& p, const GateCase& g) {
    const pa::PagedDecodeView v(p);
    const double scale = p.scale;
    const pa::reference::GateParams gate = g.gate;
    const double floor = g.alpha * gate.gamma;
    std::vector<Suspect> out;
    if (exercise == "gate" && g.alpha > 0) {
        out.push_back({"the floor is not applied: the output is the lesson's gate (TODO(1), TODO(2))",
                       [v, scale, gate] { return pa::reference::gated_decode(v, scale, gate); }});
        if (gate.gamma != 1.0 && g.alpha / gate.gamma < 1.0)
            out.push_back({pa::strf("the floor is alpha, not alpha times gamma: it must scale with the largest weight "
                                    "the gate gives (here %g, not %g)",
                                    floor, g.alpha),
                           [v, scale, gate, g] {
                               return pa::reference::floor_gated_decode(v, scale, gate, g.alpha / gate.gamma);
                           }});
        out.push_back({"the threshold is on the wrong side: each weight kept its part below the floor (min(p, floor)), "
                       "not its part above it",
                       [v, scale, gate, floor] {
                           return pa::reference::decode_with_weights(v, scale, [gate, floor](const std::vector<double>& s) {
                               std::vector<double> w = pa::reference::gate_weights(s, gate);
                               for (double& x : w) x = std::min(x, floor);
                               return w;
                           });
                       }});
        out.push_back({"negative weights: each weight at or below the floor became p - floor < 0 (the max with 0 is "
                       "missing), so no token has a weight of exactly 0",
                       [v, scale, gate, floor] {
                           return pa::reference::decode_with_weights(v, scale, [gate, floor](const std::vector<double>& s) {
                               std::vector<double> w = pa::reference::gate_weights(s, gate);
                               for (double& x : w) x -= floor;
                               return w;
                           });
                       }});
    }
    out.push_back({exercise == "fill" ? "the output is all zeros: no token was listed (TODO(1): lane 0 writes the "
                                        "warp's count, which nnz sums)"
                                      : "the output is all zeros (or too small to tell from zero)",
                   [&p] { return std::vector<double>(static_cast<size_t>(p.shape.B) * p.shape.H * p.shape.D, 0.0); }});
    return out;
}

namespace {

const char* kProgram = "lesson05_exercise";

std::string usage() {
    return std::string("usage: ") + kProgram +
           " [--grade] [--exercise fill|gate] [--seed S] [--json FILE] [--timeout S] [--iters N] [--help]\n"
           "Grades lesson 05's exercises (lessons/05_sparse_p/exercise/README.md):\n"
           "  fill  student.cuh: the ordered compaction of step 10 (warp ballot and prefix counts)\n"
           "  gate  gate.cuh: the gate with a floor (every weight keeps its part above alpha * gamma)\n"
           "Correctness first: part of Table C, 6 shapes drawn from --seed (a teacher's secret seed gives shapes\n"
           "no student saw) and named edge cases, each at several gates, every output poisoned with NaN before\n"
           "every launch. Then speed: the graded kernel against the lesson's step 10 (compact_ordered), timed\n"
           "alternately in the same run, L2-cold, as a ratio of times (full marks within 1.2).\n"
           "Exit codes: 0 correct, 1 wrong, 2 invalid input, 3 no usable GPU, 4 a kernel hung.\n"
           "With no flags: --grade --exercise fill.\n";
}

}  // namespace

int run(int argc, char** argv, const Graded& g) {
    const pa::exercise::GradeFlags f = pa::exercise::parse_grade_flags(argc, argv, kProgram, usage(), {"fill", "gate"});
    const std::string exercise = f.exercise;
    const GradedKernel& k = exercise == "fill" ? g.fill : g.gate;
    if (!k.built)
        pa::exit_bad_input(kProgram, "this build (" + g.build + ") has no graded file for the " + exercise +
                                         " exercise; lesson05_exercise has both");

    const GateCase& timed = gate_table()[kTimingGate];  // the lesson's step 10 only runs timed
    const pa::DecodeVariant lesson =
        lesson05::variant("compact_ordered", lesson05::make_gate(timed.gate.sigma, timed.gate.gamma));
    pa::exercise::GraderSpec spec;
    spec.program = kProgram;
    spec.build = g.build;
    spec.exercise = exercise;
    spec.seed = f.seed;
    spec.cases = grade_cases(exercise, f.seed);
    spec.why_not = [lesson](const pa::DecodeShape& s) {
        const pa::DeviceInfo& info = pa::current_device_info();
        std::string why = lesson05::why_not(s, info);
        if (!why.empty()) return why;
        // The graded kernel must run the layout step 10 runs, or the speed ratio compares two layouts.
        const Plan plan = plan_for(s.B, s.Hkv, s.max_ctx(), s.block_size);
        const pa::LaunchGeometry geo = lesson.geometry(s, info);
        if (geo.ctas != plan.ctas || geo.smem_bytes != plan.smem_bytes)
            throw std::logic_error(pa::strf("lesson05_exercise: shape %s: the grader's launch plan (%lld CTAs, %d bytes) is "
                                            "not step 10's (%lld CTAs, %d bytes)",
                                            s.name.c_str(), plan.ctas, plan.smem_bytes, geo.ctas, geo.smem_bytes));
        return why;
    };
    spec.student = k.launch;
    spec.lesson_variant = lesson.name;
    spec.lesson_why_not = [](const pa::DecodeShape& s) { return lesson05::why_not(s, pa::current_device_info()); };
    spec.lesson = lesson.launch;
    spec.reference = [exercise](const pa::DecodeProblem& p, int, int gate) {
        return reference(exercise, p, gate_table()[static_cast<size_t>(gate)]);
    };
    spec.suspects = [exercise](const pa::DecodeProblem& p, int, int gate) {
        return suspects(exercise, p, gate_table()[static_cast<size_t>(gate)]);
    };
    for (const char* name : {"h8kv4-B1-ctx2k", "h8kv4-B32-ctx1k", "h8kv4-B128-ctx2k"})
        spec.timing_shapes.push_back(*pa::find_shape(name));
    spec.timing_param = kTimingGate;
    spec.json = f.json;
    spec.timeout_s = f.timeout_s;
    spec.iters = f.iters;
    return pa::exercise::grade(spec);
}

}  // namespace lesson05_exercise
