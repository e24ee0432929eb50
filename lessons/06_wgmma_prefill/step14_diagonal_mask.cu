// Step 14's instantiations (one per policy) and launcher (tma_maps.cuh's persistent launch, as
// steps 10 to 13's). Built for sm_90a only.
#include "step14_diagonal_mask.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step14 {
    template <class P>
    static auto kernel() { return step14::wgmma_diagonal_mask_prefill_kernel<P>; }
    static constexpr int kNB = step14::kNB, kRows = step14::kRows, kThreads = step14::kThreads;
    static constexpr int kSmemBytes = step14::kSmemBytes;
};

}  // namespace

void launch_wgmma_diagonal_mask(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    launch_persistent_step<Step14>(a, p, stream);
}

Geometry geometry_wgmma_diagonal_mask(const PrefillShape& s) { return geometry_persistent_step<Step14>(s); }

}  // namespace lesson06
