// The FlashInfer peer's calls into FlashInfer, behind a plain C++ interface: main.cu includes
// this and never FlashInfer's headers, so that only the fi_*.cu files compile them.
//
// Every call returns an empty string on success, else one line saying what failed (a
// FlashInfer error, a CUDA error, a configuration FlashInfer does not offer).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dtype.h"

namespace fi_peer {

// This repository's paged cache as FlashInfer reads it: K and V pools of shape
// [num_blocks, Hkv, page_size, D] (FlashInfer's HND layout), and each sequence's pages in CSR
// form: pages of sequence b are indices[indptr[b] .. indptr[b + 1]), the last one holding
// last_page_len[b] tokens. The indices are the block table's entries, in order.
struct PagedKv {
    const void* k = nullptr;
    const void* v = nullptr;
    int* indices = nullptr;        // device
    int* indptr = nullptr;         // device, [B + 1]
    int* last_page_len = nullptr;  // device, [B]
    int batch = 0, num_kv_heads = 0, page_size = 0, head_dim = 0;
};

// FlashInfer's planners write their schedule into two device buffers (through a pinned
// host buffer); the float one also holds split-k partial results.
struct Workspace {
    void* float_buf = nullptr;
    size_t float_bytes = 0;
    void* int_buf = nullptr;
    size_t int_bytes = 0;
    void* pinned_int = nullptr;  // page-locked, int_bytes
    std::string allocate(size_t float_bytes, size_t int_bytes);
    void release();
};

// A plan is FlashInfer's own plan-info struct as its vector of int64 (ToVector / FromVector).
struct Plan {
    std::vector<int64_t> info;
    long long ctas = 0;   // CTAs of the main kernel
    bool split_kv = false;
};

// Group sizes (H / Hkv) that BatchDecode (the CUDA-core decode) is compiled for.
bool decode_supports_group(int group);
std::string group_list();

// BatchDecode: FlashInfer's split planner (DecodePlan with its work estimation), then the
// kernel (and its merge when the plan splits). head_dim must be 128.
std::string decode_plan(pa::DType t, const std::vector<int>& indptr_host, int batch, int num_qo_heads,
                        int num_kv_heads, int page_size, Workspace& ws, Plan* plan);
std::string decode_run(pa::DType t, const Plan& plan, Workspace& ws, const PagedKv& kv, const void* q, void* o,
                       int num_qo_heads, float sm_scale, cudaStream_t stream);

// BatchPrefill over the paged cache (the FA2 tensor-core kernel): q is [total rows, H, D]
// with rows of sequence b at qo_indptr[b] .. qo_indptr[b + 1]. `causal` aligns the last query
// row with the last key (query i of a sequence of n rows over kv_len keys sees keys up to
// kv_len - n + i). One query row per sequence without the mask is FlashInfer's tensor-core
// decode.
std::string prefill_plan(const std::vector<int>& qo_indptr_host, const std::vector<int>& kv_indptr_host, int batch,
                         int num_qo_heads, int num_kv_heads, int page_size, Workspace& ws, Plan* plan);
std::string prefill_run(pa::DType t, bool causal, const Plan& plan, Workspace& ws, const PagedKv& kv, const void* q,
                        int* qo_indptr_dev, void* o, int num_qo_heads, float sm_scale, cudaStream_t stream);

// BatchPrefill's Hopper backend (FlashInfer's FA3-style kernels, sm_90a), causal, bf16, D 128:
// built only with 90a configured and CUTLASS beside FlashInfer's headers, when main.cu sees
// PA_FI_SM90_PREFILL (fi_prefill_sm90_bf16.cu). Its planner, PrefillSM90Plan, deals the
// 128-row query tiles of every (sequence, head) out to one persistent CTA per SM by estimated
// cost; it needs each sequence's key count beside the page lists, and the GPU's SM count
// (pa::DeviceInfo::sms). q and o as prefill_run's.
std::string prefill_sm90_plan(const std::vector<int>& qo_indptr_host, const std::vector<int>& kv_indptr_host,
                              const std::vector<int>& kv_len_host, int batch, int num_qo_heads, int num_kv_heads,
                              int page_size, int num_sms, Workspace& ws, Plan* plan);
std::string prefill_sm90_run(pa::DType t, const Plan& plan, Workspace& ws, const PagedKv& kv, const void* q,
                             int total_rows, void* o, int num_qo_heads, float sm_scale, cudaStream_t stream);

// The per-dtype entry points (fi_decode_<dtype>.cu, fi_prefill_<dtype>.cu).
std::string decode_plan_fp16(const std::vector<int>&, int, int, int, int, Workspace&, Plan*);
std::string decode_plan_bf16(const std::vector<int>&, int, int, int, int, Workspace&, Plan*);
std::string decode_run_fp16(const Plan&, Workspace&, const PagedKv&, const void*, void*, int, float, cudaStream_t);
std::string decode_run_bf16(const Plan&, Workspace&, const PagedKv&, const void*, void*, int, float, cudaStream_t);
std::string prefill_run_fp16(bool, const Plan&, Workspace&, const PagedKv&, const void*, int*, void*, int, float,
                             cudaStream_t);
std::string prefill_run_bf16(bool, const Plan&, Workspace&, const PagedKv&, const void*, int*, void*, int, float,
                             cudaStream_t);

// The helpers of both FlashInfer back ends' launch code (fi_impl.cuh, fi_sm90_impl.cuh): a failed
// CUDA call as one line, and a typed pointer `offset` bytes into a planner's workspace buffer.
inline std::string cuda_failed(const char* what, cudaError_t e) {
    return std::string(what) + ": " + cudaGetErrorString(e);
}

template <class T>
T* at_offset(void* base, int64_t offset) {
    return static_cast<T*>(static_cast<void*>(static_cast<char*>(base) + offset));
}

}  // namespace fi_peer
