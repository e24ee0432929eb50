// The two ceilings every row is measured against, measured on this GPU:
//  - streaming read bandwidth: a plain kernel that reads a buffer much larger than L2
//    with 16-byte loads (what a decode kernel does at best);
//  - dense bf16 matrix rate: an 8192^3 GEMM through cuBLAS on random data (prefill).
// Each is measured once per process and then reused.
#pragma once

#include "device_info.cuh"

namespace pa {

// GB/s (1e9 bytes per second), median of repeated reads.
double measured_read_bandwidth_gbps(const DeviceInfo& info);
// Microseconds a plain streaming read of `bytes` bytes (rounded down to 16) takes, L2-cold
// (copies rotate, as the decode rows are timed), median of 100 launches: the best any kernel
// that must read that many bytes can do at this size, where a launch's start and end are a
// visible share. Measured once per (device, size) and process.
double streaming_read_us(const DeviceInfo& info, long long bytes);
// TFLOP/s, median of repeated GEMMs.
double measured_bf16_gemm_tflops();

}  // namespace pa
