// Lesson 02, step 11: step 10's warp-specialised CTA, with its rows copied by the copy engine.
//
// What changed since step 10 (step10_warp_specialized.cuh), and why: step 10's producers copy
// with cp.async, whose completion a thread can only learn by waiting for its own copies
// (cp.async.wait_group). So each producer issues tile s, then blocks until tile s - kLag has
// landed before it may announce it, and only kLag + 1 tiles are ever on their way: two of a
// three-slot ring at two CTAs per SM. Here every row of a tile is one bulk copy
// (cp.async.bulk, sm_90): producer thread r hands row r (D * 2 bytes) to the copy engine and
// arrives on the slot's `full` barrier with expect_tx, announcing the bytes; the barrier's
// phase completes when every producer has arrived and every announced byte has landed. A
// producer no longer waits for copies at all, only for free slots, so the whole ring streams.
//  * Rows past the sequence's end are zeros, written by the producer thread that owns the
//    row, then a proxy fence (the next bulk copy into that row is the copy engine's write,
//    which barriers alone do not order after the thread's own), then a plain arrival.
//  * Page ids are read a token tile ahead, as in step 10; a thread now needs one per tile.
//  * Everything else, the layout (MmaLayout), the ring, the consumers' math, is step 10's.
//  * Measured (README, step 11): faster than step 10 on every shape at two CTAs per SM, but
//    slower at one CTA per SM on the long contexts, so `auto` takes it at two per SM only.
// Needs sm_90 (the copy engine); elsewhere the variant says so and step 10 runs.
// Run: lesson02_thread_groups [--check | --bench] --variant grouped_mma_bulk
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "mbarrier.cuh"
#include "mma.cuh"
#include "grouped_common.cuh"  // chunk_softmax, tile_tokens, tile_row_elems
#include "ws_layout.cuh"  // MmaLayout, the thread counts

namespace lesson02 {

// The producer side: one bulk copy per row. Producer thread `tid` owns row tid of every tile
// (a tile has 128 rows, 64 at D 256: there the upper half of the producers only arrive).
template <class scalar_t, int HEAD_SIZE>
struct BulkRowProducer {
    static constexpr int kTile = tile_tokens(HEAD_SIZE);
    static constexpr int kRow = tile_row_elems(HEAD_SIZE);
    static constexpr int kRowBytes = HEAD_SIZE * static_cast<int>(sizeof(scalar_t));  // 128, 256 or 512: whole 16 bytes
    static_assert(kTile <= kProducerThreads, "one producer thread per row of a tile");

    const scalar_t* k_cache;  // [num_blocks, Hkv, block_size, D]
    const scalar_t* v_cache;
    const int* seq_pages;     // this sequence's block-table row
    int block_stride;         // elements between blocks: Hkv * block_size * D (a few million at most)
    int src_offset;           // where this thread's row sits in its block: (kv_head, row % block_size, 0)
    int row, block_shift, ctx;
    int block_id;             // physical block of this thread's row of the next token tile (-1: none)

    __device__ BulkRowProducer(int tid, const scalar_t* k, const scalar_t* v, const int* pages, int Hkv, int kv_head,
                               int block_size, int context)
        : k_cache(k), v_cache(v), seq_pages(pages), row(tid), ctx(context) {
        block_shift = __ffs(block_size) - 1;  // block sizes are powers of two, and divide kTile
        block_stride = Hkv * block_size * HEAD_SIZE;
        src_offset = (kv_head * block_size + (row & (block_size - 1))) * HEAD_SIZE;
        load_block_id(0);
    }

    __device__ __forceinline__ void load_block_id(int token_tile) {
        const int t = token_tile * kTile + row;
        block_id = row < kTile && t < ctx ? __ldg(seq_pages + (t >> block_shift)) : -1;
    }

