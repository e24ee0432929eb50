// Step 8's instantiations (one per policy) and launcher (the host side steps 5 to 9 share is
// tma_maps.cuh's). Built for sm_90a only.
#include "step8_wgmma_overlap.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step8 {
    template <class P>
    static auto kernel() { return step8::wgmma_ws_prefill_kernel<P>; }
    static constexpr int kNB = step8::kNB, kRows = step8::kRows, kThreads = step8::kThreads;
    static constexpr int kSmemBytes = step8::kSmemBytes;
};

}  // namespace

void launch_wgmma_overlap(const PrefillArgs& a, Policy p, cudaStream_t stream) { launch_tma_step<Step8>(a, p, stream); }

Geometry geometry_wgmma_overlap(const PrefillShape& s) { return geometry_tma_step<Step8>(s); }

}  // namespace lesson06
