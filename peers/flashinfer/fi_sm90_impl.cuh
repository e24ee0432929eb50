// FlashInfer's Hopper backend of BatchPrefill (its FlashAttention-3-style kernels,
// flashinfer/attention/hopper/, sm_90a) on this repository's paged cache: the parameter
// struct its paged kernel reads, and the run call, for one dtype (fi_prefill_sm90_bf16.cu
// instantiates it). Needs CUTLASS/CuTe (the wheel's data/cutlass) beside FlashInfer's headers.
//
// FlashInfer's Python package writes this struct at JIT time from
// batch_prefill_sm90_customize_config.jinja, with the additional parameters its fa3 backend
// passes for 16-bit inputs (modules.py: prefix/item pointers for multi-item scoring, a V
// scale, the soft cap, sm_scale); here it is written once for the default softmax attention
// (DefaultAttention<false>: no soft cap, no sliding window, no multi-item scoring).
#pragma once

#include <flashinfer/attention/hopper/attention_updater.cuh>
#include <flashinfer/attention/hopper/variant_helper.cuh>
#include <flashinfer/attention/hopper/variants.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/cutlass_utils.cuh>
#include <flashinfer/layout.cuh>
#include <flashinfer/math.cuh>
// after the struct's dependencies, as the JIT's generated source includes it
#include <flashinfer/attention/hopper/prefill_sm90.cuh>

#include <exception>
#include <string>

#include "fi_launch.h"

namespace fi_peer {

constexpr uint32_t kSm90HeadDim = 128;
using Sm90Variant = flashinfer::DefaultAttention</*use_logits_soft_cap=*/false>;

template <class DType>
struct Sm90PagedParams {
    using DTypeQ = typename flashinfer::cutlass_dtype<DType>::type;  // cutlass::bfloat16_t for bf16
    using DTypeKV = DTypeQ;
    using DTypeO = DTypeQ;
    using IdType = int32_t;

    DTypeQ* q_ptr = nullptr;
    DTypeKV* k_ptr = nullptr;
    DTypeKV* v_ptr = nullptr;
    DTypeO* o_ptr = nullptr;
    float* lse_ptr = nullptr;

    // The planner's work list (one entry per query tile and head, grouped by CTA).
    IdType* qo_tile_indices = nullptr;
    IdType* qo_indptr = nullptr;
    IdType* kv_indptr = nullptr;
    IdType* kv_indices = nullptr;  // the page lists: pages of sequence b at kv_indices[page indptr[b] ..]
    IdType* qo_lens = nullptr;
    IdType* kv_lens = nullptr;
    IdType* head_indices = nullptr;
    IdType* work_indptr = nullptr;
    IdType* batch_indices = nullptr;

    struct AdditionalParams {
        uint32_t* maybe_prefix_len_ptr = nullptr;
        uint16_t* maybe_token_pos_in_items_ptr = nullptr;
        uint16_t* maybe_max_item_len_ptr = nullptr;
        float* maybe_scale_v = nullptr;  // null: scale_v_scalar for every head
        double logits_soft_cap = 0;
        double sm_scale = 0;
        double scale_v_scalar = 1;  // what the Python wrapper passes without a V scale
        int64_t token_pos_in_items_len = 0;
    } additional_params;

    int64_t q_stride_n = 0, k_stride_n = 0, v_stride_n = 0, o_stride_n = 0;
    int64_t q_stride_h = 0, k_stride_h = 0, v_stride_h = 0, o_stride_h = 0;
    int64_t nnz_qo = 0;
    int64_t k_page_stride = 0, v_page_stride = 0;  // between pages (the pool's stride(0))

    int head_dim = 0;
    int num_qo_heads = 0;
    int num_kv_heads = 0;
    int group_size = 0;
    int page_size = 0;
    int window_left = -1;