    // Tile s (even: K of token tile s / 2, odd: its V) into buf = its ring slot [kTile][kRow],
    // and this thread's arrival on `full`, the slot's barrier. Tiles must be issued in order.
    __device__ __forceinline__ void issue(scalar_t* buf, int s, uint64_t* full) {
        const scalar_t* cache = s % 2 == 0 ? k_cache : v_cache;
        scalar_t* dst = buf + row * kRow;
        if (block_id >= 0) {  // cache[block, kv_head, t % block_size, 0 .. D)
            pa::mbarrier_arrive_expect_tx(full, kRowBytes);
            pa::bulk_copy_to_shared(dst, cache + static_cast<long long>(block_id) * block_stride + src_offset, kRowBytes,
                                    full);
        } else {
            if (row < kTile) {  // a row past the end: an mma multiplies whole 16-row blocks, and a stale NaN times 0 is NaN
#pragma unroll
                for (int i = 0; i < HEAD_SIZE / 8; ++i) reinterpret_cast<uint4*>(dst)[i] = make_uint4(0, 0, 0, 0);
                pa::fence_proxy_async_shared();
            }
            pa::mbarrier_arrive(full);
        }
        if (s % 2 == 1) load_block_id(s / 2 + 1);
    }
};

template <class scalar_t, int HEAD_SIZE, int HEADS_PER_CTA, int CTAS_PER_SM>
__global__ void __launch_bounds__(kMmaThreads, CTAS_PER_SM)
grouped_bulk_decode_kernel(scalar_t* __restrict__ out,             // [B, H, D]
                          const scalar_t* __restrict__ q,         // [B, H, D]
                          const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
                          const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
                          const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
                          const int* __restrict__ context_lens,   // [B]
                          int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // bulk copies: sm_90 (why_not keeps other GPUs away)
    using L = MmaLayout<HEAD_SIZE, HEADS_PER_CTA, CTAS_PER_SM>;
    constexpr int kRow = L::kRow;
    constexpr int kTile = L::kTile;
    constexpr int kStages = L::kStages;

    const int seq = blockIdx.y;
    const int kv_head = blockIdx.x;
    const int first_head = kv_head * group;
    const int num_heads = group;  // <= HEADS_PER_CTA
    const int ctx = context_lens[seq];
    const int* seq_pages = block_table + static_cast<size_t>(seq) * max_blocks_per_seq;
    const int num_stream_tiles = 2 * ((ctx + kTile - 1) / kTile);  // K0 V0 K1 V1 ...

    extern __shared__ __align__(16) float smem[];
    scalar_t* tiles = reinterpret_cast<scalar_t*>(smem);                        // [kStages][kTile][kRow]
    scalar_t* q_tile = tiles + kStages * kTile * kRow;                          // [HEADS_PER_CTA][kRow]
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
        // Producers. Slot s % kStages is reused once the consumers have released its previous
        // tile (use s / kStages - 1 of `empty`); that is the only wait left. The tile's
        // arrival on full[slot] goes in with the copies, and the slot's phase completes when
        // the last of its bytes lands, so every slot of the ring can be in flight at once.
        BulkRowProducer<scalar_t, HEAD_SIZE> producer(threadIdx.x - kConsumerThreads, k_cache, v_cache, seq_pages, Hkv,
                                                      kv_head, block_size, ctx);
        for (int s = 0; s < num_stream_tiles; ++s) {
            const int slot = s % kStages;
            if (s >= kStages) pa::mbarrier_wait(&empty[slot], (s / kStages + 1) & 1);
            producer.issue(tiles + slot * kTile * kRow, s, &full[slot]);
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
        const scalar_t* buf = tiles + slot * kTile * kRow;                // [kTile][kRow], rows >= n are zero
        const int n = min(kTile, ctx - s / 2 * kTile);                    // tokens of this token tile
        float* logits = logit_bufs + (s / 2 % 2) * L::kLogitFloats;       // [HEADS_PER_CTA][kTile + 8]

        if (s % 2 == 0) {
            // 1. logits[h][t] = scale * (K_tile[t] . q[h]), one 16-token x 8-head block per warp and step.
            for (int item = warp; item < L::kQkItems; item += kConsumerWarps) {
                const int mt = item % L::kKSteps, nt = item / L::kKSteps;
                if (mt * 16 >= n) continue;  // the whole block is past the sequence's end
                float cf[2][4] = {};         // two partial sums: the mma chain is half as long
#pragma unroll
                for (int ks = 0; ks < HEAD_SIZE / 16; ++ks) {
                    uint32_t a[4], b[2];
                    // A: tokens mt*16 + (lane % 16), dims ks*16 + (lane / 16) * 8 .. + 8
                    pa::ldmatrix_x4(a, buf + (mt * 16 + lane % 16) * kRow + ks * 16 + lane / 16 * 8);
                    // B: heads nt*8 + (lane % 8), dims ks*16 + (lane / 8 % 2) * 8 .. + 8
                    pa::ldmatrix_x2(b, q_tile + (nt * 8 + lane % 8) * kRow + ks * 16 + lane / 8 % 2 * 8);
                    pa::mma_16816<scalar_t>(cf[ks % 2], a, b);
                }
                const int t = mt * 16 + g, h = nt * 8 + 2 * c;
                float* row0 = logits + h * L::kLogitStride;  // logits[h][.], then logits[h + 1][.]
                if (t < n) {
                    row0[t] = (cf[0][0] + cf[1][0]) * scale;
                    row0[L::kLogitStride + t] = (cf[0][1] + cf[1][1]) * scale;
                }
                if (t + 8 < n) {
                    row0[t + 8] = (cf[0][2] + cf[1][2]) * scale;
                    row0[L::kLogitStride + t + 8] = (cf[0][3] + cf[1][3]) * scale;
                }
            }
            pa::release_slot(&empty[slot]);  // this thread is done with the K tile (fence, arrive)
            continue;
        }

        // 2. Every warp has written its logits: the softmax step with the tile as the chunk
        //    (one warp per head), then every output block is rescaled by its heads' alpha.
        //    Writing the next token tile's logits cannot disturb this one's p (the other
        //    buffer), and the token tile after that waits at this barrier of the next tile,
        //    which every warp reaches only after its PV here.
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
        chunk_softmax<HEADS_PER_CTA, kConsumerWarps>(logits, L::kLogitStride, n, num_heads, m_run, l_run, alpha, red_max,
                                               red_sum);
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
        // 3. out^T[d][h] += V_tile^T[d][t] p[h][t], 16 tokens per mma. Tokens past the end and
        //    idle heads give p = 0 (their V rows are zero too).
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
                return pa::pack2(head_on && t < n ? pp.x : 0.f, head_on && t + 1 < n ? pp.y : 0.f, scalar_t{});
            };
#pragma unroll
            for (int kk = 0; kk < L::kKStepsPerSplit; ++kk) {  // steps past the end add zeros: no early exit
                const int ks = pv_split * L::kKStepsPerSplit + kk;
                uint32_t a[4], b[2];
                // A = V^T: tokens ks*16 + (lane % 8) + (lane / 16) * 8, dims mt*16 + (lane / 8 % 2) * 8 .. + 8
                pa::ldmatrix_x4_trans(a, buf + (ks * 16 + lane % 8 + lane / 16 * 8) * kRow + mt * 16 + lane / 8 % 2 * 8);
                const int t = ks * 16 + 2 * c;
                b[0] = p_pair(t);
                b[1] = p_pair(t + 8);
                pa::mma_16816<scalar_t>(acc[j], a, b);
            }
        }
        pa::release_slot(&empty[slot]);  // this thread is done with the V tile (fence, arrive)
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
