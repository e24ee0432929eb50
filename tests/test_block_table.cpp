// The block-table builder and the generated decode problems (common/paged_cache.h).
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <set>
#include <stdexcept>
#include <vector>

#include "dtype.h"
#include "paged_cache.h"

namespace {

int pages_of(int ctx, int bs) { return (ctx + bs - 1) / bs; }

// The blocks the sequences own, sequence by sequence, page by page.
std::vector<int> owned_blocks(const pa::BlockTable& bt, int bs) {
    std::vector<int> out;
    for (int s = 0; s < bt.B; ++s)
        for (int p = 0; p < pages_of(bt.context_lens[s], bs); ++p) out.push_back(bt.block(s, p));
    return out;
}

}  // namespace

TEST_CASE("build_block_table gives each sequence distinct pages and points unused entries at an unowned block",
          "[cpu][block_table]") {
    const std::vector<int> lens = {5, 33, 16, 1, 100, 64};
    const int bs = 16, extra = 4;
    const pa::BlockTable bt = pa::build_block_table(lens, bs, extra, 42);
    int owned = 0, max_pages = 0;
    for (int c : lens) {
        owned += pages_of(c, bs);
        max_pages = std::max(max_pages, pages_of(c, bs));
    }
    REQUIRE(bt.B == static_cast<int>(lens.size()));
    REQUIRE(bt.context_lens == lens);
    REQUIRE(bt.max_blocks_per_seq == max_pages);
    REQUIRE(bt.num_blocks == owned + extra);
    REQUIRE(bt.table.size() == static_cast<size_t>(bt.B) * bt.max_blocks_per_seq);

    const std::vector<int> mine = owned_blocks(bt, bs);
    const std::set<int> distinct(mine.begin(), mine.end());
    CHECK(distinct.size() == mine.size());  // no page owned twice
    for (int b : bt.table) {
        CHECK(b >= 0);
        CHECK(b < bt.num_blocks);
    }
    // unused entries (past each sequence's last page) name a block no sequence owns
    for (int s = 0; s < bt.B; ++s)
        for (int p = pages_of(lens[s], bs); p < bt.max_blocks_per_seq; ++p) {
            INFO("sequence " << s << " entry " << p);
            CHECK(distinct.count(bt.block(s, p)) == 0);
        }
    // a random placement, not the identity (a kernel that ignores the table must fail)
    std::vector<int> identity(mine.size());
    for (size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<int>(i);
    CHECK(mine != identity);
}

TEST_CASE("build_block_table is deterministic for a seed and differs between seeds", "[cpu][block_table]") {
    const std::vector<int> lens = {300, 17, 1, 64, 250};
    const pa::BlockTable a = pa::build_block_table(lens, 8, 10, 7);
    const pa::BlockTable b = pa::build_block_table(lens, 8, 10, 7);
    const pa::BlockTable c = pa::build_block_table(lens, 8, 10, 8);
    CHECK(a.table == b.table);
    CHECK(a.num_blocks == b.num_blocks);
    CHECK(a.table != c.table);
}

TEST_CASE("build_block_table keeps an unowned block even with no extra blocks, and refuses bad input",
          "[cpu][block_table]") {
    const pa::BlockTable bt = pa::build_block_table({16, 32}, 16, 0, 3);
    CHECK(bt.num_blocks == 3 + 1);
    // sequence 0 has one page of two entries: the second is the one unowned block
    const std::vector<int> mine = owned_blocks(bt, 16);
    CHECK(std::set<int>(mine.begin(), mine.end()).count(bt.block(0, 1)) == 0);
    CHECK_THROWS_AS(pa::build_block_table({4, 0}, 16, 1, 3), std::invalid_argument);
    CHECK_THROWS_AS(pa::build_block_table({4}, 0, 1, 3), std::invalid_argument);
}

TEST_CASE("make_decode_problem: real tokens finite and in range, NaN past each length and in unowned blocks",
          "[cpu][block_table]") {
    for (pa::DType t : {pa::DType::fp16, pa::DType::bf16}) {
        const pa::DecodeShape s = pa::make_shape("nan-layout", 6, 3, {1, 8, 13, 30}, 64, 8, t);
        INFO(pa::dtype_name(t));
        const pa::DecodeProblem p = pa::make_decode_problem(s, 99);
        const pa::PagedKvCache& c = p.cache;
        REQUIRE(c.num_blocks == p.table.num_blocks);
        REQUIRE(c.k.size() == c.elements());
        REQUIRE(c.v.size() == c.elements());
        CHECK(p.scale == 1.0 / 8.0);

        // which (block, slot) holds a real token
        std::vector<char> real(static_cast<size_t>(c.num_blocks) * c.block_size, 0);
        for (int b = 0; b < s.B; ++b)
            for (int tok = 0; tok < s.ctx[b]; ++tok)
                real[static_cast<size_t>(p.table.block(b, tok / s.block_size)) * c.block_size + tok % s.block_size] = 1;
        long long real_values = 0, nan_values = 0, bad = 0;
        for (int blk = 0; blk < c.num_blocks; ++blk)
            for (int h = 0; h < c.Hkv; ++h)
                for (int slot = 0; slot < c.block_size; ++slot)
                    for (int d = 0; d < c.D; ++d) {
                        const size_t at = c.index(blk, h, slot, d);
                        const float k = pa::decode(t, c.k[at]), v = pa::decode(t, c.v[at]);
                        if (real[static_cast<size_t>(blk) * c.block_size + slot]) {
                            ++real_values;
                            bad += !(k >= -1.f && k <= 1.f) || !(v >= -1.f && v <= 1.f);
                        } else {
                            ++nan_values;
                            bad += !std::isnan(k) || !std::isnan(v);
                        }
                    }
        CHECK(bad == 0);
        CHECK(real_values == s.total_tokens() * s.Hkv * s.D);
        // the tail of each sequence's last page and at least one whole unowned block are NaN
        CHECK(nan_values >= (7 + 0 + 3 + 2) * s.Hkv * s.D + static_cast<long long>(s.Hkv) * s.block_size * s.D);
        REQUIRE(p.q.size() == static_cast<size_t>(s.B) * s.H * s.D);
        long long q_bad = 0;
        for (uint16_t q : p.q) {
            const float f = pa::decode(t, q);
            q_bad += !(f >= -3.f && f <= 3.f);
        }
        CHECK(q_bad == 0);
        // same seed, same bytes
        const pa::DecodeProblem again = pa::make_decode_problem(s, 99);
        CHECK(again.cache.k == c.k);
        CHECK(again.cache.v == c.v);
        CHECK(again.q == p.q);
        CHECK(again.table.table == p.table.table);
    }
}

TEST_CASE("decode_pool_bytes is the size of the pools make_decode_problem builds", "[cpu][block_table]") {
    const std::vector<pa::DecodeShape> shapes = {
        pa::make_shape("one", 1, 1, {1}, 128, 16),
        pa::make_shape("mixed", 8, 2, {1, 17, 100}, 64, 8),
        pa::make_shape("long", 64, 8, {2048, 1531}, 128, 32, pa::DType::bf16),
        pa::make_shape("d256", 4, 4, {513, 1000, 4096}, 256, 16),
    };
    for (const auto& s : shapes) {
        const pa::DecodeProblem p = pa::make_decode_problem(s, 7);
        CHECK(pa::decode_pool_bytes(s) == static_cast<long long>(p.cache.k.size() + p.cache.v.size()) * 2);
    }
}

TEST_CASE("pools_why_not refuses, in one line, pools that do not fit the GPU or the host", "[cpu][block_table]") {
    pa::DeviceInfo gpu;
    gpu.name = "a 1 GiB GPU";
    gpu.global_mem_bytes = 1LL << 30;
    const pa::DecodeShape small = pa::make_shape("small", 8, 8, {1000}, 128, 16);       // 4.1 MB of pools
    const pa::DecodeShape big = pa::make_shape("big", 8, 8, {100000, 100000}, 128, 16);  // 876 MB
    CHECK(pa::pools_why_not(small, gpu, 2, 0).empty());
    CHECK(pa::pools_why_not(big, gpu, 1, 0).empty());
    const std::string two = pa::pools_why_not(big, gpu, 2, 0);  // two copies: 1.6 GiB
    CHECK(two.find("shape big needs 1.6 GiB of GPU memory for 2 copies of its K and V pools; a 1 GiB GPU has 1.0 GiB") == 0);
    CHECK(two.find('\n') == std::string::npos);
    const std::string host = pa::pools_why_not(big, gpu, 1, 1LL << 30);  // more than half of the host
    CHECK(host.find("shape big needs 0.8 GiB of host memory") == 0);
    CHECK(pa::pools_why_not(big, gpu, 1, 4LL << 30).empty());
    CHECK(pa::host_memory_bytes() > 0);
}
