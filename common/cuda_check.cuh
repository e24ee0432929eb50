// CUDA error checking: every runtime call goes through CUDA_CHECK, every launch is
// followed by CUDA_CHECK_LAUNCH(). A failure throws pa::CudaError naming the call,
// the file and the line, so a lesson reports it in one line instead of crashing later.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace pa {

struct CudaError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

inline void cuda_check(cudaError_t err, const char* what, const char* file, int line) {
    if (err != cudaSuccess)
        throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " + cudaGetErrorName(err) +
                        " (" + cudaGetErrorString(err) + ")");
}

}  // namespace pa

#define CUDA_CHECK(expr) ::pa::cuda_check((expr), #expr, __FILE__, __LINE__)
// After a <<<...>>> launch: catches bad configurations at once (errors inside the
// kernel surface at the next synchronizing call, which is checked too).
#define CUDA_CHECK_LAUNCH() ::pa::cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
