#include "timer.cuh"

#include <algorithm>
#include <vector>

#include "cuda_check.cuh"
#include "device_math.cuh"

namespace pa {

namespace {

// Holds the GPU for `ns` nanoseconds, so that the host can queue the timed launches
// behind it: otherwise, for kernels shorter than a launch's host cost, the start event
// would fire early and the measured time would include the host's launch overhead.
__global__ void spin_kernel(unsigned long long ns) {
    const unsigned long long start = globaltimer_ns();
    while (globaltimer_ns() - start < ns) {
    }
}

}  // namespace

Timing time_kernel(const std::function<void(int)>& launch, int copies, int warmup, int iters, cudaStream_t stream) {
    copies = std::max(copies, 1);
    iters = std::max(iters, 1);
    int next = 0;
    for (int i = 0; i < warmup; ++i) launch(next++ % copies);
    std::vector<cudaEvent_t> start(iters), stop(iters);
    for (int i = 0; i < iters; ++i) {
        CUDA_CHECK(cudaEventCreate(&start[i]));
        CUDA_CHECK(cudaEventCreate(&stop[i]));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    // about 10 us of queueing time per timed launch, at most 20 ms
    spin_kernel<<<1, 1, 0, stream>>>(std::min(20000000ULL, 10000ULL * static_cast<unsigned long long>(iters)));
    CUDA_CHECK_LAUNCH();
    for (int i = 0; i < iters; ++i) {
        CUDA_CHECK(cudaEventRecord(start[i], stream));
        launch(next++ % copies);
        CUDA_CHECK(cudaEventRecord(stop[i], stream));
    }
    CUDA_CHECK(cudaEventSynchronize(stop[iters - 1]));
    std::vector<double> us(iters);
    for (int i = 0; i < iters; ++i) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start[i], stop[i]));
        us[i] = ms * 1000.0;
        CUDA_CHECK(cudaEventDestroy(start[i]));
        CUDA_CHECK(cudaEventDestroy(stop[i]));
    }
    std::sort(us.begin(), us.end());
    Timing t;
    t.reps = iters;
    t.us_min = us.front();
    t.us_median = iters % 2 ? us[iters / 2] : 0.5 * (us[iters / 2 - 1] + us[iters / 2]);
    return t;
}

int cold_copies(long long bytes_per_copy, long long l2_bytes) {
    if (bytes_per_copy <= 0) return 2;
    const long long need = (2 * l2_bytes + bytes_per_copy - 1) / bytes_per_copy;  // copies between two uses
    return static_cast<int>(std::max(2LL, need + 1));
}

}  // namespace pa
