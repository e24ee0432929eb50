// Step 10's instantiations (one per policy) and launcher (tma_maps.cuh's persistent launch).
// Built for sm_90a only.
#include "step10_wgmma_persistent.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step10 {
    template <class P>
    static auto kernel() { return step10::wgmma_persistent_prefill_kernel<P>; }
    static constexpr int kNB = step10::kNB, kRows = step10::kRows, kThreads = step10::kThreads;
    static constexpr int kSmemBytes = step10::kSmemBytes;
};

}  // namespace

void launch_wgmma_persistent(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    launch_persistent_step<Step10>(a, p, stream);
}

Geometry geometry_wgmma_persistent(const PrefillShape& s) { return geometry_persistent_step<Step10>(s); }

}  // namespace lesson06
