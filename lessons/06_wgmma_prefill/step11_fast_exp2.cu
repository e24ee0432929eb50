// Step 11's instantiations (one per policy) and launcher (tma_maps.cuh's persistent launch, as
// step 10's). Built for sm_90a only.
#include "step11_fast_exp2.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step11 {
    template <class P>
    static auto kernel() { return step11::wgmma_fast_exp2_prefill_kernel<P>; }
    static constexpr int kNB = step11::kNB, kRows = step11::kRows, kThreads = step11::kThreads;
    static constexpr int kSmemBytes = step11::kSmemBytes;
};

}  // namespace

void launch_wgmma_fast_exp2(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    launch_persistent_step<Step11>(a, p, stream);
}

Geometry geometry_wgmma_fast_exp2(const PrefillShape& s) { return geometry_persistent_step<Step11>(s); }

}  // namespace lesson06
