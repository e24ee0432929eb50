// Lesson 03, step 8: the partitions of a (sequence, KV head) as one thread-block cluster, their
// slices merged through distributed shared memory: one launch, no scratch, no reduce (sm_90).
//
// What changed since step 7 (step7_flat_merge.cuh), and why: with its math and its copies
// taken out (timing-only builds, NOTES.md "The cluster merge"), step 7 behind lesson 04's reduce still
// takes 12 us on mqa-B64-ctx2k, of the 29 it takes whole: the launch, q, each CTA merging its
// four slices into one partition state, that state written to scratch, then the reduce, a
// second launch that waits for the whole grid and reads the scratch back. On sm_90 the
// partitions of one (sequence, KV head) can run as one cluster (grid (Hkv, B, P), cluster
// dims (1, 1, P), so a CTA's rank in its cluster is its partition); its CTAs run at the same
// time and can read each other's shared memory:
//  * each CTA leaves its slices' states (m, l and the unnormalised O of every head, as step 7
//    writes them before merging) in its own shared memory, the ring nothing reads any more;
//  * a cluster barrier (arrive.release, wait.acquire) says every CTA's states are there;
//  * then each CTA of the cluster finishes a share of the outputs (four dims of one head an
//    item): it loads m, l and the four O values of every slice of every partition that holds
//    a token (ld.shared::cluster, all in flight before the first is used), weighs them by
//    e^(m - M) as the reduce does, and writes out = sum / l: one merge instead of step 7's two;
//  * a second cluster barrier keeps every CTA, and so its shared memory, alive until the
//    others have read it.
// A partition past its sequence's end returns at once and is left out of the sums (a
// barrier.cluster waits for the threads that have not exited, and so does not wait for it,
// nor for the producer warps, which return after their last copy). At most 4 partitions
// (kClusterMostParts, split_plan.h: the loads of 16 slices in flight fit a thread's
// registers; the kernel is built for 2 and for 4, so that 2 partitions hold registers for 8
// slices, not 16); a plan of more runs step 7, and so does a grid whose clusters do not all fit the GPU at once
// (lesson03::why_not asks the driver). The partitions start in the grid's order: a cluster is
// one (sequence, KV head), so there is no longest-first order. The cluster's PTX:
// common/cluster.cuh.
// Run: lesson03_split_k [--check | --bench] [--shape NAME] --variant cluster_merge
#pragma once

#include "cluster.cuh"           // the cluster's barrier and loads (sm_90)
#include "step6_head_rows.cuh"  // HeadRowLayout, the producers, RowOrder, partition_tokens

