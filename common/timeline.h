// Where a streaming kernel's time goes: a kernel built with TIMELINE = true writes, per
// CTA, the GPU clock (%globaltimer, ns) at a few points (timeline.cuh stamps them), and
// summarize_timeline turns one launch's record into the numbers a lesson's --timeline
// prints (lesson 02's warp-specialised kernel; the partition kernel of split-k alike).
//
// The record is [ctas][stride] 64-bit words, CTA c = seq * Hkv + kv_head (the grid is
// (Hkv, B)), stride = kTlTiles + the most stream tiles any CTA has:
//   kTlStart      thread 0 entered the kernel
//   kTlSm         the SM the CTA ran on (%smid)
//   kTlFirstCopy  the producers' first tile of copies was issued (its page ids had arrived)
//   kTlEnd        thread 0 finished (after its output stores)
//   kTlTiles + s  the consumers saw stream tile s land (K of token tile s / 2 when s is
//                 even, its V when odd)
#pragma once

#include <cstdint>
#include <vector>

namespace pa {

constexpr int kTlStart = 0, kTlSm = 1, kTlFirstCopy = 2, kTlEnd = 3, kTlTiles = 4;

// Words per CTA for a batch whose longest context is max_ctx, with `tile` tokens per tile.
inline int timeline_stride(int max_ctx, int tile) { return kTlTiles + 2 * ((max_ctx + tile - 1) / tile); }

// Times in microseconds from the first CTA's start unless said otherwise.
struct TimelineSummary {
    int ctas = 0, sms_used = 0;
    double bytes = 0;                           // K and V bytes of real tokens
    double first_copy_p50 = 0, first_copy_max = 0;  // a CTA's start -> its first copies issued
    double first_tile_p50 = 0, first_tile_max = 0;  // a CTA's start -> its first tile landed
    double landed_10 = 0, landed_50 = 0, landed_90 = 0, landed_all = 0;  // when that share of the bytes had landed
    double end_first = 0, end_p50 = 0, end_last = 0;                    // CTA ends
    // The rate between 10 % and 90 % landed; 0 when that window is under half of the run
    // (a launch that is mostly start-up has no steady state, and tiles the consumers reach
    // in a burst would read as a rate above the memory's).
    double steady_gbps = 0;
    double cta_gbps_p10 = 0, cta_gbps_p50 = 0, cta_gbps_p90 = 0;  // one CTA's rate over the middle half of its tiles
    // end_last split up: the bytes at the steady rate, the excess before 10 % had landed
    // (start-up), and the excess after 90 % had landed (the tail: uneven CTA ends and the
    // last tile's math). All 0 without a steady state.
    double at_steady_us = 0, head_us = 0, tail_us = 0;
};

// raw: [B * Hkv][stride] as the kernel wrote it; ctx: [B]; tile: tokens per tile;
// row_bytes: bytes of one token's K (or V) row for one KV head (D * element size).
// Throws std::invalid_argument on a record that is not ordered in time.
TimelineSummary summarize_timeline(const std::vector<uint64_t>& raw, int stride, int Hkv, const std::vector<int>& ctx,
                                   int tile, int row_bytes);

}  // namespace pa
