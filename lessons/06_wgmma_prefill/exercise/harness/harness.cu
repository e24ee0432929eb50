#include "harness.h"

#include "layout_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>

#include "check.h"
#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "device_info.cuh"
#include "dtype.h"
#include "flags.h"
#include "prefill_reference.h"
#include "table.h"
#include "timer.cuh"

namespace lesson06_exercise {

using lesson06::PrefillShape;
using pa::exercise::kFullWindow;
using pa::exercise::Suspect;

namespace {

// A small portable generator: the same seed gives the same shapes with any standard library.
struct Rng {
    uint64_t x;
    uint64_t next() {
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    int in(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<uint64_t>(hi - lo + 1)); }
    int log_uniform(int lo, int hi) {
        const double u = static_cast<double>(next() >> 11) / 9007199254740992.0;
        return std::clamp(static_cast<int>(std::exp(std::log(lo) + u * (std::log(hi + 1.0) - std::log(lo)))), lo, hi);
    }
};

PrefillCase edge(std::string name, int H, int Hkv, std::vector<int> news, std::vector<int> prefixes, std::string teaches) {
    PrefillCase c;
    c.shape = lesson06::make_mixed_prefill_shape(name, H, Hkv, std::move(news), std::move(prefixes));
    c.name = std::move(name);
    c.group = "edge";
    c.teaches = std::move(teaches);
    return c;
}

}  // namespace

std::vector<PrefillCase> grade_cases(const std::string& exercise, uint64_t seed) {
    std::vector<PrefillCase> cases;
    for (const PrefillShape& s : lesson06::check_shapes()) {
        PrefillCase c;
        c.name = s.name;
        c.group = "catalogue";
        c.shape = s;
        c.teaches = "one of the lesson's check batches";
        cases.push_back(c);
    }
    Rng rng{seed * 0x2545F4914F6CDD1Dull + 6};
    const std::pair<int, int> heads[] = {{8, 8}, {8, 4}, {8, 2}, {8, 1}, {16, 2}, {4, 4}};
    for (int k = 0; k < 6; ++k) {
        const int B = rng.in(1, 4);
        const auto [H, Hkv] = heads[rng.in(0, 5)];
        std::vector<int> news(B), prefixes(B);
        for (int b = 0; b < B; ++b) {
            news[b] = rng.log_uniform(1, 400);
            prefixes[b] = rng.in(0, 2) == 0 ? 0 : rng.in(0, 600);
        }
        PrefillCase c;
        c.name = pa::strf("seed-%d", k);
        c.shape = lesson06::make_mixed_prefill_shape(c.name + pa::strf("-B%d-H%d-Hkv%d", B, H, Hkv), H, Hkv, news, prefixes);
        c.group = "seeded";
        c.teaches = "a batch drawn from the seed";
        cases.push_back(c);
    }
    cases.push_back(edge("ctx-1", 8, 8, {1}, {0}, "one new token and no prefix: a context of 1"));
    cases.push_back(edge("partial-page", 8, 4, {5, 3}, {21, 0}, "a prefix and a last page that are not multiples of 16"));
    cases.push_back(edge("tile-127-128-129", 8, 4, {127, 128, 129}, {0, 0, 0},
                         "2^k - 1, 2^k, 2^k + 1 new tokens around the 128-row query tile and 128-key K/V tile"));
    cases.push_back(edge("tile-255-256-257", 8, 2, {255, 256, 257}, {1, 0, 15}, "lengths around two tiles, odd prefixes"));
    cases.push_back(edge("prefix-127-128-129", 4, 4, {63, 65, 1}, {128, 127, 129}, "prefixes around a K/V tile"));
    cases.push_back(edge("mixed-lengths", 8, 4, {1, 300, 17, 129, 64}, {0, 5, 300, 16, 123}, "short and long prompts in one batch"));
    cases.push_back(edge("mqa", 8, 1, {200, 33}, {40, 0}, "MQA: every query head shares one K/V head"));
    cases.push_back(edge("many-pages-random-order", 8, 4, {400}, {333}, "48 pages of 16 tokens in random order"));
    if (exercise == "window") {
        const int drawn = Rng{seed + 77}.in(3, 500);
        for (PrefillCase& c : cases) {
            c.windows = {1, 2, 65, 128, 129, 300, drawn};
            std::sort(c.windows.begin(), c.windows.end());
            c.windows.erase(std::unique(c.windows.begin(), c.windows.end()), c.windows.end());
        }
    }
    return cases;
}

lesson06::PrefillProblem make_grade_problem(const PrefillShape& s, uint64_t seed) {
    lesson06::PrefillProblem p = lesson06::make_prefill_problem(s, seed);
    for (uint16_t& x : p.q) x = pa::encode(p.cache.dtype, 2.f * pa::decode(p.cache.dtype, x));
    return p;
}

std::vector<double> reference(const lesson06::PrefillProblem& p, int window) {
    const lesson06::PagedPrefillView v(p);
    return window >= kFullWindow ? pa::reference::softmax_prefill(v, p.scale)
                                 : pa::reference::sliding_window_prefill(v, p.scale, window);
}

namespace {

// The softmax over the FIRST `window` positions of the sequence (and causal).
struct FirstPositions {
    long long window;
    std::vector<double> operator()(const std::vector<double>& s) const {
        const size_t n = std::min<size_t>(s.size(), static_cast<size_t>(window));
        std::vector<double> p = pa::reference::WindowSoftmaxP{kFullWindow}(std::vector<double>(s.begin(), s.begin() + static_cast<long long>(n)));
        p.resize(s.size(), 0.0);
        return p;
    }
};

// Every attended position weighs the same: the plain mean of V over the window.
struct MeanOverWindow {
    long long window;
    std::vector<double> operator()(const std::vector<double>& s) const {
        const size_t n = s.size(), first = static_cast<long long>(n) > window ? n - static_cast<size_t>(window) : 0;
        std::vector<double> p(n, 0.0);
        for (size_t t = first; t < n; ++t) p[t] = 1.0 / static_cast<double>(n - first);
        return p;
    }
};

}  // namespace

std::vector<Suspect> suspects(const std::string& exercise, const lesson06::PrefillProblem& p, int window) {
    const double scale = p.scale;
    std::vector<Suspect> out;
    out.push_back({"the output is all zeros (or too small to tell from zero)", [&p] {
                       return std::vector<double>(static_cast<size_t>(p.shape.total_new()) * p.shape.H * p.shape.D, 0.0);
                   }});
    if (exercise == "window" && window < kFullWindow) {
        out.push_back({"the output is causal prefill over every earlier position: the window is not applied",
                       [&p, scale] { return pa::reference::softmax_prefill(lesson06::PagedPrefillView(p), scale); }});
        out.push_back({pa::strf("the output is a window of %d positions, one too many: the window is off by one", window + 1),
                       [&p, scale, window] {
                           return pa::reference::sliding_window_prefill(lesson06::PagedPrefillView(p), scale, window + 1LL);
                       }});
        if (window > 1)
            out.push_back({pa::strf("the output is a window of %d positions, one too few: the window is off by one", window - 1),
                           [&p, scale, window] {
                               return pa::reference::sliding_window_prefill(lesson06::PagedPrefillView(p), scale, window - 1LL);
                           }});
        out.push_back({pa::strf("the output attends the FIRST %d positions of each sequence: the window counts from the "
                                "start; it must end at the query's own position",
                                window),
                       [&p, scale, window] {
                           return pa::reference::causal_prefill(lesson06::PagedPrefillView(p), scale, FirstPositions{window});
                       }});
    }
    out.push_back({"the output is the plain mean of V over the attended positions: every softmax weight is the same",
                   [&p, scale, window] {
                       return pa::reference::causal_prefill(lesson06::PagedPrefillView(p), scale,
                                                            MeanOverWindow{window});
                   }});
    return out;
}

namespace {

const char* kProgram = "lesson06_exercise";

std::string usage() {
    return std::string("usage: ") + kProgram +
           " [--grade] [--exercise fill|window] [--seed S] [--json FILE] [--timeout S] [--iters N] [--help]\n"
           "Grades lesson 06's exercises (lessons/06_wgmma_prefill/exercise/README.md); both need a Hopper GPU (sm_90a):\n"
           "  fill    student.cuh: step 3's core-matrix layout (TODO(1)) and wgmma descriptor (TODO(2))\n"
           "  window  window.cuh: a sliding-window causal prefill (query at position p sees p - W < t <= p)\n"
           "Correctness first: the lesson's check batches, 6 batches drawn from --seed (a teacher's secret seed gives\n"
           "batches no student saw) and named edge cases, every output poisoned with NaN before every launch. Then\n"
           "speed: the graded kernel against the lesson's step 3 (wgmma_softmax), timed alternately in the same run,\n"
           "L2-cold, as a ratio of times (full marks within 1.2).\n"
           "Exit codes: 0 correct, 1 wrong, 2 invalid input, 3 no usable GPU (or not a Hopper), 4 a kernel hung.\n"
           "With no flags: --grade --exercise fill.\n";
}

size_t out_elems(const PrefillShape& s) { return static_cast<size_t>(s.total_new()) * s.H * s.D; }

}  // namespace

int run(int argc, char** argv, const Graded& g) {
    using pa::exercise::Outcome;
    const pa::exercise::GradeFlags f = pa::exercise::parse_grade_flags(argc, argv, kProgram, usage(), {"fill", "window"});
    const std::string& exercise = f.exercise;
    const PrefillLaunch& student = exercise == "fill" ? g.fill : g.window;
    if (g.has_sm90a && !student)
        pa::exit_bad_input(kProgram, "this build (" + g.build + ") has no graded file for the " + exercise +
                                         " exercise; lesson06_exercise has both");
    pa::exercise::GradeLog gr(kProgram, g.build, exercise, f.seed, f.json);

    std::string why;
    if (!pa::gpu_available(&why))
        return gr.finish(Outcome::no_gpu, pa::strf("RESULT: NO GPU: %s: no usable CUDA GPU (%s); nothing graded", kProgram, why.c_str()));
    const pa::DeviceInfo info = pa::require_gpu(kProgram);  // also validates PA_SMEM_CAP_KIB (exit 2)
    gr.report.gpu = info.name;
    if (info.cc_major != 9)
        return gr.finish(Outcome::no_gpu, pa::strf("RESULT: NO GPU: lesson 06's exercises need a Hopper GPU (sm_90a: H100, "
                                                   "H200); %s is sm_%d; nothing graded",
                                                   info.name.c_str(), info.cc()));
    if (!g.has_sm90a)
        return gr.finish(Outcome::no_gpu, "RESULT: NO GPU: this build has no sm_90a code (configure with 90a among "
                                          "CMAKE_CUDA_ARCHITECTURES); nothing graded");

    lesson06::PrefillVariant lesson;
    for (const lesson06::PrefillVariant& v : lesson06::all_variants())
        if (v.name == "wgmma_softmax") lesson = v;
    std::printf("%s --grade --exercise %s: build '%s', seed %llu, on %s\n", kProgram, exercise.c_str(), g.build.c_str(),
                static_cast<unsigned long long>(f.seed), info.summary().c_str());

    if (exercise == "fill") {  // the layout functions, on the host, before anything is launched
        const std::vector<std::string> errors = fill_layout_errors(g.fill_core, g.fill_desc);
        for (const std::string& e : errors) {
            std::printf("  FAIL fill layout: %s\n", e.c_str());
            pa::exercise::CaseResult cr;
            cr.name = "layout";
            cr.group = "host";
            cr.message = e;
            gr.add(cr);
        }
        if (!errors.empty()) {
            std::printf("correctness: the kernel is not launched while its layout is wrong (wgmma would read the wrong "
                        "bytes, or outside the tile)\nspeed: not measured (correctness comes first)\n");
            return gr.finish(Outcome::wrong, pa::strf("RESULT: FAIL: %zu of 2 layout checks of the fill exercise failed",
                                                      errors.size()));
        }
        std::printf("layout: core_offset_bytes and smem_desc agree with step 3 on every element and address\n");
    }

    pa::exercise::Watchdog wd(f.timeout_s, [&](const std::string& line) { gr.hang(line); });
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const std::vector<PrefillCase> cases = grade_cases(exercise, f.seed);
    std::printf("correctness: %zu batches (catalogue, seeded, edge); outputs poisoned with NaN before every launch\n",
                cases.size());
    const lesson06::GateSetting gate;
    int checks = 0, failures = 0, skipped = 0;
    try {
        for (const PrefillCase& c : cases) {
            const std::string no = lesson06::why_not(lesson, c.shape, info);  // the student's kernel has step 3's geometry
            if (!no.empty()) {
                std::printf("  skip %-28s %s\n", c.name.c_str(), no.c_str());
                pa::exercise::CaseResult cr;
                cr.name = c.name;
                cr.group = c.group;
                cr.skipped = true;
                cr.message = no;
                gr.add(cr);
                ++skipped;
                continue;
            }
            const lesson06::PrefillProblem p = make_grade_problem(c.shape, f.seed);
            lesson06::DevicePrefillProblem dev(p);
            const size_t n = out_elems(c.shape);
            double worst = 0;
            int case_failures = 0;
            for (int w : c.windows) {
                const std::string label = exercise + " " + c.name + pa::exercise::window_label(w);
                const std::vector<double> ref = reference(p, w);
                const lesson06::PrefillArgs a = dev.args(gate);
                wd.arm(label);
                CUDA_CHECK(cudaMemsetAsync(a.out, 0xff, n * sizeof(uint16_t), stream));  // NaN in bf16
                student(a, w, stream);
                pa::exercise::wait_stream(stream, wd, label);
                const std::vector<uint16_t> out = dev.download_output();
                wd.disarm();
                const pa::CheckResult r = pa::compare_output(out, ref, c.shape.dtype);
                pa::exercise::CaseResult cr;
                cr.name = c.name;
                cr.group = c.group;
                cr.window = w;
                cr.pass = r.pass;
                cr.rel_err = r.rel_err;
                cr.max_abs_err = r.max_abs_err;
                ++checks;
                if (!r.pass) {
                    ++failures;
                    ++case_failures;
                    cr.message = pa::exercise::diagnose(out, ref, c.shape.dtype, r, suspects(exercise, p, w),
                                                        static_cast<int>(c.shape.total_new() * c.shape.H), c.shape.D);
                    std::printf("  FAIL %s: %s [this case: %s]\n", label.c_str(), cr.message.c_str(), c.teaches.c_str());
                } else {
                    worst = std::max(worst, r.rel_err);
                }
                gr.add(cr);
            }
            if (case_failures == 0)
                std::printf("  ok   %-28s %zu check%s, max rel err %.1e\n", c.name.c_str(), c.windows.size(),
                            c.windows.size() == 1 ? "" : "s", worst);
        }
    } catch (const pa::CudaError& e) {
        pa::exercise::CaseResult cr;
        cr.name = "crash";
        cr.group = "error";
        cr.message = pa::strf("CUDA error: %s (an out-of-bounds access?); grading stopped", e.what());
        std::printf("  FAIL %s: %s\n", exercise.c_str(), cr.message.c_str());
        gr.add(cr);
        return gr.finish(Outcome::wrong, pa::strf("RESULT: FAIL: the %s kernel crashed after %d checks", exercise.c_str(), checks));
    }
    if (checks == 0)
        return gr.finish(Outcome::bad_input, pa::strf("RESULT: NOT GRADED: no case can run on %s (%d skipped)", info.name.c_str(), skipped));
    if (failures > 0) {
        std::printf("speed: not measured (correctness comes first)\n");
        return gr.finish(Outcome::wrong, pa::strf("RESULT: FAIL: %d of %d checks of the %s exercise failed", failures, checks,
                                                  exercise.c_str()));
    }

    // Speed: alternately, in the same run, L2-cold, both outputs poisoned before every launch.
    std::printf("speed: the %s kernel against the lesson's step 3 (%s), timed alternately, L2-cold%s\n", exercise.c_str(),
                lesson.name.c_str(), exercise == "window" ? ", at a window longer than every sequence" : "");
    bool recheck = true;
    const int rounds = 6;
    try {
        for (const PrefillShape& s : {lesson06::make_prefill_shape(16, 1024, 8, 4, 0), lesson06::make_prefill_shape(16, 1024, 8, 4, 1024)}) {
            const std::string no = lesson06::why_not(lesson, s, info);
            if (!no.empty()) {
                std::printf("  skip %-28s %s\n", s.name.c_str(), no.c_str());
                continue;
            }
            const std::string shape_name = s.name + (s.uniform_prefix() && s.prefix_lens[0] > 0 ? "-P" + s.prefix_label() : "");
            const lesson06::PrefillProblem p = make_grade_problem(s, f.seed);
            lesson06::DevicePrefillProblem dev(p, pa::cold_copies(2LL * static_cast<long long>(p.cache.k.size()) * 2, info.l2_bytes));
            const size_t n = out_elems(s);
            pa::DeviceBuffer<uint16_t> student_out(n);
            int copy = 0;
            lesson06::PrefillArgs a;
            const auto prepare = [&](int who) {
                a = dev.args(gate, copy++ % dev.copies());
                if (who == 0) a.out = student_out.get();
                CUDA_CHECK(cudaMemsetAsync(a.out, 0xff, n * sizeof(uint16_t), stream));
            };
            const auto launch = [&](int who) {
                if (who == 0) student(a, kFullWindow, stream);
                else lesson06::launch(lesson, a, stream);
            };
            const pa::exercise::SpeedShape sp =
                pa::exercise::time_alternately(exercise, shape_name, stream, wd, rounds, f.iters, prepare, launch);
            // The student's last timed output, checked again on sampled rows (every 32nd new token
            // of each sequence, its first and last 16): a race or a stale answer shows here.
            wd.arm(exercise + " re-check " + shape_name);
            const std::vector<uint16_t> out = student_out.download();
            wd.disarm();
            const std::vector<long long> rows = lesson06::checked_rows(s, 32);
            const std::vector<double> ref = lesson06::reference_rows(p, lesson06::Policy::softmax, gate, rows);
            const size_t row_elems = static_cast<size_t>(s.H) * s.D;
            std::vector<uint16_t> picked(rows.size() * row_elems);
            for (size_t r = 0; r < rows.size(); ++r)
                std::copy_n(out.begin() + rows[r] * row_elems, row_elems, picked.begin() + r * row_elems);
            const pa::CheckResult r = pa::compare_output(picked, ref, s.dtype);
            std::printf("  %-28s student %9.2f us   lesson %9.2f us   ratio %.3f%s\n", shape_name.c_str(), sp.student_us,
                        sp.lesson_us, sp.ratio(), r.pass ? "" : "   re-check FAILED");
            std::lock_guard<std::mutex> lk(gr.mu);
            gr.report.speed.push_back(sp);
            if (!r.pass) {
                recheck = false;
                gr.report.recheck_pass = false;
                pa::exercise::CaseResult cr;
                cr.name = "re-check " + shape_name;
                cr.group = "recheck";
                cr.rel_err = r.rel_err;
                cr.max_abs_err = r.max_abs_err;
                cr.message = r.message + " (after the timing loop)";
                gr.report.cases.push_back(cr);
                std::printf("  FAIL %s re-check %s: %s\n", exercise.c_str(), shape_name.c_str(), cr.message.c_str());
            }
        }
    } catch (const pa::CudaError& e) {
        return gr.finish(Outcome::wrong, pa::strf("RESULT: FAIL: CUDA error while timing: %s", e.what()));
    }
    if (!recheck) return gr.finish(Outcome::wrong, "RESULT: FAIL: the output after the timing loop is wrong (a race?)");
    const double ratio = gr.report.speed_ratio();
    if (ratio <= 0)
        return gr.finish(Outcome::pass, pa::strf("RESULT: PASS: %d/%d checks; speed not measured (no timing shape runs here)",
                                                 checks, checks));
    return gr.finish(Outcome::pass, pa::strf("RESULT: PASS: %d/%d checks; speed ratio %.3f of the lesson's step 3 (%s)", checks,
                                             checks, ratio, pa::exercise::speed_band(ratio).c_str()));
}

}  // namespace lesson06_exercise
