// Lesson 03, step 7: the flat merge: the head-row kernel's slices merged with every load in
// flight (weights once per head, then each output's rows loaded before the first is used).
// (sm_90 only, as step 6; elsewhere steps 3 to 5, or 1 and 2, run the shape.)
//
// What changed since step 6 (step6_head_rows.cuh), and why: a clock stamp at each stage of the
// head-row CTA (NOTES.md, "Against cuDNN: where decode's time goes") showed its last stage,
// merging the four slices of every head and writing the partition's state, taking about 3.5 us
// of the CTA's 7.5 on mqa-B1-ctx4k, longer than reading and computing its tile. Step 6 merges
// output by output: each thread takes 16 of the 4096 (head, dim) outputs in turn, and for each
// reads the slices' m, takes their max, then four exponentials, then the four partial rows:
// a chain of dependent shared-memory loads and MUFU instructions, 16 times over. Now:
//  * one thread per head computes M and the weights w_sl = e^(m_sl - M) once, writes them to
//    shared memory beside m and l, and writes the head's m and l to scratch (32 threads, 4
//    exponentials each, instead of 4 for every one of the 4096 outputs);
//  * each thread then takes four dims of one head per item (4 items at 32 heads, D 128), loads
//    every slice's float4 of every item first (16 loads in flight), then sums and stores them
//    with 16-byte stores;
//  * the partial rows are padded by 8 floats, so the 8 rows a warp writes at once land on
//    different banks (step 6's rows, 128 floats apart, all fall on the same ones).
// The sums are the same as step 6's, in the same order (w_sl * o_sl added from slice 0), and
// the state written, the sentinel, the reduce and the fused merge are unchanged.
// Run: lesson03_split_k [--check | --bench] [--shape NAME] --variant flat_merge
#pragma once

#include "step6_head_rows.cuh"  // HeadRowLayout, the producers, RowOrder, partition_tokens, cta_cell

namespace lesson03 {

// Grid (Hkv, B, max_partitions), kMmaThreads threads, as step 6's split_k_head_rows_kernel; same
// layout, scratch, sentinel and (FUSED) counters.
template <class scalar_t, int HEAD_SIZE, int ROWS, bool FUSED, bool UNITS>
__global__ void __launch_bounds__(kMmaThreads, 1)
flat_merge_kernel(scalar_t* __restrict__ out,             // [B, H, D] (FUSED only)
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
    //    First each head's weights, once: w_sl = e^(m_sl - M); then every output, its slices'
    //    rows loaded before the first one is used.
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // the quad's four shares of each row sum
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
        l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
    }
    constexpr int kORow = HEAD_SIZE + 8;  // a warp's 8 rows g of one write: 8 different bank pairs
    float* merge_m = smem;                          // [kSlices][ROWS]
    float* merge_l = merge_m + L::kSlices * ROWS;   // [kSlices][ROWS]
    float* merge_w = merge_l + L::kSlices * ROWS;   // [kSlices][ROWS]: e^(m_sl - M)
    float* merge_o = merge_w + L::kSlices * ROWS;   // [kSlices][ROWS][kORow]
    static_assert(L::kSlices * ROWS * (3 + kORow) * 4 <= L::kStages * L::kTileBytes, "the merge fits the ring");
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
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
    for (int h = threadIdx.x; h < num_heads; h += kConsumerThreads) {  // one thread per head
        float M = -INFINITY;
#pragma unroll
        for (int sl = 0; sl < L::kSlices; ++sl) M = fmaxf(M, merge_m[sl * ROWS + h]);
        float l = 0.f;
#pragma unroll
        for (int sl = 0; sl < L::kSlices; ++sl) {
            const float w = __expf(merge_m[sl * ROWS + h] - M);  // 0 for a slice that saw no token
            merge_w[sl * ROWS + h] = w;
            l += w * merge_l[sl * ROWS + h];
        }
        const size_t r = scratch_row + static_cast<size_t>(h) * scratch.max_partitions;
        scratch.m[r] = M;
        scratch.l[r] = l;
    }
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
    // Four dims of one head per item, kItems items per thread: every slice's float4 of every
    // item is loaded first, then summed and stored.
    constexpr int kQuads = HEAD_SIZE / 4;
    constexpr int kItems = ROWS * kQuads / kConsumerThreads;
    static_assert(kItems * kConsumerThreads == ROWS * kQuads, "the outputs spread evenly over the consumers");
    float4 rows[kItems][L::kSlices];
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        const int i = threadIdx.x + k * kConsumerThreads, h = i / kQuads, q4 = i % kQuads;
#pragma unroll
        for (int sl = 0; sl < L::kSlices; ++sl)
            rows[k][sl] = *reinterpret_cast<const float4*>(merge_o + (sl * ROWS + h) * kORow + 4 * q4);
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
        const int i = threadIdx.x + k * kConsumerThreads, h = i / kQuads, q4 = i % kQuads;
        if (h >= num_heads) continue;  // rows past the group
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int sl = 0; sl < L::kSlices; ++sl) {
            const float w = merge_w[sl * ROWS + h];
            acc.x = fmaf(w, rows[k][sl].x, acc.x);
            acc.y = fmaf(w, rows[k][sl].y, acc.y);
            acc.z = fmaf(w, rows[k][sl].z, acc.z);
            acc.w = fmaf(w, rows[k][sl].w, acc.w);
        }
        const size_t r = scratch_row + static_cast<size_t>(h) * scratch.max_partitions;
        *reinterpret_cast<float4*>(scratch.acc + r * HEAD_SIZE + 4 * q4) = acc;
    }
    merge_if_last();
}

}  // namespace lesson03
