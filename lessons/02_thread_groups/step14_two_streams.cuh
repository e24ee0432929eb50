// Lesson 02, step 14: step 13 with two streams a CTA, each half the context's tiles, merged at the end.
//
// What changed since step 13 (step13_aligned_units.cuh), and why: where the grid of 8-head CTAs
// covers the SMs once (llama70b-B16-ctx8k: 128 CTAs), each SM holds one CTA, and the CTA's
// tiles go through one chain: land, QK, the move, the softmax, PV, each barrier waiting for the
// slowest warp. Two CTAs per SM read the same bytes faster (NOTES.md, "Step 13 in full": the same
// bytes as llama70b-B16-ctx8k in 256 CTAs of half the context took 130.0 us against 134.5),
// because one CTA's tile runs while the other's waits. So here one CTA runs two of step 13's
// CTAs side by side, its two streams: threads 0..383 take the first half of the context's
// tiles, threads 384..767 the rest, each with step 13's 256 consumers and 128 producers, its own
// ring (the two-per-SM layout, a shared-memory region each), barriers and running softmax. At the
// end the second stream leaves its unnormalised output in its idle work tile, and the first
// merges the two (the weights e^(m - M) of lesson 03's reduce) and stores the result.
//  * the code is step 13's kernel with `tid` (the thread's index in its stream) for threadIdx.x,
//    the stream's tiles for the whole context's, and its own named barrier (kConsumerBarrier + stream);
//  * a stream with no tile (a context of one tile) keeps m = -inf and weighs 0 in the merge.
// Needs sm_90, as step 13; 8 heads a CTA (one 8-head column block), the two-per-SM layout.
// Run: lesson02_thread_groups [--check | --bench] --variant grouped_mma_two_streams
#pragma once

#include "step13_aligned_units.cuh"  // AlignedLayout, aligned_qk, UnitTile, UnitProducer

