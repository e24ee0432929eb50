// Lesson 03's exercise grader, the read-only part: flags, cases, references, suspects, the
// scratch and log-sum-exp buffers the graded kernels write (poisoned with NaN before every
// launch), and the lesson's own step 1 as the speed baseline. Compiled once
// (lesson03_exercise_harness); each grader executable adds only its graded files (graded_main.cu).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "exercise_grader.cuh"
#include "shapes.h"
#include "split_plan.h"

namespace lesson03_exercise {

// The partition size every graded launch uses on a shape: the lesson's step 1 rule (the largest
// power of two from 64 to 4096 whose grid gives every SM four CTAs), so that the student's
// kernel and the lesson's do the same work.
int partition_size(const pa::DecodeShape& s);

// The split scratch ([B][H][partitions] m, l and acc) of a launch at partitions of
// `partition_size`, in a buffer the grader owns and fills with NaN before every launch (a
// partition that writes nothing leaves NaN for the reduce to read).
lesson03::SplitScratch scratch_for(const pa::PagedDecodeArgs& a, int partition_size);
// The log-sum-exp output [B, H] of the lse exercise (also NaN before every launch).
float* lse_buffer(const pa::PagedDecodeArgs& a);

// What one grader executable holds: the graded files' kernels, each launched by graded_main.cu.
struct GradedKernel {
    std::function<std::string(const pa::DecodeShape&)> why_not;  // unset: this build has no such file
    pa::exercise::GradedLaunch launch;
};
struct Graded {
    std::string build;  // "student", "lesson + solution", "mutant fill_sentinel_m_zero", ...
    GradedKernel fill, lse;
};

// "" if the graded kernels (built as `kernel`, or not built: null) run the shape here, else why.
std::string graded_why_not(const pa::DecodeShape& s, const void* kernel);

// The cases of an exercise ("fill" or "lse") for a seed: Table A, 8 seeded shapes, the edge
// cases (fp16 D 128; mixed lengths in bf16 and at D 64) and negative-logits. Host only.
std::vector<pa::exercise::GradeCase> grade_cases(const std::string& exercise, uint64_t seed);

// The known wrong outputs of the fill-in at partitions of `partition_size`. Host only.
std::vector<pa::exercise::Suspect> suspects(const pa::DecodeProblem& p, int partition_size);

// main() of every grader executable.
int run(int argc, char** argv, const Graded& g);

}  // namespace lesson03_exercise
