// Step 9's instantiations (one per policy) and launcher (the host side steps 5 to 9 share is
// tma_maps.cuh's). Built for sm_90a only.
#include "step9_wgmma_ws.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step9 {
    template <class P>
    static auto kernel() { return step9::wgmma_ws_prefill_kernel<P>; }
    static constexpr int kNB = step9::kNB, kRows = step9::kRows, kThreads = step9::kThreads;
    static constexpr int kSmemBytes = step9::kSmemBytes;
};

}  // namespace

void launch_wgmma_ws(const PrefillArgs& a, Policy p, cudaStream_t stream) { launch_tma_step<Step9>(a, p, stream); }

Geometry geometry_wgmma_ws(const PrefillShape& s) { return geometry_tma_step<Step9>(s); }

}  // namespace lesson06
