// Lesson 07's plan of a KV hand-off, plain C++ (no CUDA: the CPU tests build it anywhere).
//
// A prefill server at tensor-parallel size Ps hands a request's KV cache to a decode
// server at TP size Pd. Each side splits the model's KV heads over its ranks, so when
// Ps != Pd a decode rank's heads come from a different set of prefill ranks than its own
// rank number suggests. This file answers, for every (Ps, Pd, KV heads, rank):
//   - which global KV heads a rank holds (rank_heads),
//   - which heads a prefill rank sends to a decode rank, from where in its pool to where
//     in the decode pool (head_slice),
//   - how many prefill ranks write into one decode rank (writers_per_reader) and which,
//   - how the staging buffer between them is laid out and how large it is (StagingLayout),
//   - the whole hand-off as a list of (writer, reader) pairs (TransferPlan),
// and names the lesson's shapes (`T4096-L32-tp4to2`, `T4096-L32-tp1to4-kv2`).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace lesson07 {

constexpr int kPageSize = 16;   // tokens per page, as in every lesson
constexpr int kHeadDim = 128;   // D
constexpr int kElemBytes = 2;   // bf16 (the hand-off copies bits: fp16 moves the same way)
constexpr int kDefaultKvHeads = 8;

// A bad TP pair, head count, shape name or layout request: a one-line message.
struct PlanError : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

struct TpConfig {
    int prefill_tp = 1;  // Ps
    int decode_tp = 1;   // Pd
    int kv_heads = kDefaultKvHeads;  // KV heads of the model, all ranks together
};

// Throws PlanError unless: Ps, Pd, heads >= 1; on each side the heads split evenly over
// the ranks or the ranks evenly over the heads (TP 4 with 8 heads: 2 each; TP 4 with 2
// heads: each head on 2 ranks); and one of Ps, Pd divides the other.
void validate(const TpConfig& tp);

// Heads one rank holds: max(1, heads / tp).
int heads_per_rank(int tp, int kv_heads);
// Ranks that hold the same heads: max(1, tp / heads).
int replication(int tp, int kv_heads);

// The global KV heads [first, first + count) that `rank` of a TP-`tp` group holds. With
// more ranks than heads, neighbouring ranks share a head: rank / replication picks it
// (TP 4, 2 heads: ranks 0,1 hold head 0 and ranks 2,3 head 1).
struct RankHeads {
    int first = 0;
    int count = 0;
};
RankHeads rank_heads(int tp, int rank, int kv_heads);

// What one prefill rank sends to one decode rank, in local head indices of each pool:
// heads [src_head_start, + num_heads) of the prefill rank's pool land at
// [dst_head_start, + num_heads) of the decode rank's pool.
struct HeadSlice {
    int src_head_start = 0;
    int num_heads = 0;
    int dst_head_start = 0;
};

// Prefill ranks writing into one decode rank: Ps / Pd when Ps > Pd (fan-in), else 1.
int writers_per_reader(const TpConfig& tp);
// Decode ranks one prefill rank writes to: Pd / Ps when Pd > Ps (fan-out), else 1.
int readers_per_writer(const TpConfig& tp);
// The prefill rank that is writer `writer` (0 <= writer < writers_per_reader) of decode
// rank `dst_rank`.
int writer_rank(const TpConfig& tp, int dst_rank, int writer);

// The slice prefill rank `src_rank` sends to decode rank `dst_rank`; they must be a
// writer/reader pair of the plan (throws PlanError otherwise).
//   fan-in  (Ps > Pd):  all src heads from 0, landing at (src_rank / rep_src) * hpr_src % hpr_dst
//   fan-out (Ps <= Pd): hpr_dst heads from (dst_rank / rep_dst) * hpr_dst % hpr_src, landing at 0
// The rank is divided by its replication before it is scaled: taking it modulo the head
// count instead sends the wrong heads whenever ranks outnumber heads (TP1 -> TP4 with 2
// heads must read heads 0,0,1,1, not 0,1,0,1), and nothing fails until accuracy drops.
HeadSlice head_slice(const TpConfig& tp, int src_rank, int dst_rank);

