// The score-to-P step of every tensor-core kernel of lesson 06, as a policy: the kernel body
// computes a tile of scores with tensor cores and hands it to the policy, which turns it
// into weights P in place, then multiplies P by V. Two policies:
//
//   SoftmaxPolicy   online softmax (FlashAttention): a running max m and sum l per row; the
//                   output so far is rescaled by alpha = e^(m_old - m_new) when m grows, and
//                   divided by l at the end.
//   GatePolicy      the FIR gate (reference/gated_reference.h): r = max(s, 0),
//                   a_t = (r_t + r_{t-1} + r_{t-2}) / 3, p = gamma * clamp(r - sigma * a, 0, 1).
//                   No normalisation: nothing to rescale, nothing to divide.
//
// Both work on the accumulator fragment that mma.sync.m16n8k16 and wgmma m64nNk16 share: a
// warp owns 16 rows of the tile, lane l holds rows g = l / 4 and g + 8, and for each 8-column
// block j four registers
//   s[4j + 0] = (row g,     col 8j + 2c)      s[4j + 1] = (row g,     col 8j + 2c + 1)
//   s[4j + 2] = (row g + 8, col 8j + 2c)      s[4j + 3] = (row g + 8, col 8j + 2c + 1)
// with c = l % 4. The four lanes of a quad hold one row's 8 columns of each block, in order,
// which is what lets the gate find its two predecessors with shuffles inside the quad (and,
// for the first columns of a block, in the quad's last lane's previous block), and carry the
// last two r of a tile in registers (the "tail") into the next tile.
//
// Masking (causality): column t of the tile is key position kv0 + t; row r may see it when
// kv0 + t <= last[r] (= prefix + i). A masked score is selected away (-inf, or p = 0), never
// multiplied: K rows past a sequence's end may be NaN in the last step's shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace lesson06 {

struct SoftmaxParams {
    float scale_log2;  // scale * log2(e): scores go straight to the exp2 domain
};
struct GateParams {
    float scale, gamma, sigma;
};

// 2^x as the softmax takes it: exp2f, which (without --use_fast_math) keeps a result below
// 2^-126 (a denormal) exact, at the price of a range test and two multiplies around the one
// MUFU.EX2 instruction. Step 11 swaps in the instruction alone (step11_fast_exp2.cuh: Exp2Ftz).
struct Exp2Exact {
    __device__ __forceinline__ static float apply(float x) { return exp2f(x); }
};

// t[r][j] = max(t[r][j], t[r][j + W]) for j < W, then W / 2, ..., 1: t[r][0] ends as the max of
// t[r][0 .. 2W). A template, so that every index is a constant and t stays in registers.
template <int W, int N>
__device__ __forceinline__ void tree_max(float (&t)[2][N]) {
#pragma unroll
    for (int j = 0; j < W; ++j) {
        t[0][j] = fmaxf(t[0][j], t[0][j + W]);
        t[1][j] = fmaxf(t[1][j], t[1][j + W]);
    }
    if constexpr (W > 1) tree_max<W / 2>(t);
}

// NB: 8-column blocks of the tile (8: 64 keys, 16: 128 keys). LAZY: 0, the running max follows every
// new score; n > 0, a row keeps its max until a score exceeds it by more than n (exp2 domain), so
// weights reach 2^n and the output is rescaled only on such a jump (step 13). TREE: the max of a
// row's scores in a tree of depth log2(2 NB) rather than a chain of 2 NB (step 20).
template <int NB, class Exp2 = Exp2Exact, int LAZY = 0, bool TREE = false>
struct SoftmaxPolicy {
    static constexpr bool kRescales = true;
    float m[2];  // running max of rows g and g + 8, in the exp2 domain (-inf before any key)
    float l[2];  // this lane's share of the running sum of p (the quad adds its four at the end)
    float scale_log2;

    __device__ __forceinline__ explicit SoftmaxPolicy(const SoftmaxParams& p) : scale_log2(p.scale_log2) {
        m[0] = m[1] = -INFINITY;
        l[0] = l[1] = 0.f;
    }

