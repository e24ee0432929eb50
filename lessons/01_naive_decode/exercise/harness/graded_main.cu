// One grader executable of lesson 01's exercise: the harness (compiled once) plus the graded
// files, chosen by compile definitions (lessons/01_naive_decode/CMakeLists.txt):
//   PA_EXERCISE_FILL    the fill-in's graded file: student.cuh, a mutant, or lesson_fill.cuh
//   PA_EXERCISE_WINDOW  the window's graded file: window.cuh, a mutant, or solution/window.cuh
//   PA_EXERCISE_BUILD   the build's name, printed and written to --json
// An executable without one of them grades only the other exercise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda_check.cuh"
#include "dispatch.cuh"
#include "harness.h"
#include "launch_utils.cuh"
#include "naive_decode.h"
#include "table.h"

#ifdef PA_EXERCISE_FILL
#include PA_EXERCISE_FILL
#endif
#ifdef PA_EXERCISE_WINDOW
#include PA_EXERCISE_WINDOW
#endif

namespace {

// Calls f(kernel) for the graded instantiation of (dtype, D), one of pa::exercise::decode_instances();
// false for any other. `pick` maps TypeTag and integral_constant to the graded kernel.
template <class Pick, class F>
bool with_instance(pa::DType t, int D, Pick&& pick, F&& f) {
    if (t == pa::DType::fp16)
        return pa::dispatch_int<64, 128>(D, [&](auto d) { f(pick(pa::TypeTag<__half>{}, d)); return true; });
    return pa::dispatch_int<128>(D, [&](auto d) { f(pick(pa::TypeTag<__nv_bfloat16>{}, d)); return true; });
}

std::string not_built(const pa::DecodeShape& s) {
    return pa::strf("shape %s: no graded kernel is built for %s with head size %d", s.name.c_str(), pa::dtype_name(s.dtype), s.D);
}

template <class Pick>
lesson01_exercise::GradedKernel graded(Pick pick) {
    lesson01_exercise::GradedKernel k;
    k.why_not = [pick](const pa::DecodeShape& s) {
        std::string why = not_built(s);
        with_instance(s.dtype, s.D, pick, [&](auto kernel) { why = lesson01_exercise::smem_why_not(s, reinterpret_cast<const void*>(kernel)); });
        return why;
    };
    k.launch = [pick](const pa::PagedDecodeArgs& a, int window, int /*param*/, cudaStream_t stream) {
        const bool built = with_instance(a.dtype, a.D, pick, [&](auto kernel) {
            using T = typename pa::KernelScalar<decltype(kernel)>::type;
            pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
            const dim3 grid(a.H, a.B);
            const size_t smem = lesson01::smem_bytes(a.D, a.max_ctx);
            if constexpr (std::is_invocable_v<decltype(kernel), T*, const T*, const T*, const T*, const int*, const int*,
                                              int, int, int, int, float, int>) {
                kernel<<<grid, lesson01_exercise::kThreads, smem, stream>>>(
                    static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
                    static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.Hkv, a.H / a.Hkv, a.block_size,
                    a.max_blocks_per_seq, a.scale, window);
            } else {
                (void)window;
                kernel<<<grid, lesson01_exercise::kThreads, smem, stream>>>(
                    static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
                    static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.Hkv, a.H / a.Hkv, a.block_size,
                    a.max_blocks_per_seq, a.scale);
            }
            CUDA_CHECK_LAUNCH();
        });
        if (!built) throw pa::CudaError(not_built(pa::launch_shape(a)));
    };
    return k;
}

}  // namespace

int main(int argc, char** argv) {
    lesson01_exercise::Graded g;
    g.build = PA_EXERCISE_BUILD;
#ifdef PA_EXERCISE_FILL
    g.fill = graded([](auto tag, auto d) { return ex_fill::decode_kernel<typename decltype(tag)::type, decltype(d)::value>; });
#endif
#ifdef PA_EXERCISE_WINDOW
    g.window = graded([](auto tag, auto d) { return ex_window::decode_kernel<typename decltype(tag)::type, decltype(d)::value>; });
#endif
    return lesson01_exercise::run(argc, argv, g);
}
