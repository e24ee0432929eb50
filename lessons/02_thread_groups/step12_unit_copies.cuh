// Lesson 02, step 12: step 11 with one bulk copy per 16-token unit of a page, not per row.
//
// What changed since step 11 (step11_bulk_rows.cuh), and why: with the consumers idle, step 11's
// copies alone move about as many bytes per SM as step 10's whole kernel at one CTA per SM,
// and fewer on long contexts: the copy engine pays per copy, and a row is only D * 2 bytes.
// A page of one KV head is contiguous in the cache ([num_blocks, Hkv, block_size, D]), so 16
// tokens (8 at D 256) of it are one copy of 4 KiB (2 KiB at D 64), and a tile is 8 copies
// instead of 128. The price is the layout: a unit's rows land back to back, unpadded, and
// rows 256 bytes apart share their shared-memory banks, so 8 rows of one unit read by one
// ldmatrix would conflict 8 ways. Instead the mma sees the tile in another order:
//  * slot s of a tile (the order of the mma's rows, logits and p) is row s / 8 of unit s % 8;
//    units are padded by 16 bytes, so 8 consecutive slots are 8 different units, 16 bytes
//    apart modulo 128: no bank conflict (UnitTile).
//  * attention does not care in which order a tile's tokens are summed, only that a token's
//    logit, p and V row share a slot; so QK, the softmax and PV run on slots unchanged, and
//    only the addresses change (UnitTile::slot_offset).
//  * a slot whose token is past the sequence's end gets the logit -inf (the softmax gives it
//    p = 0, whatever its position), and its V row is zeros: the unit that holds the end is
//    copied as its real rows only, the rest written with zeros (then a proxy fence).
//  * pages of 8 tokens are smaller than a unit at D 64 and 128: step 12 refuses them by name.
// Needs sm_90 (the copy engine), as step 11.
// Run: lesson02_thread_groups [--check | --bench] --variant grouped_mma_units
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device_math.cuh"
#include "mbarrier.cuh"
#include "mma.cuh"
#include "grouped_common.cuh"  // chunk_softmax, tile_tokens, tile_row_elems
#include "ws_layout.cuh"  // MmaLayout, the thread counts

namespace lesson02 {

// The order of a staged tile: 8 units of kUnitRows rows each, a unit's rows back to back
// (one copy), units padded by 16 bytes; slot s is row s / 8 of unit s % 8.
template <int HEAD_SIZE>
struct UnitTile {
    static constexpr int kTile = tile_tokens(HEAD_SIZE);
    static constexpr int kUnits = 8;
    static constexpr int kUnitRows = kTile / kUnits;                 // 16 tokens (8 at D 256)
    static constexpr int kUnitElems = kUnitRows * HEAD_SIZE + 8;     // its rows, then 16 bytes of padding
    __host__ __device__ static constexpr int slot_offset(int s) { return (s % kUnits) * kUnitElems + (s / kUnits) * HEAD_SIZE; }
    __host__ __device__ static constexpr int token_of(int s) { return (s % kUnits) * kUnitRows + s / kUnits; }
    static_assert(kUnitRows * HEAD_SIZE * 2 % 128 == 0, "units 16 bytes apart modulo 128: 8 units, 8 bank groups");
    static_assert(kUnits * kUnitElems <= kTile * tile_row_elems(HEAD_SIZE), "a unit tile fits step 10's ring slot");
};

// The producer side: producer thread u < 8 copies unit u of every tile (tokens u * kUnitRows
// .. + kUnitRows of the token tile), one bulk copy when all of them exist; the other producer
// threads only arrive. A unit never straddles a page: its rows divide the page size. Unit u
// lands UNIT_STRIDE elements into the slot (step 13 lands them back to back).
template <class scalar_t, int HEAD_SIZE, int UNIT_STRIDE = UnitTile<HEAD_SIZE>::kUnitElems>
struct UnitProducer {
    using U = UnitTile<HEAD_SIZE>;
    static constexpr int kTile = U::kTile;
    static constexpr int kRowBytes = HEAD_SIZE * static_cast<int>(sizeof(scalar_t));
    static constexpr int kUnitBytes = U::kUnitRows * kRowBytes;  // 4 KiB (2 KiB at D 64)

    const scalar_t* k_cache;  // [num_blocks, Hkv, block_size, D]
    const scalar_t* v_cache;
    const int* seq_pages;     // this sequence's block-table row
    int block_stride;         // elements between blocks: Hkv * block_size * D
    int head_offset;          // (kv_head, 0, 0) of a block
    int unit, block_shift, block_mask, ctx;
    int first;                // the next token tile's first token of this unit
    int block_id;             // its physical block (-1: none)

    __device__ UnitProducer(int tid, const scalar_t* k, const scalar_t* v, const int* pages, int Hkv, int kv_head,
                            int block_size, int context)
        : k_cache(k), v_cache(v), seq_pages(pages), unit(tid), ctx(context) {
        block_shift = __ffs(block_size) - 1;
        block_mask = block_size - 1;
        block_stride = Hkv * block_size * HEAD_SIZE;
        head_offset = kv_head * block_size * HEAD_SIZE;
        load_block_id(0);
    }

    __device__ __forceinline__ void load_block_id(int token_tile) {
        first = token_tile * kTile + unit * U::kUnitRows;
        block_id = unit < U::kUnits && first < ctx ? __ldg(seq_pages + (first >> block_shift)) : -1;
    }

