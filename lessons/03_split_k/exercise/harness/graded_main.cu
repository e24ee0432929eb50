// One grader executable of lesson 03's exercise: the harness (compiled once) plus the graded
// files, chosen by compile definitions (lessons/03_split_k/CMakeLists.txt):
//   PA_EXERCISE_FILL  the fill-in's graded file: student.cuh, a mutant, or lesson_fill.cuh
//   PA_EXERCISE_LSE   the lse exercise's graded file: lse.cuh, a mutant, or solution/lse.cuh
//   PA_EXERCISE_BUILD the build's name, printed and written to --json
// An executable without one of them grades only the other exercise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_check.cuh"
#include "dispatch.cuh"
#include "harness.h"
#include "launch_utils.cuh"
#include "shapes.h"
#include "split_k.h"
#include "step1_partitions.cuh"  // step1::smem_bytes, kThreads: the graded kernels' launch shape
// Not split_reduce.cuh: its lesson03::merge_partitions would be found (through SplitScratch's
// namespace) beside a graded file's own copy. The graded files name their kReduceThreads.
#include "table.h"

#ifdef PA_EXERCISE_FILL
#include PA_EXERCISE_FILL
#endif
#ifdef PA_EXERCISE_LSE
#include PA_EXERCISE_LSE
#endif

namespace {

// Calls f(TypeTag<scalar_t>, integral_constant<D>) for a graded (dtype, D), one of
// pa::exercise::decode_instances(); false for any other.
template <class F>
bool with_instance(pa::DType t, int D, F&& f) {
    if (t == pa::DType::fp16) return pa::dispatch_int<64, 128>(D, [&](auto d) { f(pa::TypeTag<__half>{}, d); return true; });
    return pa::dispatch_int<128>(D, [&](auto d) { f(pa::TypeTag<__nv_bfloat16>{}, d); return true; });
}

std::string not_built(const pa::PagedDecodeArgs& a) {
    return pa::strf("no graded kernel is built for %s with head size %d", pa::dtype_name(a.dtype), a.D);
}

// The graded kernels of an exercise: `launch_one(tag, d, a, P, scratch, stream)` launches them
// for one instance; `first_kernel(tag, d)` is the one whose limits why_not reads.
template <class FirstKernel, class LaunchOne>
lesson03_exercise::GradedKernel graded(FirstKernel first_kernel, LaunchOne launch_one) {
    lesson03_exercise::GradedKernel k;
    k.why_not = [first_kernel](const pa::DecodeShape& s) {
        const void* kernel = nullptr;
        with_instance(s.dtype, s.D, [&](auto tag, auto d) { kernel = first_kernel(tag, d); });
        return lesson03_exercise::graded_why_not(s, kernel);
    };
    k.launch = [launch_one](const pa::PagedDecodeArgs& a, int, int, cudaStream_t stream) {
        const int P = lesson03_exercise::partition_size(pa::launch_shape(a));
        const lesson03::SplitScratch s = lesson03_exercise::scratch_for(a, P);
        const bool built = with_instance(a.dtype, a.D, [&](auto tag, auto d) { launch_one(tag, d, a, P, s, stream); });
        if (!built) throw pa::CudaError(not_built(a));
    };
    return k;
}

}  // namespace

int main(int argc, char** argv) {
    lesson03_exercise::Graded g;
    g.build = PA_EXERCISE_BUILD;
#ifdef PA_EXERCISE_FILL
    // Step 1's two kernels, both the graded file's: partitions, then the reduce (a programmatic
    // dependent on sm_90, as the lesson launches its own).
    g.fill = graded(
        [](auto tag, auto d) {
            using T = typename decltype(tag)::type;
            return reinterpret_cast<const void*>(ex_fill::partitions_kernel<T, decltype(d)::value, lesson03::kStepTgs>);
        },
        [](auto tag, auto d, const pa::PagedDecodeArgs& a, int P, const lesson03::SplitScratch& s, cudaStream_t stream) {
            using T = typename decltype(tag)::type;
            constexpr int D = decltype(d)::value;
            auto partitions = ex_fill::partitions_kernel<T, D, lesson03::kStepTgs>;
            pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(partitions));
            partitions<<<dim3(a.H, a.B, s.max_partitions), lesson03::step1::kThreads, lesson03::step1::smem_bytes(D, P),
                         stream>>>(static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
                                   static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.Hkv, a.H / a.Hkv,
                                   a.block_size, a.max_blocks_per_seq, a.scale, P, s);
            CUDA_CHECK_LAUNCH();
            pa::launch_maybe_dependent(ex_fill::split_k_reduce_kernel<T, D>, dim3(a.H, a.B), dim3(ex_fill::kReduceThreads),
                                       stream, true, static_cast<T*>(a.out), s, a.H);
        });
#endif
#ifdef PA_EXERCISE_LSE
    // The lesson's step 1 partitions, then the graded reduce, which also writes the log-sum-exp.
    g.lse = graded(
        [](auto tag, auto d) {
            using T = typename decltype(tag)::type;
            return reinterpret_cast<const void*>(ex_lse::lse_reduce_kernel<T, decltype(d)::value>);
        },
        [](auto tag, auto d, const pa::PagedDecodeArgs& a, int P, const lesson03::SplitScratch& s, cudaStream_t stream) {
            using T = typename decltype(tag)::type;
            constexpr int D = decltype(d)::value;
            lesson03::step1::launch(a, P, s, stream);
            pa::launch_maybe_dependent(ex_lse::lse_reduce_kernel<T, D>, dim3(a.H, a.B), dim3(ex_lse::kReduceThreads),
                                       stream, true, static_cast<T*>(a.out), lesson03_exercise::lse_buffer(a), s, a.H);
        });
#endif
    return lesson03_exercise::run(argc, argv, g);
}
