// Lesson 06's exercise grader, the read-only part: cases, references, suspects, the fill-in's
// layout checks and a grading loop for a causal prefill kernel (the decode lessons' generic
// pa::exercise::grade is decode-only; this one reuses its Watchdog, wait_stream, diagnose,
// speed_band, GradeReport and parse_grade_flags, and follows the same rules). Compiled once
// (lesson06_exercise_harness); each grader executable adds only its graded files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "exercise_grader.cuh"
#include "layout_check.h"  // CoreOffsetFn, SmemDescFn, fill_layout_errors
#include "lesson06.h"
#include "prefill_problem.h"

namespace lesson06_exercise {

// One batch the grader checks, at each of `windows` (kFullWindow: causal prefill).
struct PrefillCase {
    std::string name, group;  // group: "catalogue", "seeded" or "edge"
    lesson06::PrefillShape shape;
    std::string teaches;      // printed when it fails
    std::vector<int> windows{pa::exercise::kFullWindow};
};

// The check shapes of the lesson, 6 batches drawn from `seed`, and the named edge cases;
// the window exercise runs each at windows 1, 2, 65, 128, 129, 300 and one drawn from the seed.
std::vector<PrefillCase> grade_cases(const std::string& exercise, uint64_t seed);
// make_prefill_problem, then q doubled and rounded again: the softmax is far from uniform, so
// an all-zeros output or the plain mean of V fails the tolerance. Unused cache slots stay NaN.
lesson06::PrefillProblem make_grade_problem(const lesson06::PrefillShape& s, uint64_t seed);
// [total_new, H, D]: causal prefill, or the sliding window of reference/prefill_reference.h.
std::vector<double> reference(const lesson06::PrefillProblem& p, int window);
// The known wrong answers of an exercise for (problem, window), tried in order.
std::vector<pa::exercise::Suspect> suspects(const std::string& exercise, const lesson06::PrefillProblem& p, int window);


// A graded kernel: its launch on the grid of step 3 (H x 128-row query tiles).
using PrefillLaunch = std::function<void(const lesson06::PrefillArgs&, int window, cudaStream_t)>;
struct Graded {
    std::string build;        // "student", "lesson + solution", "mutant fill_core_row_major", ...
    bool has_sm90a = false;   // false: this build has no sm_90a code (90a not configured)
    PrefillLaunch fill, window;  // unset: this build has no such graded file
    CoreOffsetFn fill_core;
    SmemDescFn fill_desc;
};

// main() of every grader executable.
int run(int argc, char** argv, const Graded& g);

}  // namespace lesson06_exercise
