// Step 16's instantiations (one per policy) and launcher (tma_maps.cuh's persistent launch, as
// steps 10 to 15's). Built for sm_90a only.
#include "step16_q_registers.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

struct Step16 {
    template <class P>
    static auto kernel() { return step16::wgmma_q_registers_prefill_kernel<P>; }
    static constexpr int kNB = step16::kNB, kRows = step16::kRows, kThreads = step16::kThreads;
    static constexpr int kSmemBytes = step16::kSmemBytes;
};

}  // namespace

void launch_wgmma_q_registers(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    launch_persistent_step<Step16>(a, p, stream);
}

Geometry geometry_wgmma_q_registers(const PrefillShape& s) { return geometry_persistent_step<Step16>(s); }

}  // namespace lesson06
