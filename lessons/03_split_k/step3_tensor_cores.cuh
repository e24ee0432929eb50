// Lesson 03, step 3: steps 1 and 2's split-k on lesson 02's fastest kernel: tensor cores, a
// warp-specialized CTA per (sequence, KV head) with its whole query group, a cp.async ring.
//
// What changed, and why: steps 1 and 2 give every query head its own CTA and read K and V
// once per head; lesson 02 showed that one CTA per KV head with the group's heads as the
// columns of mma.sync reads them once per group, and its step 10 (step10_warp_specialized.cuh)
// is that kernel at its fastest. This step is step 10's kernel with steps 1 and 2's ideas,
// so `diff ../02_thread_groups/step10_warp_specialized.cuh step3_tensor_cores.cuh` shows them:
//  * the grid gains the partition axis z, and the producers start at the partition's first
//    token and stop at its last (TileProducer takes t_begin and t_end, not the context);
//  * the epilogue writes the partition's unnormalised (m, l, acc) per query head to scratch
//    instead of dividing by l;
//  * a partition at or past its sequence's end writes the sentinel (-inf, 0, 0) and returns;
//  * FUSED: step 2's merge (counter per (sequence, KV head), fences, the last CTA merges).
// The layout (partition_layout.cuh: MmaLayout, TileProducer, moved here from lesson 02
// unchanged): one 8-head column block runs two CTAs per SM with 3-slot rings (a partition is
// short, and a second CTA hides each one's start); 16 and 32 heads run one CTA per SM. That
// takes 113 KiB of shared memory a CTA or more: GPUs with 99 KiB a CTA (sm_86, sm_89) refuse
// the step, and run steps 1 and 2.
// Run: lesson03_split_k [--check | --bench] [--shape NAME] --variant tensor_cores
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "mbarrier.cuh"
#include "mma.cuh"
#include "partition_layout.cuh"  // MmaLayout, TileProducer, the thread counts
#include "split_plan.h"
#include "split_reduce.cuh"  // merge_partitions

