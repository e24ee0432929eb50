// Lesson 03, step 6: head rows: for a large group (MQA, and GQA groups of 9..32 heads), the
// group's query heads become the ROWS of every mma and the softmax stays in registers.
// (208 to 213 KiB of shared memory a CTA: sm_90 only; elsewhere steps 3 to 5 run the shape,
// or steps 1 and 2 where those do not fit either.)
//
// What changed since step 5 (step5_unit_copies.cuh), and why: with 32 query heads on one KV head the
// partition kernel is not short of bytes but of time per token tile. It puts the heads on
// the 8-wide n side of the mma, so every tile goes QK -> logits in shared memory -> barrier
// -> softmax, one warp per head, four heads a warp in turn -> barrier -> PV: two CTA-wide
// barriers and a chain of warp shuffles per tile, with eight warps that mostly wait on each
// other (NOTES.md, "Head rows for MQA", has the measurement).
// FlashAttention-2's prefill loop has no such chain, and a decode step of a large group is
// a prefill with the group's heads as its query rows (FlashInfer's tensor-core decode):
//  * S[head][token] = Q K^T with Q as A (16 heads x 16 dims, from shared memory) and the
//    staged K rows as B: each warp owns 16 heads and one slice of every token tile
//    (32 tokens for 32 heads: 2 head blocks x 4 slices = the 8 consumer warps).
//  * The softmax runs on the accumulator fragment: a thread holds two rows (heads g and
//    g + 8) of its slice; a row's max is two quad shuffles away; p = exp(s - m) is packed
//    straight into the A operand of the PV mma (the C layout of one mma is the A layout of
//    the next), O += P V with the staged V rows as B (ldmatrix .trans).
//  * So the warps never wait for each other inside the loop: no logits in shared memory, no
//    barrier, only the ring's full/empty mbarriers. Each warp keeps its own running (m, l, O)
//    over its slices; after the loop the 4 (or 8) slice states of a head are merged through
//    shared memory, the same merge as split-k's reduce, and written to scratch as this
//    partition's (m, l, acc). The reduce, the sentinel and the fused merge are unchanged.
//  * A slice with no token in a tile is skipped; a warp whose slices never see a token keeps
//    m = -inf, l = 0, O = 0, i.e. a sentinel, which the merge weighs 0 (partition 0's first
//    slice always holds a token, so each head's merged m is finite).
// The producers (TileProducer, the ring) are the partition kernel's, unchanged; UNITS (sm_90)
// takes its unit copies too, and the warps' slices are then slices of the tile's slots.
// Run: lesson03_split_k [--check | --bench] [--shape NAME] --variant head_rows
#pragma once

#include "step5_unit_copies.cuh"  // the producers, RowOrder, partition_tokens, cta_cell

