// FlashInfer's Hopper BatchPrefill (FA3-style, sm_90a) over the paged cache for bf16, causal,
// D 128: its planner PrefillSM90Plan and the kernel. Compiled for 90a alone, and only when
// CUTLASS is found beside FlashInfer's headers (peers/CMakeLists.txt).
#include "fi_sm90_impl.cuh"

#include <algorithm>
#include <vector>

namespace fi_peer {

namespace {

// The bytes PrefillSM90Plan carves out of the int workspace (FlashInfer has no size query
// for it; its Python wrapper passes a fixed 8 MiB): seven arrays of one int per work item
// and work_indptr of one int per SM plus one, each aligned to 16 bytes.
size_t sm90_plan_int_bytes(const std::vector<int>& qo_indptr, int batch, int num_qo_heads, int num_sms) {
    const int cta_tile_q = 128;  // PrefillSM90Plan's query tile for head_dim 128
    long long tiles = 0;
    for (int b = 0; b < batch; ++b) tiles += (qo_indptr[b + 1] - qo_indptr[b] + cta_tile_q - 1) / cta_tile_q;
    const long long works = tiles * num_qo_heads;  // an upper bound: one schedule per head
    auto aligned = [](long long bytes) { return static_cast<size_t>((bytes + 15) / 16 * 16); };
    return 7 * aligned(4 * std::max(works, 1LL)) + aligned(4LL * (num_sms + 1)) + 64;
}

}  // namespace

std::string prefill_sm90_plan(const std::vector<int>& qo_indptr_host, const std::vector<int>& kv_indptr_host,
                              const std::vector<int>& kv_len_host, int batch, int num_qo_heads, int num_kv_heads,
                              int page_size, int num_sms, Workspace& ws, Plan* plan) {
    try {
        // The float buffer is not used by this planner (no split-k); the int one holds the work list.
        const std::string grown = ws.allocate(1, sm90_plan_int_bytes(qo_indptr_host, batch, num_qo_heads, num_sms));
        if (!grown.empty()) return grown;
        // the planner takes non-const pointers
        std::vector<int> qo = qo_indptr_host, kv = kv_indptr_host, kv_len = kv_len_host;
        flashinfer::PrefillPlanSM90Info info;
        // As FlashInfer's Python plan() for the fa3 backend: no CUDA graph, causal, 2-byte output.
        cudaError_t e = flashinfer::PrefillSM90Plan<int32_t>(
            ws.float_buf, ws.float_bytes, ws.int_buf, ws.pinned_int, ws.int_bytes, info, qo.data(), kv.data(),
            kv_len.data(), static_cast<uint32_t>(qo.back()), batch, num_qo_heads, num_kv_heads, kSm90HeadDim,
            kSm90HeadDim, page_size, /*causal=*/true, /*enable_cuda_graph=*/false, /*sizeof_dtype_o=*/2, nullptr);
        if (e != cudaSuccess) return cuda_failed("PrefillSM90Plan", e);
        e = cudaStreamSynchronize(nullptr);  // the plan's copy to the device
        if (e != cudaSuccess) return cuda_failed("PrefillSM90Plan copy", e);
        plan->info = info.ToVector();
        plan->split_kv = false;
        // one persistent CTA per SM (per SM and head when every head shares one schedule)
        plan->ctas = static_cast<long long>(num_sms) * (info.same_schedule_for_all_heads ? num_qo_heads : 1);
    } catch (const std::exception& ex) {
        return std::string("FlashInfer: ") + ex.what();
    }
    return "";
}

std::string prefill_sm90_run(pa::DType t, const Plan& plan, Workspace& ws, const PagedKv& kv, const void* q,
                             int total_rows, void* o, int num_qo_heads, float sm_scale, cudaStream_t stream) {
    if (t != pa::DType::bf16) return "the sm_90a prefill is built for bf16 only";
    return prefill_sm90_run_t<nv_bfloat16>(plan, ws, kv, q, total_rows, o, num_qo_heads, sm_scale, stream);
}

}  // namespace fi_peer
