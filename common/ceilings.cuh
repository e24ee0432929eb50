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
// TFLOP/s, median of repeated GEMMs.
double measured_bf16_gemm_tflops();

}  // namespace pa
