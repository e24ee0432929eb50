// Lesson 07's kernels, compiled once: the launchers of gather and scatter, and the
// fill / compare kernels of the check.
#include "staging.h"

#include <algorithm>
#include <climits>

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "device_math.cuh"
#include "kv_pattern.h"
#include "staging_kernels.cuh"
#include "table.h"

namespace lesson07 {

namespace {

// The launch arguments both copy kernels share, checked once.
struct CopyLaunch {
    dim3 grid;
    ChunkList chunks{};
    bool empty = false;
};

CopyLaunch plan_copy(const char* what, const PoolRef& pool, int token_begin, int num_tokens, const std::vector<Chunk>& chunks,
                     const void* staging, int first_layer_kv, int count_layer_kv) {
    auto fail = [&](const std::string& why) { throw pa::CudaError(std::string(what) + ": " + why); };
    CopyLaunch l;
    if (num_tokens < 0 || token_begin < 0) fail("negative token range");
    if (chunks.empty() || chunks.size() > static_cast<size_t>(kMaxChunks))
        fail(pa::strf("%zu chunks in one launch (1 to %d)", chunks.size(), kMaxChunks));
    if (first_layer_kv < 0 || count_layer_kv < 1 || first_layer_kv + count_layer_kv > pool.layers_kv || count_layer_kv > 65535)
        fail(pa::strf("layers [%d, +%d) outside the pool's %d", first_layer_kv, count_layer_kv, pool.layers_kv));
    l.empty = num_tokens == 0;
    if (l.empty) return l;
    if (!pool.layers || !staging) fail("null pool or staging pointer");
    const long long layer_vectors = static_cast<long long>(num_tokens) * kVecsPerRow;
    for (size_t i = 0; i < chunks.size(); ++i) {
        const Chunk& c = chunks[i];
        if (c.num_heads < 1 || c.pool_head_start < 0 || c.pool_head_start + c.num_heads > pool.heads)
            fail(pa::strf("chunk %zu: heads [%d, +%d) outside the pool's %d", i, c.pool_head_start, c.num_heads, pool.heads));
        if (c.staging_offset < 0 || c.staging_offset % kVecBytes != 0)
            fail(pa::strf("chunk %zu: staging offset %lld is not a multiple of %d bytes", i, static_cast<long long>(c.staging_offset), kVecBytes));
        // a per-layer launch starts `first_layer_kv` layers into the chunk
        l.chunks.chunk[i] = {c.pool_head_start, c.num_heads,
                             c.staging_offset / kVecBytes + first_layer_kv * layer_vectors * c.num_heads};
    }
    if (reinterpret_cast<uintptr_t>(staging) % kVecBytes != 0) fail("staging buffer is not 16-byte aligned");
    l.chunks.count = static_cast<int>(chunks.size());
    l.grid = dim3((num_tokens + kTileTokens - 1) / kTileTokens, count_layer_kv, static_cast<unsigned>(chunks.size()));
    return l;
}

__global__ void busy_wait_kernel(unsigned long long ns) {
    const unsigned long long start = pa::globaltimer_ns();
    while (pa::globaltimer_ns() - start < ns) {
    }
}

// ---- pattern kernels: each thread handles 16-byte vectors (8 elements) at a time

__device__ uint16_t pool_expected(const PoolPattern& p, PoolContent content, int layer_kv, int block, int head, int slot, int d) {
    const BlockOwner o = p.owner[block];
    if (content != PoolContent::background && o.request >= 0) {
        const PatternRequest r = p.requests[o.request];
        const int t = o.page * kPageSize + slot;
        const bool handed = content == PoolContent::prefill ? t < r.total : (t >= r.prefix && t < r.total);
        if (handed) return kv_value(r.id, layer_kv % p.layers, layer_kv / p.layers, p.global_head0 + head, t, d);
    }
    return background(p.salt, layer_kv, block, head, slot, d);
}

// [layers_kv, num_blocks, heads, kPageSize, D] -> the 8 expected elements of vector v
__device__ void pool_expected8(const PoolPattern& p, PoolContent content, size_t v, uint16_t (&e)[8]) {
    const int d0 = static_cast<int>(v % kVecsPerRow) * 8;
    size_t rest = v / kVecsPerRow;
    const int slot = static_cast<int>(rest % kPageSize);
    rest /= kPageSize;
    const int head = static_cast<int>(rest % p.heads);
    rest /= p.heads;
    const int block = static_cast<int>(rest % p.num_blocks);
    const int layer_kv = static_cast<int>(rest / p.num_blocks);
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = pool_expected(p, content, layer_kv, block, head, slot, d0 + i);
}

__device__ void count_mismatches8(const uint4& got, const uint16_t (&e)[8], size_t v, unsigned long long* result) {
    uint16_t g[8];
    memcpy(g, &got, sizeof g);
    int bad = 0, first = -1;
#pragma unroll
    for (int i = 0; i < 8; ++i)
        if (g[i] != e[i]) {
            ++bad;
            if (first < 0) first = i;
        }
    if (bad) {
        atomicAdd(result, static_cast<unsigned long long>(bad));
        atomicMin(result + 1, static_cast<unsigned long long>(v * 8 + first));
    }
}

__global__ void pool_pattern_kernel(PoolPattern p, PoolContent content, bool check, unsigned long long* result) {
    const size_t vectors = static_cast<size_t>(2) * p.layers * p.num_blocks * p.heads * kPageSize * kVecsPerRow;
    uint4* data = reinterpret_cast<uint4*>(p.storage);
    for (size_t v = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; v < vectors;
         v += static_cast<size_t>(gridDim.x) * blockDim.x) {
        uint16_t e[8];
        pool_expected8(p, content, v, e);
        if (check) count_mismatches8(data[v], e, v, result);
        else memcpy(&data[v], e, sizeof e);
    }
}

struct StagingPatternList {
    StagingPattern chunk[kMaxChunks];
};

// grid.y = chunk; each chunk [layers_kv, tokens, num_heads, D]
__global__ void staging_pattern_kernel(uint4* staging, StagingPatternList list, int layers, int tokens, uint32_t request,
                                       int token_begin, bool check, unsigned long long* result) {
    const StagingPattern c = list.chunk[blockIdx.y];
    const size_t vectors = static_cast<size_t>(2) * layers * tokens * c.num_heads * kVecsPerRow;
    uint4* data = staging + c.offset_bytes / kVecBytes;
    for (size_t v = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; v < vectors;
         v += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const int d0 = static_cast<int>(v % kVecsPerRow) * 8;
        size_t rest = v / kVecsPerRow;
        const int h = static_cast<int>(rest % c.num_heads);
        rest /= c.num_heads;
        const int t = static_cast<int>(rest % tokens);
        const int layer_kv = static_cast<int>(rest / tokens);
        uint16_t e[8];
#pragma unroll
        for (int i = 0; i < 8; ++i)
            e[i] = kv_value(request, layer_kv % layers, layer_kv / layers, c.global_head0 + h, token_begin + t, d0 + i);
        if (check) count_mismatches8(data[v], e, v + c.offset_bytes / kVecBytes, result);
        else memcpy(&data[v], e, sizeof e);
    }
}

constexpr int kPatternThreads = 256;
constexpr int kPatternBlocks = 4096;  // at most; a small pool gets a grid its size (fast under the sanitizer)

unsigned pattern_blocks(size_t vectors, int most) {
    const size_t need = (vectors + kPatternThreads - 1) / kPatternThreads;
    return static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(need, static_cast<size_t>(most))));
}