    // s: raw dot products of the tile -> unnormalised p. alpha: what to multiply the output so
    // far by, per row. `masked`: whether some column may lie past a row's last position.
    __device__ __forceinline__ void to_p(float (&s)[4 * NB], int kv0, const int (&last)[2], bool masked, int lane,
                                         float (&alpha)[2]) {
        const int col0 = kv0 + 2 * (lane & 3);
        // The max of the raw scores (scale_log2 > 0, so it is the max of the scaled ones); the
        // scale then folds into one FFMA per element: p = 2^(s * scale_log2 - m).
        float mx[2] = {-INFINITY, -INFINITY};
        if constexpr (TREE) {
            // The same max (fmaxf is exact, so the order does not change it), but every exponent
            // below waits for it: a chain of 2 NB dependent fmaxf is 2 NB latencies, a tree log2(2 NB).
            if (masked) {
#pragma unroll
                for (int j = 0; j < NB; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (col0 + 8 * j + (e & 1) > last[e >> 1]) s[4 * j + e] = -INFINITY;
            }
            float t[2][NB];  // row r's max of block j's two scores, then halved level by level
#pragma unroll
            for (int j = 0; j < NB; ++j) {
                t[0][j] = fmaxf(s[4 * j], s[4 * j + 1]);
                t[1][j] = fmaxf(s[4 * j + 2], s[4 * j + 3]);
            }
            tree_max<NB / 2>(t);
            mx[0] = t[0][0];
            mx[1] = t[1][0];
        } else {
#pragma unroll
            for (int j = 0; j < NB; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    if (masked && col0 + 8 * j + (e & 1) > last[e >> 1]) s[4 * j + e] = -INFINITY;
                    mx[e >> 1] = fmaxf(mx[e >> 1], s[4 * j + e]);
                }
        }
        float base[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));  // the quad holds the row
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float cand = mx[r] * scale_log2;
            float m_new;
            if constexpr (LAZY == 0) m_new = fmaxf(m[r], cand);
            else m_new = cand - m[r] > LAZY ? cand : m[r];  // m = -inf: the first finite max is taken
            base[r] = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet: no inf - inf
            alpha[r] = Exp2::apply(m[r] - base[r]);      // m = -inf: 0, and the output is 0 anyway
            m[r] = m_new;
        }
        float sum[2] = {0.f, 0.f};
#pragma unroll
        for (int j = 0; j < NB; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float p = Exp2::apply(fmaf(s[4 * j + e], scale_log2, -base[e >> 1]));
                s[4 * j + e] = p;
                sum[e >> 1] += p;
            }
        l[0] = l[0] * alpha[0] + sum[0];
        l[1] = l[1] * alpha[1] + sum[1];
    }

    // What the output rows are multiplied by at the end: 1 / l.
    __device__ __forceinline__ void finish(float (&out_scale)[2]) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float t = l[r];
            t += __shfl_xor_sync(0xffffffffu, t, 1);
            t += __shfl_xor_sync(0xffffffffu, t, 2);
            out_scale[r] = 1.f / t;
        }
    }
};

// FOLD: false, the weight as the reference writes it; true, with the scale and sigma folded into
// two coefficients, two FFMAs a weight (step 19, below).
template <int NB, bool FOLD = false>
struct GatePolicy {
    static constexpr bool kRescales = false;
    // r_{t-2} and r_{t-1} of each row for the first column of the next tile (meaningful on the
    // first lane of each quad, which is the only one that reads it). r before position 0 is 0.
    float tail[2][2];
    float scale, gamma, sigma_third;
    float a_own, b_prev;  // FOLD: scale (1 - sigma / 3) and -scale sigma / 3

    __device__ __forceinline__ explicit GatePolicy(const GateParams& p)
        : scale(p.scale),
          gamma(p.gamma),
          sigma_third(p.sigma * (1.f / 3.f)),
          a_own(p.scale * (1.f - p.sigma * (1.f / 3.f))),
          b_prev(-p.scale * (p.sigma * (1.f / 3.f))) {
        tail[0][0] = tail[0][1] = tail[1][0] = tail[1][1] = 0.f;
    }

