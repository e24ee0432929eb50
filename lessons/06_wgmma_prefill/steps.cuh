// The launchers of each step, as lesson06.cu dispatches to them (internal to the lesson: main.cu
// and the tests go through lesson06.h). Steps 3 to 16 live in the sm_90a objects and exist
// only in a build with 90a among its architectures (PA_BUILT_SM90A).
#pragma once

#include <cuda_runtime.h>

#include "cuda_check.cuh"
#include "launch_utils.cuh"
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

// The launch of steps 4 to 9: grid (H, 128-row query tiles), after opting in to the shared memory.
template <class Kernel, class... Params>
void launch_tiles128(Kernel kernel, const PrefillArgs& a, int threads, int smem_bytes, cudaStream_t stream,
                     const Params&... params) {
    pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
    kernel<<<dim3(a.H, a.num_tiles128), threads, smem_bytes, stream>>>(params...);
    CUDA_CHECK_LAUNCH();
}
template <class Kernel>
Geometry geometry_tiles128(Kernel kernel, const PrefillShape& s, int threads, int smem_bytes) {
    Geometry g;
    g.ctas = static_cast<long long>(s.H) * query_tiles(s, 128, 128).size();
    g.threads = threads;
    g.smem_bytes = smem_bytes;
    pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
    g.ctas_per_sm = pa::resident_ctas_per_sm(reinterpret_cast<const void*>(kernel), threads, smem_bytes);
    return g;
}

void launch_mma_sync(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_mma_sync(const PrefillShape& s);
#if PA_BUILT_SM90A
void launch_wgmma(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma(const PrefillShape& s);
void launch_wgmma_swizzle(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_swizzle(const PrefillShape& s);
void launch_wgmma_tma(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_tma(const PrefillShape& s);
void launch_wgmma_producer(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_producer(const PrefillShape& s);
void launch_wgmma_setmaxnreg(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_setmaxnreg(const PrefillShape& s);
void launch_wgmma_overlap(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_overlap(const PrefillShape& s);
void launch_wgmma_ws(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_ws(const PrefillShape& s);
void launch_wgmma_persistent(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_persistent(const PrefillShape& s);
void launch_wgmma_fast_exp2(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_fast_exp2(const PrefillShape& s);
void launch_wgmma_early_start(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_early_start(const PrefillShape& s);
void launch_wgmma_lazy_rescale(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_lazy_rescale(const PrefillShape& s);
void launch_wgmma_diagonal_mask(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_diagonal_mask(const PrefillShape& s);
void launch_wgmma_paired_stores(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_paired_stores(const PrefillShape& s);
void launch_wgmma_q_registers(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_q_registers(const PrefillShape& s);
void launch_wgmma_work_ahead(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_work_ahead(const PrefillShape& s);
void launch_wgmma_tma_store(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_tma_store(const PrefillShape& s);
void launch_wgmma_folded_gate(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_folded_gate(const PrefillShape& s);
void launch_wgmma_tree_max(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_tree_max(const PrefillShape& s);
void launch_wgmma_v_pages(const PrefillArgs& a, Policy p, cudaStream_t stream);
Geometry geometry_wgmma_v_pages(const PrefillShape& s);
#endif

}  // namespace lesson06