size_t pool_vectors(const PoolPattern& p) {
    return static_cast<size_t>(2) * p.layers * p.num_blocks * p.heads * kPageSize * kVecsPerRow;
}

unsigned staging_blocks(const std::vector<StagingPattern>& chunks, int layers, int tokens) {
    size_t most = 0;
    for (const auto& c : chunks) most = std::max(most, static_cast<size_t>(2) * layers * tokens * c.num_heads * kVecsPerRow);
    return pattern_blocks(most, kPatternBlocks / 4);
}

Mismatches read_result(const pa::DeviceBuffer<unsigned long long>& result) {
    const std::vector<unsigned long long> r = result.download();  // synchronizes
    return {r[0], r[0] ? r[1] : 0};
}

pa::DeviceBuffer<unsigned long long> fresh_result() {
    return pa::DeviceBuffer<unsigned long long>(std::vector<unsigned long long>{0ULL, ~0ULL});
}

StagingPatternList to_list(const std::vector<StagingPattern>& chunks) {
    if (chunks.empty() || chunks.size() > static_cast<size_t>(kMaxChunks))
        throw pa::CudaError(pa::strf("staging pattern: %zu chunks (1 to %d)", chunks.size(), kMaxChunks));
    StagingPatternList l{};
    for (size_t i = 0; i < chunks.size(); ++i) l.chunk[i] = chunks[i];
    return l;
}

}  // namespace

