// Lesson 02, step 8 (q.K on tensor cores): every instantiation, compiled once, and its launcher (the
// host side it shares with steps 7 and 9 is tile_steps.cuh).
#include "step8_mma_qk.cuh"
#include "steps.h"
#include "tile_steps.cuh"

namespace lesson02::step8 {

namespace {

struct Kernels {
    static constexpr const char* kStep = "step 8 (grouped_mma_qk)";
    static constexpr int kThreads = step8::kThreads;
    // The query heads one CTA computes: the group rounded up to whole mma columns (8, 16 or
    // 32); 0 for a group above 32.
    static int heads_per_cta(int group) { return group <= 8 ? 8 : group <= 16 ? 16 : group <= 32 ? 32 : 0; }
    // What this step builds, listed once: {fp16, bf16} x D {64, 128, 256} x heads per CTA
    // {8, 16, 32}.
    template <class F>
    static bool with_kernel(pa::DType t, int D, int heads, F&& f) {
        return pa::dispatch_dtype(t, [&](auto tag) {
            using T = typename decltype(tag)::type;
            return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
                return pa::dispatch_int<8, 16, 32>(heads, [&](auto n) {
                    constexpr int kD = decltype(d)::value, kN = decltype(n)::value;
                    f(grouped_mma_qk_decode_kernel<T, kD, kN>, tag, MmaLayout<kD, kN>::kSmemBytes);
                    return true;
                });
            });
        });
    }
};

}  // namespace

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) { return tile_steps::why_not<Kernels>(s, info); }

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) { tile_steps::launch<Kernels>(a, stream); }

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo&) { return tile_steps::geometry<Kernels>(s); }

}  // namespace lesson02::step8
