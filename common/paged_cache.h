// The paged KV cache, host side, in the one layout of this repository:
//
//   K, V pools: [num_blocks, Hkv, block_size, D]   (head-major pages, vLLM / FlashInfer "HND")
//   block_table: [B, max_blocks_per_seq]          logical page -> physical block
//   context_lens: [B]
//
// Block tables are random permutations of the physical blocks, never the identity, so
// a kernel that ignores the table fails. Every slot no sequence owns (the tail of a
// sequence's last page, the pages nobody owns, the unused table entries) is NaN, so a
// kernel that reads past a sequence's end fails loudly: 0 * NaN is NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "device_info.cuh"
#include "dtype.h"
#include "shapes.h"

namespace pa {

struct BlockTable {
    int B = 0;
    int max_blocks_per_seq = 0;
    int num_blocks = 0;           // physical blocks in the pools (owned + unowned)
    std::vector<int> table;       // [B, max_blocks_per_seq]; unused entries point at an unowned (NaN) block
    std::vector<int> context_lens;  // [B]

    int block(int seq, int logical_page) const { return table[static_cast<size_t>(seq) * max_blocks_per_seq + logical_page]; }
};

// Pages for each sequence (ceil(ctx / block_size)), plus `extra_blocks` unowned pages, all
// placed by a random permutation drawn from `seed`.
BlockTable build_block_table(const std::vector<int>& context_lens, int block_size, int extra_blocks, uint64_t seed);

struct PagedKvCache {
    DType dtype = DType::fp16;
    int num_blocks = 0, Hkv = 0, block_size = 0, D = 0;
    std::vector<uint16_t> k, v;  // [num_blocks, Hkv, block_size, D]

    size_t index(int block, int head, int slot, int d) const {
        return ((static_cast<size_t>(block) * Hkv + head) * block_size + slot) * D + d;
    }
    size_t elements() const { return static_cast<size_t>(num_blocks) * Hkv * block_size * D; }
};

// One decode step's inputs: the cache, its table, and q.
struct DecodeProblem {
    DecodeShape shape;
    BlockTable table;
    PagedKvCache cache;
    std::vector<uint16_t> q;  // [B, H, D]
    double scale = 0;         // 1 / sqrt(D)
    uint64_t seed = 0;
};

// The bytes of make_decode_problem's K and V pools (both, one copy): the shape's pages plus
// the unowned ones, what a run must find room for before it builds them.
long long decode_pool_bytes(const DecodeShape& shape);

// Why a shape's K and V pools cannot be built here, or "" when they fit: one copy must fit
// half of `host_bytes` (the host builds them; 0: unknown, not checked), and `copies` of them
// (a timed run rotates L2-cold copies) nine tenths of the GPU's memory.
std::string pools_why_not(const DecodeShape& shape, const DeviceInfo& info, int copies, long long host_bytes);

// This machine's physical memory in bytes (0 if it cannot tell).
long long host_memory_bytes();

// Random K, V uniform in [-1, 1) and q in [-3, 3) (logits with a standard deviation near 1), rounded to the shape's dtype; NaN where no sequence owns.
DecodeProblem make_decode_problem(const DecodeShape& shape, uint64_t seed);

// Logical (sequence, token, head, d) access to a problem: what the references read.
class PagedDecodeView {
  public:
    explicit PagedDecodeView(const DecodeProblem& p) : p_(p) {}
    int B() const { return p_.shape.B; }
    int H() const { return p_.shape.H; }
    int Hkv() const { return p_.shape.Hkv; }
    int D() const { return p_.shape.D; }
    int ctx(int seq) const { return p_.table.context_lens[seq]; }
    double q(int seq, int head, int d) const {
        return decode(p_.cache.dtype, p_.q[(static_cast<size_t>(seq) * p_.shape.H + head) * p_.shape.D + d]);
    }
    double k(int seq, int token, int kv_head, int d) const { return decode(p_.cache.dtype, p_.cache.k[at(seq, token, kv_head, d)]); }
    double v(int seq, int token, int kv_head, int d) const { return decode(p_.cache.dtype, p_.cache.v[at(seq, token, kv_head, d)]); }

  private:
    size_t at(int seq, int token, int kv_head, int d) const {
        const int bs = p_.cache.block_size;
        return p_.cache.index(p_.table.block(seq, token / bs), kv_head, token % bs, d);
    }
    const DecodeProblem& p_;
};

}  // namespace pa
