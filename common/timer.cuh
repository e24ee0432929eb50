// Timing kernels with CUDA events.
//
// Each repetition is bracketed by its own pair of events, after `warmup` untimed runs;
// we report the median and the minimum. `launch(i)` is called with a copy index:
//  - L2-hot:  always copy 0, so the working set stays in L2 when it fits;
//  - L2-cold: copies rotate, and `cold_copies()` picks enough of them that the data
//             touched between two uses of one copy exceeds twice the L2 size.
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace pa {

struct Timing {
    double us_median = 0;
    double us_min = 0;
    int reps = 0;
};

Timing time_kernel(const std::function<void(int copy)>& launch, int copies, int warmup, int iters,
                   cudaStream_t stream = nullptr);

// Copies needed so that one launch's `bytes_per_copy` rotate through more than 2 x L2.
int cold_copies(long long bytes_per_copy, long long l2_bytes);

}  // namespace pa
