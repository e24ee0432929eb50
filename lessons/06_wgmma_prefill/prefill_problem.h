// Lesson 06's host side, in plain C++ (built once into lesson06_host, tested without a GPU):
// what a prefill batch is, how it is laid out, how much work it is, and the CPU reference
// for sampled rows of a large batch.
//
// A prefill batch: sequence b has prefix(b) >= 0 tokens already in the paged cache and
// new_len(b) >= 1 new ones (its prompt, or the next chunk of it), whose K and V the server
// has just written into the cache right after the prefix. Every new token attends to the
// whole prefix and causally to the new tokens up to itself:
//
//   new token i of sequence b attends to positions 0 .. prefix(b) + i   (ctx = prefix + i + 1)
//
// Layouts (one for the whole repository, see common/paged_cache.h):
//   K, V pools   [num_blocks, Hkv, block_size, D]   block_size 16, D 128, bf16
//   block_table  [B, max_blocks_per_seq]            random permutation of the pages
//   q, out       [total_new_tokens, H, D]           sequences one after the other
//                                                   (= [B, T, H, D] when every prompt has T tokens)
//   q_start      [B + 1]                            first row of each sequence in q and out
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtype.h"
#include "paged_cache.h"
#include "shapes.h"

namespace lesson06 {

constexpr int kHeadSize = 128;  // D: the only head size this lesson builds
constexpr int kPageSize = 16;   // block_size: one TMA box of the last step is one page

struct PrefillShape {
    std::string name;              // "B32-T256-H8-Hkv4"; a prefix is its own column, not part of the name
    int H = 8, Hkv = 4;
    int D = kHeadSize, block_size = kPageSize;
    pa::DType dtype = pa::DType::bf16;
    std::vector<int> new_lens;     // [B]: new tokens of each sequence
    std::vector<int> prefix_lens;  // [B]: tokens already cached before them