    // Two rewrites keep the step at five instructions an element (plus a shuffle):
    //  * the scale is positive, so r, a and r - sigma a scale with it: the policy works on raw
    //    dot products, r' = max(s, 0), and scales once, inside the clamp: clamp(x, 0, 1) of a
    //    product is one saturating multiply (__saturatef);
    //  * gamma multiplies every weight, so it multiplies the output once, at the end (finish).
    __device__ __forceinline__ void to_p(float (&s)[4 * NB], int kv0, const int (&last)[2], bool masked, int lane,
                                         float (&alpha)[2]) {
        alpha[0] = alpha[1] = 1.f;
        const int c = lane & 3;
        const int col0 = kv0 + 2 * c;
        // r' of every column (a NaN score, from a K row past the end, becomes 0 here: fmaxf
        // returns the number; such a column is masked below anyway).
#pragma unroll
        for (int k = 0; k < 4 * NB; ++k) s[k] = fmaxf(s[k], 0.f);
        // From the previous lane of the quad (lane 3 for the quad's first lane): its two r' of the
        // same block and row, i.e. the two columns just left of ours. For the first lane, those
        // of block j are the two columns left of block j + 1, so it keeps them one block (`prev`);
        // left of block 0 is the tail of the previous tile. One block at a time keeps 8 registers
        // live instead of 4 * NB.
        const int src = (lane & ~3) | ((lane + 3) & 3);
        float prev[4] = {tail[0][0], tail[0][1], tail[1][0], tail[1][1]};
#pragma unroll
        for (int j = 0; j < NB; ++j) {
            float cur[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) cur[e] = __shfl_sync(0xffffffffu, s[4 * j + e], src);
#pragma unroll
            for (int row = 0; row < 2; ++row) {
                // r' at columns 8j + 2c - 2 and 8j + 2c - 1
                const float r_m2 = c == 0 ? prev[2 * row] : cur[2 * row];
                const float r_m1 = c == 0 ? prev[2 * row + 1] : cur[2 * row + 1];
                const float r0 = s[4 * j + 2 * row], r1 = s[4 * j + 2 * row + 1];
                float p0, p1;
                if constexpr (!FOLD) {
                    // a = (r_t + r_{t-1} + r_{t-2}) / 3, summed in that order as the reference does
                    p0 = __saturatef((r0 - sigma_third * (r0 + r_m1 + r_m2)) * scale);
                    p1 = __saturatef((r1 - sigma_third * (r1 + r0 + r_m1)) * scale);
                } else {
                    // The weight before the clamp is linear in the three r': A r'_t + B r'_{t-1} +
                    // B r'_{t-2}, two FFMAs (the outer one saturating) where the above takes two adds,
                    // an FFMA and a multiply; B r'_{t-1} is in both columns' weights. The sums round
                    // differently from the reference's, by an ulp of a float before a continuous clamp.
                    const float b_m1 = b_prev * r_m1;
                    p0 = __saturatef(fmaf(b_prev, r_m2, fmaf(a_own, r0, b_m1)));
                    p1 = __saturatef(fmaf(b_prev, r0, fmaf(a_own, r1, b_m1)));
                }
                if (masked) {
                    if (col0 + 8 * j > last[row]) p0 = 0.f;
                    if (col0 + 8 * j + 1 > last[row]) p1 = 0.f;
                }
                s[4 * j + 2 * row] = p0;
                s[4 * j + 2 * row + 1] = p1;
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) prev[e] = cur[e];
        }
        // The tile's last two r' of each row sit in the quad's last lane, whose values the first
        // lane has just received for the last block.
        tail[0][0] = prev[0];
        tail[0][1] = prev[1];
        tail[1][0] = prev[2];
        tail[1][1] = prev[3];
    }

    __device__ __forceinline__ void finish(float (&out_scale)[2]) { out_scale[0] = out_scale[1] = gamma; }
};

// Multiplies the output fragment (R 8-column blocks of 4 registers, rows g and g + 8) by the
// policy's alpha. Skipped when no row of the warp changed its max: on long contexts the running
// max soon stops moving, and the 4R multiplies are a sizeable share of the per-tile work.
template <class Policy, int N>
__device__ __forceinline__ void rescale_output(float (&o)[N], const float (&alpha)[2]) {
    if constexpr (Policy::kRescales) {
        if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
            for (int k = 0; k < N; ++k) o[k] *= alpha[(k >> 1) & 1];
        }
    }
}

// The policy types of a kernel with NB column blocks per tile, by the host-side enum.
template <int NB, bool SOFTMAX>
struct PolicyOf;
template <int NB>
struct PolicyOf<NB, true> {
    using type = SoftmaxPolicy<NB>;
};
template <int NB>
struct PolicyOf<NB, false> {
    using type = GatePolicy<NB>;
};

// What every policy constructor takes, filled once on the host.
struct PolicyParams {
    SoftmaxParams softmax;
    GateParams gate;
};
template <int NB, class Exp2, int LAZY, bool TREE>
__device__ __forceinline__ SoftmaxPolicy<NB, Exp2, LAZY, TREE> make_policy(const PolicyParams& p,
                                                                          SoftmaxPolicy<NB, Exp2, LAZY, TREE>*) {
    return SoftmaxPolicy<NB, Exp2, LAZY, TREE>(p.softmax);
}
template <int NB, bool FOLD>
__device__ __forceinline__ GatePolicy<NB, FOLD> make_policy(const PolicyParams& p, GatePolicy<NB, FOLD>*) {
    return GatePolicy<NB, FOLD>(p.gate);
}

}  // namespace lesson06
