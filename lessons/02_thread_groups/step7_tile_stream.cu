// Lesson 02, step 7 (K and V streamed tile by tile): every instantiation, compiled once, and its launcher (the
// host side it shares with steps 8 and 9 is tile_steps.cuh).
#include "step7_tile_stream.cuh"
#include "steps.h"
#include "tile_steps.cuh"

namespace lesson02::step7 {

namespace {

struct Kernels {
    static constexpr const char* kStep = "step 7 (tile_stream)";
    static constexpr int kThreads = step7::kThreads;
    // The query heads one CTA serves: the group rounded up to 1, 2, 4, 8 or 32 (a group of 6
    // runs as 8 with two heads idle), as in step 6; 0 for a group above 32.
    static int heads_per_cta(int group) {
        for (int g : {1, 2, 4, 8, 32})
            if (group <= g) return g;
        return 0;
    }
    // What this step builds, listed once: {fp16, bf16} x D {64, 128, 256} x heads per CTA
    // {1, 2, 4, 8, 32}.
    template <class F>
    static bool with_kernel(pa::DType t, int D, int heads, F&& f) {
        return pa::dispatch_dtype(t, [&](auto tag) {
            using T = typename decltype(tag)::type;
            return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
                return pa::dispatch_int<1, 2, 4, 8, 32>(heads, [&](auto n) {
                    constexpr int kD = decltype(d)::value, kN = decltype(n)::value;
                    f(tile_stream_decode_kernel<T, kD, kN>, tag, StreamLayout<kD, kN>::kSmemBytes);
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

}  // namespace lesson02::step7
