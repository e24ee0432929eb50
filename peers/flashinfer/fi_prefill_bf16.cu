// FlashInfer's BatchPrefill over the paged cache for bf16 (causal, and unmasked for the
// tensor-core decode), compiled in a file of its own (the builds run in parallel).
#include "fi_impl.cuh"

namespace fi_peer {

std::string prefill_run_bf16(bool causal, const Plan& plan, Workspace& ws, const PagedKv& kv, const void* q,
                             int* qo_indptr, void* o, int qo_heads, float scale, cudaStream_t stream) {
    return prefill_run_t<nv_bfloat16>(causal, plan, ws, kv, q, qo_indptr, o, qo_heads, scale, stream);
}

}  // namespace fi_peer
