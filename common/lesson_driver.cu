#include "lesson_driver.cuh"

#include <algorithm>

#include "cuda_check.cuh"

namespace pa {

Timing time_part(const TimedPart& part, int copies, const MeasureSetup& setup) {
    int iters = part.max_iters > 0 ? std::min(part.max_iters, setup.iters) : setup.iters;
    int warmup = part.warmup >= 0 ? part.warmup : setup.warmup;
    if (setup.budget_us > 0) {
        // one run with events sizes the count: slow parts (lesson 06's as_decode on 8k prompts)
        // get fewer runs
        cudaEvent_t e0, e1;
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e1));
        CUDA_CHECK(cudaEventRecord(e0, part.stream));
        part.launch(0);
        CUDA_CHECK(cudaEventRecord(e1, part.stream));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        CUDA_CHECK(cudaEventDestroy(e0));
        CUDA_CHECK(cudaEventDestroy(e1));
        iters = std::clamp(static_cast<int>(setup.budget_us / std::max(1.0, ms * 1e3)), setup.min_iters, iters);
        warmup = std::min(warmup, iters);
    }
    return time_kernel(part.launch, copies, warmup, iters, part.stream);
}

void fill_timing(ResultRow& r, const Timing& t, bool cold, const TimedPart& part, const MeasureSetup& setup) {
    r.l2 = cold ? "cold" : "hot";
    r.us_median = t.us_median;
    r.us_min = t.us_min;
    const double seconds = t.us_median * 1e-6;
    if (part.bytes > 0) {
        r.bytes = part.bytes;
        r.gbps = part.bytes / seconds / 1e9;
        if (setup.read_bw_gbps > 0) {
            r.read_bw_gbps = setup.read_bw_gbps;
            r.pct_read_bw = 100.0 * *r.gbps / setup.read_bw_gbps;
        }
    }
    if (part.flops > 0) {
        r.flops = part.flops;
        r.tflops = part.flops / seconds / 1e12;
        if (setup.gemm_tflops > 0) {
            r.mma_peak_tflops = setup.gemm_tflops;
            r.pct_mma_peak = 100.0 * *r.tflops / setup.gemm_tflops;
        }
    }
}

}  // namespace pa
