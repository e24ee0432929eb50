#include "paged_cache.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include <unistd.h>

#include "parallel.h"
#include "random.h"
#include "table.h"  // strf

namespace pa {

BlockTable build_block_table(const std::vector<int>& context_lens, int block_size, int extra_blocks, uint64_t seed) {
    if (block_size < 1) throw std::invalid_argument("block_size must be positive");
    BlockTable bt;
    bt.B = static_cast<int>(context_lens.size());
    bt.context_lens = context_lens;
    long long owned = 0;
    for (int c : context_lens) {
        if (c < 1) throw std::invalid_argument("context lengths must be at least 1");
        const int pages = (c + block_size - 1) / block_size;
        bt.max_blocks_per_seq = std::max(bt.max_blocks_per_seq, pages);
        owned += pages;
    }
    const long long total = owned + std::max(extra_blocks, 1);  // at least one unowned page for the padding entries
    if (total > (1LL << 31) - 1) throw std::invalid_argument("too many pages for an int block table");
    bt.num_blocks = static_cast<int>(total);

    std::vector<int> perm(bt.num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    Rng rng(seed, 0xb10c);
    for (int i = bt.num_blocks - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(static_cast<uint64_t>(i) + 1)]);
    // Never the identity (a shuffle of a few blocks can draw it): a kernel that ignores the
    // table must fail.
    bool identity = true;
    for (int i = 0; i < bt.num_blocks && identity; ++i) identity = perm[i] == i;
    if (identity) std::rotate(perm.begin(), perm.begin() + 1, perm.end());

    // perm[0 .. owned) are the sequences' pages in order; the rest are unowned.
    const int unowned = perm[owned];
    bt.table.assign(static_cast<size_t>(bt.B) * bt.max_blocks_per_seq, unowned);
    long long next = 0;
    for (int s = 0; s < bt.B; ++s) {
        const int pages = (context_lens[s] + block_size - 1) / block_size;
        for (int p = 0; p < pages; ++p) bt.table[static_cast<size_t>(s) * bt.max_blocks_per_seq + p] = perm[next++];
    }
    return bt;
}

namespace {

// Unowned pages beside the sequences' own: one for every 16 pages' worth of tokens, at least one.
int unowned_pages(const DecodeShape& shape) {
    return std::max(1, static_cast<int>(shape.total_tokens() / shape.block_size / 16));
}

}  // namespace

long long decode_pool_bytes(const DecodeShape& shape) {
    long long pages = unowned_pages(shape);
    for (int c : shape.ctx) pages += (c + shape.block_size - 1) / shape.block_size;
    return 2LL * pages * shape.Hkv * shape.block_size * shape.D * static_cast<long long>(sizeof(uint16_t));
}

std::string pools_why_not(const DecodeShape& shape, const DeviceInfo& info, int copies, long long host_bytes) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const double pools = static_cast<double>(decode_pool_bytes(shape));
    if (pools * copies > 0.9 * static_cast<double>(info.global_mem_bytes))
        return strf("shape %s needs %.1f GiB of GPU memory for %d cop%s of its K and V pools; %s has %.1f GiB",
                    shape.name.c_str(), pools * copies / gib, copies, copies == 1 ? "y" : "ies", info.name.c_str(),
                    static_cast<double>(info.global_mem_bytes) / gib);
    if (host_bytes > 0 && pools > 0.5 * static_cast<double>(host_bytes))
        return strf("shape %s needs %.1f GiB of host memory for its K and V pools; this machine has %.1f GiB",
                    shape.name.c_str(), pools / gib, static_cast<double>(host_bytes) / gib);
    return "";
}

long long host_memory_bytes() {
    const long long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? pages * page : 0;
}

DecodeProblem make_decode_problem(const DecodeShape& shape, uint64_t seed) {
    DecodeProblem p;
    p.shape = shape;
    p.seed = seed;
    p.scale = 1.0 / std::sqrt(static_cast<double>(shape.D));
    p.table = build_block_table(shape.ctx, shape.block_size, unowned_pages(shape), seed);

    PagedKvCache& c = p.cache;
    c.dtype = shape.dtype;
    c.num_blocks = p.table.num_blocks;
    c.Hkv = shape.Hkv;
    c.block_size = shape.block_size;
    c.D = shape.D;
    c.k.assign(c.elements(), kNaNBits);
    c.v.assign(c.elements(), kNaNBits);

    // Fill each sequence's real tokens; a stream per (sequence, page) keeps it parallel and deterministic.
    const DType t = shape.dtype;
    std::vector<std::pair<int, int>> pages;  // (seq, logical page)
    for (int s = 0; s < shape.B; ++s)
        for (int pg = 0; pg * shape.block_size < shape.ctx[s]; ++pg) pages.emplace_back(s, pg);
    parallel_for(static_cast<long long>(pages.size()), [&](long long i) {
        const auto [s, pg] = pages[i];
        Rng rng(seed, (static_cast<uint64_t>(s) << 32) + static_cast<uint64_t>(pg) + 1);
        const int block = p.table.block(s, pg);
        const int tokens = std::min(shape.block_size, shape.ctx[s] - pg * shape.block_size);
        for (int h = 0; h < c.Hkv; ++h)
            for (int slot = 0; slot < tokens; ++slot)
                for (int d = 0; d < c.D; ++d) {
                    const size_t at = c.index(block, h, slot, d);
                    c.k[at] = encode(t, rng.uniform(-1.f, 1.f));
                    c.v[at] = encode(t, rng.uniform(-1.f, 1.f));
                }
    });

    Rng qrng(seed, 0x9u);
    p.q.resize(static_cast<size_t>(shape.B) * shape.H * shape.D);
    for (auto& x : p.q) x = encode(t, qrng.uniform(-3.f, 3.f));
    return p;
}

}  // namespace pa
