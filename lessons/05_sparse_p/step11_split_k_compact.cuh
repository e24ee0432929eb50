// Lesson 05, step 11 (`split_k_compact`): step 10's ordered compaction inside split-k.
//
// What changed since step 10 (step10_compact_ordered.cuh), and why: a grid of one CTA per
// (sequence, KV head) is B * Hkv CTAs, 4 for h8kv4-B1 and 128 for h8kv4-B32, however long the
// context: fewer CTAs than the GPU has SMs, each reading at the few tens of GB/s one CTA
// reaches (lesson 02's timeline). As in lesson 03, the grid gains a partition axis: CTA z of
// a (sequence, KV head) covers tokens [z P, (z + 1) P) and runs step 10's loop over them
// only. With the gate the partitions are simpler to merge than lesson 03's:
//  * There is no softmax, so a partition's output needs no max and no sum beside it, and
//    the merge is a plain sum of the partitions' partial outputs, in fp32, in partition
//    order (so the result is the same bits on every run, whichever CTA finishes last).
//  * A partition past a short sequence's end writes nothing and needs no sentinel: the
//    merge adds the sequence's own ceil(ctx / P) partitions only.
//  * The gate of a partition's first two tokens reads r of the FIR_K - 1 = 2 tokens to its
//    left. Before its first tile, consumer warps 0 and 1 each compute one of those two scores
//    on CUDA cores (one K row, straight from the cache) into the carry that the first tile's
//    gate reads; at the start of the sequence there is nothing to the left, and r is 0.
//  * The merge is fused, as lesson 03's split_k_fused: each partition CTA writes its partial
//    sums to scratch [B][H][max_partitions][D], fences, and counts itself on a per-(sequence,
//    KV head) counter; the CTA that counts last adds the partials up, writes out and resets
//    the counter for the next launch. A sequence with one partition writes out directly.
// P is a multiple of the tile (128 tokens), so every partition starts on a page.
// Run: lesson05_sparse_p [--check | --bench] --variant split_k_compact
#pragma once

#include "gated_tile.cuh"