namespace lesson03 {

// Grid (Hkv, B, P) in clusters of (1, 1, P), P <= PARTS <= kClusterMostParts (PARTS: 2 or 4, the
// partitions the merge has registers for), kMmaThreads threads, step 7's layout; no scratch.
template <class scalar_t, int HEAD_SIZE, int ROWS, bool UNITS, int PARTS>
__global__ void __launch_bounds__(kMmaThreads, 1)
cluster_merge_kernel(scalar_t* __restrict__ out,          // [B, H, D]
                  const scalar_t* __restrict__ q,         // [B, H, D]
                  const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
                  const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
                  const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
                  const int* __restrict__ context_lens,   // [B]
                  int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale,
                  int partition_size, int splits) {
    using L = HeadRowLayout<HEAD_SIZE, ROWS>;
    constexpr int kRow = L::kRow;
    constexpr int kTile = L::kTile;
    constexpr int kStages = L::kStages;
    using Order = std::conditional_t<UNITS, lesson02::UnitTile<HEAD_SIZE>, RowOrder<HEAD_SIZE>>;

    const int seq = blockIdx.y;
    const int kv_head = blockIdx.x;
    const int part = pa::cluster_rank();  // blockIdx.z: the cluster is the grid's z
    const int first_head = kv_head * group;
    const int num_heads = group;  // <= ROWS
    const int ctx = context_lens[seq];
    const int part_tokens = partition_tokens(ctx, partition_size, splits);
    const int t_begin = part * part_tokens;
    const int t_end = min(ctx, t_begin + part_tokens);
    const int* seq_pages = block_table + static_cast<size_t>(seq) * max_blocks_per_seq;
    const int num_stream_tiles = 2 * ((t_end - t_begin + kTile - 1) / kTile);  // K0 V0 K1 V1 ...
    const int live = min(static_cast<int>(gridDim.z), (ctx + part_tokens - 1) / part_tokens);  // those with a token
    if (t_begin >= ctx) return;  // past the sequence's end: left out of the merge

    extern __shared__ __align__(16) float smem[];
    scalar_t* tiles = reinterpret_cast<scalar_t*>(smem);   // [kStages][kTile][kRow]
    scalar_t* q_tile = tiles + kStages * kTile * kRow;     // [ROWS][kRow]: row h = query head first_head + h
    __shared__ uint64_t full[kStages], empty[kStages];

    if (threadIdx.x == 0) {
        for (int i = 0; i < kStages; ++i) {
            pa::mbarrier_init(&full[i], kProducerThreads);
            pa::mbarrier_init(&empty[i], kConsumerThreads);
        }
    }
    __syncthreads();  // the last CTA-wide barrier: from here on the two roles only meet at full/empty

    if constexpr (UNITS) {
        if (threadIdx.x >= kConsumerThreads) {
            run_unit_producers<scalar_t, HEAD_SIZE, kStages>(threadIdx.x - kConsumerThreads, k_cache, v_cache, seq_pages,
                                                             Hkv, kv_head, block_size, t_begin, t_end, tiles, full, empty);
            return;
        }
    }
    if (threadIdx.x >= kConsumerThreads) {  // producers: the partition kernel's, unchanged
        constexpr int kLag = kStages - 2;
        TileProducer<scalar_t, HEAD_SIZE> producer(threadIdx.x - kConsumerThreads, k_cache, v_cache, seq_pages, Hkv,
                                                   kv_head, block_size, t_begin, t_end);
        for (int s = 0; s < num_stream_tiles; ++s) {
            const int slot = s % kStages;
            if (s >= kStages) pa::mbarrier_wait(&empty[slot], (s / kStages + 1) & 1);
            producer.issue(tiles + slot * kTile * kRow, s);
            if (s >= kLag) {
                pa::cp_async_wait<kLag>();
                pa::mbarrier_arrive(&full[(s - kLag) % kStages]);
            }
        }
        pa::cp_async_wait<0>();
        for (int s = max(0, num_stream_tiles - kLag); s < num_stream_tiles; ++s) pa::mbarrier_arrive(&full[s % kStages]);
        return;
    }

    // Consumers. q rows of the group, 16 bytes at a time: q_tile[h][d] = q[seq, first_head + h, d]
    constexpr int kPiecesPerRow = HEAD_SIZE / 8;
    for (int i = threadIdx.x; i < ROWS * kPiecesPerRow; i += kConsumerThreads) {
        const int h = i / kPiecesPerRow, piece = i % kPiecesPerRow;
        uint4 w = make_uint4(0, 0, 0, 0);
        if (h < num_heads)
            w = *reinterpret_cast<const uint4*>(q + (static_cast<size_t>(seq) * H + first_head + h) * HEAD_SIZE + piece * 8);
        *reinterpret_cast<uint4*>(q_tile + h * kRow + piece * 8) = w;
    }
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();

    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const int g = lane / 4, c = lane % 4;      // fragment row and column pair (see mma.cuh)
    const int row_block = warp / L::kSlices;   // heads row_block * 16 .. + 16
    const int slice = warp % L::kSlices;       // tokens slice * kSliceTokens .. + kSliceTokens of every tile
    const int tok0 = slice * L::kSliceTokens;  // the slice's first slot (Order maps slots to tokens)
    const scalar_t* q_rows = q_tile + row_block * 16 * kRow;

    // This warp's running state for heads row_block*16 + g (index 0) and + g + 8 (index 1):
    // o[j] = {(h g, d 8j+2c), (h g, d 8j+2c+1), (h g+8, d 8j+2c), (h g+8, d 8j+2c+1)}; l is
    // this thread's share of the row sum (its quad adds the four shares after the loop).
    float o[L::kONTiles][4];
#pragma unroll
    for (int j = 0; j < L::kONTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[j][e] = 0.f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
    uint32_t p_frag[L::kPvKSteps][4];  // P of the current token tile as PV's A operand, 16 tokens a step

    for (int s = 0; s < num_stream_tiles; ++s) {
        const int slot = s % kStages;
        const scalar_t* buf = tiles + slot * kTile * kRow;          // [kTile][kRow] in Order, V rows past the end are zero
        const int n = min(kTile, t_end - t_begin - s / 2 * kTile);  // tokens of this token tile
        // the slice holds at least one token: its first slot holds its smallest token (rows:
        // tok0; units: row tok0 / 8 of unit 0)
        const bool slice_on = Order::token_of(tok0) < n;
        pa::mbarrier_wait(&full[slot], (s / kStages) & 1);

        if (s % 2 == 0) {
            if (slice_on) {
                // 1. S[h][t] = q[h] . K[t] for this warp's 16 heads x kSliceTokens tokens.
                float sc[L::kSNTiles][4];
#pragma unroll
                for (int j = 0; j < L::kSNTiles; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) sc[j][e] = 0.f;
#pragma unroll
                for (int ks = 0; ks < HEAD_SIZE / 16; ++ks) {
                    uint32_t a[4];
                    // A: heads lane % 16, dims ks*16 + (lane / 16) * 8 .. + 8
                    pa::ldmatrix_x4(a, q_rows + (lane % 16) * kRow + ks * 16 + lane / 16 * 8);
#pragma unroll
                    for (int jp = 0; jp < L::kSNTiles / 2; ++jp) {
                        uint32_t b[4];
                        // B = K^T, two 8-slot blocks: slots tok0 + jp*16 + (lane % 8) + (lane / 16) * 8,
                        // dims ks*16 + (lane / 8 % 2) * 8 .. + 8
                        pa::ldmatrix_x4(b, buf + Order::slot_offset(tok0 + jp * 16 + lane % 8 + lane / 16 * 8) + ks * 16 +
                                               lane / 8 % 2 * 8);
                        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
                        pa::mma_16816<scalar_t>(sc[2 * jp], a, b0);
                        pa::mma_16816<scalar_t>(sc[2 * jp + 1], a, b1);
                    }
                }
                // 2. The online softmax on the fragment: scale, mask tokens past the end, the
                //    rows' max over the quad, rescale O and l, p = exp(s - m) packed for PV.
                float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int j = 0; j < L::kSNTiles; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int t = tok0 + j * 8 + 2 * c + (e & 1);  // a slot
                        sc[j][e] = Order::token_of(t) < n ? sc[j][e] * scale : -INFINITY;
                        tile_max[e >> 1] = fmaxf(tile_max[e >> 1], sc[j][e]);
                    }
                float ref[2], alpha[2];
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
                    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
                    const float m_new = fmaxf(m_run[r], tile_max[r]);  // finite: the slice holds a token
                    ref[r] = m_new;
                    alpha[r] = __expf(m_run[r] - m_new);  // 0 on this warp's first tile (m_run = -inf)
                    m_run[r] = m_new;
                    l_run[r] *= alpha[r];
                }
#pragma unroll
                for (int j = 0; j < L::kONTiles; ++j) {
                    o[j][0] *= alpha[0];
                    o[j][1] *= alpha[0];
                    o[j][2] *= alpha[1];
                    o[j][3] *= alpha[1];
                }
#pragma unroll
                for (int j = 0; j < L::kSNTiles; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        sc[j][e] = __expf(sc[j][e] - ref[e >> 1]);  // 0 past the end
                        l_run[e >> 1] += sc[j][e];
                    }
                // C of S's blocks 2kk and 2kk + 1 is the A of PV's 16-token step kk.
#pragma unroll
                for (int kk = 0; kk < L::kPvKSteps; ++kk) {
                    p_frag[kk][0] = pa::pack2(sc[2 * kk][0], sc[2 * kk][1], scalar_t{});
                    p_frag[kk][1] = pa::pack2(sc[2 * kk][2], sc[2 * kk][3], scalar_t{});
                    p_frag[kk][2] = pa::pack2(sc[2 * kk + 1][0], sc[2 * kk + 1][1], scalar_t{});
                    p_frag[kk][3] = pa::pack2(sc[2 * kk + 1][2], sc[2 * kk + 1][3], scalar_t{});
                }
            }
            pa::release_slot<UNITS>(&empty[slot]);  // this thread is done with the K tile
            continue;
        }

        // 3. O[h][d] += P[h][t] V[t][d] over the slice, two 8-dim blocks per ldmatrix.
        if (slice_on) {
#pragma unroll
            for (int kk = 0; kk < L::kPvKSteps; ++kk)
#pragma unroll
                for (int dp = 0; dp < HEAD_SIZE / 16; ++dp) {
                    uint32_t b[4];
                    // B = V: slots tok0 + kk*16 + (lane % 8) + (lane / 8 % 2) * 8, dims dp*16 + (lane / 16) * 8 .. + 8
                    pa::ldmatrix_x4_trans(b, buf + Order::slot_offset(tok0 + kk * 16 + lane % 8 + lane / 8 % 2 * 8) +
                                                 dp * 16 + lane / 16 * 8);
                    const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
                    pa::mma_16816<scalar_t>(o[2 * dp], p_frag[kk], b0);
                    pa::mma_16816<scalar_t>(o[2 * dp + 1], p_frag[kk], b1);
                }
        }
        pa::release_slot<UNITS>(&empty[slot]);  // this thread is done with the V tile
    }

