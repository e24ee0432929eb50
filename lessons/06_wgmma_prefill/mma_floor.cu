// The MMA floor (mma_floor.h): step 13's kernel, instantiated with a policy that does nothing.
// Built for sm_90a only, as step 13.
#include "mma_floor.h"

#include "cuda_check.cuh"
#include "launch_utils.cuh"
#include "step13_lazy_rescale.cuh"
#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

// P = S: no max, no exponent, no mask, no rescale, the output scaled by 1. Every copy, wgmma,
// barrier, bf16 packing of P and store of step 13 is still there; only the policy's work on
// the score fragment is gone. (Masked and past-the-end scores stay in P as they are: the
// output is meaningless, and the MMAs take no longer for it.)
template <int NB>
struct MmaOnlyPolicy {
    static constexpr bool kRescales = false;
    __device__ __forceinline__ void to_p(float (&)[4 * NB], int, const int (&)[2], bool, int, float (&alpha)[2]) {
        alpha[0] = alpha[1] = 1.f;
    }
    __device__ __forceinline__ void finish(float (&out_scale)[2]) { out_scale[0] = out_scale[1] = 1.f; }
};
template <int NB>
__device__ __forceinline__ MmaOnlyPolicy<NB> make_policy(const PolicyParams&, MmaOnlyPolicy<NB>*) {
    return MmaOnlyPolicy<NB>{};
}

void launch_mma_floor(const PrefillArgs& a, cudaStream_t stream) {
    const step2::Batch b = make_batch(a, step13::kRows);
    const Maps maps = make_maps(a, step13::kRows);
    const int items = a.H * a.num_tiles128;
    const auto kernel = step13::wgmma_lazy_rescale_prefill_kernel<MmaOnlyPolicy<step13::kNB>>;
    pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
    kernel<<<persistent_ctas(items), step13::kThreads, step13::kSmemBytes, stream>>>(b, policy_params(a), maps, items);
    CUDA_CHECK_LAUNCH();
}

}  // namespace lesson06
