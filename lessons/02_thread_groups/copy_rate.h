// Lesson 02's `--copy-rate`: how fast one CTA's copies bring bytes in, by the kind of copy
// (copy_rate.cu). Steps 10 to 12 are readers first: with their consumers idle they take as
// long as the whole kernel on the big shapes (NOTES.md, "How deep a ring").
#pragma once

#include <string>
#include <vector>

#include "device_info.cuh"

namespace lesson02 {

// One measured reader: `copy_bytes` per copy from `issuers` threads, `inflight_bytes` per CTA
// at most, `ctas` CTAs each reading its own `bytes_per_cta` (contiguous, L2-cold), median and
// minimum of the launches' times.
struct CopyRate {
    std::string reader;  // "bulk_256", "bulk_4096", "bulk_4096_one", "bulk_16384", "loads_16"
    int copy_bytes = 0, issuers = 0;  // bytes a copy; threads issuing them
    int inflight_bytes = 0, ctas = 0, ctas_per_sm = 0;
    long long bytes_per_cta = 0;
    double us_median = 0, us_min = 0;
};

// Every reader at one CTA, one CTA per SM and two CTAs per SM. The bulk copies need sm_90
// code: elsewhere they are left out and `skipped` says why in one line.
std::vector<CopyRate> measure_copy_rates(const pa::DeviceInfo& info, std::string* skipped);

}  // namespace lesson02
