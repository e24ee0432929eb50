// Split-k's host-side decisions, in plain C++ (tested on the CPU): where the partitions
// leave their state, how a launch divides each context, and the rules that choose between
// single pass and split-k (the two posts' rules, vLLM's, a split-count rule, and ours).
#pragma once

#include <string>
#include <vector>

namespace lesson03 {

// Where split-k's partitions leave their state (shared by the kernels, the host code and
// lesson 04's reduces). For query head h of sequence b and partition p:
//   m   [B][H][max_partitions]      max logit of the partition's tokens (-inf: a sentinel, no tokens)
//   l   [B][H][max_partitions]      sum of exp(logit - m) over them (0 for a sentinel)
//   acc [B][H][max_partitions][D]   sum of exp(logit - m) * v, not divided by l (0 for a sentinel)
struct SplitScratch {
    float* m = nullptr;
    float* l = nullptr;
    float* acc = nullptr;
    int max_partitions = 0;
};

// One partition's state for one query head, as the partition kernel writes it.
struct PartitionState {
    double m = 0;                // max logit (-inf: a sentinel)
    double l = 0;                // sum of exp(logit - m)
    std::vector<double> acc;     // sum of exp(logit - m) * v, [D]
};

// The host model of the reduce (what split_k_reduce_kernel and the fused merge compute, in
// double): M = max m_p; out = sum_p e^(m_p - M) acc_p / sum_p e^(m_p - M) l_p, no mask.
std::vector<double> merge_states(const std::vector<PartitionState>& parts);
// The state of tokens [begin, end) of one head: logits[t] (already scaled) and v[t][d].
PartitionState partition_state(const std::vector<double>& logits, const std::vector<std::vector<double>>& v, int begin,
                               int end);

// Partitions a context of ctx tokens needs at a fixed partition size: ceil(ctx / partition_size).
int num_partitions(int ctx, int partition_size);

// How a split-k launch divides each sequence's context:
//  * partition_size > 0 (splits == 0): fixed partitions of that many tokens (vLLM's v2); a
//    long sequence gets more of them than a short one, so every CTA has about the same work;
//  * splits > 0: every sequence cut into `splits` pieces of ceil(ctx / splits) tokens rounded
//    up to 32 (one split count for the whole batch, as Flash-Decoding picks it): a batch of
//    mixed lengths then gives its CTAs very different amounts of work.
// fused: the last partition CTA of a (sequence, KV head) merges, no reduce launch.
// head_rows: the group's query heads as the rows of every mma, the softmax in registers
// (step6_head_rows.cuh), for groups of 9 to 32 heads.
// units (sm_90): the producers (of the partition or the head-row kernel) are lesson 02's step 12
// (one bulk copy per 16-token unit of a page, 8 at D 256); pages of 8 tokens at D 64 and 128
// are too small.
// flat_merge (with head_rows): step 7's kernel (step7_flat_merge.cuh), the head-row kernel
// whose slices merge with every load in flight.
// cluster (with flat_merge, sm_90): step 8's kernel (step8_cluster_merge.cuh): the partitions of a
// (sequence, KV head) launched as one thread-block cluster of at most kClusterMostParts CTAs and
// merged in it, no scratch and no reduce; never fused, never longest first.
// longest_first: the CTAs start in the order of longest_first_order (the longest partitions
// first, the empty ones last) instead of the grid's own order; planned on the host from the
// batch's lengths (PagedDecodeArgs::context_lens_host; without them, the grid's order).
// tgs > 0: the ladder's first steps (step1_partitions.cuh, step2_fused_merge.cuh; fused: step
// 2), lesson 02's step 2 with a partition axis, one CTA per (sequence, query head, partition)
// with thread groups of tgs lanes and a few KiB of shared memory: they run on every sm_80+ GPU.
// They take fixed partitions only (no splits, head rows, unit copies or longest-first order).
// tgs == 0: the mma kernels (steps 3 to 8: step3_tensor_cores.cuh .. step8_cluster_merge.cuh), which need
// 113 KiB of shared memory a CTA or more.
// Unit copies pay from partitions of one 128-token tile (measured; our_rule and lesson 04 use it).
constexpr int kUnitsSmallestPartition = 128;
// The most partitions step 8 merges in one cluster (the registers of its merge: step8_cluster_merge.cuh).
constexpr int kClusterMostParts = 4;

struct SplitPlan {
    int partition_size = 256;
    int splits = 0;
    bool fused = false;
    bool head_rows = false;
    bool units = false;
    bool longest_first = false;
    bool flat_merge = false;
    bool cluster = false;
    int tgs = 0;

