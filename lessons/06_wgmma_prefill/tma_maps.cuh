// The tensor maps of the TMA steps (5 to 21): q, the two page pools and the output (the stores
// of steps 18 to 21), as the copy engine sees them. Made on the host for each launch
// (tma_maps.cu, sm_90a objects only), passed to the kernel as a __grid_constant__ parameter.
#pragma once

#include <cuda.h>  // CUtensorMap (a 128-byte opaque struct); no driver library is linked

#include <algorithm>
#include <type_traits>

#include "device_info.cuh"

#include "lesson06.h"
#include "steps.cuh"  // make_batch, policy_params, launch_tiles128, geometry_tiles128

namespace lesson06 {

struct Maps {
    CUtensorMap q;  // [total_new][H][128] bf16, box 64 x 1 x 128 rows, 128-byte swizzle
    CUtensorMap k;  // [num_blocks][Hkv][16][128] bf16, box 64 x 16 x 1 x 1 (one page half)
    CUtensorMap v;
    CUtensorMap o;  // the output [total_new][H][128] bf16, box 64 x 1 x 64 rows, 128-byte swizzle (steps 18 to 21 store through it)
};

// The maps of a batch, for query tiles of `q_rows` rows; the output's only if `output`.
Maps make_maps(const PrefillArgs& a, int q_rows, bool output);

// Step 21 on: the V pool as whole pages, [num_blocks][Hkv][16][2][64] read as five dimensions
// (64 dims, 16 keys, KV head, block, the two 64-dim halves), a box one page of one KV head (4 KiB,
// landing as its two 64-dim halves, 2 KiB each, 128-byte swizzle).
struct PageMaps : Maps {
    CUtensorMap v_pages;
};
CUtensorMap make_v_pages_map(const PrefillArgs& a);

// Whether a step stores its output through maps.o (its Step says kStoresThroughMap = true: steps 18
// on); the other steps' launches do not encode that map.
template <class Step, class = void>
struct StoresThroughMap : std::false_type {};
template <class Step>
struct StoresThroughMap<Step, std::void_t<decltype(Step::kStoresThroughMap)>>
    : std::bool_constant<Step::kStoresThroughMap> {};

// The host side of a TMA step (5 to 12), which differ only in their kernels: Step names them,
//   struct Step {
//       template <class P> static auto kernel();  // stepN::wgmma_ws_prefill_kernel<P>
//       static constexpr int kNB, kRows, kThreads, kSmemBytes;  // stepN's
//   };
// and each step's .cu instantiates these once, for its two policies.
template <class Step, class F>
void with_tma_step_kernel(Policy p, F&& f) {
    if (p == Policy::softmax)
        f(Step::template kernel<SoftmaxPolicy<Step::kNB>>());
    else
        f(Step::template kernel<GatePolicy<Step::kNB>>());
}

// Whether a step copies V a page at a time (its Step says kVPages = true: step 21 on): its kernel
// takes PageMaps.
template <class Step, class = void>
struct CopiesVPages : std::false_type {};
template <class Step>
struct CopiesVPages<Step, std::void_t<decltype(Step::kVPages)>> : std::bool_constant<Step::kVPages> {};

template <class Step>
auto step_maps(const PrefillArgs& a) {
    const Maps maps = make_maps(a, Step::kRows, StoresThroughMap<Step>::value);
    if constexpr (CopiesVPages<Step>::value) {
        PageMaps pm;
        static_cast<Maps&>(pm) = maps;
        pm.v_pages = make_v_pages_map(a);
        return pm;
    } else {
        return maps;
    }
}

template <class Step>
void launch_tma_step(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    const step2::Batch b = make_batch(a, Step::kRows);
    const Maps maps = make_maps(a, Step::kRows, false);
    with_tma_step_kernel<Step>(p, [&](auto kernel) {
        launch_tiles128(kernel, a, Step::kThreads, Step::kSmemBytes, stream, b, policy_params(a), maps);
    });
}

template <class Step>
Geometry geometry_tma_step(const PrefillShape& s) {
    Geometry g;
    with_tma_step_kernel<Step>(Policy::softmax,
                               [&](auto kernel) { g = geometry_tiles128(kernel, s, Step::kThreads, Step::kSmemBytes); });
    return g;
}

// The persistent steps (10 to 12): one CTA per SM, or per work item when there are fewer (one CTA
// fits an SM: kSmemBytes), each walking the (query tile, head) work list; the kernel takes the
// number of items after the step's parameters.
inline int persistent_ctas(long long items) {
    return static_cast<int>(std::min<long long>(items, pa::current_device_info().sms));
}

template <class Step>
void launch_persistent_step(const PrefillArgs& a, Policy p, cudaStream_t stream) {
    const step2::Batch b = make_batch(a, Step::kRows);
    const auto maps = step_maps<Step>(a);
    const int items = a.H * a.num_tiles128;
    with_tma_step_kernel<Step>(p, [&](auto kernel) {
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        kernel<<<persistent_ctas(items), Step::kThreads, Step::kSmemBytes, stream>>>(b, policy_params(a), maps, items);
        CUDA_CHECK_LAUNCH();
    });
}

template <class Step>
Geometry geometry_persistent_step(const PrefillShape& s) {
    Geometry g = geometry_tma_step<Step>(s);  // g.ctas: the work items
    g.ctas = persistent_ctas(g.ctas);
    return g;
}

}  // namespace lesson06