    // Tile s (even: K of token tile s / 2, odd: its V) into buf = its ring slot, and this
    // thread's arrival on `full`. Tiles must be issued in order.
    __device__ __forceinline__ void issue(scalar_t* buf, int s, uint64_t* full) {
        if (unit < U::kUnits) {
            const scalar_t* cache = s % 2 == 0 ? k_cache : v_cache;
            scalar_t* dst = buf + unit * UNIT_STRIDE;
            const int rows = block_id < 0 ? 0 : min(U::kUnitRows, ctx - first);  // rows that exist
            // cache[block, kv_head, first % block_size .. + rows, 0 .. D): contiguous
            const scalar_t* src = cache + static_cast<long long>(block_id) * block_stride + head_offset +
                                  (first & block_mask) * HEAD_SIZE;
            if (rows < U::kUnitRows) {  // the sequence ends in or before this unit: zeros after its last row
                for (int i = rows * HEAD_SIZE / 8; i < U::kUnitRows * HEAD_SIZE / 8; ++i)
                    reinterpret_cast<uint4*>(dst)[i] = make_uint4(0, 0, 0, 0);
                pa::fence_proxy_async_shared();
            }
            if (rows > 0) {
                pa::mbarrier_arrive_expect_tx(full, rows * kRowBytes);
                pa::bulk_copy_to_shared(dst, src, rows * kRowBytes, full);
            } else {
                pa::mbarrier_arrive(full);
            }
        } else {
            pa::mbarrier_arrive(full);
        }
        if (s % 2 == 1) load_block_id(s / 2 + 1);
    }
};

template <class scalar_t, int HEAD_SIZE, int HEADS_PER_CTA, int CTAS_PER_SM>
__global__ void __launch_bounds__(kMmaThreads, CTAS_PER_SM)
grouped_unit_decode_kernel(scalar_t* __restrict__ out,             // [B, H, D]
                          const scalar_t* __restrict__ q,         // [B, H, D]
                          const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
                          const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
                          const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
                          const int* __restrict__ context_lens,   // [B]
                          int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // bulk copies: sm_90 (why_not keeps other GPUs away)
    using L = MmaLayout<HEAD_SIZE, HEADS_PER_CTA, CTAS_PER_SM>;
    using U = UnitTile<HEAD_SIZE>;
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
        // Producers: step 11's loop, with unit copies.
        UnitProducer<scalar_t, HEAD_SIZE> producer(threadIdx.x - kConsumerThreads, k_cache, v_cache, seq_pages, Hkv,
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
        const scalar_t* buf = tiles + slot * kTile * kRow;                // [8 units][U::kUnitElems]; V rows past the end are zero
        const int n = min(kTile, ctx - s / 2 * kTile);                    // tokens of this token tile
        float* logits = logit_bufs + (s / 2 % 2) * L::kLogitFloats;       // [HEADS_PER_CTA][kTile + 8]

        if (s % 2 == 0) {
            // 1. logits[h][t] = scale * (K_tile[t] . q[h]), one 16-token x 8-head block per warp and step.
            for (int item = warp; item < L::kQkItems; item += kConsumerWarps) {
                const int mt = item % L::kKSteps, nt = item / L::kKSteps;
                float cf[2][4] = {};         // two partial sums: the mma chain is half as long
#pragma unroll
                for (int ks = 0; ks < HEAD_SIZE / 16; ++ks) {
                    uint32_t a[4], b[2];
                    // A: slots mt*16 + (lane % 16), dims ks*16 + (lane / 16) * 8 .. + 8
                    pa::ldmatrix_x4(a, buf + U::slot_offset(mt * 16 + lane % 16) + ks * 16 + lane / 16 * 8);
                    // B: heads nt*8 + (lane % 8), dims ks*16 + (lane / 8 % 2) * 8 .. + 8
                    pa::ldmatrix_x2(b, q_tile + (nt * 8 + lane % 8) * kRow + ks * 16 + lane / 8 % 2 * 8);
                    pa::mma_16816<scalar_t>(cf[ks % 2], a, b);
                }
                // logits are kept by slot; a slot whose token is past the end gets -inf, so
                // that the softmax gives it p = 0 without a bound
                const int t = mt * 16 + g, h = nt * 8 + 2 * c;
                float* row0 = logits + h * L::kLogitStride;  // logits[h][.], then logits[h + 1][.]
                const bool on0 = U::token_of(t) < n, on8 = U::token_of(t + 8) < n;
                row0[t] = on0 ? (cf[0][0] + cf[1][0]) * scale : -INFINITY;
                row0[L::kLogitStride + t] = on0 ? (cf[0][1] + cf[1][1]) * scale : -INFINITY;
                row0[t + 8] = on8 ? (cf[0][2] + cf[1][2]) * scale : -INFINITY;
                row0[L::kLogitStride + t + 8] = on8 ? (cf[0][3] + cf[1][3]) * scale : -INFINITY;
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
        chunk_softmax<HEADS_PER_CTA, kConsumerWarps>(logits, L::kLogitStride, kTile, num_heads, m_run, l_run, alpha, red_max,
                                               red_sum);
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
        // 3. out^T[d][h] += V_tile^T[d][t] p[h][t] over slots t, 16 per mma. Slots past the end
        //    and idle heads give p = 0 (their V rows are zero too).
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
                // A = V^T: slots ks*16 + (lane % 8) + (lane / 16) * 8, dims mt*16 + (lane / 8 % 2) * 8 .. + 8
                pa::ldmatrix_x4_trans(a, buf + U::slot_offset(ks * 16 + lane % 8 + lane / 16 * 8) + mt * 16 + lane / 8 % 2 * 8);
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