    bool operator==(const SplitPlan& o) const {
        return partition_size == o.partition_size && splits == o.splits && fused == o.fused && head_rows == o.head_rows &&
               units == o.units && longest_first == o.longest_first && flat_merge == o.flat_merge &&
               cluster == o.cluster && tgs == o.tgs;
    }
    bool operator!=(const SplitPlan& o) const { return !(*this == o); }
};

// One CTA's work in a split-k grid: partition `part` of sequence `seq` (for every KV head:
// the grid's x). Laid out as the kernels' int2.
struct Cell {
    int seq = 0, part = 0;
};

// Every cell of a launch over these lengths (partitions = grid_partitions: ctx.size() x
// partitions cells), in the order their CTAs should start: by the partition's token count,
// largest first, ties in the grid's own order (partition-major, then sequence), so the
// empty partitions come last. The GPU starts CTAs in index order, and a batch of mixed
// lengths in the grid's own order starts the long sequences' last partitions last: the
// final wave is full-size CTAs on a GPU that is emptying (NOTES.md: "Longest first").
std::vector<Cell> longest_first_order(const SplitPlan& p, const std::vector<int>& ctx, int partitions);

// Partition CTAs per (sequence, KV head) for a batch whose longest context is max_ctx
// (`splits` itself with splits > 0).
int grid_partitions(const SplitPlan& p, int max_ctx);
// Tokens of one partition of a ctx-token sequence (the kernel's partition_tokens).
int partition_tokens(const SplitPlan& p, int ctx);

// CSV names: split_k_256, split_k_even8 (splits), split_k_fused_256, split_k_rows_256 (head rows),
// split_k_units_256, split_k_units_fused_256 and split_k_rows_units_256 (unit copies),
// split_k_units_lpt_2048 (longest first; "lpt" after the units, before fused),
// split_k_rows_units_lpt_flat_1024 (step 7's flat merge; after lpt, before fused),
// split_k_rows_units_flat_cluster_1024 (step 8's cluster merge; after flat); the steps:
// partitions_tgs8_256 (step 1), fused_merge_tgs8_256 (step 2).
std::string plan_name(const SplitPlan& p);
// The inverse of plan_name: true and *out set when `name` is the name of a plan (a positive
// partition size or split count, written without leading zeros; an even plan's partition_size
// is 0); false for any other text. parse_plan_name(plan_name(p)) gives p back for every plan
// whose fields plan_name writes (a step's plan: tgs, fused and the partition size only).
bool parse_plan_name(const std::string& name, SplitPlan* out);

// What a rule decides for a shape: single pass, or split-k with this plan.
struct Choice {
    bool split = false;
    SplitPlan plan;
};

struct ShapeFacts {
    int B = 1, H = 1, Hkv = 1, max_ctx = 1;
    long long total_ctx = 1;  // the batch's tokens: sum of its context lengths
    int sms = 132;
    // The reduce behind the plan loads all of a head's partitions at once (lesson 04's
    // pow2_lanes) instead of walking them one after another (this lesson's): more, shorter
    // partitions then cost it little.
    bool parallel_reduce = false;
};

// Lesson 02's auto runs its per-head kernel for a grouped grid of fewer CTAs than this
// (lesson02::kMinGroupedCtas; split_k.cu checks that the two agree).
constexpr int kTinyGroupedGrid = 4;

// The L4 post's first rule: split when B * Hkv < 0.75 * SMs and there are >= 2 segments of 512.
Choice post_rule_1(const ShapeFacts& f);
// Its second: B * Hkv < 0.5 * SMs and >= 4 segments of 512.
Choice post_rule_2(const ShapeFacts& f);
// vLLM: v1 (single pass) when max_ctx <= 8192 and (one partition of 512, or B * H > 512).
Choice vllm_rule(const ShapeFacts& f);
// A split-count rule: splits = min(ceil(SMs / (B * Hkv)), ctx / 64); split when > 1.
Choice split_count_rule(const ShapeFacts& f);
// This lesson's rule (README "The automatic choice"), read off the measured variants:
//  * single pass when the single-pass grid (B * Hkv CTAs) already fills 90 % of the SMs and
//    the batch is even (no context above twice the mean): nothing is gained by splitting;
//  * otherwise split-k, with the largest power-of-two partition whose CTAs still give every
//    SM one (groups up to 8 behind this lesson's reduce: two, which share an SM, unless the
//    batch is even and the partition 4096 tokens or more), at most 4096 tokens for a batch of
//    mixed lengths, whose CTAs start longest first (longest_first), at least 128 tokens (256 for a full
//    8-head group) and, behind this lesson's reduce (not parallel_reduce), for the partition
//    kernel at least 1/16 of the longest context, or 64 when a short context would otherwise
//    give fewer than 8 partitions;
//  * fused (no reduce launch) for groups of 1 or 2, whose last CTA has one or two heads to
//    merge; with more heads the merge in one CTA costs more than the launch it saves;
//  * head rows (split_k_rows_<P>) for groups of 9 to 32, whose grouped CTA is bound by its
//    per-tile barriers rather than by bytes;
//  * unit copies (split_k_units_<P>, split_k_rows_units_<P>; sm_90) from 128 tokens a
//    partition (auto drops them where the GPU or the page size does not allow them);
//  * the cluster merge (split_k_rows_units_flat_cluster_<P>; sm_90) for head rows of an even
//    batch cut into 2 to kClusterMostParts partitions (auto drops it where the GPU cannot run
//    all of the grid's clusters at once, or runs no sm_90 code);
//  * single pass after all when that leaves one partition, unless the single pass would be
//    lesson 02's per-head kernel (fewer than kTinyGroupedGrid grouped CTAs) and the one
//    partition runs the partition kernel with unit copies: its grouped CTA is faster there.
Choice our_rule(const ShapeFacts& f);
// The split-k plan our_rule runs where it splits (its partition size, fused, head rows, unit
// copies, longest first), made for any shape: the ladder's steps run it, each with only the
// ideas it has (split_k.h: step_plan).
SplitPlan our_plan(const ShapeFacts& f);

}  // namespace lesson03
