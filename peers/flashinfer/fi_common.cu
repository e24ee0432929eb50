// The dtype-free parts of the FlashInfer peer's calls: the workspace, the prefill planner
// (it only needs the lengths) and the per-dtype dispatch.
#include <flashinfer/attention/scheduler.cuh>

#include <algorithm>
#include <exception>

#include "fi_launch.h"

namespace fi_peer {

namespace {
const int kDecodeGroups[] = {1, 2, 3, 4, 6, 8, 16};  // FlashInfer's DISPATCH_GQA_GROUP_SIZE
}

bool decode_supports_group(int group) {
    return std::find(std::begin(kDecodeGroups), std::end(kDecodeGroups), group) != std::end(kDecodeGroups);
}

std::string group_list() {
    std::string s;
    for (int g : kDecodeGroups) s += (s.empty() ? "" : ", ") + std::to_string(g);
    return s;
}

std::string Workspace::allocate(size_t want_float, size_t want_int) {
    // Grows only; FlashInfer's Python wrappers start from 128 MiB for the float buffer.
    want_float = std::max<size_t>(want_float, 1);
    want_int = std::max<size_t>(want_int, 1);
    if (want_float > float_bytes) {
        if (float_buf) cudaFree(float_buf);
        float_buf = nullptr;
        const cudaError_t e = cudaMalloc(&float_buf, want_float);
        if (e != cudaSuccess) return std::string("workspace: ") + cudaGetErrorString(e);
        float_bytes = want_float;
    }
    if (want_int > int_bytes) {
        if (int_buf) cudaFree(int_buf);
        if (pinned_int) cudaFreeHost(pinned_int);
        int_buf = pinned_int = nullptr;
        cudaError_t e = cudaMalloc(&int_buf, want_int);
        if (e == cudaSuccess) e = cudaMallocHost(&pinned_int, want_int);
        if (e != cudaSuccess) return std::string("workspace: ") + cudaGetErrorString(e);
        int_bytes = want_int;
    }
    return "";
}

void Workspace::release() {
    if (float_buf) cudaFree(float_buf);
    if (int_buf) cudaFree(int_buf);
    if (pinned_int) cudaFreeHost(pinned_int);
    float_buf = int_buf = pinned_int = nullptr;
    float_bytes = int_bytes = 0;
}

std::string prefill_plan(const std::vector<int>& qo_indptr_host, const std::vector<int>& kv_indptr_host, int batch,
                         int num_qo_heads, int num_kv_heads, int page_size, Workspace& ws, Plan* plan) {
    try {
        std::vector<int> qo = qo_indptr_host, kv = kv_indptr_host;  // the planner takes non-const pointers
        const uint32_t rows = static_cast<uint32_t>(qo.back());
        size_t float_bytes = 0, int_bytes = 0;
        // Defaults of FlashInfer's Python plan(): no CUDA graph, window -1, no fixed split size,
        // split-k allowed, no co-located decode CTAs, no uniform-length hint.
        cudaError_t e = flashinfer::PrefillPlanWorkspaceSize<int32_t>(
            float_bytes, int_bytes, qo.data(), kv.data(), rows, batch, num_qo_heads, num_kv_heads, 128, 128, page_size,
            /*cuda_graph=*/false, /*sizeof_dtype_o=*/2, /*window_left=*/-1, /*fixed_split_size=*/-1,
            /*disable_split_kv=*/false, /*num_colocated_ctas=*/0, /*uniform_q_len=*/0, nullptr);
        if (e != cudaSuccess) return std::string("PrefillPlanWorkspaceSize: ") + cudaGetErrorString(e);
        const std::string grown = ws.allocate(float_bytes, int_bytes);
        if (!grown.empty()) return grown;
        flashinfer::PrefillPlanInfo info;
        e = flashinfer::PrefillPlan<int32_t>(ws.float_buf, ws.float_bytes, ws.int_buf, ws.pinned_int, ws.int_bytes, info,
                                             qo.data(), kv.data(), rows, batch, num_qo_heads, num_kv_heads, 128, 128,
                                             page_size, false, 2, -1, -1, false, 0, 0, nullptr);
        if (e != cudaSuccess) return std::string("PrefillPlan: ") + cudaGetErrorString(e);
        e = cudaStreamSynchronize(nullptr);
        if (e != cudaSuccess) return std::string("PrefillPlan copy: ") + cudaGetErrorString(e);
        plan->info = info.ToVector();
        plan->split_kv = info.split_kv;
        plan->ctas = static_cast<long long>(info.padded_batch_size) * num_kv_heads;
    } catch (const std::exception& ex) {
        return std::string("FlashInfer: ") + ex.what();
    }
    return "";
}

std::string decode_plan(pa::DType t, const std::vector<int>& indptr_host, int batch, int num_qo_heads,
                        int num_kv_heads, int page_size, Workspace& ws, Plan* plan) {
    return t == pa::DType::fp16 ? decode_plan_fp16(indptr_host, batch, num_qo_heads, num_kv_heads, page_size, ws, plan)
                                : decode_plan_bf16(indptr_host, batch, num_qo_heads, num_kv_heads, page_size, ws, plan);
}

std::string decode_run(pa::DType t, const Plan& plan, Workspace& ws, const PagedKv& kv, const void* q, void* o,
                       int num_qo_heads, float sm_scale, cudaStream_t stream) {
    return t == pa::DType::fp16 ? decode_run_fp16(plan, ws, kv, q, o, num_qo_heads, sm_scale, stream)
                                : decode_run_bf16(plan, ws, kv, q, o, num_qo_heads, sm_scale, stream);
}

std::string prefill_run(pa::DType t, bool causal, const Plan& plan, Workspace& ws, const PagedKv& kv, const void* q,
                        int* qo_indptr_dev, void* o, int num_qo_heads, float sm_scale, cudaStream_t stream) {
    return t == pa::DType::fp16
               ? prefill_run_fp16(causal, plan, ws, kv, q, qo_indptr_dev, o, num_qo_heads, sm_scale, stream)
               : prefill_run_bf16(causal, plan, ws, kv, q, qo_indptr_dev, o, num_qo_heads, sm_scale, stream);
}

}  // namespace fi_peer
