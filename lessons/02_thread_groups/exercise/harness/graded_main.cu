// One grader executable of lesson 02's exercise: the harness (compiled once) plus the graded
// files, chosen by compile definitions (lessons/02_thread_groups/CMakeLists.txt):
//   PA_EXERCISE_FILL     the fill-in's graded file: student.cuh, a mutant, or lesson_fill.cuh
//   PA_EXERCISE_SOFTCAP  the softcap's graded file: softcap.cuh, a mutant, or solution/softcap.cuh
//   PA_EXERCISE_BUILD    the build's name, printed and written to --json
// An executable without one of them grades only the other exercise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda_check.cuh"
#include "dispatch.cuh"
#include "harness.h"
#include "launch_utils.cuh"
#include "step1_thread_groups.cuh"
#include "table.h"

#ifdef PA_EXERCISE_FILL
#include PA_EXERCISE_FILL
#endif
#ifdef PA_EXERCISE_SOFTCAP
#include PA_EXERCISE_SOFTCAP
#endif

namespace {

// Calls f(kernel) for the graded instantiation of (dtype, D, tgs), one of
// pa::exercise::decode_instances() at a TGS of kTgs...; false for any other. `pick` maps
// (TypeTag, integral_constant D, integral_constant TGS) to the graded kernel.
template <int... kTgs, class Pick, class F>
bool with_instance(pa::DType t, int D, int tgs, Pick&& pick, F&& f) {
    auto at_tgs = [&](auto tag, auto d) {
        return pa::dispatch_int<kTgs...>(tgs, [&](auto g) { f(pick(tag, d, g)); return true; });
    };
    if (t == pa::DType::fp16)
        return pa::dispatch_int<64, 128>(D, [&](auto d) { return at_tgs(pa::TypeTag<__half>{}, d); });
    return pa::dispatch_int<128>(D, [&](auto d) { return at_tgs(pa::TypeTag<__nv_bfloat16>{}, d); });
}

std::string not_built(pa::DType t, int D, int tgs) {
    return pa::strf("no graded kernel is built for %s with head size %d at TGS %d", pa::dtype_name(t), D, tgs);
}

template <int... kTgs, class Pick>
lesson02_exercise::GradedKernel graded(Pick pick) {
    lesson02_exercise::GradedKernel k;
    k.why_not = [pick](const pa::DecodeShape& s) {
        std::string why = "shape " + s.name + ": " + not_built(s.dtype, s.D, 8);
        with_instance<kTgs...>(s.dtype, s.D, 8, pick, [&](auto kernel) {
            why = lesson02_exercise::smem_why_not(s, reinterpret_cast<const void*>(kernel));
        });
        return why;
    };
    k.launch = [pick](const pa::PagedDecodeArgs& a, lesson02_exercise::Param prm, cudaStream_t stream) {
        const bool built = with_instance<kTgs...>(a.dtype, a.D, prm.tgs, pick, [&](auto kernel) {
            using T = typename pa::KernelScalar<decltype(kernel)>::type;
            pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
            const dim3 grid(a.H, a.B);  // one CTA per (query head, sequence), as step 1
            const size_t smem = lesson02::step1::smem_bytes(a.D, a.max_ctx);
            if constexpr (std::is_invocable_v<decltype(kernel), T*, const T*, const T*, const T*, const int*, const int*,
                                              int, int, int, int, float, float>) {
                kernel<<<grid, lesson02_exercise::kThreads, smem, stream>>>(
                    static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
                    static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.Hkv, a.H / a.Hkv, a.block_size,
                    a.max_blocks_per_seq, a.scale, static_cast<float>(prm.cap));
            } else {
                kernel<<<grid, lesson02_exercise::kThreads, smem, stream>>>(
                    static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
                    static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.Hkv, a.H / a.Hkv, a.block_size,
                    a.max_blocks_per_seq, a.scale);
            }
            CUDA_CHECK_LAUNCH();
        });
        if (!built) throw pa::CudaError(not_built(a.dtype, a.D, prm.tgs));
    };
    return k;
}

}  // namespace

int main(int argc, char** argv) {
    lesson02_exercise::Graded g;
    g.build = PA_EXERCISE_BUILD;
#ifdef PA_EXERCISE_FILL
    g.fill = graded<4, 8, 16>([](auto tag, auto d, auto tgs) {
        return ex_fill::decode_kernel<typename decltype(tag)::type, decltype(d)::value, decltype(tgs)::value>;
    });
#endif
#ifdef PA_EXERCISE_SOFTCAP
    g.softcap = graded<8>([](auto tag, auto d, auto tgs) {
        return ex_softcap::decode_kernel<typename decltype(tag)::type, decltype(d)::value, decltype(tgs)::value>;
    });
#endif
    return lesson02_exercise::run(argc, argv, g);
}
