// Lesson 02, step 1 (thread groups): every instantiation, compiled once, and its launcher (the host
// side it shares with step 2 is per_head_steps.cuh).
#include "per_head_steps.cuh"
#include "step1_thread_groups.cuh"

namespace lesson02::step1 {

namespace {

struct Kernels {
    static constexpr const char* kStep = "step 1 (thread groups)";
    static constexpr int kThreads = step1::kThreads;
    static size_t smem_bytes(int D, int max_ctx) { return step1::smem_bytes(D, max_ctx); }
    template <class T, int D, int TGS>
    static auto get() {
        return thread_groups_decode_kernel<T, D, TGS>;
    }
};

}  // namespace

std::string why_not(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info) {
    return per_head_steps::why_not<Kernels>(s, tgs, info);
}

void launch(const pa::PagedDecodeArgs& a, int tgs, cudaStream_t stream) { per_head_steps::launch<Kernels>(a, tgs, stream); }

pa::LaunchGeometry geometry(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo&) {
    return per_head_steps::geometry<Kernels>(s, tgs);
}

}  // namespace lesson02::step1
