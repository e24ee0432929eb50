// Lesson 02, step 3 (grouped logits): every instantiation, compiled once, and its launcher (the host
// side it shares with steps 4 and 5 is grouped_steps.cuh).
#include "grouped_steps.cuh"
#include "step3_grouped_logits.cuh"

namespace lesson02::step3 {

namespace {

struct Kernels {
    static constexpr const char* kStep = "step 3 (grouped logits)";
    static constexpr int kThreads = step3::kThreads;
    static int last_arg(int, int max_ctx) { return max_ctx; }  // the logits' row length
    static size_t smem_bytes(int D, int heads, int max_ctx) { return sizeof(float) * static_cast<size_t>(smem_words(D, heads, max_ctx)); }
    static std::string too_big(const pa::DecodeShape& s, size_t need, int limit, const pa::DeviceInfo& info) {
        return pa::strf("ctx %d: the logits of %d heads need %zu KiB of shared memory, more than the %d KiB a CTA can have "
                        "on %s; step 4 (online_softmax) walks the context in chunks",
                        s.max_ctx(), grouped_steps::heads_per_cta(s.group()), need / 1024, limit / 1024, info.name.c_str());
    }
    template <class T, int D, int TGS, int HEADS>
    static auto get() {
        return grouped_logits_decode_kernel<T, D, TGS, HEADS>;
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

}  // namespace lesson02::step3
