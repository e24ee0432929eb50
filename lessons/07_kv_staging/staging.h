// Lesson 07's launchers and the check's fill / compare kernels, compiled once in
// staging.cu; main.cu, the server loop and the tests use this.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "staging_plan.h"

namespace lesson07 {

// One rank's pools as the copy kernels see them: a device array of one device pointer
// per layer (all K layers, then all V layers), each [num_blocks, heads, kPageSize, D],
// as a server keeps one tensor per layer.
struct PoolRef {
    void* const* layers = nullptr;
    int layers_kv = 0;  // 2 x layers
    int heads = 0;      // KV heads this rank's pool holds
};

// One chunk of a launch: pool heads [pool_head_start, + num_heads) at `staging_offset`
// bytes, laid out [layers_kv, tokens, num_heads, D].
struct Chunk {
    int pool_head_start = 0;
    int num_heads = 0;
    int64_t staging_offset = 0;
};

// Tokens [token_begin, token_begin + num_tokens) of layers [first_layer_kv, + count) of
// every chunk, in one launch: count = layers_kv is the lesson's gather; count = 1 is one
// call of the per-layer baseline. Throws pa::CudaError for arguments the kernel cannot
// take (too many chunks, heads outside the pool, a misaligned offset). No launch for 0 tokens.
void launch_gather(const PoolRef& pool, const int* page_table, int token_begin, int num_tokens,
                   const std::vector<Chunk>& chunks, void* staging, int first_layer_kv, int count_layer_kv,
                   cudaStream_t stream);
void launch_scatter(const PoolRef& pool, const int* page_table, int token_begin, int num_tokens,
                    const std::vector<Chunk>& chunks, const void* staging, int first_layer_kv, int count_layer_kv,
                    cudaStream_t stream);

// Keeps `stream` busy for `ns` nanoseconds: the server loop's stand-in for a decode
// forward pass, so that the prefill side runs ahead and has to wait on the watermark.
void launch_busy_wait(unsigned long long ns, cudaStream_t stream);

// ---- checking: fill pools and staging with kv_pattern.h's values, count mismatches

// A request as the checks see it: tokens [0, total) exist on the prefill side; tokens
// [prefix, total) are handed off; the decode side already holds [0, prefix) (cached).
struct PatternRequest {
    uint32_t id;
    int prefix;
    int total;
};

// Owner of one pool block: request index and logical page, or {-1, -1}.
struct BlockOwner {
    int request;
    int page;
};

enum class PoolContent {
    prefill,        // every token [0, total) of its owner; background elsewhere
    background,     // background everywhere (a decode pool before the hand-off)
    decode_after,   // tokens [prefix, total) of the owner; background elsewhere
};

// One rank's pool storage, contiguous: [layers_kv, num_blocks, heads, kPageSize, D].
struct PoolPattern {
    uint16_t* storage = nullptr;
    int layers = 0;
    int num_blocks = 0;
    int heads = 0;
    int global_head0 = 0;   // the model's KV head of local head 0
    uint32_t salt = 0;      // background of this side and rank
    const BlockOwner* owner = nullptr;          // device [num_blocks]
    const PatternRequest* requests = nullptr;   // device [requests]
};

struct Mismatches {
    uint64_t count = 0;
    uint64_t first = 0;  // element index of the first (lowest) mismatch, when count > 0
};

void fill_pool(const PoolPattern& p, PoolContent content, cudaStream_t stream = nullptr);
Mismatches count_pool_mismatches(const PoolPattern& p, PoolContent content);
// "layer 3 V, block 17, head 1, slot 5, d 64" for a PoolPattern element index.
std::string describe_pool_element(const PoolPattern& p, uint64_t index);

// Staging chunks hold tokens [token_begin, + tokens) of one request:
// [layers_kv, tokens, num_heads, D] at offset_bytes, heads global_head0...
struct StagingPattern {
    int64_t offset_bytes = 0;
    int global_head0 = 0;
    int num_heads = 0;
};
void fill_staging(void* staging, const std::vector<StagingPattern>& chunks, int layers, int tokens, uint32_t request,
                  int token_begin, cudaStream_t stream = nullptr);
Mismatches count_staging_mismatches(const void* staging, const std::vector<StagingPattern>& chunks, int layers, int tokens,
                                    uint32_t request, int token_begin);

}  // namespace lesson07
