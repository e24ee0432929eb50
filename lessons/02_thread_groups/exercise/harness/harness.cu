#include "harness.h"

#include <algorithm>
#include <cstdio>

#include "decode_reference.h"
#include "device_info.cuh"
#include "flags.h"
#include "launch_utils.cuh"
#include "random.h"
#include "softcap_reference.h"
#include "lesson02.h"
#include "step1_thread_groups.cuh"
#include "steps.h"
#include "table.h"

namespace lesson02_exercise {

using pa::exercise::GradeCase;
using pa::exercise::kFullWindow;
using pa::exercise::Suspect;

bool operator==(Param a, Param b) { return a.tgs == b.tgs && a.cap == b.cap; }

int param_index(std::vector<Param>& params, Param p) {
    const auto it = std::find(params.begin(), params.end(), p);
    if (it != params.end()) return static_cast<int>(it - params.begin());
    params.push_back(p);
    return static_cast<int>(params.size()) - 1;
}

std::string smem_why_not(const pa::DecodeShape& s, const void* kernel) {
    const size_t need = lesson02::step1::smem_bytes(s.D, s.max_ctx());
    const int limit = pa::max_dynamic_smem(kernel);
    if (need > static_cast<size_t>(limit))
        return pa::strf("shape %s: ctx %d needs %zu bytes of shared memory for its logits, more than the %d a CTA "
                        "can have here",
                        s.name.c_str(), s.max_ctx(), need, limit);
    return "";
}

namespace {

std::string param_label(const std::string& exercise, Param p) {
    if (exercise == "fill") return pa::strf("/tgs%d", p.tgs);
    return p.cap > 0 ? pa::strf("/cap%d", p.cap) : std::string("/nocap");
}

// The case once per Param, each named for it.
void add(Cases& out, const std::string& exercise, GradeCase c, const std::vector<Param>& params) {
    if (exercise == "softcap" && c.q_scale < 8) c.q_scale = 8;  // logits of +-20 and more: a cap of 30 changes them
    for (const Param& p : params) {
        GradeCase x = c;
        x.name += param_label(exercise, p);
        x.windows = {kFullWindow};  // no window in this lesson
        x.param = param_index(out.params, p);
        out.list.push_back(x);
    }
}

}  // namespace

Cases grade_cases(const std::string& exercise, uint64_t seed) {
    const bool fill = exercise == "fill";
    // fill: every TGS (the trap depends on the tokens one CTA step takes, 128 / TGS); softcap:
    // no cap, a gentle one (Gemma 2's attention uses 50) and a tight one, at TGS 8.
    const std::vector<Param> every = fill ? std::vector<Param>{{4, 0}, {8, 0}, {16, 0}}
                                          : std::vector<Param>{{8, 0}, {8, 5}, {8, 30}};
    Cases cases;
    int i = 0;
    for (const pa::DecodeShape& s : pa::table_a()) {  // long contexts: one Param each, in turn
        GradeCase c;
        c.name = s.name;
        c.group = "catalogue";
        c.shape = s;
        c.teaches = "a Table A shape";
        const Param p = fill ? every[static_cast<size_t>(i) % 3] : Param{8, i % 2 ? 5 : 30};
        add(cases, exercise, c, {p});
        ++i;
    }
    pa::Rng rng(seed, 0xca9);
    for (const GradeCase& c : pa::exercise::seeded_cases(seed, 8, pa::exercise::decode_instances())) {
        // softcap: the cap drawn from the seed too, 2 .. 60
        add(cases, exercise, c, fill ? every : std::vector<Param>{{8, 2 + static_cast<int>(rng.below(59))}});
    }
    for (const GradeCase& c : pa::exercise::decode_edge_cases(pa::DType::fp16, 128)) add(cases, exercise, c, every);
    for (const auto& [t, D] : {std::pair{pa::DType::bf16, 128}, std::pair{pa::DType::fp16, 64}})
        for (const GradeCase& c : pa::exercise::decode_edge_cases(t, D))
            if (c.name.rfind("mixed-lengths", 0) == 0) add(cases, exercise, c, every);
    return cases;
}

int lane_of_element(int d, int D, int tgs) {
    const int elems = D / tgs;                 // elements of a head per lane
    const int piece = elems >= 8 ? 8 : elems;  // step 1's kPiece
    return d / piece % tgs;
}

namespace {

// Decode inputs whose q keeps only the elements that the lanes in `lanes` (a bit set) multiply:
// the logits a group computes when only those lanes' partial dots are added.
struct LanesOnly {
    pa::PagedDecodeView view;
    int tgs;
    unsigned lanes;
    int B() const { return view.B(); }
    int H() const { return view.H(); }
    int Hkv() const { return view.Hkv(); }
    int D() const { return view.D(); }
    int ctx(int b) const { return view.ctx(b); }
    double q(int b, int h, int d) const { return ((lanes >> lane_of_element(d, view.D(), tgs)) & 1u) ? view.q(b, h, d) : 0.0; }
    double k(int b, int t, int h, int d) const { return view.k(b, t, h, d); }
    double v(int b, int t, int h, int d) const { return view.v(b, t, h, d); }
};

// Uniform weights: the plain mean of V.
struct Uniform {
    std::vector<double> operator()(const std::vector<double>& s) const {
        return std::vector<double>(s.size(), 1.0 / static_cast<double>(s.size()));
    }
};

// The cap on the unscaled q.k, scaled afterwards: scale * cap * tanh((s / scale) / cap).
struct CapUnscaled {
    double cap, scale;
    std::vector<double> operator()(std::vector<double> s) const {
        for (double& x : s) x = scale * cap * std::tanh(x / scale / cap);
        return pa::reference::SoftmaxP{}(s);
    }
};

// Uncapped logits, the cap applied to logit - max inside the exponential.
struct CapAfterMax {
    double cap;
    std::vector<double> operator()(const std::vector<double>& s) const {
        double m = -INFINITY;
        for (double x : s) m = std::max(m, x);
        std::vector<double> p(s.size());
        double sum = 0;
        for (size_t t = 0; t < s.size(); ++t) sum += (p[t] = std::exp(cap * std::tanh((s[t] - m) / cap)));
        for (double& x : p) x /= sum;
        return p;
    }
};

}  // namespace

std::vector<Suspect> suspects(const std::string& exercise, const pa::DecodeProblem& p, Param prm) {
    const pa::PagedDecodeView v(p);
    const double scale = p.scale;
    std::vector<Suspect> out;
    out.push_back({"the output is all zeros (or too small to tell from zero)", [&p] {
                       return std::vector<double>(static_cast<size_t>(p.shape.B) * p.shape.H * p.shape.D, 0.0);
                   }});
    if (exercise == "fill") {
        const int tgs = prm.tgs;
        auto lanes_only = [v, tgs, scale](unsigned lanes) {
            return pa::reference::softmax_decode(LanesOnly{v, tgs, lanes}, scale);
        };
        out.push_back({pa::strf("the logits hold only lane 0's share of each dot product: the group's %d partial dots "
                                "are never added (TGS %d)",
                                tgs, tgs),
                       [lanes_only] { return lanes_only(1u); }});
        for (int o = tgs / 2; o > 0; o >>= 1) {
            unsigned lanes = 0;
            for (int l = 0; l < tgs; ++l)
                if ((l & o) == 0) lanes |= 1u << l;
            out.push_back({pa::strf("the logits add only half of the group's lanes: the butterfly never uses offset %d "
                                    "(TGS %d: offsets %d down to 1)",
                                    o, tgs, tgs / 2),
                           [lanes_only, lanes] { return lanes_only(lanes); }});
        }
    } else if (prm.cap > 0) {
        const double cap = prm.cap;
        out.push_back({pa::strf("the output is the uncapped softmax: the cap is not applied (cap %d)", prm.cap),
                       [v, scale] { return pa::reference::softmax_decode(v, scale); }});
        out.push_back({pa::strf("the cap is applied to the logit before it is scaled by 1/sqrt(D): it must cap the scaled "
                                "logit s = q.k / sqrt(D) (cap %d)",
                                prm.cap),
                       [v, scale, cap] { return pa::reference::decode_with_weights(v, scale, CapUnscaled{cap, scale}); }});
        out.push_back({pa::strf("the cap is applied to logit - max inside the exponential: it must cap each logit "
                                "itself, before the max and the softmax (cap %d)",
                                prm.cap),
                       [v, scale, cap] { return pa::reference::decode_with_weights(v, scale, CapAfterMax{cap}); }});
    }
    out.push_back({exercise == "softcap" && prm.cap == 0
                       ? "the output is the plain mean of V: every softmax weight is the same (a softcap of 0 must turn "
                         "capping off, not make every logit 0)"
                       : "the output is the plain mean of V: every softmax weight is the same",
                   [v, scale] { return pa::reference::decode_with_weights(v, scale, Uniform{}); }});
    return out;
}

namespace {

const char* kProgram = "lesson02_exercise";

std::string usage() {
    return std::string("usage: ") + kProgram +
           " [--grade] [--exercise fill|softcap] [--seed S] [--json FILE] [--timeout S] [--iters N] [--help]\n"
           "Grades lesson 02's exercises (lessons/02_thread_groups/exercise/README.md):\n"
           "  fill     student.cuh: the group mask and the group's shuffle reduce of step 1 (TGS 4, 8, 16)\n"
           "  softcap  softcap.cuh: logit soft-capping (Gemma 2: s <- cap * tanh(s / cap)) on step 1\n"
           "Correctness first: Table A, 8 shapes drawn from --seed (a teacher's secret seed gives shapes no\n"
           "student saw) and named edge cases, every output poisoned with NaN before every launch. Then speed:\n"
           "the graded kernel against the lesson's own step 1 (variant thread_groups_tgs8), timed alternately in\n"
           "the same run, L2-cold, as a ratio of times (full marks within 1.2).\n"
           "Exit codes: 0 correct, 1 wrong, 2 invalid input, 3 no usable GPU, 4 a kernel hung.\n"
           "With no flags: --grade --exercise fill.\n";
}

}  // namespace

int run(int argc, char** argv, const Graded& g) {
    const pa::exercise::GradeFlags f = pa::exercise::parse_grade_flags(argc, argv, kProgram, usage(), {"fill", "softcap"});
    const std::string& exercise = f.exercise;
    const GradedKernel& k = exercise == "fill" ? g.fill : g.softcap;
    if (!k.why_not)
        pa::exit_bad_input(kProgram, "this build (" + g.build + ") has no graded file for the " + exercise +
                                         " exercise; lesson02_exercise has both");

    constexpr int kTimedTgs = 8;  // the lesson's thread_groups_tgs8
    pa::exercise::GraderSpec spec;
    spec.program = kProgram;
    spec.build = g.build;
    spec.exercise = exercise;
    spec.seed = f.seed;
    Cases cases = grade_cases(exercise, f.seed);
    // The softcap kernel is timed with a cap (its tanh is part of its cost); both at TGS 8.
    spec.timing_param = param_index(cases.params, {kTimedTgs, exercise == "softcap" ? 30 : 0});
    spec.cases = cases.list;
    const std::vector<Param> params = cases.params;  // what each case's param and timing_param index
    spec.why_not = k.why_not;
    spec.student = [launch = k.launch, params](const pa::PagedDecodeArgs& a, int, int param, cudaStream_t s) {
        launch(a, params[static_cast<size_t>(param)], s);
    };
    spec.lesson_variant = lesson02::config_name({lesson02::Step::thread_groups, lesson02::Mapping::grouped, kTimedTgs});
    spec.lesson_why_not = [](const pa::DecodeShape& s) {
        return lesson02::step1::why_not(s, kTimedTgs, pa::current_device_info());
    };
    spec.lesson = [](const pa::PagedDecodeArgs& a, cudaStream_t s) { lesson02::step1::launch(a, kTimedTgs, s); };
    spec.reference = [exercise, params](const pa::DecodeProblem& p, int, int param) {
        const Param prm = params[static_cast<size_t>(param)];
        return exercise == "softcap" ? pa::reference::softcap_decode(p, prm.cap) : pa::reference::softmax_decode(p);
    };
    spec.suspects = [exercise, params](const pa::DecodeProblem& p, int, int param) {
        return suspects(exercise, p, params[static_cast<size_t>(param)]);
    };
    for (const char* name : {"llama7b-B32-ctx1k", "llama70b-B4-ctx2k", "mqa-B16-ctx4k"})
        spec.timing_shapes.push_back(*pa::find_shape(name));
    spec.json = f.json;
    spec.timeout_s = f.timeout_s;
    spec.iters = f.iters;
    return pa::exercise::grade(spec);
}

}  // namespace lesson02_exercise
