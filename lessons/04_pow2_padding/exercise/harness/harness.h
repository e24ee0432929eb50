// Lesson 04's exercise grader, the read-only part: flags, cases, the pipeline around the
// graded reduce (lesson 03's partition kernel into a scratch whose memory past its end is NaN),
// the lesson's own pow2_lanes pipeline as the speed baseline, and the plan exercise's CPU
// grader (plan_grader.h). Compiled once (lesson04_exercise_harness); each grader executable adds
// only its graded files (graded_main.cu).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

#include "exercise_grader.cuh"
#include "plan_grader.h"
#include "shapes.h"
#include "split_plan.h"

namespace lesson04_exercise {

// A graded reduce's launcher: out from the scratch s (s.max_partitions entries per head).
using ReduceLaunch = std::function<void(const pa::PagedDecodeArgs&, const lesson03::SplitScratch&, cudaStream_t)>;

// What one grader executable holds: the graded files (unset: this build has no such file).
struct Graded {
    std::string build;  // "student", "lesson + solution", "mutant fill_no_mask", ...
    ReduceLaunch fill;
    PlanFn plan;
};

// The fill-in's cases for a seed: the lesson's --check shapes, 8 seeded shapes, the decode edge
// cases, and this lesson's own (segment counts 2^k +- 1 up to 1024, small logits). Host only.
std::vector<pa::exercise::GradeCase> fill_cases(uint64_t seed);

// main() of every grader executable.
int run(int argc, char** argv, const Graded& g);

}  // namespace lesson04_exercise
