// One grader executable of lesson 05's exercise: the harness (compiled once) plus the graded
// files, chosen by compile definitions (lessons/05_sparse_p/CMakeLists.txt):
//   PA_EXERCISE_FILL   the fill-in's graded file: student.cuh, a mutant, or lesson_fill.cuh
//   PA_EXERCISE_GATE   the floor's graded file: gate.cuh, a mutant, or solution/gate.cuh
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
#ifdef PA_EXERCISE_GATE
#include PA_EXERCISE_GATE
#endif

namespace {

using lesson05_exercise::Plan;

// A graded kernel launched as lesson05.cu launches step 10: the same plan (plan_for), grid,
// threads and shared memory. `pick(tag, ctas_per_sm, seqs, stages)` gives the instantiation;
// WITH_ALPHA: the kernel takes the floor's alpha after B (the gate exercise).
template <bool WITH_ALPHA, class Pick>
lesson05_exercise::GradedKernel graded(Pick pick) {
    lesson05_exercise::GradedKernel k;
    k.built = true;
    k.launch = [pick](const pa::PagedDecodeArgs& a, int /*window*/, int param, cudaStream_t stream) {
        const Plan plan = lesson05_exercise::plan_for(a.B, a.Hkv, a.max_ctx, a.block_size);
        const dim3 grid(a.Hkv, (a.B + plan.seqs - 1) / plan.seqs);
        const lesson05_exercise::GateCase& g = lesson05_exercise::gate_table()[static_cast<size_t>(param)];
        const lesson05::GateArgs gate = lesson05_exercise::gate_args(g);
        const float alpha = static_cast<float>(g.alpha);
        const bool built = pa::dispatch_dtype(a.dtype, [&](auto tag) {
            using T = typename decltype(tag)::type;
            return lesson05_exercise::dispatch_ring(plan.ring, [&](auto c, auto st) {
                return pa::dispatch_int<1, 2>(plan.seqs, [&](auto q) {
                    constexpr int C = c.value, S = q.value;
                    if constexpr (C == 1 && S == 2) {
                        return false;  // two sequences per CTA only at two CTAs per SM, as in the lesson
                    } else {
                        const auto kernel = pick(tag, c, q, st);
                        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
                        if constexpr (WITH_ALPHA)
                            kernel<<<grid, lesson05::kThreads, plan.smem_bytes, stream>>>(
                                static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
                                static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.H, a.Hkv, a.H / a.Hkv,
                                a.block_size, a.max_blocks_per_seq, a.scale, gate, a.B, alpha);
                        else
                            kernel<<<grid, lesson05::kThreads, plan.smem_bytes, stream>>>(
                                static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
                                static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.H, a.Hkv, a.H / a.Hkv,
                                a.block_size, a.max_blocks_per_seq, a.scale, gate, a.B);
                        CUDA_CHECK_LAUNCH();
                        return true;
                    }
                });
            });
        });
        if (!built) throw pa::CudaError(pa::strf("lesson05_exercise: no graded kernel built for %s", pa::dtype_name(a.dtype)));
    };
    return k;
}

}  // namespace

int main(int argc, char** argv) {
    lesson05_exercise::Graded g;
    g.build = PA_EXERCISE_BUILD;
#ifdef PA_EXERCISE_FILL
    g.fill = graded<false>([](auto tag, auto c, auto q, auto st) {
        return ex_fill::compact_ordered_gated_kernel<typename decltype(tag)::type, decltype(c)::value, decltype(q)::value,
                                                     decltype(st)::value>;
    });
#endif
#ifdef PA_EXERCISE_GATE
    g.gate = graded<true>([](auto tag, auto c, auto q, auto st) {
        return ex_gate::floor_gated_kernel<typename decltype(tag)::type, decltype(c)::value, decltype(q)::value,
                                           decltype(st)::value>;
    });
#endif
    return lesson05_exercise::run(argc, argv, g);
}