// The staging bytes of one destination allocation (one decode rank, one request):
// writer-major; within a writer all K layers, then all V layers; within a layer
// [tokens, heads, D]. The prefill side stages each (writer, reader) chunk in the same
// order, so one chunk is one contiguous copy.
struct StagingLayout {
    int writers = 1;
    int layers = 1;
    int tokens = 0;
    int heads = 1;  // heads per chunk (HeadSlice::num_heads)

    int64_t row_bytes() const { return int64_t{kHeadDim} * kElemBytes; }           // one token of one head
    int64_t layer_bytes() const { return int64_t{tokens} * heads * row_bytes(); }  // one layer of K (or V)
    int64_t writer_bytes() const { return 2 * int64_t{layers} * layer_bytes(); }  // one (writer, reader) chunk
    int64_t total_bytes() const { return writers * writer_bytes(); }
    // Byte offset of (writer, kv, layer, token, head); kv 0 is K, 1 is V. Throws PlanError
    // for an index out of range.
    int64_t offset(int writer, int kv, int layer, int token, int head) const;
};

// One writer -> reader chunk of a hand-off.
struct TransferPair {
    int src_rank = 0;      // prefill rank (the writer)
    int dst_rank = 0;      // decode rank (the reader)
    int writer = 0;        // its index among the reader's writers
    HeadSlice slice;
    int64_t bytes = 0;           // StagingLayout::writer_bytes()
    int64_t src_offset = 0;      // in the prefill rank's staging buffer
    int64_t dst_offset = 0;      // in the decode rank's allocation
};

// The whole hand-off of `tokens` tokens of `layers` layers from every prefill rank to
// every decode rank.
struct TransferPlan {
    TpConfig tp;
    int layers = 0;
    int tokens = 0;
    std::vector<TransferPair> pairs;                   // reader-major, then writer
    std::vector<std::vector<int>> pairs_of_src;        // [Ps] indices into pairs, in staging order
    std::vector<std::vector<int>> pairs_of_dst;        // [Pd] indices into pairs, by writer
    std::vector<int64_t> src_staging_bytes;            // [Ps] what each prefill rank stages
    std::vector<int64_t> dst_allocation_bytes;         // [Pd] what each decode rank allocates
    StagingLayout layout;                              // of one decode rank's allocation

    int64_t total_bytes() const;                       // every chunk once
};

// Throws PlanError for a bad TpConfig, layers < 1 or tokens < 0.
TransferPlan make_transfer_plan(const TpConfig& tp, int layers, int tokens);

// A shape of this lesson: tokens handed off, layers, the TP pair and the model's KV heads.
struct StagingShape {
    std::string name;
    int tokens = 0;
    int layers = 0;
    TpConfig tp;
};

// `T<tokens>-L<layers>-tp<Ps>to<Pd>`, with `-kv<heads>` added when heads != 8.
std::string staging_shape_name(int tokens, int layers, const TpConfig& tp);
// Validates and names a shape; throws PlanError.
StagingShape make_staging_shape(int tokens, int layers, const TpConfig& tp);
// Parses a name of that form (any numbers, not only the table's); throws PlanError with a
// message that says what is wrong.
StagingShape parse_staging_shape(const std::string& name);
// A TP pair written `4to2`; throws PlanError.
TpConfig parse_tp_pair(const std::string& text, int kv_heads);

// The measured table: tokens {256, 4096, 32768} x 32 layers x (4->2, 2->4 with 8 KV heads;
// 1->4 with 2 KV heads).
std::vector<StagingShape> bench_shapes();
// The correctness shapes: small, awkward (1 token, a partial last page, more ranks than
// heads on either side, equal TP), cheap enough for compute-sanitizer.
std::vector<StagingShape> check_shapes();

}  // namespace lesson07