    bool causal = false;
};

// Causal only: the plan's cost model and this instantiation both assume the mask.
template <class DType>
std::string prefill_sm90_run_t(const Plan& plan, Workspace& ws, const PagedKv& kv, const void* q, int total_rows,
                               void* o, int num_qo_heads, float sm_scale, cudaStream_t stream) {
    using Params = Sm90PagedParams<DType>;
    if (kv.head_dim != static_cast<int>(kSm90HeadDim)) return "the sm_90a prefill is built for D 128 only";
    try {
        flashinfer::PrefillPlanSM90Info info;
        info.FromVector(plan.info);
        Params p;
        p.q_ptr = static_cast<typename Params::DTypeQ*>(const_cast<void*>(q));
        p.k_ptr = static_cast<typename Params::DTypeKV*>(const_cast<void*>(kv.k));
        p.v_ptr = static_cast<typename Params::DTypeKV*>(const_cast<void*>(kv.v));
        p.o_ptr = static_cast<typename Params::DTypeO*>(o);
        // q and o: [rows, H, D]
        p.q_stride_n = p.o_stride_n = static_cast<int64_t>(num_qo_heads) * kSm90HeadDim;
        p.q_stride_h = p.o_stride_h = kSm90HeadDim;
        // K and V pools: [num_blocks, Hkv, page, D] (HND), so the page stride is Hkv * page * D
        p.k_stride_h = p.v_stride_h = static_cast<int64_t>(kv.page_size) * kv.head_dim;
        p.k_stride_n = p.v_stride_n = kv.head_dim;
        p.k_page_stride = p.v_page_stride = static_cast<int64_t>(kv.num_kv_heads) * kv.page_size * kv.head_dim;
        p.nnz_qo = total_rows;
        p.head_dim = kv.head_dim;
        p.num_qo_heads = num_qo_heads;
        p.num_kv_heads = kv.num_kv_heads;
        p.group_size = num_qo_heads / kv.num_kv_heads;
        p.page_size = kv.page_size;
        p.window_left = -1;
        p.causal = true;
        p.additional_params.sm_scale = sm_scale;
        p.qo_tile_indices = at_offset<int32_t>(ws.int_buf, info.qo_tile_indices_offset);
        p.qo_indptr = at_offset<int32_t>(ws.int_buf, info.qo_indptr_offset);
        p.kv_indptr = at_offset<int32_t>(ws.int_buf, info.kv_indptr_offset);
        p.qo_lens = at_offset<int32_t>(ws.int_buf, info.qo_len_offset);
        p.kv_lens = at_offset<int32_t>(ws.int_buf, info.kv_len_offset);
        p.head_indices = at_offset<int32_t>(ws.int_buf, info.head_indices_offset);
        p.work_indptr = at_offset<int32_t>(ws.int_buf, info.work_indptr_offset);
        p.batch_indices = at_offset<int32_t>(ws.int_buf, info.batch_indices_offset);
        p.kv_indices = kv.indices;
        // The planner gives every head one schedule when a head has over 4096 query tiles.
        const cudaError_t e =
            info.same_schedule_for_all_heads
                ? flashinfer::BatchPrefillWithPagedKVCacheDispatched<kSm90HeadDim, kSm90HeadDim,
                                                                     flashinfer::MaskMode::kCausal,
                                                                     /*LEFT_SLIDING_WINDOW=*/false,
                                                                     /*SAME_SCHEDULE_FOR_ALL_HEADS=*/true, Sm90Variant>(
                      p, /*enable_pdl=*/false, stream)
                : flashinfer::BatchPrefillWithPagedKVCacheDispatched<kSm90HeadDim, kSm90HeadDim,
                                                                     flashinfer::MaskMode::kCausal,
                                                                     /*LEFT_SLIDING_WINDOW=*/false,
                                                                     /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false, Sm90Variant>(
                      p, /*enable_pdl=*/false, stream);
        if (e != cudaSuccess)
            return cuda_failed("BatchPrefillWithPagedKVCache (sm_90a)", e);
    } catch (const std::exception& ex) {
        return std::string("FlashInfer: ") + ex.what();
    }
    return "";
}

}  // namespace fi_peer
