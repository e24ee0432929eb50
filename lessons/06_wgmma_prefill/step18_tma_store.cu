// Step 18's instantiations (one per policy) and launcher (tma_maps.cuh's persistent launch, as
// steps 10 to 17's). Built for sm_90a only.
#include "step18_tma_store.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step18 {
    template <class P>
    static auto kernel() { return step18::wgmma_tma_store_prefill_kernel<P>; }
    static constexpr int kNB = step18::kNB, kRows = step18::kRows, kThreads = step18::kThreads;
    static constexpr int kSmemBytes = step18::kSmemBytes;
    static constexpr bool kStoresThroughMap = true;  // maps.o
};

}  // namespace

void launch_wgmma_tma_store(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    launch_persistent_step<Step18>(a, p, stream);
}

Geometry geometry_wgmma_tma_store(const PrefillShape& s) { return geometry_persistent_step<Step18>(s); }

}  // namespace lesson06
