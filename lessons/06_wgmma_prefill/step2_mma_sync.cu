// Step 2's instantiations (one per policy) and launcher.
#include "step2_mma_sync.cuh"

#include "cuda_check.cuh"
#include "launch_utils.cuh"
#include "steps.cuh"

namespace lesson06 {

namespace {

template <class F>
void with_mma_sync_kernel(Policy p, F&& f) {
    if (p == Policy::softmax)
        f(step2::mma_sync_prefill_kernel<SoftmaxPolicy<step2::kNB>>);
    else
        f(step2::mma_sync_prefill_kernel<GatePolicy<step2::kNB>>);
}

}  // namespace

void launch_mma_sync(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    const step2::Batch b = make_batch(a, step2::kRows);
    const PolicyParams pp = policy_params(a);
    with_mma_sync_kernel(p, [&](auto kernel) {
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        kernel<<<dim3(a.H, a.num_tiles64), step2::kThreads, step2::kSmemBytes, stream>>>(b, pp);
        CUDA_CHECK_LAUNCH();
    });
}

Geometry geometry_mma_sync(const PrefillShape& s) {
    Geometry g;
    g.ctas = static_cast<long long>(s.H) * query_tiles(s, step2::kRows, step2::kTile).size();
    g.threads = step2::kThreads;
    g.smem_bytes = step2::kSmemBytes;
    with_mma_sync_kernel(Policy::softmax, [&](auto kernel) {
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        g.ctas_per_sm = pa::resident_ctas_per_sm(reinterpret_cast<const void*>(kernel), g.threads, g.smem_bytes);
    });
    return g;
}

}  // namespace lesson06
