// Step 21's instantiations (one per policy) and launcher (tma_maps.cuh's persistent launch, as
// steps 10 to 20's). Built for sm_90a only.
#include "step21_v_pages.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step21 {
    template <class P>
    static auto kernel() { return step21::wgmma_v_pages_prefill_kernel<P>; }
    static constexpr int kNB = step21::kNB, kRows = step21::kRows, kThreads = step21::kThreads;
    static constexpr int kSmemBytes = step21::kSmemBytes;
    static constexpr bool kStoresThroughMap = true;  // maps.o
    static constexpr bool kVPages = true;            // PageMaps::v_pages
};

}  // namespace

void launch_wgmma_v_pages(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    launch_persistent_step<Step21>(a, p, stream);
}

Geometry geometry_wgmma_v_pages(const PrefillShape& s) { return geometry_persistent_step<Step21>(s); }

}  // namespace lesson06
