// What GPU this is, and the one-line exit when there is none.
#pragma once

#include <string>

namespace pa {

struct DeviceInfo {
    int device = 0;
    std::string name;        // e.g. "NVIDIA H100 80GB HBM3"
    std::string short_name;  // "h100", "h200", or the name in lower case with '-' for spaces
    int cc_major = 0, cc_minor = 0;
    int sms = 0;
    long long l2_bytes = 0;
    long long global_mem_bytes = 0;
    int smem_per_block_optin = 0;  // the most dynamic shared memory one CTA can ask for
    int smem_per_sm = 0;
    int max_threads_per_sm = 0;
    int runtime_version = 0, driver_version = 0;  // e.g. 13000

    int cc() const { return cc_major * 10 + cc_minor; }  // 90 for sm_90
    std::string cuda_version_string() const;  // "runtime 13.0, driver 13.0"
    std::string summary() const;              // one line: name, SMs, L2, smem, CUDA
};

// True when at least one CUDA device can be used. Any failure of cudaGetDeviceCount
// (no driver, "driver version is insufficient", no device) counts as no GPU.
bool gpu_available(std::string* why = nullptr);

// The current device's info, queried once per device (throws CudaError on failure):
// for launchers whose choice depends on the GPU.
const DeviceInfo& current_device_info();

// Returns the current device's info, or prints one line and exits with kExitNoGpu.
DeviceInfo require_gpu(const std::string& program);

// Exits with kExitNoGpu and one line when the GPU's compute capability is below
// major.minor (as a lesson needs, e.g. 9.0 for wgmma).
void require_compute_capability(const DeviceInfo& info, int major, int minor, const std::string& program,
                                const std::string& why);

}  // namespace pa
