// Step 7's instantiations (one per policy) and launcher (the host side steps 5 to 9 share is
// tma_maps.cuh's). Built for sm_90a only.
#include "step7_wgmma_setmaxnreg.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step7 {
    template <class P>
    static auto kernel() { return step7::wgmma_ws_prefill_kernel<P>; }
    static constexpr int kNB = step7::kNB, kRows = step7::kRows, kThreads = step7::kThreads;
    static constexpr int kSmemBytes = step7::kSmemBytes;
};

}  // namespace

void launch_wgmma_setmaxnreg(const PrefillArgs& a, Policy p, cudaStream_t stream) { launch_tma_step<Step7>(a, p, stream); }

Geometry geometry_wgmma_setmaxnreg(const PrefillShape& s) { return geometry_tma_step<Step7>(s); }

}  // namespace lesson06
