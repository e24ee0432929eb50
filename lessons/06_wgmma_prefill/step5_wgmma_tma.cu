// Step 5's instantiations (one per policy) and launcher (the host side steps 5 to 9 share is
// tma_maps.cuh's). Built for sm_90a only.
#include "step5_wgmma_tma.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step5 {
    template <class P>
    static auto kernel() { return step5::wgmma_prefill_kernel<P>; }
    static constexpr int kNB = step5::kNB, kRows = step5::kRows, kThreads = step5::kThreads;
    static constexpr int kSmemBytes = step5::kSmemBytes;
};

}  // namespace

void launch_wgmma_tma(const PrefillArgs& a, Policy p, cudaStream_t stream) { launch_tma_step<Step5>(a, p, stream); }

Geometry geometry_wgmma_tma(const PrefillShape& s) { return geometry_tma_step<Step5>(s); }

}  // namespace lesson06
