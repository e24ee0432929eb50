// Lesson 02, step 13: step 12 with its units landing 128-byte aligned, read without bank conflicts.
//
// What changed since step 12 (step12_unit_copies.cuh), and why: step 12 pads each unit by 16
// bytes, so that 8 units start in 8 different bank groups and an ldmatrix of 8 slots does not
// conflict. But then 7 of a tile's 8 copies land off a 128-byte line, and the copy engine
// writes such a copy more slowly: read alone, step 12's bytes arrive at about 92 % of the
// streaming rate in its layout and 97 % in 128-byte aligned units (--copy-rate's item
// readers; NOTES). Here the units land back to back, so a slot holds the tile's rows in token
// order, unpadded, every copy aligned; rows are 2 * D bytes apart, so a 16-byte piece of dims
// sits in the same bank group in every row, and the reads are arranged around that:
//  * QK: a lane loads the mma's A fragments itself, 16 bytes at a time, instead of ldmatrix.
//    Lane (g, c) of the mma holds rows g and g + 8 (tokens), dims {2c, 2c+1, 2c+8, 2c+9} of
//    a 16-dim step; which physical dims a step covers does not matter as long as q (the B
//    fragment) follows, so one 16-byte load of dims 32b + 8c .. + 8 gives a lane its part of
//    two steps (b: a 32-dim block). Lanes of odd g load block b ^ 1 while even g load b (the
//    8 lanes of a quarter-warp then hit 8 bank groups) and sort the two back (aligned_qk).
//  * PV: ldmatrix.trans must read 8 tokens at the same dims, which would conflict 8 ways, so
//    the consumers first move the V tile into a padded work tile (rows D + 8 apart, as steps
//    10 and 11 lay them out), 16 bytes per thread and load, and release the landing slot at
//    once; PV then reads the work tile as step 11 reads its slots. The move sits between the
//    two barriers the softmax already has: the first says every warp is done with the last
//    tile's PV (the work tile is free), the second that the move is done.
//  * Slots are tokens again: a token past the sequence's end still gets the logit -inf and a
//    V row of zeros (the producers zero the rows a unit lacks, as in step 12).
//  * The ring: the work tile takes one slot's room, so the two-per-SM layout has two landing
//    slots (a K and a V in flight per CTA), the one-per-SM layout up to five (AlignedLayout).
// Needs sm_90 (the copy engine), as step 12.
// Run: lesson02_thread_groups [--check | --bench] --variant grouped_mma_aligned
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "mbarrier.cuh"
#include "mma.cuh"
#include "grouped_common.cuh"  // chunk_softmax, tile_tokens, tile_row_elems
#include "step12_unit_copies.cuh"  // UnitTile (the unit's rows), UnitProducer
#include "ws_layout.cuh"  // MmaLayout, the thread counts

namespace lesson02 {

// Step 13's shared memory, inside step 10's (MmaLayout::kSmemBytes, which the launcher asks
// for): landing slots of kTile unpadded rows, then the V work tile (kTile rows of kRow), then
// q and the logits as before.
template <int HEAD_SIZE, int HEADS_PER_CTA, int CTAS_PER_SM>
struct AlignedLayout : MmaLayout<HEAD_SIZE, HEADS_PER_CTA, CTAS_PER_SM> {
    using L = MmaLayout<HEAD_SIZE, HEADS_PER_CTA, CTAS_PER_SM>;
    static constexpr int kSlotElems = L::kTile * HEAD_SIZE;  // a landing slot: the tile's rows back to back
    static constexpr int kSlotBytes = kSlotElems * 2;
    static constexpr int kFit = (L::kSmemBytes - L::kFixedBytes - L::kTileBytes) / kSlotBytes;
    static constexpr int kLandingSlots = kFit < 5 ? kFit : 5;
    static_assert(kLandingSlots >= 2, "a K and a V slot at least");
    static_assert(kLandingSlots * kSlotBytes + L::kTileBytes + L::kFixedBytes <= L::kSmemBytes, "fits step 10's smem");
    static_assert((L::kPvSplit - 1) * HEADS_PER_CTA * HEAD_SIZE * 4 <= kLandingSlots * kSlotBytes, "split partials reuse the ring");
};

// QK of one 16-token x 8-head block from an unpadded slot, into the mma's accumulators cf:
// k_rows = the block's first token row, q_row = this lane's head row (g) of q_tile.
template <class scalar_t, int HEAD_SIZE>
__device__ __forceinline__ void aligned_qk(float (&cf)[2][4], const scalar_t* k_rows, const scalar_t* q_row, int g, int c) {
    const int flip = g & 1;  // odd g: the blocks of a pair in the other order
#pragma unroll
    for (int b = 0; b < HEAD_SIZE / 32; b += 2) {
        uint4 lo[2], hi[2];  // tokens g and g + 8; [i]: block (b + i) ^ flip
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int dim = ((b + i) ^ flip) * 32 + c * 8;
            lo[i] = *reinterpret_cast<const uint4*>(k_rows + g * HEAD_SIZE + dim);
            hi[i] = *reinterpret_cast<const uint4*>(k_rows + (g + 8) * HEAD_SIZE + dim);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const uint4 k0 = flip ? lo[i ^ 1] : lo[i], k8 = flip ? hi[i ^ 1] : hi[i];  // block b + i
            const uint4 qv = *reinterpret_cast<const uint4*>(q_row + (b + i) * 32 + c * 8);
            uint32_t a0[4] = {k0.x, k8.x, k0.y, k8.y}, b0[2] = {qv.x, qv.y};  // dims 8c + 0..3 of the block
            uint32_t a1[4] = {k0.z, k8.z, k0.w, k8.w}, b1[2] = {qv.z, qv.w};  // dims 8c + 4..7
            pa::mma_16816<scalar_t>(cf[0], a0, b0);
            pa::mma_16816<scalar_t>(cf[1], a1, b1);
        }
    }
}

