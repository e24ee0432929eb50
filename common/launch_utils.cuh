// Small launch-side helpers.
#pragma once

#include <cuda_runtime.h>

namespace pa {

// Above 48 KiB a kernel must opt in to more dynamic shared memory. This raises the
// kernel's limit to the device maximum, once per kernel (later calls are a lookup), so
// launchers can call it every time without adding host work to timed launches.
void opt_in_max_dynamic_smem(const void* kernel);

// The most dynamic shared memory one CTA of `kernel` can have on the current device:
// the per-block opt-in limit less the kernel's own static shared memory.
int max_dynamic_smem(const void* kernel);

}  // namespace pa