void launch_gather(const PoolRef& pool, const int* page_table, int token_begin, int num_tokens,
                   const std::vector<Chunk>& chunks, void* staging, int first_layer_kv, int count_layer_kv,
                   cudaStream_t stream) {
    const CopyLaunch l = plan_copy("gather", pool, token_begin, num_tokens, chunks, staging, first_layer_kv, count_layer_kv);
    if (l.empty) return;
    gather_to_staging_kernel<<<l.grid, kCopyThreads, 0, stream>>>(
        reinterpret_cast<const uint4* const*>(pool.layers) + first_layer_kv, page_table, token_begin, num_tokens,
        pool.heads, l.chunks, static_cast<uint4*>(staging));
    CUDA_CHECK_LAUNCH();
}

void launch_scatter(const PoolRef& pool, const int* page_table, int token_begin, int num_tokens,
                    const std::vector<Chunk>& chunks, const void* staging, int first_layer_kv, int count_layer_kv,
                    cudaStream_t stream) {
    const CopyLaunch l = plan_copy("scatter", pool, token_begin, num_tokens, chunks, staging, first_layer_kv, count_layer_kv);
    if (l.empty) return;
    scatter_from_staging_kernel<<<l.grid, kCopyThreads, 0, stream>>>(
        reinterpret_cast<uint4* const*>(pool.layers) + first_layer_kv, page_table, token_begin, num_tokens, pool.heads,
        l.chunks, static_cast<const uint4*>(staging));
    CUDA_CHECK_LAUNCH();
}

void launch_busy_wait(unsigned long long ns, cudaStream_t stream) {
    busy_wait_kernel<<<1, 1, 0, stream>>>(ns);
    CUDA_CHECK_LAUNCH();
}

void fill_pool(const PoolPattern& p, PoolContent content, cudaStream_t stream) {
    pool_pattern_kernel<<<pattern_blocks(pool_vectors(p), kPatternBlocks), kPatternThreads, 0, stream>>>(p, content, false, nullptr);
    CUDA_CHECK_LAUNCH();
}

Mismatches count_pool_mismatches(const PoolPattern& p, PoolContent content) {
    pa::DeviceBuffer<unsigned long long> result = fresh_result();
    pool_pattern_kernel<<<pattern_blocks(pool_vectors(p), kPatternBlocks), kPatternThreads>>>(p, content, true, result.get());
    CUDA_CHECK_LAUNCH();
    return read_result(result);
}

std::string describe_pool_element(const PoolPattern& p, uint64_t index) {
    const int d = static_cast<int>(index % kHeadDim);
    uint64_t rest = index / kHeadDim;
    const int slot = static_cast<int>(rest % kPageSize);
    rest /= kPageSize;
    const int head = static_cast<int>(rest % p.heads);
    rest /= p.heads;
    const int block = static_cast<int>(rest % p.num_blocks);
    const int layer_kv = static_cast<int>(rest / p.num_blocks);
    return pa::strf("layer %d %s, block %d, head %d (model head %d), slot %d, d %d", layer_kv % p.layers,
                    layer_kv < p.layers ? "K" : "V", block, head, p.global_head0 + head, slot, d);
}

void fill_staging(void* staging, const std::vector<StagingPattern>& chunks, int layers, int tokens, uint32_t request,
                  int token_begin, cudaStream_t stream) {
    if (tokens == 0) return;
    const dim3 grid(staging_blocks(chunks, layers, tokens), static_cast<unsigned>(chunks.size()));
    staging_pattern_kernel<<<grid, kPatternThreads, 0, stream>>>(static_cast<uint4*>(staging), to_list(chunks), layers, tokens,
                                                                 request, token_begin, false, nullptr);
    CUDA_CHECK_LAUNCH();
}

Mismatches count_staging_mismatches(const void* staging, const std::vector<StagingPattern>& chunks, int layers, int tokens,
                                    uint32_t request, int token_begin) {
    if (tokens == 0) return {};
    pa::DeviceBuffer<unsigned long long> result = fresh_result();
    const dim3 grid(staging_blocks(chunks, layers, tokens), static_cast<unsigned>(chunks.size()));
    staging_pattern_kernel<<<grid, kPatternThreads>>>(static_cast<uint4*>(const_cast<void*>(staging)), to_list(chunks), layers,
                                                      tokens, request, token_begin, true, result.get());
    CUDA_CHECK_LAUNCH();
    return read_result(result);
}

}  // namespace lesson07
