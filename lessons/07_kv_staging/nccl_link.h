// NCCL between two GPUs of one process: the engine a multi-node deployment would move the
// staging chunks with. Built only where CMake found NCCL (PA_HAVE_NCCL); elsewhere
// nccl_built() is false and NcclPair's constructor throws.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace lesson07 {

bool nccl_built();
// "NCCL 2.28.3", or why there is none.
const char* nccl_description();

struct NcclChunk {
    const void* src = nullptr;  // on the sending device
    void* dst = nullptr;        // on the receiving device
    size_t bytes = 0;
};

// Two communicators (ranks 0 and 1 on devices dev0 and dev1) from ncclCommInitAll.
class NcclPair {
  public:
    NcclPair(int dev0, int dev1);
    ~NcclPair();
    NcclPair(const NcclPair&) = delete;
    NcclPair& operator=(const NcclPair&) = delete;

    // Every chunk from rank 0 to rank 1: ncclSend on stream0 (of dev0), ncclRecv on
    // stream1 (of dev1), all in one group so that the pairs can proceed together.
    void send_recv(const std::vector<NcclChunk>& chunks, cudaStream_t stream0, cudaStream_t stream1);

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace lesson07
