// Step 17's instantiations (one per policy) and launcher (tma_maps.cuh's persistent launch, as
// steps 10 to 16's). Built for sm_90a only.
#include "step17_work_ahead.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step17 {
    template <class P>
    static auto kernel() { return step17::wgmma_work_ahead_prefill_kernel<P>; }
    static constexpr int kNB = step17::kNB, kRows = step17::kRows, kThreads = step17::kThreads;
    static constexpr int kSmemBytes = step17::kSmemBytes;
};

}  // namespace

void launch_wgmma_work_ahead(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    launch_persistent_step<Step17>(a, p, stream);
}

Geometry geometry_wgmma_work_ahead(const PrefillShape& s) { return geometry_persistent_step<Step17>(s); }

}  // namespace lesson06
