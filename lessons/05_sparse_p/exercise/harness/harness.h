// Lesson 05's exercise grader, the read-only part: flags, cases, gates, references, suspects,
// the launch plan, and step 10 (compact_ordered) as the speed baseline. Compiled once
// (lesson05_exercise_harness); each grader executable adds only its graded files
// (graded_main.cu).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "exercise_grader.cuh"
#include "gated_layout.cuh"
#include "gated_reference.h"
#include "gated_tile.cuh"
#include "shapes.h"

namespace lesson05_exercise {

// The gate a check runs at: the lesson's (sigma, gamma) and, for the gate exercise, the floor's
// alpha (0: none, the lesson's gate).
struct GateCase {
    pa::reference::GateParams gate;
    double alpha = 0;
    std::string label() const;  // "sigma=1.5", "sigma=0 gamma=2 alpha=0.25"
};

// Every gate either exercise checks at; a case's GradeCase::param is its gate's index here.
const std::vector<GateCase>& gate_table();
// The gate both kernels are timed at (the grader's timing_param): the lesson's middle sparsity,
// at alpha 0 for the floor's kernel, where it does step 10's work.
constexpr int kTimingGate = 1;
// A gate's (sigma, gamma) as the kernels take them.
lesson05::GateArgs gate_args(const GateCase& g);

// Which of the lesson's three layouts (gated_layout.cuh) a launch uses, as lesson05.cu
// chooses it: Layout<1> (one CTA per SM), Layout<2> (two), Layout<1, kSmallStages> (99 KiB).
enum class Ring { one_per_sm, two_per_sm, small };
struct Plan {
    int seqs = 1;  // sequences per CTA (CtaSeqs)
    Ring ring = Ring::small;
    long long ctas = 0;
    int smem_bytes = 0;
};
// Step 10's plan for a batch on this GPU (PA_SMEM_CAP_KIB applied): the same rule as
// lesson05.cu's single_pass_plan, so the graded kernel runs the layout step 10 runs.
Plan plan_for(int B, int Hkv, int max_ctx, int block_size);

// Calls f(CTAS_PER_SM, STAGES) of `ring`, each a std::integral_constant.
template <class F>
bool dispatch_ring(Ring ring, F&& f) {
    using std::integral_constant;
    switch (ring) {
        case Ring::one_per_sm: return f(integral_constant<int, 1>{}, integral_constant<int, lesson05::default_stages(1)>{});
        case Ring::two_per_sm: return f(integral_constant<int, 2>{}, integral_constant<int, lesson05::default_stages(2)>{});
        case Ring::small: return f(integral_constant<int, 1>{}, integral_constant<int, lesson05::kSmallStages>{});
    }
    return false;
}

// What one grader executable holds: the graded files' kernels, each launched by graded_main.cu.
struct GradedKernel {
    bool built = false;  // false: this build has no such file
    pa::exercise::GradedLaunch launch;
};
struct Graded {
    std::string build;  // "student", "lesson + solution", "mutant fill_zeros", ...
    GradedKernel fill, gate;
};

// The cases of an exercise ("fill" or "gate") for a seed: part of Table C, 6 seeded shapes and
// the edge cases, each at the exercise's gates (its name ends in the gate's label, its param
// indexes gate_table()). Host only.
std::vector<pa::exercise::GradeCase> grade_cases(const std::string& exercise, uint64_t seed);

// The reference of an exercise at a gate, and its known wrong answers (see pa::exercise::diagnose).
std::vector<double> reference(const std::string& exercise, const pa::DecodeProblem& p, const GateCase& g);
std::vector<pa::exercise::Suspect> suspects(const std::string& exercise, const pa::DecodeProblem& p, const GateCase& g);

// main() of every grader executable.
int run(int argc, char** argv, const Graded& g);

}  // namespace lesson05_exercise
