// Lesson 05, step 12 (`split_k_cluster`, sm_90): step 11's partitions, merged through
// distributed shared memory inside a thread-block cluster.
//
// What changed since step 11 (step11_split_k_compact.cuh), and why: step 11's merge is three
// memory round trips at the very end of the kernel, when nothing else is in flight to hide
// them: each partition writes its partials to global scratch and fences (a round trip for
// the writes to be acknowledged), one thread counts on a global counter (another), and the
// last partition reads the others' partials back (a third). On sm_90 the partitions of one
// (sequence, KV head) can be launched as one thread-block cluster (grid z = partitions,
// cluster dims (1, 1, partitions), so a CTA's rank in its cluster is its partition), whose
// CTAs run at the same time and can read each other's shared memory:
//  * every partition leaves its partial output in its own shared memory (the ring, which
//    nothing uses any more): entry e, one float4, is what consumer thread e holds, the same
//    four (dim, head) outputs in every CTA;
//  * a cluster barrier (barrier.cluster: arrive with release, wait with acquire) replaces
//    the fence and the counter: once it completes, every partial is written and visible;
//  * partition 0 reads entry tid of every other partition (ld.shared::cluster after mapa,
//    four loads in flight at a time), adds them in partition order from 0, as step 11 does
//    (the same bits), and writes the output;
//  * a second cluster barrier keeps the other CTAs, and so their shared memory, alive until
//    partition 0 has read them.
// No scratch, no counters, no fence. A cluster holds at most 16 CTAs on sm_90 (8 is the
// portable size; 16 where the layout's CTAs fit one GPC), so this step takes step 11's
// partitions, lengthened where the rule asks for more than that (lesson05.cu: cluster_plan).
// A barrier.cluster waits for the cluster's non-exited threads only, so the producer warps,
// which return when their copies are issued, and a partition past a short sequence's end,
// which returns at once, take no part. Clusters need sm_90: elsewhere this step is
// unavailable, and step 11 is the split-k to run. The cluster's PTX: common/cluster.cuh.
// Run: lesson05_sparse_p [--check | --bench] --variant split_k_cluster
#pragma once

#include "cluster.cuh"  // the cluster's barrier and loads (sm_90)
#include "gated_tile.cuh"

namespace lesson05 {

template <class scalar_t, int CTAS_PER_SM>
__global__ void __launch_bounds__(kThreads, CTAS_PER_SM)
split_k_cluster_gated_kernel(scalar_t* __restrict__ out,             // [B, H, D]
                             const scalar_t* __restrict__ q,         // [B, H, D]
                             const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
                             const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
                             const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
                             const int* __restrict__ context_lens,   // [B]
                             int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale, GateArgs gate,
                             int partition_size) {                 // P: a multiple of kTile; the cluster is the partitions
    using L = Layout<CTAS_PER_SM>;
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
    const Smem<scalar_t> sm = carve_smem<scalar_t, CTAS_PER_SM>(smem);
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

    // 4. This partition's partial output into its own shared memory (the ring's first
    //    slot: every tile is consumed, and the producers are gone): entry tid, one float4,
    //    the same four (dim, head) outputs in every CTA of the cluster; then partition 0
    //    adds them up.
    pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();  // every consumer is done with the ring
    float4* entries = reinterpret_cast<float4*>(sm.tiles);  // [kConsumerThreads] float4
    entries[tid] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    pa::cluster_arrive_release();  // this partition's entries are written ...
    pa::cluster_wait_acquire();    // ... and so are every other partition's
    if (part == 0) {
        float sum[4] = {0.f, 0.f, 0.f, 0.f};  // from 0, in partition order: step 11's bits
        for (int z0 = 0; z0 < num_parts; z0 += 4) {
            float4 v[4];  // four remote loads in flight before the first add waits for one
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int z = z0 + k;
                v[k] = z == 0 ? entries[tid] : z < num_parts ? pa::load_shared_cluster(entries + tid, z) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (z0 + k >= num_parts) break;
                sum[0] += v[k].x;
                sum[1] += v[k].y;
                sum[2] += v[k].z;
                sum[3] += v[k].w;
            }
        }
        store_output(out, sum, seq, H, first_head, num_heads, warp, lane);
    }
    pa::cluster_arrive_release();  // partition 0 has read the others' entries ...
    pa::cluster_wait_acquire();    // ... before they leave, and their shared memory with them
}

}  // namespace lesson05
