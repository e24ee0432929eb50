// Step 15's instantiations (one per policy) and launcher (tma_maps.cuh's persistent launch, as
// steps 10 to 14's). Built for sm_90a only.
#include "step15_paired_stores.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step15 {
    template <class P>
    static auto kernel() { return step15::wgmma_paired_stores_prefill_kernel<P>; }
    static constexpr int kNB = step15::kNB, kRows = step15::kRows, kThreads = step15::kThreads;
    static constexpr int kSmemBytes = step15::kSmemBytes;
};

}  // namespace

void launch_wgmma_paired_stores(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    launch_persistent_step<Step15>(a, p, stream);
}

Geometry geometry_wgmma_paired_stores(const PrefillShape& s) { return geometry_persistent_step<Step15>(s); }

}  // namespace lesson06