namespace lesson03 {

// ROWS: the group's heads rounded up to whole 16-row mma blocks (16 or 32). One CTA per SM:
// the output accumulators (16 heads x D per warp) need the registers of a whole SM.
template <int HEAD_SIZE, int ROWS>
struct HeadRowLayout {
    static constexpr int kTile = tile_tokens(HEAD_SIZE);    // tokens per staged tile
    static constexpr int kRow = tile_row_elems(HEAD_SIZE);  // D + 8 elements: rows padded by 16 bytes
    static constexpr int kRowBlocks = ROWS / 16;            // 16-head blocks
    static constexpr int kSlices = kConsumerWarps / kRowBlocks;  // warps sharing a head block, one slice each
    static constexpr int kSliceTokens = kTile / kSlices;    // 32 (ROWS 32) or 16 (ROWS 16) at D 64 and 128
    static constexpr int kSNTiles = kSliceTokens / 8;       // 8-token column blocks of a slice's S
    static constexpr int kPvKSteps = kSliceTokens / 16;     // 16-token steps of a slice's PV
    static constexpr int kONTiles = HEAD_SIZE / 8;          // 8-dim column blocks of O
    static constexpr int kTileBytes = kTile * kRow * 2;
    static constexpr int kFixedBytes = ROWS * kRow * 2;     // q_tile
    static constexpr int kStages = (kMmaSmemLimit - kFixedBytes) / kTileBytes < 6 ? (kMmaSmemLimit - kFixedBytes) / kTileBytes : 6;
    static constexpr int kSmemBytes = kStages * kTileBytes + kFixedBytes;
    // The slice merge reuses the ring: m, l [kSlices][ROWS] and O [kSlices][ROWS][D] floats.
    static constexpr int kMergeBytes = kSlices * ROWS * (HEAD_SIZE + 2) * 4;
    static_assert(ROWS == 16 || ROWS == 32, "heads are padded to 16 or 32 rows");
    static_assert(HEAD_SIZE == 64 || HEAD_SIZE == 128, "O of 16 heads x D stays in a warp's registers up to D 128");
    static_assert(kSliceTokens % 16 == 0, "a slice is whole 16-token PV steps");
    static_assert(kStages >= 3 && kMergeBytes <= kStages * kTileBytes, "the ring holds three tiles and the merge");
};

// Grid (Hkv, B, max_partitions), kMmaThreads threads, as step 5's split_k_partition_kernel; same
// scratch, sentinel and (FUSED) counters.
template <class scalar_t, int HEAD_SIZE, int ROWS, bool FUSED, bool UNITS>
__global__ void __launch_bounds__(kMmaThreads, 1)
split_k_head_rows_kernel(scalar_t* __restrict__ out,             // [B, H, D] (FUSED only)
                         const scalar_t* __restrict__ q,         // [B, H, D]
                         const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
                         const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
                         const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
                         const int* __restrict__ context_lens,   // [B]
                         int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale,
                         int partition_size, int splits, SplitScratch scratch,
                         unsigned* __restrict__ counters,        // [B * Hkv] (FUSED only)
                         const int2* __restrict__ cell_order) {  // [max_partitions][B] or nullptr (cta_cell)
    using L = HeadRowLayout<HEAD_SIZE, ROWS>;
    constexpr int kRow = L::kRow;
    constexpr int kTile = L::kTile;
    constexpr int kStages = L::kStages;
    using Order = std::conditional_t<UNITS, lesson02::UnitTile<HEAD_SIZE>, RowOrder<HEAD_SIZE>>;

    const int2 cell = cta_cell(cell_order);
    const int seq = cell.x;
    const int kv_head = blockIdx.x;
    const int part = cell.y;
    const int first_head = kv_head * group;
    const int num_heads = group;  // <= ROWS
    const int ctx = context_lens[seq];
    const int part_tokens = partition_tokens(ctx, partition_size, splits);
    const int t_begin = part * part_tokens;
    const int t_end = min(ctx, t_begin + part_tokens);
    const int* seq_pages = block_table + static_cast<size_t>(seq) * max_blocks_per_seq;
    const int num_stream_tiles = 2 * ((t_end - t_begin + kTile - 1) / kTile);  // K0 V0 K1 V1 ...
    // this CTA's state of head h: scratch.m[seq][first_head + h][part] (and l, acc alike)
    const size_t scratch_row = (static_cast<size_t>(seq) * H + first_head) * scratch.max_partitions + part;
    __shared__ unsigned arrived;  // FUSED: how many partitions of this (sequence, KV head) were done before this one
    auto merge_if_last = [&]() {
        if constexpr (FUSED) {
            __threadfence();  // this thread's scratch writes are visible device-wide before the count says so
            pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // every consumer has written and fenced
            if (threadIdx.x == 0) arrived = atomicAdd(counters + seq * Hkv + kv_head, 1u);
            pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
            if (arrived != gridDim.z - 1) return;  // another partition of this (sequence, KV head) merges
            __threadfence();  // the others' scratch, seen through the count, is read after it
            merge_partitions<scalar_t, HEAD_SIZE>(out, scratch, seq, H, first_head, num_heads, threadIdx.x, kConsumerThreads);
            if (threadIdx.x == 0) counters[seq * Hkv + kv_head] = 0;  // ready for the next launch
        }
    };

    if (t_begin >= ctx) {  // past the sequence's end: the sentinel, and nothing to read
        if (threadIdx.x >= kConsumerThreads) return;
        for (int i = threadIdx.x; i < num_heads * (HEAD_SIZE + 2); i += kConsumerThreads) {
            const int h = i / (HEAD_SIZE + 2), j = i % (HEAD_SIZE + 2);
            const size_t r = scratch_row + static_cast<size_t>(h) * scratch.max_partitions;
            if (j == HEAD_SIZE) scratch.m[r] = -INFINITY;
            else if (j == HEAD_SIZE + 1) scratch.l[r] = 0.f;
            else scratch.acc[r * HEAD_SIZE + j] = 0.f;
        }
        merge_if_last();
        return;
    }

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

    pa::allow_dependent_launch();  // the reduce may start launching (sm_90; see launch_reduce)
    // 4. Merge the slices of each head through the (now idle) ring, then write the
    //    partition's state, not divided by l: acc[seq][first_head + h][part][d], m and l.
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // the quad's four shares of each row sum
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
    }
    float* merge_m = smem;                          // [kSlices][ROWS]
    float* merge_l = merge_m + L::kSlices * ROWS;   // [kSlices][ROWS]
    float* merge_o = merge_l + L::kSlices * ROWS;   // [kSlices][ROWS][HEAD_SIZE]
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // every consumer is done with the ring
    {
        const int h0 = row_block * 16 + g;  // this thread's rows: h0 and h0 + 8
        if (c == 0) {
            merge_m[slice * ROWS + h0] = m_run[0];
            merge_m[slice * ROWS + h0 + 8] = m_run[1];
            merge_l[slice * ROWS + h0] = l_run[0];
            merge_l[slice * ROWS + h0 + 8] = l_run[1];
        }
        float* o0 = merge_o + (slice * ROWS + h0) * HEAD_SIZE;
#pragma unroll
        for (int j = 0; j < L::kONTiles; ++j) {
            *reinterpret_cast<float2*>(o0 + j * 8 + 2 * c) = make_float2(o[j][0], o[j][1]);
            *reinterpret_cast<float2*>(o0 + 8 * HEAD_SIZE + j * 8 + 2 * c) = make_float2(o[j][2], o[j][3]);
        }
    }
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
    for (int i = threadIdx.x; i < num_heads * HEAD_SIZE; i += kConsumerThreads) {
        const int h = i / HEAD_SIZE, d = i % HEAD_SIZE;
        float M = -INFINITY;
#pragma unroll
        for (int sl = 0; sl < L::kSlices; ++sl) M = fmaxf(M, merge_m[sl * ROWS + h]);
        float acc = 0.f, l = 0.f;
#pragma unroll
        for (int sl = 0; sl < L::kSlices; ++sl) {
            const float w = __expf(merge_m[sl * ROWS + h] - M);  // 0 for a slice that saw no token
            acc += w * merge_o[(sl * ROWS + h) * HEAD_SIZE + d];
            l += w * merge_l[sl * ROWS + h];
        }
        const size_t r = scratch_row + static_cast<size_t>(h) * scratch.max_partitions;
        scratch.acc[r * HEAD_SIZE + d] = acc;
        if (d == 0) {
            scratch.m[r] = M;
            scratch.l[r] = l;
        }
    }
    merge_if_last();
}

}  // namespace lesson03
