// The MMA floor (mma_floor.h): step 21's kernel, instantiated with a policy that does nothing.
// Built for sm_90a only, as step 21.
#include "mma_floor.h"

#include "step21_v_pages.cuh"
#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

// P = S: no max, no exponent, no mask, no rescale, the output scaled by 1. Every copy, wgmma,
// barrier, bf16 packing of P and store of step 21 is still there; only the policy's work on
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

namespace {

// The floor as a TMA step (tma_maps.cuh): step 21's constants, its kernel with MmaOnlyPolicy
// whichever policy the launcher names.
struct FloorStep {
    template <class>
    static auto kernel() { return step21::wgmma_v_pages_prefill_kernel<MmaOnlyPolicy<step21::kNB>>; }
    static constexpr int kNB = step21::kNB, kRows = step21::kRows, kThreads = step21::kThreads;
    static constexpr int kSmemBytes = step21::kSmemBytes;
    static constexpr bool kStoresThroughMap = true;  // maps.o
    static constexpr bool kVPages = true;            // PageMaps::v_pages
};

}  // namespace

void launch_mma_floor(const PrefillArgs& a, cudaStream_t stream) { launch_persistent_step<FloorStep>(a, Policy::softmax, stream); }

}  // namespace lesson06