namespace lesson05 {

template <class scalar_t, int CTAS_PER_SM, int STAGES = default_stages(CTAS_PER_SM)>  // STAGES: the ring (Layout)
__global__ void __launch_bounds__(kThreads, CTAS_PER_SM)
split_k_compact_gated_kernel(scalar_t* __restrict__ out,             // [B, H, D]
                             const scalar_t* __restrict__ q,         // [B, H, D]
                             const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
                             const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
                             const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
                             const int* __restrict__ context_lens,   // [B]
                             int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale, GateArgs gate,
                             int partition_size,                   // P: a multiple of kTile
                             float* __restrict__ partials,         // [B, H, max_partitions, D]
                             int max_partitions,
                             unsigned* __restrict__ counters) {    // [B * Hkv], 0 between launches
    using L = Layout<CTAS_PER_SM, STAGES>;
    constexpr int kStages = L::kStages;
    constexpr int kBufs = L::kBufs;
    const int seq = blockIdx.y;
    const int kv_head = blockIdx.x;
    const int first_head = kv_head * group;
    const int num_heads = group;  // <= kHeads
    const int part = blockIdx.z;
    const int ctx = context_lens[seq];
    const int t_begin = part * partition_size;
    if (t_begin >= ctx) return;  // past this sequence's end: the merge does not count this partition
    const int t_end = min(ctx, t_begin + partition_size);
    const int num_parts = (ctx + partition_size - 1) / partition_size;  // this sequence's partitions
    const int* seq_pages = block_table + static_cast<size_t>(seq) * max_blocks_per_seq;
    const int num_tiles = (t_end - t_begin + kTile - 1) / kTile;

    extern __shared__ __align__(16) unsigned char smem[];
    const Smem<scalar_t> sm = carve_smem<scalar_t, CTAS_PER_SM, STAGES>(smem);
    __shared__ uint64_t full[kStages], empty[kStages];
    __shared__ uint64_t listed[kBufs];  // the list of tile i is in rows[i % kBufs], its length in nnz_of[i % kBufs]
    __shared__ int nnz_of[kBufs];
    // needed tokens of each gate warp in the current tile; on 16 bytes, so that the compiler's
    // wide load of the four counts reads nothing else (nnz_of, written meanwhile)
    __shared__ __align__(16) int warp_count[kGateThreads / 32];
    if (threadIdx.x == 0) {
        for (int i = 0; i < kStages; ++i) {
            pa::mbarrier_init(&full[i], kProducerThreads);
            pa::mbarrier_init(&empty[i], kConsumerThreads);
        }
        for (int b = 0; b < kBufs; ++b) pa::mbarrier_init(&listed[b], kConsumerThreads);
    }
    __syncthreads();  // the last CTA-wide barrier: from here on the two roles only meet at full/empty

    if (threadIdx.x >= kConsumerThreads) {
        // Producers: stream position s uses slot s % kStages once the consumers have
        // released its previous tile (use s / kStages - 1 of `empty`).
        Producer<scalar_t, L::kBulkCopies> producer(threadIdx.x - kConsumerThreads, k_cache, v_cache, seq_pages,
                                                    max_blocks_per_seq, Hkv, kv_head, block_size, t_begin, t_end);
        producer.stage_pages(sm.pages, L::kPageSlots);
        for (int s = 0; s < 2 * num_tiles; ++s) {
            const int slot = s % kStages;
            if (s >= kStages) pa::mbarrier_wait(&empty[slot], (s / kStages + 1) & 1);
            scalar_t* buf = sm.tiles + slot * kTileElems;
            const StreamItem item = stream_item<L::kAhead>(s, num_tiles);
            if (!item.is_v) {
                producer.copy_k(buf, item.tile, &full[slot]);
            } else {
                pa::mbarrier_wait(&listed[item.tile % kBufs], (item.tile / kBufs) & 1);
                const uint8_t* list = sm.rows + (item.tile % kBufs) * kTile;  // tokens of the tile some head uses
                const int nnz = nnz_of[item.tile % kBufs];
                producer.copy_v(buf, item.tile, (nnz + 15) / 16 * 16, [&](int j) { return j < nnz ? list[j] : -1; },
                                true, &full[slot]);
            }
        }
        cp_async_wait_all();
        return;
    }

    // Consumers.
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const int tid = threadIdx.x;
    uint32_t qf[kHeadSize / 16][2];
    load_q_fragments(qf, q, seq, H, first_head, num_heads, lane);
    // r of the two tokens left of the partition, into carry[1], which tile 0's gate reads:
    // warp w computes token t_begin - 2 + w, lane l dims 4 l .. 4 l + 3 (0 before token 0).
    if (warp < kFirK - 1) {
        const int t = t_begin - (kFirK - 1) + warp;
        float kv[4] = {0.f, 0.f, 0.f, 0.f};
        if (t >= 0) {  // k_cache[block of t, kv_head, t % block_size, 4 l .. 4 l + 3]
            const long long block = seq_pages[t / block_size];
            pa::load4(k_cache + ((block * Hkv + kv_head) * block_size + t % block_size) * kHeadSize + 4 * lane, kv);
        }
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
            float dot = 0.f;
            if (t >= 0 && h < num_heads) {
                float qv[4];
                pa::load4(q + (static_cast<size_t>(seq) * H + first_head + h) * kHeadSize + 4 * lane, qv);
                dot = qv[0] * kv[0] + qv[1] * kv[1] + qv[2] * kv[2] + qv[3] * kv[3];
            }
            dot = pa::warp_sum(dot);
            if (lane == 0) sm.carry[2 * kHeads + 2 * h + warp] = fmaxf(dot * scale, 0.f);
        }
    } else if (tid - 64 < 2 * kHeads) {
        sm.carry[tid - 64] = 0.f;  // buffer 0: tile 0's gate writes it before anyone reads it
    }
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();

    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < 2 * num_tiles; ++s) {
        const int slot = s % kStages;
        const StreamItem item = stream_item<L::kAhead>(s, num_tiles);
        const int i = item.tile;
        scalar_t* pb = sm.p16 + (i % kBufs) * kHeads * kPStride;  // p16[i % kBufs]: [kHeads][kPStride]
        pa::mbarrier_wait(&full[slot], (s / kStages) & 1);
        scalar_t* buf = sm.tiles + slot * kTileElems;
        if (item.is_v) {  // PV of tile i: the nnz listed rows of its V tile
            pa::mbarrier_wait(&listed[i % kBufs], (i / kBufs) & 1);  // complete long ago: orders nnz_of and the padding
            pv_steps(acc, buf, pb, (nnz_of[i % kBufs] + 15) / 16, warp, lane);
            release_slot<L>(&empty[slot]);
            continue;
        }
        // 1. scores of tile i
        const int n = min(kTile, t_end - t_begin - i * kTile);  // tokens of this tile
        float* scores = scores_of<L>(buf, sm);  // in this K slot, or the scores buffer (score_index)
        qk_tile<L::kScoreRegion>(scores, buf, qf, n, scale, warp, lane);
        release_k_after_qk<L>(&empty[slot], tid);
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // A
        // 2. the gate, and the list: the needed tokens of the tile in increasing order in
        //    rows[i % kBufs], their weights in the same columns of p16[i % kBufs]
        float p[kHeads];
        bool needed = false;
        int before = 0;  // needed tokens of the lanes below this one, in this warp
        if (tid < kGateThreads) {
            gate_token<L::kScoreRegion>(p, scores, sm.carry + ((i + 1) % 2) * 2 * kHeads, sm.carry + (i % 2) * 2 * kHeads, tid, n,
                       num_heads, gate);
            release_k_after_gate<L>(&empty[slot]);
#pragma unroll
            for (int h = 0; h < kHeads; ++h) needed |= p[h] != 0.f;
            const unsigned mask = __ballot_sync(0xffffffffu, needed);  // whole warps: kGateThreads % 32 == 0
            before = __popc(mask & ((1u << lane) - 1u));
            if (lane == 0) warp_count[warp] = __popc(mask);
        }
        pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // B: every warp's count is written
        int nnz = 0, offset = 0;
#pragma unroll
        for (int w = 0; w < kGateThreads / 32; ++w) {
            offset += w < warp ? warp_count[w] : 0;
            nnz += warp_count[w];
        }
        if (needed) {
            const int slot = offset + before;
            sm.rows[(i % kBufs) * kTile + slot] = static_cast<uint8_t>(tid);
#pragma unroll
            for (int h = 0; h < kHeads; ++h) pb[h * kPStride + slot] = pa::from_float<scalar_t>(p[h]);
        }
        // the weights of rows nnz .. round16(nnz) - 1, which the last mma step reads, are 0
        if (tid >= nnz && tid < (nnz + 15) / 16 * 16) {
#pragma unroll
            for (int h = 0; h < kHeads; ++h) pb[h * kPStride + tid] = pa::from_float<scalar_t>(0.f);
        }
        if (tid == 0) nnz_of[i % kBufs] = nnz;
        pa::mbarrier_arrive(&listed[i % kBufs]);  // the list is complete: the producers may copy V_i
    }
    if (num_parts == 1) {  // the whole sequence was this CTA's: no partials, no merge
        store_output(out, acc, seq, H, first_head, num_heads, warp, lane);
        return;
    }

    // 4. This partition's partial output, partials[seq][first_head + h][part][d], then the
    //    count; the last of the sequence's partitions to count adds them all up.
    {
        const int g = lane / 4, c = lane % 4;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int d = warp * 16 + g + (e >> 1) * 8, h = 2 * c + (e & 1);
            if (h < num_heads)
                partials[((static_cast<size_t>(seq) * H + first_head + h) * max_partitions + part) * kHeadSize + d] = acc[e];
        }
    }
    __shared__ unsigned arrived;
    __threadfence();  // this thread's partials are visible device-wide before the count says so
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // every consumer has written and fenced
    if (tid == 0) arrived = atomicAdd(counters + seq * Hkv + kv_head, 1u);
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
    if (arrived != static_cast<unsigned>(num_parts - 1)) return;  // another partition merges
    __threadfence();  // the other partitions' partials, seen through the count, are read after it
    for (int e = tid; e < num_heads * kHeadSize; e += kConsumerThreads) {
        const int h = e / kHeadSize, d = e % kHeadSize;
        const float* row = partials + (static_cast<size_t>(seq) * H + first_head + h) * max_partitions * kHeadSize + d;
        float sum = 0.f;
        for (int z = 0; z < num_parts; ++z) sum += __ldcg(row + static_cast<size_t>(z) * kHeadSize);  // in partition order
        out[(static_cast<size_t>(seq) * H + first_head + h) * kHeadSize + d] = pa::from_float<scalar_t>(sum);
    }
    if (tid == 0) counters[seq * Hkv + kv_head] = 0;  // ready for the next launch
}

}  // namespace lesson05