    int B() const { return static_cast<int>(new_lens.size()); }
    int group() const { return H / Hkv; }
    long long total_new() const;                 // rows of q and out
    int max_new() const;
    int max_total() const;                       // longest prefix + new
    bool uniform_prefix() const;                 // every sequence has prefix_lens[0]
    std::string prefix_label() const;            // "1024", or "mixed"
    std::string ctx_label() const;               // new tokens per sequence: "256", or "mixed"
};

// The catalogue name of a uniform batch: "B<b>-T<t>-H<h>-Hkv<hkv>".
std::string prefill_shape_name(int B, int T, int H, int Hkv);
// A uniform batch: B prompts of T new tokens after a prefix of `prefix` cached tokens.
PrefillShape make_prefill_shape(int B, int T, int H, int Hkv, int prefix = 0);
// "B16-T1024-H8-Hkv4" or "B16-T1024-H8-Hkv4-P1024" (prefix 1024). Throws pa::FlagError.
PrefillShape parse_prefill_shape(const std::string& name);
// Any batch (mixed lengths). Throws pa::FlagError naming the problem.
PrefillShape make_mixed_prefill_shape(std::string name, int H, int Hkv, std::vector<int> new_lens,
                                      std::vector<int> prefix_lens);
// What this lesson's kernels need of a shape (D 128, page 16, bf16, H % Hkv == 0, lengths);
// throws pa::FlagError with a one-line reason.
void validate_prefill_shape(const PrefillShape& s);

// Work and bytes, as the README counts them.
//  * causal pairs: the (query row, key position) pairs attention must visit,
//    sum_b sum_i (prefix_b + i + 1), per query head;
//  * FLOPs: 4 * D * H * pairs (2 for the multiply-add of q.k, 2 for p * v), the masked half
//    of the diagonal tiles and the padding of a last tile not counted;
//  * bytes: q and out once, K and V of every cached position once, the used block-table
//    entries: what the kernel must move at the least.
long long causal_pairs(const PrefillShape& s);
double causal_flops(const PrefillShape& s);
long long prefill_bytes(const PrefillShape& s);

// The score-to-P step, the policy of every kernel of this lesson.
enum class Policy { softmax, gate };
const char* policy_name(Policy p);  // "softmax", "gate"

// The gate's parameters (gated_reference.h): p = gamma * clamp(r - sigma * a, 0, 1).
// sigma 1.5 gives about 72 % zeros on this lesson's random data, the ~70 % of the post.
struct GateSetting {
    double gamma = 1.0;
    double sigma = 1.5;
};

struct PrefillProblem {
    PrefillShape shape;
    pa::BlockTable table;             // context_lens = prefix + new of each sequence
    pa::PagedKvCache cache;           // NaN in every slot no sequence owns
    std::vector<uint16_t> q;          // [total_new, H, D]
    std::vector<int> q_start;         // [B + 1]
    double scale = 0;                 // 1 / sqrt(D)
    uint64_t seed = 0;
};

// The paged cache a shape's problem holds: a decode shape whose contexts are each sequence's
// prefix plus its new tokens (its pools' size is pa::decode_pool_bytes of it).
pa::DecodeShape cache_shape(const PrefillShape& s);

// Random q in [-3, 3), K and V in [-1, 1) (scores with a standard deviation near 1), rounded
// to bf16; a random block table; NaN wherever no sequence owns a slot.
PrefillProblem make_prefill_problem(const PrefillShape& s, uint64_t seed);

// Logical access for the references (reference/prefill_reference.h's Inputs).
class PagedPrefillView {
  public:
    explicit PagedPrefillView(const PrefillProblem& p) : p_(p) {}
    int B() const { return p_.shape.B(); }
    int H() const { return p_.shape.H; }
    int Hkv() const { return p_.shape.Hkv; }
    int D() const { return p_.shape.D; }
    int prefix(int b) const { return p_.shape.prefix_lens[b]; }
    int new_len(int b) const { return p_.shape.new_lens[b]; }
    double q(int b, int i, int h, int d) const {
        return pa::decode(p_.cache.dtype, p_.q[(static_cast<size_t>(p_.q_start[b] + i) * H() + h) * D() + d]);
    }
    double k(int b, int t, int kvh, int d) const { return pa::decode(p_.cache.dtype, p_.cache.k[at(b, t, kvh, d)]); }
    double v(int b, int t, int kvh, int d) const { return pa::decode(p_.cache.dtype, p_.cache.v[at(b, t, kvh, d)]); }

  private:
    size_t at(int b, int t, int kvh, int d) const {
        const int bs = p_.cache.block_size;
        return p_.cache.index(p_.table.block(b, t / bs), kvh, t % bs, d);
    }
    const PrefillProblem& p_;
};

// The rows of out a check compares: every row (stride 1), or every stride-th new token of each
// sequence plus its first 16 and last 16 (where the diagonal and the tails are), so that the
// reference of an 8k-token prompt takes seconds, not minutes.
std::vector<long long> checked_rows(const PrefillShape& s, int stride);
// The reference (double, from the rounded inputs) on those rows: [rows.size(), H, D].
std::vector<double> reference_rows(const PrefillProblem& p, Policy policy, const GateSetting& g,
                                   const std::vector<long long>& rows);

// Query tiles: each CTA of the tensor-core steps takes `rows` consecutive new tokens of one
// sequence and one query head. A tile is (sequence, first new token); the list is sorted by
// decreasing work (KV tiles of `kv_tile` tokens it must visit), so that the longest CTAs start
// first and the short ones fill the tail of the grid.
struct QueryTile {
    int seq = 0;
    int row0 = 0;
};
std::vector<QueryTile> query_tiles(const PrefillShape& s, int rows, int kv_tile);

// Step 1 treats each new token as a decode of its own (ctx = prefix + i + 1): one decode
// "sequence" per row of q, with its sequence's block-table row. Returns the decode shape
// (B = total_new; ctx per row) and fills the [total_new, max_blocks_per_seq] table.
pa::DecodeShape as_decode_shape(const PrefillShape& s);
std::vector<int> as_decode_block_table(const PrefillProblem& p);

}  // namespace lesson06