    // 4. Each slice's state (m, l, O of its 16 heads) into the (now idle) ring, as step 7 writes
    //    it; then one merge over the slices of every partition of the cluster.
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // the quad's four shares of each row sum
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
    }
    constexpr int kORow = HEAD_SIZE + 8;  // a warp's 8 rows g of one write: 8 different bank pairs
    float* merge_m = smem;                          // [kSlices][ROWS]
    float* merge_l = merge_m + L::kSlices * ROWS;   // [kSlices][ROWS]
    float* merge_o = merge_l + L::kSlices * ROWS;   // [kSlices][ROWS][kORow]
    static_assert(L::kSlices * ROWS * (2 + kORow) * 4 <= L::kStages * L::kTileBytes, "the states fit the ring");
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // every consumer is done with the ring
    {
        const int h0 = row_block * 16 + g;  // this thread's rows: h0 and h0 + 8
        if (c == 0) {
            merge_m[slice * ROWS + h0] = m_run[0];
            merge_m[slice * ROWS + h0 + 8] = m_run[1];
            merge_l[slice * ROWS + h0] = l_run[0];
            merge_l[slice * ROWS + h0 + 8] = l_run[1];
        }
        float* o0 = merge_o + (slice * ROWS + h0) * kORow;
#pragma unroll
        for (int j = 0; j < L::kONTiles; ++j) {
            *reinterpret_cast<float2*>(o0 + j * 8 + 2 * c) = make_float2(o[j][0], o[j][1]);
            *reinterpret_cast<float2*>(o0 + 8 * kORow + j * 8 + 2 * c) = make_float2(o[j][2], o[j][3]);
        }
    }
    // 5. Every CTA's states are in its shared memory once the cluster barrier completes. Items
    //    (four dims of one head) go round the live CTAs, kConsumerThreads at a time; for each,
    //    every live slice's m, l and O are loaded first (a slice that saw no token has m = -inf
    //    and weighs 0), then weighed by e^(m - M) and summed in order, partition by partition.
    pa::cluster_sync();
    constexpr int kQuads = HEAD_SIZE / 4;
    static_assert(PARTS <= kClusterMostParts, "a cluster merges at most kClusterMostParts partitions");
    constexpr int kStates = PARTS * L::kSlices;
    for (int i = part * kConsumerThreads + threadIdx.x; i < num_heads * kQuads; i += live * kConsumerThreads) {
        const int h = i / kQuads, q4 = i % kQuads;
        float ms[kStates], ls[kStates];
        float4 os[kStates];
#pragma unroll
        for (int e = 0; e < kStates; ++e) {
            const int p = e / L::kSlices, sl = e % L::kSlices;
            ms[e] = -INFINITY;
            ls[e] = 0.f;
            os[e] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (p < live) {
                ms[e] = pa::load_shared_cluster(merge_m + sl * ROWS + h, p);
                ls[e] = pa::load_shared_cluster(merge_l + sl * ROWS + h, p);
                const float* o = merge_o + (sl * ROWS + h) * kORow + 4 * q4;
                os[e] = pa::load_shared_cluster(reinterpret_cast<const float4*>(o), p);
            }
        }
        float M = -INFINITY;
#pragma unroll
        for (int e = 0; e < kStates; ++e) M = fmaxf(M, ms[e]);  // finite: partition 0's slice 0 holds a token
        float l = 0.f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int e = 0; e < kStates; ++e) {
            const float w = __expf(ms[e] - M);  // 0 for a slice with no token and past the live partitions
            l = fmaf(w, ls[e], l);
            acc.x = fmaf(w, os[e].x, acc.x);
            acc.y = fmaf(w, os[e].y, acc.y);
            acc.z = fmaf(w, os[e].z, acc.z);
            acc.w = fmaf(w, os[e].w, acc.w);
        }
        const float inv = 1.f / l;
        const uint2 packed = make_uint2(pa::pack2(acc.x * inv, acc.y * inv, scalar_t{}),
                                        pa::pack2(acc.z * inv, acc.w * inv, scalar_t{}));
        *reinterpret_cast<uint2*>(out + (static_cast<size_t>(seq) * H + first_head + h) * HEAD_SIZE + 4 * q4) = packed;
    }
    pa::cluster_sync();  // every CTA has read the others' states: their shared memory may go
}

}  // namespace lesson03
