// Step 6's instantiations (one per policy) and launcher. Built for sm_90a only.
#include "step6_wgmma_producer.cuh"

#include "steps.cuh"
#include "tma_maps.cuh"

namespace lesson06 {

namespace {

template <class F>
void with_wgmma_producer_kernel(Policy p, F&& f) {
    if (p == Policy::softmax)
        f(step6::wgmma_ws_prefill_kernel<SoftmaxPolicy<step6::kNB>>);
    else
        f(step6::wgmma_ws_prefill_kernel<GatePolicy<step6::kNB>>);
}

}  // namespace

void launch_wgmma_producer(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    const step2::Batch b = make_batch(a, step6::kRows);
    const Maps maps = make_maps(a, step6::kRows);
    with_wgmma_producer_kernel(p, [&](auto kernel) {
        launch_tiles128(kernel, a, step6::kThreads, step6::kSmemBytes, stream, b, policy_params(a), maps);
    });
}

Geometry geometry_wgmma_producer(const PrefillShape& s) {
    Geometry g;
    with_wgmma_producer_kernel(Policy::softmax, [&](auto kernel) {
        g = geometry_tiles128(kernel, s, step6::kThreads, step6::kSmemBytes);
    });
    return g;
}

}  // namespace lesson06
