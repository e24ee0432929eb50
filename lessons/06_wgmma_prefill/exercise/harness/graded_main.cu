// One grader executable of lesson 06's exercise: the harness (compiled once) plus the graded
// files, chosen by compile definitions (lessons/06_wgmma_prefill/CMakeLists.txt):
//   PA_EXERCISE_FILL    the fill-in's graded file: student.cuh, a mutant, or lesson_fill.cuh
//   PA_EXERCISE_WINDOW  the window's graded file: window.cuh, a mutant, or solution/window.cuh
//   PA_EXERCISE_BUILD   the build's name, printed and written to --json
// The graded kernels are sm_90a code (wgmma): they are compiled only where the lesson's sm_90a
// steps are (PA_BUILT_SM90A); elsewhere the grader says so and exits 3.
#include "cuda_check.cuh"
#include "harness.h"
#include "launch_utils.cuh"

#if PA_BUILT_SM90A
#include "steps.cuh"  // make_batch, policy_params
#ifdef PA_EXERCISE_FILL
#include PA_EXERCISE_FILL
#endif
#ifdef PA_EXERCISE_WINDOW
#include PA_EXERCISE_WINDOW
#endif
#endif

int main(int argc, char** argv) {
    lesson06_exercise::Graded g;
    g.build = PA_EXERCISE_BUILD;
#if PA_BUILT_SM90A
    g.has_sm90a = true;
#ifdef PA_EXERCISE_FILL
    static_assert(ex_fill::kRows == 128, "the grader launches step 3's grid of 128-row query tiles");
    g.fill = [](const lesson06::PrefillArgs& a, int, cudaStream_t stream) {
        auto kernel = ex_fill::wgmma_prefill_kernel<lesson06::SoftmaxPolicy<ex_fill::kNB>>;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        kernel<<<dim3(a.H, a.num_tiles128), ex_fill::kThreads, ex_fill::kSmemBytes, stream>>>(
            lesson06::make_batch(a, 128), lesson06::policy_params(a));
        CUDA_CHECK_LAUNCH();
    };
    g.fill_core = [](int row, int d) { return ex_fill::core_offset_bytes(row, d); };
    g.fill_desc = [](uint32_t addr, uint32_t lbo, uint32_t sbo) { return ex_fill::smem_desc(addr, lbo, sbo); };
#endif
#ifdef PA_EXERCISE_WINDOW
    static_assert(ex_window::kRows == 128, "the grader launches step 3's grid of 128-row query tiles");
    g.window = [](const lesson06::PrefillArgs& a, int window, cudaStream_t stream) {
        auto kernel = ex_window::wgmma_prefill_kernel<lesson06::SoftmaxPolicy<ex_window::kNB>>;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        kernel<<<dim3(a.H, a.num_tiles128), ex_window::kThreads, ex_window::kSmemBytes, stream>>>(
            lesson06::make_batch(a, 128), lesson06::policy_params(a), window);
        CUDA_CHECK_LAUNCH();
    };
#endif
#endif
    return lesson06_exercise::run(argc, argv, g);
}
