// The ceiling of a kernel that only moves bytes (lesson 07's gather and scatter), measured
// on this machine: a plain cudaMemcpyAsync device-to-device of a buffer much larger than
// L2, and the same between two GPUs with cudaMemcpyPeerAsync. Both count bytes read plus
// bytes written (a copy of N bytes moves 2N), the way a copy kernel's rows count them.
// Each is measured once per process (per device, per pair) and then reused.
#pragma once

#include "device_info.cuh"

namespace pa {

// GB/s (1e9 bytes per second), median of repeated copies on `info.device`.
double measured_copy_bandwidth_gbps(const DeviceInfo& info);
// GB/s from src_device to dst_device (peer access enabled by the caller where the
// hardware allows; without it the runtime stages the copy through the host).
double measured_peer_bandwidth_gbps(int src_device, int dst_device);

}  // namespace pa
