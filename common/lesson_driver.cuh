// The check-then-measure loop of a lesson whose problem is not a decode (lesson 06's
// prefill, lesson 07's hand-off), generic over the lesson's Problem type. The decode
// lessons have their own driver (decode_driver.cuh).
//
//   --variant -> select_variant_or_exit            (exit 2 on an unknown name)
//   GPU       -> runnable_variants_or_exit         (one line per variant this GPU cannot run)
//   shape     -> Problem (inputs on the GPU, its reference)
//             -> check_variants: poison, launch once, compare; one line each, then N/N PASS
//             -> measure_variants: check, time every part L2-hot (and L2-cold), check again,
//                rows with time, GB/s, TFLOPS and % of the measured ceilings
//
// What the driver needs of a lesson's Problem type P (one shape's inputs on the GPU):
//   typename P::Variant                           with a std::string `name`
//   std::string why_not(const Variant&) const     empty when the variant runs this problem here
//   CheckResult check(const Variant&)             poison the output, launch once, wait, compare
//                                                 with the reference
//   CheckResult recheck(const Variant&)           compare what the last timed run left
//   std::vector<TimedPart> parts(const Variant&)  what is timed: one row per part and L2 regime
//   int copies() const                            K/V copies on the GPU, which the L2-cold runs
//                                                 rotate over (MeasureSetup::cold)
//   std::string label() const                     the shape, as a failure line names it
//   std::string check_line(const Variant&, const CheckResult&) const   the check's line after PASS/FAIL
//   void describe(const Variant&, const TimedPart&, ResultRow&) const  the columns that name the
//                                                 run and the lesson's own columns (called last)
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "check.h"
#include "device_info.cuh"
#include "flags.h"
#include "table.h"
#include "timer.cuh"

namespace pa {

// "a, b, c": the names of `variants`, as --help and the unknown-variant error list them.
template <class Variant>
std::string variant_names(const std::vector<Variant>& variants, const std::string& sep = ", ") {
    std::string out;
    for (const auto& v : variants) out += (out.empty() ? "" : sep) + v.name;
    return out;
}

// --variant: every variant when `name` is empty, else the one it names; an unknown name is
// refused in one line listing the lesson's variants (exit 2).
template <class Variant>
std::vector<Variant> select_variant_or_exit(const std::string& program, const std::string& name,
                                            const std::vector<Variant>& all) {
    if (name.empty()) return all;
    for (const auto& v : all)
        if (v.name == name) return {v};
    exit_bad_input(program, "unknown variant '" + name + "' (this lesson has: " + variant_names(all) + ")");
}

// The variants this build and GPU run. `why_unavailable(v)` is empty for those; for each of
// the others its text is printed on a line of its own. With none left the program says so in
// one line and exits with kExitNoGpu.
template <class Variant, class WhyUnavailable>
std::vector<Variant> runnable_variants_or_exit(const std::string& program, const std::vector<Variant>& variants,
                                               WhyUnavailable&& why_unavailable) {
    std::vector<Variant> out;
    for (const auto& v : variants) {
        const std::string why = why_unavailable(v);
        if (why.empty()) out.push_back(v);
        else std::printf("%s\n", why.c_str());
    }
    if (out.empty()) {
        std::fflush(stdout);
        std::fprintf(stderr, "error: %s: no selected variant runs on this GPU\n", program.c_str());
        std::exit(kExitNoGpu);
    }
    return out;
}

// Refuses (exit 2, one line: the first reason) a shape that none of `variants` can run.
// `why_not(v, shape)` is empty when v runs the shape.
template <class Shape, class Variant, class WhyNot>
void refuse_unrunnable_shapes_or_exit(const std::string& program, const std::vector<Shape>& shapes,
                                      const std::vector<Variant>& variants, WhyNot&& why_not) {
    for (const auto& s : shapes) {
        std::string why;
        bool any = false;
        for (const auto& v : variants) {
            const std::string w = why_not(v, s);
            if (w.empty()) any = true;
            else if (why.empty()) why = w;
        }
        if (!any) exit_bad_input(program, why);
    }
}

// The check's lines and its verdict: "  PASS <line>" each, then "N/N PASS" (or FAIL).
class CheckTally {
  public:
    void line(bool pass, const std::string& text) {
        ++total_;
        passed_ += pass;
        std::printf("  %s %s\n", pass ? "PASS" : "FAIL", text.c_str());
    }
    // A shape the variant cannot run, and why (one line per variant and reason).
    void skipped(const std::string& variant, const std::string& why) {
        for (auto& e : not_run_)
            if (e.variant == variant && e.why == why) {
                ++e.shapes;
                return;
            }
        not_run_.push_back({variant, why, 1});
    }
    // Prints one line per variant not run on some shape, as the decode lessons do, then the
    // verdict; returns the number of failures.
    int finish() const {
        for (const auto& e : not_run_)
            std::printf("  (%s not run on %d shape%s: %s)\n", e.variant.c_str(), e.shapes, e.shapes == 1 ? "" : "s",
                        e.why.c_str());
        std::printf("%d/%d %s\n", passed_, total_, passed_ == total_ ? "PASS" : "FAIL");
        return total_ - passed_;
    }
    int failures() const { return total_ - passed_; }