template <class scalar_t, int HEAD_SIZE, int HEADS_PER_CTA, int CTAS_PER_SM>
__global__ void __launch_bounds__(kMmaThreads, CTAS_PER_SM)
grouped_aligned_decode_kernel(scalar_t* __restrict__ out,             // [B, H, D]
                          const scalar_t* __restrict__ q,         // [B, H, D]
                          const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
                          const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
                          const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
                          const int* __restrict__ context_lens,   // [B]
                          int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // bulk copies: sm_90 (why_not keeps other GPUs away)
    using L = AlignedLayout<HEAD_SIZE, HEADS_PER_CTA, CTAS_PER_SM>;
    using U = UnitTile<HEAD_SIZE>;
    constexpr int kRow = L::kRow;
    constexpr int kTile = L::kTile;
    constexpr int kStages = L::kLandingSlots;

    const int seq = blockIdx.y;
    const int kv_head = blockIdx.x;
    const int first_head = kv_head * group;
    const int num_heads = group;  // <= HEADS_PER_CTA
    const int ctx = context_lens[seq];
    const int* seq_pages = block_table + static_cast<size_t>(seq) * max_blocks_per_seq;
    const int num_stream_tiles = 2 * ((ctx + kTile - 1) / kTile);  // K0 V0 K1 V1 ...

    extern __shared__ __align__(16) float smem[];
    scalar_t* tiles = reinterpret_cast<scalar_t*>(smem);                        // [kStages][kTile][HEAD_SIZE]
    scalar_t* v_work = tiles + kStages * L::kSlotElems;                         // [kTile][kRow]
    scalar_t* q_tile = v_work + kTile * kRow;                                   // [HEADS_PER_CTA][kRow]
    float* logit_bufs = reinterpret_cast<float*>(q_tile + HEADS_PER_CTA * kRow);      // [2][HEADS_PER_CTA][kTile + 8]
    __shared__ float m_run[HEADS_PER_CTA], l_run[HEADS_PER_CTA], alpha[HEADS_PER_CTA];
    __shared__ float red_max[kConsumerWarps], red_sum[kConsumerWarps];
    __shared__ uint64_t full[kStages], empty[kStages];

    if (threadIdx.x == 0) {
        for (int i = 0; i < kStages; ++i) {
            pa::mbarrier_init(&full[i], kProducerThreads);
            pa::mbarrier_init(&empty[i], kConsumerThreads);
        }
    }
    __syncthreads();  // the last CTA-wide barrier: from here on the two roles only meet at full/empty

    if (threadIdx.x >= kConsumerThreads) {
        // Producers: step 12's loop, its units back to back.
        UnitProducer<scalar_t, HEAD_SIZE, U::kUnitRows * HEAD_SIZE> producer(threadIdx.x - kConsumerThreads, k_cache, v_cache, seq_pages, Hkv,
                                                      kv_head, block_size, ctx);
        for (int s = 0; s < num_stream_tiles; ++s) {
            const int slot = s % kStages;
            if (s >= kStages) pa::mbarrier_wait(&empty[slot], (s / kStages + 1) & 1);
            producer.issue(tiles + slot * L::kSlotElems, s, &full[slot]);
        }
        return;  // the consumers wait for every byte before the CTA ends
    }

    // Consumers. q rows of the group, 16 bytes at a time: q_tile[h][d] = q[seq, first_head + h, d]
    constexpr int kPiecesPerRow = HEAD_SIZE / 8;
    for (int i = threadIdx.x; i < HEADS_PER_CTA * kPiecesPerRow; i += kConsumerThreads) {
        const int h = i / kPiecesPerRow, piece = i % kPiecesPerRow;
        uint4 w = make_uint4(0, 0, 0, 0);
        if (h < num_heads)
            w = *reinterpret_cast<const uint4*>(q + (static_cast<size_t>(seq) * H + first_head + h) * HEAD_SIZE + piece * 8);
        *reinterpret_cast<uint4*>(q_tile + h * kRow + piece * 8) = w;
    }
    if (threadIdx.x < HEADS_PER_CTA) {
        m_run[threadIdx.x] = -INFINITY;
        l_run[threadIdx.x] = 0.f;
    }
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();

    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const int g = lane / 4, c = lane % 4;  // fragment row and column pair (see mma.cuh)

    // This warp's output blocks: item = warp % kWarpsPerSplit + j * kWarpsPerSplit covers dims
    // (item % (D/16)) * 16 .. + 16 and heads (item / (D/16)) * 8 .. + 8, over the 16-token steps
    // of split `pv_split`. acc[j] = {(d g, h 2c), (d g, h 2c+1), (d g+8, h 2c), (d g+8, h 2c+1)}.
    const int pv_split = warp / L::kWarpsPerSplit;
    const int pv_first_item = warp % L::kWarpsPerSplit;
    float acc[L::kPvItemsPerWarp][4];
#pragma unroll
    for (int j = 0; j < L::kPvItemsPerWarp; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.f;

    for (int s = 0; s < num_stream_tiles; ++s) {
        const int slot = s % kStages;
        pa::mbarrier_wait(&full[slot], (s / kStages) & 1);
        const scalar_t* buf = tiles + slot * L::kSlotElems;               // [kTile][HEAD_SIZE]; V rows past the end are zero
        const int n = min(kTile, ctx - s / 2 * kTile);                    // tokens of this token tile
        float* logits = logit_bufs + (s / 2 % 2) * L::kLogitFloats;       // [HEADS_PER_CTA][kTile + 8]

        if (s % 2 == 0) {
            // 1. logits[h][t] = scale * (K_tile[t] . q[h]), one 16-token x 8-head block per warp and step.
            for (int item = warp; item < L::kQkItems; item += kConsumerWarps) {
                const int mt = item % L::kKSteps, nt = item / L::kKSteps;
                float cf[2][4] = {};         // two partial sums: the mma chain is half as long
                // A: tokens mt*16 + g and + 8 of the slot; B: head nt*8 + g of q
                aligned_qk<scalar_t, HEAD_SIZE>(cf, buf + mt * 16 * HEAD_SIZE, q_tile + (nt * 8 + g) * kRow, g, c);
                // a token past the end gets the logit -inf, so that the softmax gives it p = 0
                // without a bound
                const int t = mt * 16 + g, h = nt * 8 + 2 * c;
                float* row0 = logits + h * L::kLogitStride;  // logits[h][.], then logits[h + 1][.]
                const bool on0 = t < n, on8 = t + 8 < n;
                row0[t] = on0 ? (cf[0][0] + cf[1][0]) * scale : -INFINITY;
                row0[L::kLogitStride + t] = on0 ? (cf[0][1] + cf[1][1]) * scale : -INFINITY;
                row0[t + 8] = on8 ? (cf[0][2] + cf[1][2]) * scale : -INFINITY;
                row0[L::kLogitStride + t + 8] = on8 ? (cf[0][3] + cf[1][3]) * scale : -INFINITY;
            }
            pa::release_slot(&empty[slot]);  // this thread is done with the K tile (fence, arrive)
            continue;
        }

        // 2. Every warp has written its logits and is done with the last tile's PV: the V tile
        //    moves to the work tile, 16 bytes per load and store (a quarter-warp's 8 pieces
        //    are 128 contiguous bytes on both sides: no conflict), and its landing slot is
        //    free at once. Then the softmax step with the tile as the chunk (one warp per
        //    head), and every output block is rescaled by its heads' alpha. Writing the next
        //    token tile's logits cannot disturb this one's p (the other buffer), and the
        //    token tile after that waits at this barrier of the next tile, which every warp
        //    reaches only after its PV here.
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
        {
            constexpr int kPieceRow = HEAD_SIZE / 8;                      // 16-byte pieces of a row
            constexpr int kMoves = kTile * kPieceRow / kConsumerThreads;  // per thread: 8 at D 128
            uint4 w[kMoves];
#pragma unroll
            for (int r = 0; r < kMoves; ++r) w[r] = reinterpret_cast<const uint4*>(buf)[r * kConsumerThreads + threadIdx.x];
#pragma unroll
            for (int r = 0; r < kMoves; ++r) {
                const int i = r * kConsumerThreads + threadIdx.x;
                *reinterpret_cast<uint4*>(v_work + i / kPieceRow * kRow + i % kPieceRow * 8) = w[r];
            }
        }
        pa::release_slot(&empty[slot]);  // this thread is done with the V landing slot (fence, arrive)
        chunk_softmax<HEADS_PER_CTA, kConsumerWarps>(logits, L::kLogitStride, kTile, num_heads, m_run, l_run, alpha, red_max,
                                               red_sum);
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
        // 3. out^T[d][h] += V_tile^T[d][t] p[h][t] over tokens t, 16 per mma, from the work
        //    tile. Tokens past the end and idle heads give p = 0 (their V rows are zero too).
#pragma unroll
        for (int j = 0; j < L::kPvItemsPerWarp; ++j) {
            const int item = pv_first_item + j * L::kWarpsPerSplit;
            const int mt = item % (HEAD_SIZE / 16), nt = item / (HEAD_SIZE / 16);
            const int h_acc = nt * 8 + 2 * c;  // heads of acc[j]: h_acc, h_acc + 1
            const float a0 = h_acc < num_heads ? alpha[h_acc] : 0.f;
            const float a1 = h_acc + 1 < num_heads ? alpha[h_acc + 1] : 0.f;
            acc[j][0] *= a0;
            acc[j][1] *= a1;
            acc[j][2] *= a0;
            acc[j][3] *= a1;
            const int h_p = nt * 8 + g;  // the head whose p this lane packs into B
            const float* prow = logits + h_p * L::kLogitStride;
            const bool head_on = h_p < num_heads;
            auto p_pair = [&](int t) {  // p[h_p][t], p[h_p][t + 1] (t even) as one operand register
                const float2 pp = *reinterpret_cast<const float2*>(prow + t);
                return pa::pack2(head_on ? pp.x : 0.f, head_on ? pp.y : 0.f, scalar_t{});  // p = 0 past the end
            };
#pragma unroll
            for (int kk = 0; kk < L::kKStepsPerSplit; ++kk) {  // steps past the end add zeros: no early exit
                const int ks = pv_split * L::kKStepsPerSplit + kk;
                uint32_t a[4], b[2];
                // A = V^T: tokens ks*16 + (lane % 8) + (lane / 16) * 8, dims mt*16 + (lane / 8 % 2) * 8 .. + 8
                pa::ldmatrix_x4_trans(a, v_work + (ks * 16 + lane % 8 + lane / 16 * 8) * kRow + mt * 16 + lane / 8 % 2 * 8);
                const int t = ks * 16 + 2 * c;
                b[0] = p_pair(t);
                b[1] = p_pair(t + 8);
                pa::mma_16816<scalar_t>(acc[j], a, b);
            }
        }
    }

    // 4. Splits 1.. hand their partial sums to split 0 through the ring, which divides by the
    //    running sum and stores out[seq, first_head + h, d]. The ring is idle: the consumers
    //    waited for every tile the producers copied, and the producers copy nothing more.
    float* partials = smem;  // [kPvSplit - 1][HEADS_PER_CTA][HEAD_SIZE]
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // every consumer is done with the ring and l_run is final
    if constexpr (L::kPvSplit > 1) {
        if (pv_split > 0) {
#pragma unroll
            for (int j = 0; j < L::kPvItemsPerWarp; ++j) {
                const int item = pv_first_item + j * L::kWarpsPerSplit;
                const int d = item % (HEAD_SIZE / 16) * 16 + g, h = item / (HEAD_SIZE / 16) * 8 + 2 * c;
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    partials[((pv_split - 1) * HEADS_PER_CTA + h + (e & 1)) * HEAD_SIZE + d + (e >> 1) * 8] = acc[j][e];
            }
        }
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
    }
    if (pv_split == 0) {
#pragma unroll
        for (int j = 0; j < L::kPvItemsPerWarp; ++j) {
            const int item = pv_first_item + j * L::kWarpsPerSplit;
            const int d = item % (HEAD_SIZE / 16) * 16 + g, h = item / (HEAD_SIZE / 16) * 8 + 2 * c;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int he = h + (e & 1), de = d + (e >> 1) * 8;
                float o = acc[j][e];
                for (int sp = 1; sp < L::kPvSplit; ++sp) o += partials[((sp - 1) * HEADS_PER_CTA + he) * HEAD_SIZE + de];
                if (he < num_heads)
                    out[(static_cast<size_t>(seq) * H + first_head + he) * HEAD_SIZE + de] = pa::from_float<scalar_t>(o / l_run[he]);
            }
        }
    }
#else
    __trap();
#endif
}

}  // namespace lesson02
