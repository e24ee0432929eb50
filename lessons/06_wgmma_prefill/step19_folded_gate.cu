// Step 19's instantiations (one per policy) and launcher (tma_maps.cuh's persistent launch, as
// steps 10 to 18's). Built for sm_90a only.
#include "step19_folded_gate.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step19 {
    template <class P>
    static auto kernel() { return step19::wgmma_folded_gate_prefill_kernel<P>; }
    static constexpr int kNB = step19::kNB, kRows = step19::kRows, kThreads = step19::kThreads;
    static constexpr int kSmemBytes = step19::kSmemBytes;
    static constexpr bool kStoresThroughMap = true;  // maps.o
};

}  // namespace

void launch_wgmma_folded_gate(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    launch_persistent_step<Step19>(a, p, stream);
}

Geometry geometry_wgmma_folded_gate(const PrefillShape& s) { return geometry_persistent_step<Step19>(s); }

}  // namespace lesson06
