// The timeline summary (common/timeline.h) on records made by
// hand, where every number it reports can be worked out on paper.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "timeline.h"

using Catch::Approx;

namespace {

// One CTA's record: start, SM, first copy, end, then the tile times (all in ns).
void put(std::vector<uint64_t>& raw, int stride, int cta, uint64_t start, uint64_t sm, uint64_t first_copy, uint64_t end,
         const std::vector<uint64_t>& tiles) {
    uint64_t* r = raw.data() + static_cast<size_t>(cta) * stride;
    r[pa::kTlStart] = start;
    r[pa::kTlSm] = sm;
    r[pa::kTlFirstCopy] = first_copy;
    r[pa::kTlEnd] = end;
    for (size_t k = 0; k < tiles.size(); ++k) r[pa::kTlTiles + k] = tiles[k];
}

}  // namespace

TEST_CASE("summarize_timeline: two CTAs of 10 equal tiles", "[cpu][timeline]") {
    // B 2, Hkv 1, ctx 5 tokens with 1-token tiles -> 10 stream tiles of 1000 bytes per CTA.
    const int tile = 1, row_bytes = 1000, stride = pa::timeline_stride(5, tile);
    REQUIRE(stride == pa::kTlTiles + 10);
    std::vector<uint64_t> raw(2 * stride, 0);
    std::vector<uint64_t> a, b;
    for (int k = 0; k < 10; ++k) {
        a.push_back(1000000 + 1000 * (k + 1));  // CTA 0: a tile every 1 us from 1 us after t0 = 1 ms
        b.push_back(1000000 + 2000 * (k + 1));  // CTA 1: a tile every 2 us
    }
    put(raw, stride, 0, 1000000, 3, 1000500, 1011000, a);
    put(raw, stride, 1, 1000000, 7, 1000500, 1021000, b);
    const pa::TimelineSummary s = pa::summarize_timeline(raw, stride, 1, {5, 5}, tile, row_bytes);
    CHECK(s.ctas == 2);
    CHECK(s.sms_used == 2);
    CHECK(s.bytes == Approx(20000));
    CHECK(s.first_copy_p50 == Approx(0.5));
    CHECK(s.first_tile_max == Approx(2.0));
    // tiles landed (us): 1 2 2 3 4 4 5 6 6 7 8 8 9 10 10 12 14 16 18 20 -> 2nd, 10th, 18th of 20
    CHECK(s.landed_10 == Approx(2.0));
    CHECK(s.landed_50 == Approx(7.0));
    CHECK(s.landed_90 == Approx(16.0));
    CHECK(s.landed_all == Approx(20.0));
    CHECK(s.end_first == Approx(11.0));
    CHECK(s.end_last == Approx(21.0));
    // 16000 bytes between 2 us and 16 us
    CHECK(s.steady_gbps == Approx(16000.0 / 14e-6 / 1e9));
    // middle halves: from tile 2 to tile 7, 5000 bytes in 5 us and in 10 us
    CHECK(s.cta_gbps_p10 == Approx(0.5));
    CHECK(s.cta_gbps_p90 == Approx(1.0));
    CHECK(s.at_steady_us + s.head_us + s.tail_us == Approx(s.end_last));
}

TEST_CASE("summarize_timeline counts only the real tokens of a last, partial tile", "[cpu][timeline]") {
    // ctx 3 with 2-token tiles: K and V of tokens 0-1, then K and V of token 2 alone.
    const int tile = 2, row_bytes = 100, stride = pa::timeline_stride(3, tile);
    std::vector<uint64_t> raw(stride, 0);
    put(raw, stride, 0, 0, 0, 10, 5000, {1000, 2000, 3000, 4000});
    const pa::TimelineSummary s = pa::summarize_timeline(raw, stride, 1, {3}, tile, row_bytes);
    CHECK(s.bytes == Approx(2 * 200 + 2 * 100));
}

TEST_CASE("summarize_timeline refuses records that are out of order or do not fit", "[cpu][timeline]") {
    const int tile = 1, stride = pa::timeline_stride(2, tile);
    std::vector<uint64_t> raw(stride, 0);
    put(raw, stride, 0, 100, 0, 150, 1000, {300, 200, 400, 500});  // tile 1 before tile 0
    CHECK_THROWS_AS(pa::summarize_timeline(raw, stride, 1, {2}, tile, 10), std::invalid_argument);
    put(raw, stride, 0, 100, 0, 150, 450, {200, 300, 400, 500});  // a tile after the end
    CHECK_THROWS_AS(pa::summarize_timeline(raw, stride, 1, {2}, tile, 10), std::invalid_argument);
    put(raw, stride, 0, 100, 0, 150, 1000, {200, 300, 400, 500});
    CHECK_NOTHROW(pa::summarize_timeline(raw, stride, 1, {2}, tile, 10));
    CHECK_THROWS_AS(pa::summarize_timeline(raw, stride, 1, {3}, tile, 10), std::invalid_argument);  // 6 tiles
    CHECK_THROWS_AS(pa::summarize_timeline(raw, stride, 2, {2}, tile, 10), std::invalid_argument);  // 2 CTAs
}

TEST_CASE("summarize_timeline reports no steady state for a launch that is mostly start-up", "[cpu][timeline]") {
    // One CTA, 10 tiles: nothing for 10 us, then every tile within 1 us. The 10 %..90 %
    // window (0.8 us) is far under half of the 11 us run.
    const int tile = 1, stride = pa::timeline_stride(5, tile);
    std::vector<uint64_t> raw(stride, 0);
    std::vector<uint64_t> tiles;
    for (int k = 0; k < 10; ++k) tiles.push_back(10000 + 100 * k);
    put(raw, stride, 0, 0, 0, 500, 11000, tiles);
    const pa::TimelineSummary s = pa::summarize_timeline(raw, stride, 1, {5}, tile, 1000);
    CHECK(s.landed_10 == Approx(10.0));
    CHECK(s.landed_all == Approx(10.9));
    CHECK(s.steady_gbps == 0);
    CHECK(s.at_steady_us == 0);
    CHECK(s.head_us == 0);
    CHECK(s.tail_us == 0);
}
