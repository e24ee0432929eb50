// Step 5's instantiations (one per policy) and launcher. Built for sm_90a only.
#include "step5_wgmma_tma.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

template <class F>
void with_wgmma_tma_kernel(Policy p, F&& f) {
    if (p == Policy::softmax)
        f(step5::wgmma_prefill_kernel<SoftmaxPolicy<step5::kNB>>);
    else
        f(step5::wgmma_prefill_kernel<GatePolicy<step5::kNB>>);
}

}  // namespace

void launch_wgmma_tma(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    const step2::Batch b = make_batch(a, step5::kRows);
    const Maps maps = make_maps(a, step5::kRows);
    with_wgmma_tma_kernel(p, [&](auto kernel) {
        launch_tiles128(kernel, a, step5::kThreads, step5::kSmemBytes, stream, b, policy_params(a), maps);
    });
}

Geometry geometry_wgmma_tma(const PrefillShape& s) {
    Geometry g;
    with_wgmma_tma_kernel(Policy::softmax, [&](auto kernel) {
        g = geometry_tiles128(kernel, s, step5::kThreads, step5::kSmemBytes);
    });
    return g;
}

}  // namespace lesson06
