// Step 3's instantiations (one per policy) and launcher. Built for sm_90a only.
#include "step3_wgmma.cuh"

#include "cuda_check.cuh"
#include "launch_utils.cuh"
#include "steps.cuh"

namespace lesson06 {

namespace {

template <class F>
void with_wgmma_kernel(Policy p, F&& f) {
    if (p == Policy::softmax)
        f(step3::wgmma_prefill_kernel<SoftmaxPolicy<step3::kNB>>);
    else
        f(step3::wgmma_prefill_kernel<GatePolicy<step3::kNB>>);
}

}  // namespace

void launch_wgmma(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    const step2::Batch b = make_batch(a, step3::kRows);
    const PolicyParams pp = policy_params(a);
    with_wgmma_kernel(p, [&](auto kernel) {
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        kernel<<<dim3(a.H, a.num_tiles128), step3::kThreads, step3::kSmemBytes, stream>>>(b, pp);
        CUDA_CHECK_LAUNCH();
    });
}

Geometry geometry_wgmma(const PrefillShape& s) {
    Geometry g;
    g.ctas = static_cast<long long>(s.H) * query_tiles(s, step3::kRows, step3::kTile).size();
    g.threads = step3::kThreads;
    g.smem_bytes = step3::kSmemBytes;
    with_wgmma_kernel(Policy::softmax, [&](auto kernel) {
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        g.ctas_per_sm = pa::resident_ctas_per_sm(reinterpret_cast<const void*>(kernel), g.threads, g.smem_bytes);
    });
    return g;
}

}  // namespace lesson06
