// Random decode shapes from a seed, for the GPU tests of every decode lesson.
//
// Host-only (no CUDA): the CPU tests check that a case list covers what it must, and
// gpu_cases.h runs a lesson's variants over the same list. Each case is drawn from
// its own stream (seed, case index), so case i is the same whatever `count` is.
//
// Coverage is by construction, not by luck: the page size, head size, group size and
// dtype cycle through their lists with the case index (page size and group size with
// coprime periods, so every pair appears), case 0 is ctx 1, case 1 is a full batch of
// the awkward lengths (1, bs - 1, bs, bs + 1, max_ctx, ...), and the rest draw each
// sequence's length from a mix of small, page-multiple, page +- 1 and uniform lengths.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "dtype.h"
#include "random.h"
#include "shapes.h"

namespace pa::testing {

struct RandomCaseLimits {
    int max_B = 8;
    int max_ctx = 2000;
    int max_Hkv = 4;                       // at most 2 when the group is 32 (H <= 64)
    std::vector<int> block_sizes{8, 16, 32};
    std::vector<int> head_sizes{64, 128, 256};
    std::vector<int> groups{1, 4, 8, 32, 2};  // 5 entries: coprime with 3 page sizes
    std::vector<DType> dtypes{DType::fp16, DType::bf16};
};

struct RandomCase {
    int index = 0;
    DecodeShape shape;
    uint64_t seed = 0;  // for make_decode_problem

    // One line for test logs: name, context lengths and the problem seed.
    std::string describe() const {
        std::string s = shape.name + " ctx {";
        for (size_t i = 0; i < shape.ctx.size(); ++i) s += (i ? "," : "") + std::to_string(shape.ctx[i]);
        return s + "} problem seed " + std::to_string(seed);
    }
};

namespace detail {

inline int uniform_int(Rng& rng, int lo, int hi) {  // [lo, hi]
    return lo + static_cast<int>(rng.below(static_cast<uint64_t>(hi - lo + 1)));
}

// One sequence length: a mix of the lengths that break kernels and plain uniform ones.
inline int draw_ctx(Rng& rng, int bs, int max_ctx) {
    const int pages_max = std::max(1, max_ctx / bs);
    switch (rng.below(8)) {
        case 0: return 1;
        case 1: return uniform_int(rng, 1, std::min(bs, max_ctx));                           // inside one page
        case 2: return bs * uniform_int(rng, 1, pages_max);                                   // whole pages
        case 3: return std::clamp(bs * uniform_int(rng, 1, pages_max) + 1, 1, max_ctx);      // one past a page
        case 4: return std::clamp(bs * uniform_int(rng, 1, pages_max) - 1, 1, max_ctx);      // one short of a page
        default: return uniform_int(rng, 1, max_ctx);
    }
}

}  // namespace detail

inline std::vector<RandomCase> random_decode_cases(uint64_t seed, int count, const RandomCaseLimits& lim = {}) {
    std::vector<RandomCase> out;
    const size_t nbs = lim.block_sizes.size(), nd = lim.head_sizes.size(), ng = lim.groups.size(),
                 nt = lim.dtypes.size();
    for (int i = 0; i < count; ++i) {
        Rng rng(seed, 0x7e57000ULL + static_cast<uint64_t>(i));
        const size_t u = static_cast<size_t>(i);
        DecodeShape s;
        s.block_size = lim.block_sizes[u % nbs];
        s.D = lim.head_sizes[(u / nbs) % nd];
        s.dtype = lim.dtypes[(u / (nbs * nd)) % nt];
        const int group = lim.groups[u % ng];
        s.Hkv = detail::uniform_int(rng, 1, group >= 32 ? std::min(2, lim.max_Hkv) : lim.max_Hkv);
        s.H = group * s.Hkv;
        const int bs = s.block_size, mc = lim.max_ctx;
        if (i == 0) {
            s.ctx = {1};  // one token: the softmax of a single logit
        } else if (i == 1) {
            // a full batch of the boundary lengths, mixed in one launch
            s.ctx = {1, std::max(1, bs - 1), bs, std::min(bs + 1, mc), mc};
            while (static_cast<int>(s.ctx.size()) < std::max(lim.max_B, 2)) s.ctx.push_back(detail::draw_ctx(rng, bs, mc));
            s.ctx.resize(std::max(lim.max_B, 2));
        } else {
            const int B = detail::uniform_int(rng, 1, lim.max_B);
            for (int b = 0; b < B; ++b) s.ctx.push_back(detail::draw_ctx(rng, bs, mc));
        }
        s.B = static_cast<int>(s.ctx.size());
        s.name = "rand" + std::to_string(i) + "-B" + std::to_string(s.B) + "-H" + std::to_string(s.H) + "-Hkv" +
                 std::to_string(s.Hkv) + "-D" + std::to_string(s.D) + "-bs" + std::to_string(s.block_size) + "-" +
                 dtype_name(s.dtype);
        out.push_back({i, s, splitmix64(seed * 1000003ULL + static_cast<uint64_t>(i))});
    }
    return out;
}

}  // namespace pa::testing
