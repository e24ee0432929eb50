// One grader executable of lesson 04's exercise: the harness (compiled once) plus the graded
// files, chosen by compile definitions (lessons/04_pow2_padding/CMakeLists.txt):
//   PA_EXERCISE_FILL   the fill-in's graded file: student.cuh, a mutant, or lesson_fill.cuh
//   PA_EXERCISE_PLAN   the plan's graded file: plan.cuh, a mutant, or solution/plan.cuh
//   PA_EXERCISE_BUILD  the build's name, printed and written to --json
// An executable without one of them grades only the other exercise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_check.cuh"
#include "dispatch.cuh"
#include "harness.h"
#include "launch_utils.cuh"
#include "table.h"

#ifdef PA_EXERCISE_FILL
#include PA_EXERCISE_FILL
#endif
#ifdef PA_EXERCISE_PLAN
#include PA_EXERCISE_PLAN
#endif

#ifdef PA_EXERCISE_FILL
namespace {

// The graded reduce at (dtype, head size) of pa::exercise::decode_instances() and the width
// next_pow2(s.max_partitions), launched as the lesson launches pow2_lanes (grid (H, B),
// pow2_threads threads, no dynamic shared memory).
void launch_fill(const pa::PagedDecodeArgs& a, const lesson03::SplitScratch& s, cudaStream_t stream) {
    auto go = [&](auto tag, auto d) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024>(
            lesson04::next_pow2(s.max_partitions), [&](auto p) {
                pa::launch_maybe_dependent(ex_fill::reduce_kernel<T, d.value, p.value>, dim3(a.H, a.B),
                                           dim3(lesson04::pow2_threads(p.value, d.value)), stream, false,
                                           static_cast<T*>(a.out), static_cast<const float*>(s.m),
                                           static_cast<const float*>(s.l), static_cast<const float*>(s.acc),
                                           s.max_partitions);
                return true;
            });
    };
    bool ok = false;
    if (a.dtype == pa::DType::fp16)
        ok = pa::dispatch_int<64, 128>(a.D, [&](auto d) { return go(pa::TypeTag<__half>{}, d); });
    else if (a.dtype == pa::DType::bf16)
        ok = pa::dispatch_int<128>(a.D, [&](auto d) { return go(pa::TypeTag<__nv_bfloat16>{}, d); });
    if (!ok)
        throw pa::CudaError(pa::strf("no graded reduce is built for %s, head size %d, %d segments",
                                     pa::dtype_name(a.dtype), a.D, s.max_partitions));
}

}  // namespace
#endif

int main(int argc, char** argv) {
    lesson04_exercise::Graded g;
    g.build = PA_EXERCISE_BUILD;
#ifdef PA_EXERCISE_FILL
    g.fill = launch_fill;
#endif
#ifdef PA_EXERCISE_PLAN
    g.plan = ex_plan::plan_ragged;
#endif
    return lesson04_exercise::run(argc, argv, g);
}
