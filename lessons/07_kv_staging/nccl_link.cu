#include "nccl_link.h"

#include <cstdlib>
#include <string>

#include "cuda_check.cuh"
#include "table.h"

#ifdef PA_HAVE_NCCL
#include <nccl.h>
#endif

namespace lesson07 {

#ifdef PA_HAVE_NCCL

namespace {

void nccl_check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) throw pa::CudaError(std::string("NCCL: ") + what + ": " + ncclGetErrorString(r));
}

}  // namespace

bool nccl_built() { return true; }

const char* nccl_description() {
    static std::string s;
    if (s.empty()) {
        int v = 0;
        if (ncclGetVersion(&v) == ncclSuccess)
            s = pa::strf("NCCL %d.%d.%d", v / 10000, (v / 100) % 100, v % 100);  // 22803 -> 2.28.3
        else
            s = "NCCL (version unknown)";
    }
    return s.c_str();
}

struct NcclPair::Impl {
    ncclComm_t comms[2] = {nullptr, nullptr};
};

NcclPair::NcclPair(int dev0, int dev1) : impl_(std::make_unique<Impl>()) {
    // NVLink SHARP multicast (NVLS) stays off: it serves collectives, not point-to-point
    // sends, and on the shared multi-GPU hosts this lesson is measured on a program that
    // sets up multicast objects can take every GPU of the host out of service. setenv's
    // last argument 0 keeps a value the user already chose.
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    const int devs[2] = {dev0, dev1};
    nccl_check(ncclCommInitAll(impl_->comms, 2, devs), "ncclCommInitAll");
}

NcclPair::~NcclPair() {
    for (ncclComm_t c : impl_->comms)
        if (c) ncclCommDestroy(c);  // no check: never throw from a destructor
}

void NcclPair::send_recv(const std::vector<NcclChunk>& chunks, cudaStream_t stream0, cudaStream_t stream1) {
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (const NcclChunk& c : chunks) {
        // ranks are matched by order: the k-th send of rank 0 meets the k-th recv of rank 1
        nccl_check(ncclSend(c.src, c.bytes, ncclUint8, 1, impl_->comms[0], stream0), "ncclSend");
        nccl_check(ncclRecv(c.dst, c.bytes, ncclUint8, 0, impl_->comms[1], stream1), "ncclRecv");
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
}

#else  // built without NCCL

bool nccl_built() { return false; }
const char* nccl_description() { return "NCCL not found when this was built (nccl.h / libnccl)"; }

struct NcclPair::Impl {};

NcclPair::NcclPair(int, int) { throw pa::CudaError(std::string("staged_nccl: ") + nccl_description()); }
NcclPair::~NcclPair() = default;
void NcclPair::send_recv(const std::vector<NcclChunk>&, cudaStream_t, cudaStream_t) {
    throw pa::CudaError(std::string("staged_nccl: ") + nccl_description());
}

#endif

}  // namespace lesson07
