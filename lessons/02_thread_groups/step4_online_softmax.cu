// Lesson 02, step 4 (online softmax): every instantiation, compiled once, and its launcher (the host
// side it shares with steps 3 and 5 is grouped_steps.cuh).
#include "grouped_steps.cuh"
#include "step4_online_softmax.cuh"

namespace lesson02::step4 {

namespace {

struct Kernels {
    static constexpr const char* kStep = "step 4 (online softmax)";
    static constexpr int kThreads = step4::kThreads;
    static int last_arg(int heads, int max_ctx) { return grouped_steps::chunk_tokens(heads, max_ctx); }
    static size_t smem_bytes(int D, int heads, int max_ctx) {
        return sizeof(float) * static_cast<size_t>(smem_words(D, heads, last_arg(heads, max_ctx)));
    }
    static std::string too_big(const pa::DecodeShape&, size_t need, int limit, const pa::DeviceInfo& info) {
        return pa::strf("needs %zu KiB of shared memory per CTA; this GPU (%s) gives %d KiB", need / 1024,
                        info.name.c_str(), limit / 1024);
    }
    template <class T, int D, int TGS, int HEADS>
    static auto get() {
        return online_softmax_decode_kernel<T, D, TGS, HEADS>;
    }
};

}  // namespace

std::string why_not(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo& info) {
    return grouped_steps::why_not<Kernels>(s, tgs, info);
}

void launch(const pa::PagedDecodeArgs& a, int tgs, cudaStream_t stream) { grouped_steps::launch<Kernels>(a, tgs, stream); }

pa::LaunchGeometry geometry(const pa::DecodeShape& s, int tgs, const pa::DeviceInfo&) {
    return grouped_steps::geometry<Kernels>(s, tgs);
}

}  // namespace lesson02::step4
