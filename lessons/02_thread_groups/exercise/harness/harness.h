// Lesson 02's exercise grader, the read-only part: flags, cases, references, suspects, and
// step 1 (the lesson's own kernel) as the speed baseline. Compiled once
// (lesson02_exercise_harness); each grader executable adds only its graded files (graded_main.cu).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "exercise_grader.cuh"
#include "shapes.h"

namespace lesson02_exercise {

constexpr int kThreads = 128;  // threads per CTA of every graded kernel, as in step 1

// What one check runs with, besides the shape: the thread-group size, and (softcap exercise)
// the cap, 0 for none. Each case's name says both ("ctx-1/tgs4", "mqa/cap5"); its
// GradeCase::param is the index of its Param in the grade's table (Cases::params).
struct Param {
    int tgs = 8;
    int cap = 0;
};
bool operator==(Param a, Param b);

// The index of `p` in `params`, appended first if it is not there yet.
int param_index(std::vector<Param>& params, Param p);

// "" if `kernel` (a graded instantiation) can hold the shape's logits in shared memory on
// this GPU, else one line naming the shape and the limit.
std::string smem_why_not(const pa::DecodeShape& s, const void* kernel);

// A graded kernel: why it cannot run a shape, and its launcher at a Param.
struct GradedKernel {
    std::function<std::string(const pa::DecodeShape&)> why_not;  // unset: this build has no such file
    std::function<void(const pa::PagedDecodeArgs&, Param, cudaStream_t)> launch;
};
struct Graded {
    std::string build;  // "student", "lesson + solution", "mutant fill_stops_early", ...
    GradedKernel fill, softcap;
};

// The cases of an exercise ("fill" or "softcap") for a seed: Table A, 8 seeded shapes and the
// edge cases (fp16 D 128, and mixed lengths in bf16 and at D 64), each with the one Param it
// runs with: its param indexes `params`, the Params of these cases in order of first use. Host only.
struct Cases {
    std::vector<pa::exercise::GradeCase> list;
    std::vector<Param> params;
};
Cases grade_cases(const std::string& exercise, uint64_t seed);

// The element d of a head of size D that lane l of a thread group of TGS lanes multiplies
// (step 1's layout: pieces of min(8, D / TGS) elements, piece c on lane c % TGS).
int lane_of_element(int d, int D, int tgs);

// The known wrong answers of an exercise (see pa::exercise::diagnose). Host only.
std::vector<pa::exercise::Suspect> suspects(const std::string& exercise, const pa::DecodeProblem& p, Param prm);

// main() of every grader executable.
int run(int argc, char** argv, const Graded& g);

}  // namespace lesson02_exercise
