// Step 6's instantiations (one per policy) and launcher (the host side steps 5 to 9 share is
// tma_maps.cuh's). Built for sm_90a only.
#include "step6_wgmma_producer.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step6 {
    template <class P>
    static auto kernel() { return step6::wgmma_ws_prefill_kernel<P>; }
    static constexpr int kNB = step6::kNB, kRows = step6::kRows, kThreads = step6::kThreads;
    static constexpr int kSmemBytes = step6::kSmemBytes;
};

}  // namespace

void launch_wgmma_producer(const PrefillArgs& a, Policy p, cudaStream_t stream) { launch_tma_step<Step6>(a, p, stream); }

Geometry geometry_wgmma_producer(const PrefillShape& s) { return geometry_tma_step<Step6>(s); }

}  // namespace lesson06
