// FlashInfer's BatchDecode for bf16, compiled in a file of its own (the builds run in parallel).
#include "fi_impl.cuh"

namespace fi_peer {

std::string decode_plan_bf16(const std::vector<int>& indptr, int batch, int qo_heads, int kv_heads, int page,
                             Workspace& ws, Plan* plan) {
    return decode_plan_t<nv_bfloat16>(indptr, batch, qo_heads, kv_heads, page, ws, plan);
}

std::string decode_run_bf16(const Plan& plan, Workspace& ws, const PagedKv& kv, const void* q, void* o, int qo_heads,
                            float scale, cudaStream_t stream) {
    return decode_run_t<nv_bfloat16>(plan, ws, kv, q, o, qo_heads, scale, stream);
}

}  // namespace fi_peer