  private:
    struct NotRun {
        std::string variant, why;
        int shapes;
    };
    int passed_ = 0, total_ = 0;
    std::vector<NotRun> not_run_;
};

// One check line per variant that runs the problem (the others are counted as skipped).
template <class Problem>
void check_variants(Problem& p, const std::vector<typename Problem::Variant>& variants, CheckTally& tally) {
    for (const auto& v : variants) {
        const std::string why = p.why_not(v);
        if (!why.empty()) {
            tally.skipped(v.name, why);
            continue;
        }
        const CheckResult r = p.check(v);
        tally.line(r.pass, p.check_line(v, r));
    }
}

// One timed thing: a whole variant (lesson 06) or one stage of it (lesson 07's gather,
// transfer, scatter, total). Each part gives one row per L2 regime.
struct TimedPart {
    std::string stage;                     // "" for the whole variant
    std::function<void(int copy)> launch;  // queues one run on `stream`, reading K/V copy `copy`
    cudaStream_t stream = nullptr;         // where the timer's events go
    double bytes = 0;                      // moved by one run; 0 leaves bytes and GB/s empty
    double flops = 0;                      // done by one run; 0 leaves flops and TFLOPS empty
    int warmup = -1;                       // -1: the MeasureSetup's
    int max_iters = -1;                    // > 0: at most this many timed runs (slow baselines)
};

struct MeasureSetup {
    DeviceInfo info;
    int iters = 100;           // timed runs (at most, with a time budget)
    int warmup = 10;           // untimed runs first (at most `iters`, with a time budget)
    // > 0: one run, timed first, sizes the count so that a part takes about this long
    // (slow steps get fewer runs), never fewer than min_iters.
    double budget_us = 0;
    int min_iters = 3;
    double read_bw_gbps = 0;   // measured ceilings; 0 leaves the % column empty
    double gemm_tflops = 0;
    bool cold = true;          // L2-cold rows beside the L2-hot ones (false: hot only)
    bool rel_err = true;       // fill rel_err (false: bit-exact lessons leave it empty)
};

// Times one part on copy 0 (L2-hot, copies = 1) or rotating over `copies` (L2-cold).
Timing time_part(const TimedPart& part, int copies, const MeasureSetup& setup);

// The timing columns of a row: l2, us, bytes, GB/s, % read BW, FLOPs, TFLOPS, % GEMM.
void fill_timing(ResultRow& r, const Timing& t, bool cold, const TimedPart& part, const MeasureSetup& setup);

// For each variant that runs the problem: check (output poisoned), time every part L2-hot
// and (setup.cold) L2-cold, check again (a race shows up there), and make
// the rows (hot then cold for each part). A failure is counted in *failures and named in one
// line on stderr.
template <class Problem>
std::vector<ResultRow> measure_variants(Problem& p, const std::vector<typename Problem::Variant>& variants,
                                        const MeasureSetup& setup, int* failures) {
    std::vector<ResultRow> rows;
    for (const auto& v : variants) {
        if (!p.why_not(v).empty()) continue;  // the caller refused shapes that nothing runs
        const CheckResult before = p.check(v);
        const std::vector<TimedPart> parts = p.parts(v);
        std::vector<Timing> hot, cold;
        for (const auto& part : parts) {
            hot.push_back(time_part(part, 1, setup));
            if (setup.cold) cold.push_back(time_part(part, p.copies(), setup));
        }
        const CheckResult after = p.recheck(v);
        const bool pass = before.pass && after.pass;
        if (!pass) {
            *failures += 1;
            std::fflush(stdout);
            std::fprintf(stderr, "FAIL %s %s%s: %s\n", v.name.c_str(), p.label().c_str(),
                         before.pass ? " after timing" : "", (before.pass ? after.message : before.message).c_str());
        }
        for (size_t i = 0; i < parts.size(); ++i)
            for (int c = 0; c < (setup.cold ? 2 : 1); ++c) {
                ResultRow r;
                fill_timing(r, c ? cold[i] : hot[i], c == 1, parts[i], setup);
                r.check = pass ? "PASS" : "FAIL";
                if (setup.rel_err) r.rel_err = std::max(before.rel_err, after.rel_err);
                p.describe(v, parts[i], r);  // may read the timing columns (lesson 07's % copy BW)
                rows.push_back(r);
            }
    }
    return rows;
}

}  // namespace pa
