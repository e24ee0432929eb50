// FlashInfer's batch decode and batch prefill on this repository's paged cache: the
// parameter structs its kernels read, and the plan/run calls, for one dtype at a time
// (fi_decode_<dtype>.cu and fi_prefill_<dtype>.cu instantiate them).
//
// FlashInfer's Python package generates these parameter structs from templates at JIT time;
// here they are written once, with the fields its kernels read for the default softmax
// attention (no custom mask, no sliding window, no soft cap, no ALiBi, no RoPE).
#pragma once

#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include <exception>
#include <string>
#include <vector>

#include "fi_launch.h"

namespace fi_peer {

constexpr uint32_t kHeadDim = 128;
using Variant = flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/false,
                                             /*logits_soft_cap=*/false, /*alibi=*/false>;

template <class DType>
struct DecodeParams {
    using DTypeQ = DType;
    using DTypeKV = DType;
    using DTypeO = DType;
    using IdType = int32_t;

    DTypeQ* q = nullptr;
    flashinfer::paged_kv_t<DTypeKV, IdType> paged_kv;
    DTypeO* o = nullptr;
    float* lse = nullptr;
    float* maybe_alibi_slopes = nullptr;
    double logits_soft_cap = 0, sm_scale = 0, rope_rcp_scale = 1, rope_rcp_theta = 1e-4;

    uint32_t padded_batch_size = 0;
    uint32_t num_qo_heads = 0;
    IdType q_stride_n = 0, q_stride_h = 0;
    int32_t window_left = -1;
    bool enable_pdl = false;

    IdType* request_indices = nullptr;
    IdType* kv_tile_indices = nullptr;
    IdType* o_indptr = nullptr;
    IdType* kv_chunk_size_ptr = nullptr;
    bool* block_valid_mask = nullptr;
    bool partition_kv = false;

    __host__ __device__ __forceinline__ int32_t get_qo_len(int32_t) const { return 1; }
    __host__ __device__ __forceinline__ int32_t get_kv_len(int32_t b) const { return paged_kv.get_length(b); }
};

template <class DType>
struct PrefillParams {
    using DTypeQ = DType;
    using DTypeKV = DType;
    using DTypeO = DType;
    using IdType = int32_t;

    DTypeQ* q = nullptr;
    flashinfer::paged_kv_t<DTypeKV, IdType> paged_kv;
    IdType* q_indptr = nullptr;
    DTypeO* o = nullptr;
    float* lse = nullptr;
    flashinfer::uint_fastdiv group_size;

    uint8_t* maybe_custom_mask = nullptr;
    int32_t* maybe_mask_indptr = nullptr;
    float* maybe_alibi_slopes = nullptr;
    double logits_soft_cap = 0, sm_scale = 0, rope_rcp_scale = 1, rope_rcp_theta = 1e-4;

    uint32_t num_qo_heads = 0;
    IdType q_stride_n = 0, q_stride_h = 0;
    uint32_t k_sf_stride_page = 0, k_sf_stride_n = 0, k_sf_stride_h = 0;
    uint32_t v_sf_stride_page = 0, v_sf_stride_n = 0, v_sf_stride_h = 0;
    int32_t window_left = -1;

    IdType* request_indices = nullptr;
    IdType* qo_tile_indices = nullptr;
    IdType* kv_tile_indices = nullptr;
    IdType* merge_indptr = nullptr;
    IdType* o_indptr = nullptr;
    bool* block_valid_mask = nullptr;
    IdType* kv_chunk_size_ptr = nullptr;
    uint32_t max_total_num_rows = 0;
    uint32_t* total_num_rows = nullptr;
    uint32_t padded_batch_size = 0;
    bool partition_kv = false;

