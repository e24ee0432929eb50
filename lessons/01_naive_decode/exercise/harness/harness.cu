#include "harness.h"

#include <algorithm>
#include <cstdio>

#include "decode_reference.h"
#include "device_info.cuh"
#include "flags.h"
#include "launch_utils.cuh"
#include "naive_decode.h"
#include "table.h"

namespace lesson01_exercise {

using pa::exercise::GradeCase;
using pa::exercise::kFullWindow;
using pa::exercise::Suspect;

std::string smem_why_not(const pa::DecodeShape& s, const void* kernel) {
    const size_t need = lesson01::smem_bytes(s.D, s.max_ctx());
    const int limit = pa::max_dynamic_smem(kernel);
    if (need > static_cast<size_t>(limit))
        return pa::strf("shape %s: ctx %d needs %zu bytes of shared memory for its logits, more than the %d a CTA "
                        "can have here",
                        s.name.c_str(), s.max_ctx(), need, limit);
    return "";
}

std::vector<GradeCase> grade_cases(const std::string& exercise, uint64_t seed) {
    std::vector<GradeCase> cases = pa::exercise::standard_decode_cases(seed);
    for (GradeCase& c : cases)
        if (exercise != "window") c.windows = {kFullWindow};
        else if (c.group == "catalogue") c.windows = {1000};  // shorter than every Table A context
    return cases;
}

namespace {

// Uniform weights over the last `window` tokens: the plain mean of their V rows.
struct MeanOverWindow {
    long long window;
    std::vector<double> operator()(const std::vector<double>& s) const {
        const size_t n = s.size(), first = static_cast<long long>(n) > window ? n - static_cast<size_t>(window) : 0;
        std::vector<double> p(n, 0.0);
        for (size_t t = first; t < n; ++t) p[t] = 1.0 / static_cast<double>(n - first);
        return p;
    }
};

// The softmax over the FIRST `window` tokens: a window counted from the start of the context.
struct FirstTokens {
    long long window;
    std::vector<double> operator()(const std::vector<double>& s) const {
        const size_t n = s.size(), last = std::min<size_t>(n, static_cast<size_t>(window));
        const std::vector<double> head = pa::reference::SoftmaxP{}(std::vector<double>(s.begin(), s.begin() + static_cast<long long>(last)));
        std::vector<double> p(n, 0.0);
        std::copy(head.begin(), head.end(), p.begin());
        return p;
    }
};

}  // namespace

std::vector<Suspect> suspects(const std::string& exercise, const pa::DecodeProblem& p, int window) {
    const pa::PagedDecodeView v(p);
    const double scale = p.scale;
    std::vector<Suspect> out;
    out.push_back({"the output is all zeros (or too small to tell from zero)", [&p] {
                       return std::vector<double>(static_cast<size_t>(p.shape.B) * p.shape.H * p.shape.D, 0.0);
                   }});
    if (exercise == "window" && window < kFullWindow) {
        out.push_back({"the output is full attention: the window is not applied",
                       [v, scale] { return pa::reference::softmax_decode(v, scale); }});
        out.push_back({pa::strf("the output is a window of %d tokens, one too many: the window is off by one", window + 1),
                       [v, scale, window] { return pa::reference::sliding_window_decode(v, scale, window + 1LL); }});
        if (window > 1)
            out.push_back({pa::strf("the output is a window of %d tokens, one too few: the window is off by one", window - 1),
                           [v, scale, window] { return pa::reference::sliding_window_decode(v, scale, window - 1LL); }});
        out.push_back({pa::strf("the output attends the FIRST %d tokens: the window counts from the start; it must hold "
                                "the last %d",
                                window, window),
                       [v, scale, window] { return pa::reference::decode_with_weights(v, scale, FirstTokens{window}); }});
    }
    out.push_back({"the output is the plain mean of V over the attended tokens: every softmax weight is the same",
                   [v, scale, window] { return pa::reference::decode_with_weights(v, scale, MeanOverWindow{window}); }});
    return out;
}

namespace {

const char* kProgram = "lesson01_exercise";

std::string usage() {
    return std::string("usage: ") + kProgram +
           " [--grade] [--exercise fill|window] [--seed S] [--json FILE] [--timeout S] [--iters N] [--help]\n"
           "Grades lesson 01's exercises (lessons/01_naive_decode/exercise/README.md):\n"
           "  fill    student.cuh: the block softmax (max and sum reductions) of the naive kernel\n"
           "  window  window.cuh: a sliding-window mask (only the last W tokens of a context attend)\n"
           "Correctness first: Table A, 8 shapes drawn from --seed (a teacher's secret seed gives shapes no\n"
           "student saw) and named edge cases, every output poisoned with NaN before every launch. Then speed:\n"
           "the graded kernel against the lesson's own kernel (variant naive), timed alternately in the same\n"
           "run, L2-cold, as a ratio of times (full marks within 1.2).\n"
           "Exit codes: 0 correct, 1 wrong, 2 invalid input, 3 no usable GPU, 4 a kernel hung.\n"
           "With no flags: --grade --exercise fill.\n";
}

}  // namespace

int run(int argc, char** argv, const Graded& g) {
    const pa::exercise::GradeFlags f = pa::exercise::parse_grade_flags(argc, argv, kProgram, usage(), {"fill", "window"});
    const std::string& exercise = f.exercise;
    const GradedKernel& k = exercise == "fill" ? g.fill : g.window;
    if (!k.why_not)
        pa::exit_bad_input(kProgram, "this build (" + g.build + ") has no graded file for the " + exercise +
                                         " exercise; lesson01_exercise has both");

    pa::exercise::GraderSpec spec;
    spec.program = kProgram;
    spec.build = g.build;
    spec.exercise = exercise;
    spec.seed = f.seed;
    spec.cases = grade_cases(exercise, f.seed);
    spec.why_not = k.why_not;
    spec.student = k.launch;
    spec.lesson_variant = lesson01::variant().name;
    spec.lesson_why_not = [](const pa::DecodeShape& s) { return lesson01::why_not(s, pa::current_device_info()); };
    spec.lesson = [](const pa::PagedDecodeArgs& a, cudaStream_t s) { lesson01::launch(a, s); };
    spec.reference = [](const pa::DecodeProblem& p, int window, int) {
        return window >= kFullWindow ? pa::reference::softmax_decode(p) : pa::reference::sliding_window_decode(p, window);
    };
    spec.suspects = [exercise](const pa::DecodeProblem& p, int window, int) { return suspects(exercise, p, window); };
    for (const char* name : {"llama7b-B32-ctx1k", "llama70b-B4-ctx2k", "mqa-B16-ctx4k"})
        spec.timing_shapes.push_back(*pa::find_shape(name));
    spec.timing_window = kFullWindow;  // the window kernel at W >= ctx does the lesson's work
    spec.json = f.json;
    spec.timeout_s = f.timeout_s;
    spec.iters = f.iters;
    return pa::exercise::grade(spec);
}

}  // namespace lesson01_exercise