namespace lesson02 {

constexpr int kStreams = 2;
constexpr int kTwoStreamThreads = kStreams * kMmaThreads;  // 768
constexpr int kMergeBarrier = kConsumerBarrier + kStreams;  // both streams' consumers, at the end

// One stream's shared memory (step 13's two-per-SM layout) rounded up to 1 KiB, so that the
// second stream's landing slots are 128-byte aligned as the first's.
template <int HEAD_SIZE>
struct TwoStreamLayout : AlignedLayout<HEAD_SIZE, 8, 2> {
    static constexpr int kStreamBytes = (AlignedLayout<HEAD_SIZE, 8, 2>::kSmemBytes + 1023) / 1024 * 1024;
    static constexpr int kSmemBytes = kStreams * kStreamBytes;
    static_assert(kSmemBytes <= kMmaSmemLimit + 1024, "two streams fit one CTA's shared memory on sm_90");
};

template <class scalar_t, int HEAD_SIZE>
__global__ void __launch_bounds__(kTwoStreamThreads, 1)
grouped_two_stream_decode_kernel(scalar_t* __restrict__ out,             // [B, H, D]
                          const scalar_t* __restrict__ q,         // [B, H, D]
                          const scalar_t* __restrict__ k_cache,   // [num_blocks, Hkv, block_size, D]
                          const scalar_t* __restrict__ v_cache,   // [num_blocks, Hkv, block_size, D]
                          const int* __restrict__ block_table,    // [B, max_blocks_per_seq]
                          const int* __restrict__ context_lens,   // [B]
                          int H, int Hkv, int group, int block_size, int max_blocks_per_seq, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // bulk copies: sm_90 (why_not keeps other GPUs away)
    constexpr int HEADS_PER_CTA = 8;
    using L = TwoStreamLayout<HEAD_SIZE>;
    using U = UnitTile<HEAD_SIZE>;
    constexpr int kRow = L::kRow;
    constexpr int kTile = L::kTile;
    constexpr int kStages = L::kLandingSlots;
    static_assert(HEADS_PER_CTA >= kConsumerWarps, "chunk_softmax: one warp a head, no CTA-wide barrier");

    const int stream = threadIdx.x / kMmaThreads;  // 0: the first half of the tiles, 1: the rest
    const int tid = threadIdx.x % kMmaThreads;     // the thread's index in its stream (step 13's threadIdx.x)
    const int seq = blockIdx.y;
    const int kv_head = blockIdx.x;
    const int first_head = kv_head * group;
    const int num_heads = group;  // <= HEADS_PER_CTA
    const int ctx = context_lens[seq];
    const int* seq_pages = block_table + static_cast<size_t>(seq) * max_blocks_per_seq;
    const int ctx_tiles = (ctx + kTile - 1) / kTile;
    const int first_tile = stream == 0 ? 0 : (ctx_tiles + 1) / 2;  // this stream's token tiles
    const int end_tile = stream == 0 ? (ctx_tiles + 1) / 2 : ctx_tiles;
    const int num_stream_tiles = 2 * (end_tile - first_tile);  // K V of each, in turn

    extern __shared__ __align__(16) float smem_all[];
    float* smem = smem_all + stream * (L::kStreamBytes / 4);  // this stream's region
    scalar_t* tiles = reinterpret_cast<scalar_t*>(smem);                        // [kStages][kTile][HEAD_SIZE]
    scalar_t* v_work = tiles + kStages * L::kSlotElems;                         // [kTile][kRow]
    scalar_t* q_tile = v_work + kTile * kRow;                                   // [HEADS_PER_CTA][kRow]
    float* logit_bufs = reinterpret_cast<float*>(q_tile + HEADS_PER_CTA * kRow);      // [2][HEADS_PER_CTA][kTile + 8]
    __shared__ float m_runs[kStreams][HEADS_PER_CTA], l_runs[kStreams][HEADS_PER_CTA], alphas[kStreams][HEADS_PER_CTA];
    __shared__ float red_maxs[kStreams][kConsumerWarps], red_sums[kStreams][kConsumerWarps];
    __shared__ uint64_t fulls[kStreams][kStages], empties[kStreams][kStages];
    float *m_run = m_runs[stream], *l_run = l_runs[stream], *alpha = alphas[stream];
    float *red_max = red_maxs[stream], *red_sum = red_sums[stream];
    uint64_t *full = fulls[stream], *empty = empties[stream];
    // The stream's consumer barrier (compile-time ids: a run-time one would reserve all 16).
    auto consumers_sync = [&] {
        if (stream == 0) pa::named_barrier_sync<kConsumerBarrier, kConsumerThreads>();
        else pa::named_barrier_sync<kConsumerBarrier + 1, kConsumerThreads>();
    };

    if (tid == 0) {
        for (int i = 0; i < kStages; ++i) {
            pa::mbarrier_init(&full[i], kProducerThreads);
            pa::mbarrier_init(&empty[i], kConsumerThreads);
        }
    }
    __syncthreads();  // the last CTA-wide barrier: from here on the two roles only meet at full/empty

    if (tid >= kConsumerThreads) {
        // Producers: step 13's loop over this stream's tiles (issue counts tiles from the context's first).
        UnitProducer<scalar_t, HEAD_SIZE, U::kUnitRows * HEAD_SIZE> producer(tid - kConsumerThreads, k_cache, v_cache, seq_pages, Hkv,
                                                      kv_head, block_size, ctx);
        producer.load_block_id(first_tile);
        for (int s = 0; s < num_stream_tiles; ++s) {
            const int slot = s % kStages;
            if (s >= kStages) pa::mbarrier_wait(&empty[slot], (s / kStages + 1) & 1);
            producer.issue(tiles + slot * L::kSlotElems, 2 * first_tile + s, &full[slot]);
        }
        return;  // the consumers wait for every byte before the CTA ends
    }

    // Consumers. q rows of the group, 16 bytes at a time: q_tile[h][d] = q[seq, first_head + h, d]
    constexpr int kPiecesPerRow = HEAD_SIZE / 8;
    for (int i = tid; i < HEADS_PER_CTA * kPiecesPerRow; i += kConsumerThreads) {
        const int h = i / kPiecesPerRow, piece = i % kPiecesPerRow;
        uint4 w = make_uint4(0, 0, 0, 0);
        if (h < num_heads)
            w = *reinterpret_cast<const uint4*>(q + (static_cast<size_t>(seq) * H + first_head + h) * HEAD_SIZE + piece * 8);
        *reinterpret_cast<uint4*>(q_tile + h * kRow + piece * 8) = w;
    }
    if (tid < HEADS_PER_CTA) {
        m_run[tid] = -INFINITY;
        l_run[tid] = 0.f;
    }
    consumers_sync();

    const int lane = tid % 32;
    const int warp = tid / 32;
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
        const int n = min(kTile, ctx - (first_tile + s / 2) * kTile);     // tokens of this token tile
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
        consumers_sync();
        {
            constexpr int kPieceRow = HEAD_SIZE / 8;                      // 16-byte pieces of a row
            constexpr int kMoves = kTile * kPieceRow / kConsumerThreads;  // per thread: 8 at D 128
            uint4 w[kMoves];
#pragma unroll
            for (int r = 0; r < kMoves; ++r) w[r] = reinterpret_cast<const uint4*>(buf)[r * kConsumerThreads + tid];
#pragma unroll
            for (int r = 0; r < kMoves; ++r) {
                const int i = r * kConsumerThreads + tid;
                *reinterpret_cast<uint4*>(v_work + i / kPieceRow * kRow + i % kPieceRow * 8) = w[r];
            }
        }
        pa::release_slot(&empty[slot]);  // this thread is done with the V landing slot (fence, arrive)
        chunk_softmax<HEADS_PER_CTA, kConsumerWarps>(logits, L::kLogitStride, kTile, num_heads, m_run, l_run, alpha, red_max,
                                               red_sum, warp);
        consumers_sync();
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

    // 4. Splits 1.. hand their partial sums to split 0 through the ring, as in step 13. Then the
    //    second stream's split 0 leaves its unnormalised output in its work tile (idle now), and
    //    the first stream's merges: out = (o0 w0 + o1 w1) / (l0 w0 + l1 w1), w = e^(m - max(m0, m1)).
    float* partials = smem;  // [kPvSplit - 1][HEADS_PER_CTA][HEAD_SIZE]
    consumers_sync();  // every consumer is done with the ring and l_run is final
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
        consumers_sync();
    }
    // [HEADS_PER_CTA][HEAD_SIZE] floats: the second stream's work tile
    float* other_o = reinterpret_cast<float*>(reinterpret_cast<scalar_t*>(smem_all + L::kStreamBytes / 4) + kStages * L::kSlotElems);
    static_assert(HEADS_PER_CTA * HEAD_SIZE * 4 <= L::kTileBytes, "the output fits the work tile");
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
                acc[j][e] = o;
                if (stream == 1) other_o[he * HEAD_SIZE + de] = o;
            }
        }
    }
    if (stream == 1) {
        pa::named_barrier_arrive<kMergeBarrier, kStreams * kConsumerThreads>();  // its m, l and output are there
        return;
    }
    pa::named_barrier_sync<kMergeBarrier, kStreams * kConsumerThreads>();
    if (pv_split == 0) {
#pragma unroll
        for (int j = 0; j < L::kPvItemsPerWarp; ++j) {
            const int item = pv_first_item + j * L::kWarpsPerSplit;
            const int d = item % (HEAD_SIZE / 16) * 16 + g, h = item / (HEAD_SIZE / 16) * 8 + 2 * c;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int he = h + (e & 1), de = d + (e >> 1) * 8;
                if (he < num_heads) {
                    const float m0 = m_runs[0][he], m1 = m_runs[1][he];
                    const float mx = fmaxf(m0, m1);  // finite: the first stream holds a token
                    const float w0 = __expf(m0 - mx), w1 = __expf(m1 - mx);  // w1 = 0 for a stream with no tile
                    const float o = acc[j][e] * w0 + other_o[he * HEAD_SIZE + de] * w1;
                    out[(static_cast<size_t>(seq) * H + first_head + he) * HEAD_SIZE + de] =
                        pa::from_float<scalar_t>(o / (l_runs[0][he] * w0 + l_runs[1][he] * w1));
                }
            }
        }
    }
#else
    __trap();
#endif
}

}  // namespace lesson02