    __host__ __device__ __forceinline__ uint32_t get_qo_len(uint32_t b) const { return q_indptr[b + 1] - q_indptr[b]; }
    __host__ __device__ __forceinline__ uint32_t get_kv_len(uint32_t b) const { return paged_kv.get_length(b); }
};

template <class DType>
flashinfer::paged_kv_t<DType, int32_t> fi_paged_kv(const PagedKv& kv) {
    // [num_blocks, Hkv, page, D]: FlashInfer's HND layout, contiguous
    return flashinfer::paged_kv_t<DType, int32_t>(
        kv.num_kv_heads, kv.page_size, kv.head_dim, kv.batch, flashinfer::QKVLayout::kHND,
        static_cast<DType*>(const_cast<void*>(kv.k)), static_cast<DType*>(const_cast<void*>(kv.v)), kv.indices,
        kv.indptr, kv.last_page_len);
}

template <class DType>
std::string decode_plan_t(const std::vector<int>& indptr_host, int batch, int num_qo_heads, int num_kv_heads,
                          int page_size, Workspace& ws, Plan* plan) {
    using Params = DecodeParams<DType>;
    const int group = num_qo_heads / num_kv_heads;
    if (!decode_supports_group(group))
        return "BatchDecode is compiled for groups " + group_list() + " only, this shape has " + std::to_string(group);
    try {
        std::vector<int> indptr = indptr_host;  // FlashInfer's planner takes a non-const pointer
        cudaError_t e = cudaSuccess;
        DISPATCH_GQA_GROUP_SIZE(static_cast<uint32_t>(group), GROUP_SIZE, {
            auto estimate = flashinfer::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<
                GROUP_SIZE, kHeadDim, flashinfer::PosEncodingMode::kNone, Variant, Params>;
            size_t float_bytes = 0, int_bytes = 0;
            e = flashinfer::DecodePlanWorkspaceSize<kHeadDim, flashinfer::PosEncodingMode::kNone, Variant, Params>(
                float_bytes, int_bytes, indptr.data(), batch, num_qo_heads, page_size, /*cuda_graph=*/false, nullptr,
                estimate);
            if (e != cudaSuccess) return cuda_failed("DecodePlanWorkspaceSize", e);
            const std::string grown = ws.allocate(float_bytes, int_bytes);
            if (!grown.empty()) return grown;
            flashinfer::DecodePlanInfo info;
            e = flashinfer::DecodePlan<kHeadDim, flashinfer::PosEncodingMode::kNone, Variant, Params>(
                ws.float_buf, ws.float_bytes, ws.int_buf, ws.pinned_int, ws.int_bytes, info, indptr.data(), batch,
                num_qo_heads, page_size, /*cuda_graph=*/false, nullptr, estimate);
            if (e != cudaSuccess) return cuda_failed("DecodePlan", e);
            plan->info = info.ToVector();
            plan->split_kv = info.split_kv;
            plan->ctas = static_cast<long long>(info.padded_batch_size) * num_kv_heads;
        });
        e = cudaStreamSynchronize(nullptr);  // the plan's copy to the device
        if (e != cudaSuccess) return cuda_failed("DecodePlan copy", e);
    } catch (const std::exception& ex) {
        return std::string("FlashInfer: ") + ex.what();
    }
    return "";
}

template <class DType>
std::string decode_run_t(const Plan& plan, Workspace& ws, const PagedKv& kv, const void* q, void* o, int num_qo_heads,
                         float sm_scale, cudaStream_t stream) {
    using Params = DecodeParams<DType>;
    try {
        flashinfer::DecodePlanInfo info;
        info.FromVector(plan.info);
        Params p;
        p.q = static_cast<DType*>(const_cast<void*>(q));
        p.paged_kv = fi_paged_kv<DType>(kv);
        p.o = static_cast<DType*>(o);
        p.sm_scale = sm_scale;
        p.num_qo_heads = num_qo_heads;
        p.q_stride_n = num_qo_heads * kHeadDim;  // q: [B, H, D]
        p.q_stride_h = kHeadDim;
        p.request_indices = at_offset<int32_t>(ws.int_buf, info.request_indices_offset);
        p.kv_tile_indices = at_offset<int32_t>(ws.int_buf, info.kv_tile_indices_offset);
        p.o_indptr = at_offset<int32_t>(ws.int_buf, info.o_indptr_offset);
        p.kv_chunk_size_ptr = at_offset<int32_t>(ws.int_buf, info.kv_chunk_size_ptr_offset);
        p.padded_batch_size = static_cast<uint32_t>(info.padded_batch_size);
        DType* tmp_v = nullptr;
        float* tmp_s = nullptr;
        if (info.split_kv) {
            tmp_v = at_offset<DType>(ws.float_buf, info.v_offset);
            tmp_s = at_offset<float>(ws.float_buf, info.s_offset);
        }
        const cudaError_t e =
            flashinfer::BatchDecodeWithPagedKVCacheDispatched<kHeadDim, flashinfer::PosEncodingMode::kNone, Variant>(
                p, tmp_v, tmp_s, /*enable_pdl=*/false, stream);
        if (e != cudaSuccess) return cuda_failed("BatchDecodeWithPagedKVCache", e);
    } catch (const std::exception& ex) {
        return std::string("FlashInfer: ") + ex.what();
    }
    return "";
}

template <class DType, flashinfer::MaskMode MASK>
cudaError_t prefill_dispatch(uint32_t cta_tile_q, PrefillParams<DType>& p, DType* tmp_v, float* tmp_s,
                             cudaStream_t stream) {
    // The tile sizes FlashInfer's planner picks for head_dim 128 (FA2DetermineCtaTileQ).
    switch (cta_tile_q) {
#define FI_PEER_TILE(T)                                                                                          \
    case T:                                                                                                      \
        return flashinfer::BatchPrefillWithPagedKVCacheDispatched</*SAME_KV_STRIDES=*/true, T, kHeadDim, kHeadDim, \
                                                                  flashinfer::PosEncodingMode::kNone,            \
                                                                  /*fp16_qk_reduction=*/false, MASK, Variant>(   \
            p, tmp_v, tmp_s, /*enable_pdl=*/false, stream);
        FI_PEER_TILE(16)
        FI_PEER_TILE(64)
        FI_PEER_TILE(128)
#undef FI_PEER_TILE
        default:
            return cudaErrorInvalidConfiguration;
    }
}

template <class DType>
std::string prefill_run_t(bool causal, const Plan& plan, Workspace& ws, const PagedKv& kv, const void* q,
                          int* qo_indptr_dev, void* o, int num_qo_heads, float sm_scale, cudaStream_t stream) {
    try {
        flashinfer::PrefillPlanInfo info;
        info.FromVector(plan.info);
        PrefillParams<DType> p;
        p.q = static_cast<DType*>(const_cast<void*>(q));
        p.paged_kv = fi_paged_kv<DType>(kv);
        p.q_indptr = qo_indptr_dev;
        p.o = static_cast<DType*>(o);
        p.num_qo_heads = num_qo_heads;
        p.group_size = flashinfer::uint_fastdiv(num_qo_heads / kv.num_kv_heads);
        p.sm_scale = sm_scale;
        p.q_stride_n = num_qo_heads * kHeadDim;  // q: [rows, H, D]
        p.q_stride_h = kHeadDim;
        p.request_indices = at_offset<int32_t>(ws.int_buf, info.request_indices_offset);
        p.qo_tile_indices = at_offset<int32_t>(ws.int_buf, info.qo_tile_indices_offset);
        p.kv_tile_indices = at_offset<int32_t>(ws.int_buf, info.kv_tile_indices_offset);
        p.o_indptr = at_offset<int32_t>(ws.int_buf, info.o_indptr_offset);
        p.kv_chunk_size_ptr = at_offset<int32_t>(ws.int_buf, info.kv_chunk_size_ptr_offset);
        DType* tmp_v = nullptr;
        float* tmp_s = nullptr;
        if (info.split_kv) {
            p.merge_indptr = at_offset<int32_t>(ws.int_buf, info.merge_indptr_offset);
            tmp_v = at_offset<DType>(ws.float_buf, info.v_offset);
            tmp_s = at_offset<float>(ws.float_buf, info.s_offset);
        }
        p.padded_batch_size = static_cast<uint32_t>(info.padded_batch_size);
        p.max_total_num_rows = static_cast<uint32_t>(info.total_num_rows);
        const cudaError_t e =
            causal ? prefill_dispatch<DType, flashinfer::MaskMode::kCausal>(info.cta_tile_q, p, tmp_v, tmp_s, stream)
                   : prefill_dispatch<DType, flashinfer::MaskMode::kNone>(info.cta_tile_q, p, tmp_v, tmp_s, stream);
        if (e == cudaErrorInvalidConfiguration)
            return "BatchPrefillWithPagedKVCache: the plan chose a query tile of " + std::to_string(info.cta_tile_q) +
                   " rows, which this peer does not instantiate (16, 64, 128)";
        if (e != cudaSuccess) return cuda_failed("BatchPrefillWithPagedKVCache", e);
    } catch (const std::exception& ex) {
        return std::string("FlashInfer: ") + ex.what();
    }
    return "";
}

}  // namespace fi_peer
