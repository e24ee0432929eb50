// Step 20's instantiations (one per policy) and launcher (tma_maps.cuh's persistent launch, as
// steps 10 to 19's). Built for sm_90a only.
#include "step20_tree_max.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step20 {
    template <class P>
    static auto kernel() { return step20::wgmma_tree_max_prefill_kernel<P>; }
    static constexpr int kNB = step20::kNB, kRows = step20::kRows, kThreads = step20::kThreads;
    static constexpr int kSmemBytes = step20::kSmemBytes;
    static constexpr bool kStoresThroughMap = true;  // maps.o
};

}  // namespace

void launch_wgmma_tree_max(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    launch_persistent_step<Step20>(a, p, stream);
}

Geometry geometry_wgmma_tree_max(const PrefillShape& s) { return geometry_persistent_step<Step20>(s); }

}  // namespace lesson06
