// Step 13's instantiations (one per policy) and launcher (tma_maps.cuh's persistent launch, as
// steps 10 to 12's). Built for sm_90a only.
#include "step13_lazy_rescale.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step13 {
    template <class P>
    static auto kernel() { return step13::wgmma_lazy_rescale_prefill_kernel<P>; }
    static constexpr int kNB = step13::kNB, kRows = step13::kRows, kThreads = step13::kThreads;
    static constexpr int kSmemBytes = step13::kSmemBytes;
};

}  // namespace

void launch_wgmma_lazy_rescale(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    launch_persistent_step<Step13>(a, p, stream);
}

Geometry geometry_wgmma_lazy_rescale(const PrefillShape& s) { return geometry_persistent_step<Step13>(s); }

}  // namespace lesson06