namespace lesson03 {

// Grid (Hkv, B, max_partitions): blockIdx.z is the partition. FUSED: the last partition CTA
// of a (sequence, KV head) to finish merges; counters [B * Hkv] start at 0 and are left at 0.
template <class scalar_t, int HEAD_SIZE, int HEADS_PER_CTA, int CTAS_PER_SM, bool FUSED>
__global__ void __launch_bounds__(kMmaThreads, CTAS_PER_SM)
tensor_core_partitions_kernel(scalar_t* __restrict__ out,             // [B, H, D] (FUSED only)
                         const scalar_t* __restrict__ q,         // [B, H, D]
                         const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
                         const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
                         const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
                         const int* __restrict__ context_lens,   // [B]
                         int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale,
                         int partition_size, SplitScratch scratch,
                         unsigned* __restrict__ counters) {      // [B * Hkv] (FUSED only)
    using L = MmaLayout<HEAD_SIZE, HEADS_PER_CTA, CTAS_PER_SM>;
    constexpr int kRow = L::kRow;
    constexpr int kTile = L::kTile;
    constexpr int kStages = L::kStages;

    const int seq = blockIdx.y;
    const int kv_head = blockIdx.x;
    const int part = blockIdx.z;
    const int first_head = kv_head * group;
    const int num_heads = group;  // <= HEADS_PER_CTA
    const int ctx = context_lens[seq];
    const int t_begin = part * partition_size;
    const int t_end = min(ctx, t_begin + partition_size);
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
        // tile (use s / kStages - 1 of `empty`). A producer announces tile s - kLag once its
        // cp.async group has landed: the wait covers the thread's own copies only, which is
        // why `full` counts every producer. kLag = kStages - 2 leaves one slot free, so the
        // next copy is issued while the consumers work on the tile just announced (with
        // kLag = kStages - 1 the producer waits for them, which measured slower).
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
        const scalar_t* buf = tiles + slot * kTile * kRow;                // [kTile][kRow], V rows past the end are zero
        const int n = min(kTile, t_end - t_begin - s / 2 * kTile);        // tokens of this token tile
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
                    // A: slots mt*16 + (lane % 16), dims ks*16 + (lane / 16) * 8 .. + 8
                    pa::ldmatrix_x4(a, buf + (mt * 16 + lane % 16) * kRow + ks * 16 + lane / 16 * 8);
                    // B: heads nt*8 + (lane % 8), dims ks*16 + (lane / 8 % 2) * 8 .. + 8
                    pa::ldmatrix_x2(b, q_tile + (nt * 8 + lane % 8) * kRow + ks * 16 + lane / 8 % 2 * 8);
                    pa::mma_16816<scalar_t>(cf[ks % 2], a, b);
                }
                // a token past the end gets -inf
                const int t = mt * 16 + g, h = nt * 8 + 2 * c;
                float* row0 = logits + h * L::kLogitStride;  // logits[h][.], then logits[h + 1][.]
                const bool on0 = t < n, on8 = t + 8 < n;
                row0[t] = on0 ? (cf[0][0] + cf[1][0]) * scale : -INFINITY;
                row0[L::kLogitStride + t] = on0 ? (cf[0][1] + cf[1][1]) * scale : -INFINITY;
                row0[t + 8] = on8 ? (cf[0][2] + cf[1][2]) * scale : -INFINITY;
                row0[L::kLogitStride + t + 8] = on8 ? (cf[0][3] + cf[1][3]) * scale : -INFINITY;
            }
            pa::mbarrier_arrive(&empty[slot]);  // this thread is done with the K tile
            continue;
        }

        // 2. Every warp has written its logits: the softmax step with the tile as the chunk
        //    (one warp per head), then every output block is rescaled by its heads' alpha.
        //    Writing the next token tile's logits cannot disturb this one's p (the other
        //    buffer), and the token tile after that waits at this barrier of the next tile,
        //    which every warp reaches only after its PV here.
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
        chunk_softmax<HEADS_PER_CTA, kConsumerWarps>(logits, L::kLogitStride, n, num_heads, m_run, l_run,
                                                     alpha, red_max, red_sum);
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
                const bool in0 = t < n, in1 = t + 1 < n;
                return pa::pack2(head_on && in0 ? pp.x : 0.f, head_on && in1 ? pp.y : 0.f, scalar_t{});
            };
#pragma unroll
            for (int kk = 0; kk < L::kKStepsPerSplit; ++kk) {  // steps past the end add zeros: no early exit
                const int ks = pv_split * L::kKStepsPerSplit + kk;
                uint32_t a[4], b[2];
                // A = V^T: slots ks*16 + (lane % 8) + (lane / 16) * 8, dims mt*16 + (lane / 8 % 2) * 8 .. + 8
                pa::ldmatrix_x4_trans(a, buf + (ks * 16 + lane % 8 + lane / 16 * 8) * kRow + mt * 16 + lane / 8 % 2 * 8);
                const int t = ks * 16 + 2 * c;
                b[0] = p_pair(t);
                b[1] = p_pair(t + 8);
                pa::mma_16816<scalar_t>(acc[j], a, b);
            }
        }
        pa::mbarrier_arrive(&empty[slot]);  // this thread is done with the V tile
    }

    // 4. Splits 1.. hand their partial sums to split 0 through the ring, which writes this
    //    partition's state, not divided by l: acc[seq][first_head + h][part][d], m and l.
    //    The ring is idle: the consumers waited for every tile the producers copied, and the
    //    producers copy nothing more.
    float* partials = smem;  // [kPvSplit - 1][HEADS_PER_CTA][HEAD_SIZE]
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // every consumer is done with the ring; m_run, l_run are final
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
                    scratch.acc[(scratch_row + static_cast<size_t>(he) * scratch.max_partitions) * HEAD_SIZE + de] = o;
            }
        }
    }
    if (threadIdx.x < num_heads) {
        scratch.m[scratch_row + static_cast<size_t>(threadIdx.x) * scratch.max_partitions] = m_run[threadIdx.x];
        scratch.l[scratch_row + static_cast<size_t>(threadIdx.x) * scratch.max_partitions] = l_run[threadIdx.x];
    }
    merge_if_last();
}

}  // namespace lesson03
