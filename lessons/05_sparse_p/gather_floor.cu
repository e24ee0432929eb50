// The gathers of gather_floor.h. One work item per (sequence, page, KV head): the page's
// first row in the pools and which of its rows to read, of K and of V. A CTA of 256
// threads takes U items and issues all of their loads before it uses any, so each thread
// keeps up to 2 U 16-byte loads in flight; the items are the only other bytes read (16
// per 8 KiB page pair, 0.2 %).
#include "gather_floor.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "cuda_check.cuh"
#include "device_buffer.cuh"
#include "device_info.cuh"
#include "dispatch.cuh"
#include "gated_tile.cuh"
#include "table.h"
#include "timer.cuh"

namespace lesson05 {

namespace {

constexpr int kGatherThreads = 256;
constexpr int kPiecesPerRow = kHeadSize * 2 / 16;  // 16-byte pieces of a row of 16-bit elements

struct GatherItem {
    int row0;         // [block, kv_head, 0, 0] in rows of D: (block * Hkv + kv_head) * block_size
    unsigned k_rows;  // bit r: read K row r of the page
    unsigned v_rows;  // bit r: read V row r of the page
    int unused;
};

// PIECES 16-byte pieces per thread per page: 1 for pages of up to 16 tokens, 2 up to 32.
template <int U, int PIECES>
__global__ void gather_kernel(const uint4* __restrict__ k, const uint4* __restrict__ v,
                              const GatherItem* __restrict__ items, int n, int block_size, unsigned* sink) {
    const int pieces = block_size * kPiecesPerRow;
    uint4 x[U][PIECES][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int i = blockIdx.x * U + u;
        const GatherItem g = i < n ? items[i] : GatherItem{0, 0u, 0u, 0};
#pragma unroll
        for (int j = 0; j < PIECES; ++j) {
            const int idx = threadIdx.x + j * kGatherThreads;  // piece idx % 16 of row idx / 16
            const int r = idx / kPiecesPerRow;
            const size_t at = static_cast<size_t>(g.row0) * kPiecesPerRow + idx;
            const bool in = idx < pieces;
            x[u][j][0] = in && (g.k_rows >> r & 1u) ? __ldcs(k + at) : make_uint4(0u, 0u, 0u, 0u);
            x[u][j][1] = in && (g.v_rows >> r & 1u) ? __ldcs(v + at) : make_uint4(0u, 0u, 0u, 0u);
        }
    }
    unsigned acc = 0;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
        for (int j = 0; j < PIECES; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) acc ^= x[u][j][e].x ^ x[u][j][e].y ^ x[u][j][e].z ^ x[u][j][e].w;
    if (acc == 0x9e3779b9u) sink[0] = acc;  // never, in practice: keeps the loads
}

// Work items of one problem; `needed`: V rows from row_used, else every real row.
std::vector<GatherItem> make_items(const pa::DecodeProblem& p, const std::vector<uint8_t>& row_used, int max_ctx,
                                   bool needed) {
    const pa::DecodeShape& s = p.shape;
    const int bs = s.block_size;
    std::vector<GatherItem> items;
    for (int seq = 0; seq < s.B; ++seq) {
        const int ctx = p.table.context_lens[seq];
        for (int page = 0; page * bs < ctx; ++page) {
            const int rows = std::min(bs, ctx - page * bs);
            const unsigned real = rows >= 32 ? ~0u : (1u << rows) - 1u;
            for (int h = 0; h < s.Hkv; ++h) {
                GatherItem g{(p.table.block(seq, page) * s.Hkv + h) * bs, real, real, 0};
                if (needed) {
                    const uint8_t* used = row_used.data() + (static_cast<size_t>(seq) * s.Hkv + h) * max_ctx + page * bs;
                    g.v_rows = 0;
                    for (int r = 0; r < rows; ++r) g.v_rows |= used[r] ? 1u << r : 0u;
                }
                items.push_back(g);
            }
        }
    }
    return items;
}

}  // namespace

GatherFloor time_gather_floor(const pa::DecodeProblem& p, const std::vector<uint8_t>& row_used, int max_ctx) {
    const pa::DecodeShape& s = p.shape;
    if (s.D != kHeadSize || s.block_size > kGatherMaxBlockSize)  // fp16 and bf16 both take 2 bytes
        throw std::invalid_argument(pa::strf("lesson05 gather floor: D %d and pages of at most %d tokens (got D %d, "
                                             "pages of %d)", kHeadSize, kGatherMaxBlockSize, s.D, s.block_size));
    if (row_used.size() != static_cast<size_t>(s.B) * s.Hkv * max_ctx)
        throw std::invalid_argument("lesson05 gather floor: row_used is not [B][Hkv][max_ctx]");
    const pa::DeviceInfo& info = pa::current_device_info();
    const size_t pool = p.cache.elements() * 2 / sizeof(uint4);  // 16-byte pieces per pool
    const int copies = pa::cold_copies(s.kv_bytes(), info.l2_bytes);
    std::vector<pa::DeviceBuffer<uint4>> k(copies), v(copies);
    for (int c = 0; c < copies; ++c) {
        k[c].allocate(pool);
        v[c].allocate(pool);
        k[c].fill_bytes(0x5a);
        v[c].fill_bytes(0x5a);
    }
    pa::DeviceBuffer<unsigned> sink(1);
    auto fastest = [&](bool needed) {
        const std::vector<GatherItem> host = make_items(p, row_used, max_ctx, needed);
        const pa::DeviceBuffer<GatherItem> items(host);
        const int n = static_cast<int>(host.size());
        double best = std::numeric_limits<double>::infinity();
        auto time = [&](auto kernel, int u) {
            const int grid = (n + u - 1) / u;
            const pa::Timing t = pa::time_kernel(
                [&](int c) {
                    kernel<<<grid, kGatherThreads>>>(k[c].get(), v[c].get(), items.get(), n, s.block_size, sink.get());
                    CUDA_CHECK_LAUNCH();
                },
                copies, 10, 100);
            best = std::min(best, t.us_median);
        };
        const int pieces = (s.block_size * kPiecesPerRow + kGatherThreads - 1) / kGatherThreads;  // per thread: 1 or 2
        pa::dispatch_int<1, 2>(pieces, [&](auto pc) {
            time(gather_kernel<1, pc.value>, 1);
            time(gather_kernel<2, pc.value>, 2);
            time(gather_kernel<4, pc.value>, 4);
            return true;
        });
        return best;
    };
    GatherFloor f;
    f.dense_us = fastest(false);
    f.needed_us = fastest(true);
    return f;
}

}  // namespace lesson05
