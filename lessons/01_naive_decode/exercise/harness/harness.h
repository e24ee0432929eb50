// Lesson 01's exercise grader, the read-only part: flags, cases, references, suspects, and the
// lesson's own kernel as the speed baseline. Compiled once (lesson01_exercise_harness); each
// grader executable adds only its graded files (graded_main.cu).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "exercise_grader.cuh"
#include "shapes.h"

namespace lesson01_exercise {

constexpr int kThreads = 128;  // threads per CTA of every graded kernel, as in the lesson

// "" if `kernel` (a graded instantiation) can hold the shape's logits in shared memory on
// this GPU, else one line naming the shape and the limit.
std::string smem_why_not(const pa::DecodeShape& s, const void* kernel);

// What one grader executable holds: the graded files' kernels, each launched by graded_main.cu.
struct GradedKernel {
    std::function<std::string(const pa::DecodeShape&)> why_not;  // unset: this build has no such file
    pa::exercise::GradedLaunch launch;
};
struct Graded {
    std::string build;  // "student", "lesson + solution", "mutant fill_zeros", ...
    GradedKernel fill, window;
};

// The cases of an exercise ("fill" or "window") for a seed: Table A, 8 seeded shapes, the edge
// cases (fp16 D 128, and mixed lengths in bf16 and at D 64). Host only.
std::vector<pa::exercise::GradeCase> grade_cases(const std::string& exercise, uint64_t seed);

// The known wrong answers of an exercise (see pa::exercise::diagnose). Host only.
std::vector<pa::exercise::Suspect> suspects(const std::string& exercise, const pa::DecodeProblem& p, int window);

// main() of every grader executable.
int run(int argc, char** argv, const Graded& g);

}  // namespace lesson01_exercise
