// Step 12's instantiations (one per policy) and launcher (tma_maps.cuh's persistent launch, as
// steps 10 and 11's). Built for sm_90a only.
#include "step12_early_start.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step12 {
    template <class P>
    static auto kernel() { return step12::wgmma_early_start_prefill_kernel<P>; }
    static constexpr int kNB = step12::kNB, kRows = step12::kRows, kThreads = step12::kThreads;
    static constexpr int kSmemBytes = step12::kSmemBytes;
};

}  // namespace

void launch_wgmma_early_start(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    launch_persistent_step<Step12>(a, p, stream);
}

Geometry geometry_wgmma_early_start(const PrefillShape& s) { return geometry_persistent_step<Step12>(s); }

}  // namespace lesson06
