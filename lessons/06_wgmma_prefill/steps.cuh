// The launchers of each step, as lesson06.cu dispatches to them (internal to the lesson: main.cu
// and the tests go through lesson06.h). Steps 3 and 4 live in the sm_90a objects and exist
// only in a build with 90a among its architectures (PA_BUILT_SM90A).
#pragma once

#include <cuda_runtime.h>

#include "lesson06.h"
#include "policies.cuh"
#include "step2_mma_sync.cuh"  // Batch

namespace lesson06 {

// The kernels' view of a batch, with the query tiles of 64 or 128 rows.
inline step2::Batch make_batch(const PrefillArgs& a, int tile_rows) {
    step2::Batch b;
    b.out = static_cast<__nv_bfloat16*>(a.out);
    b.q = static_cast<const __nv_bfloat16*>(a.q);
    b.k_cache = static_cast<const __nv_bfloat16*>(a.k_cache);
    b.v_cache = static_cast<const __nv_bfloat16*>(a.v_cache);
    b.block_table = a.block_table;
    b.prefix_lens = a.prefix_lens;
    b.new_lens = a.new_lens;
    b.q_start = a.q_start;
    b.tiles = tile_rows == 64 ? a.tiles64 : a.tiles128;
    b.H = a.H;
    b.Hkv = a.Hkv;
    b.max_blocks_per_seq = a.max_blocks_per_seq;
    return b;
}

inline PolicyParams policy_params(const PrefillArgs& a) {
    PolicyParams p;
    p.softmax.scale_log2 = a.scale * 1.4426950408889634f;  // log2(e)
    p.gate.scale = a.scale;
    p.gate.gamma = a.gamma;
    p.gate.sigma = a.sigma;
    return p;
}

void launch_mma_sync(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_mma_sync(const PrefillShape& s);
#if PA_BUILT_SM90A
void launch_wgmma(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma(const PrefillShape& s);
void launch_wgmma_ws(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_ws(const PrefillShape& s);
#endif

}  // namespace lesson06
