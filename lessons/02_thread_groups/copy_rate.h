// Lesson 02's `--copy-rate`: how fast one CTA's copies bring bytes in, by the kind of copy
// (copy_rate.cu). Steps 10 to 12 are readers first: with their consumers idle they take as
// long as the whole kernel on the big shapes (NOTES.md, "How deep a ring").
#pragma once

#include <string>
#include <vector>

#include "device_info.cuh"

namespace lesson02 {

// One measured reader: `copy_bytes` per copy from `issuers` threads, `inflight_bytes` per CTA
// at most, `ctas` CTAs each reading `bytes_per_cta` (L2-cold), median and minimum of the
// launches' times. `shape` is "read-<ctas>ctas" for the contiguous readers, or the Table A
// shape whose K and V bytes an item reader reads.
struct CopyRate {
    std::string reader;  // "bulk_256", "bulk_4096", "bulk_4096_one", "bulk_16384", "loads_16",
                         // "items_contiguous", "items_pages16", "items_pages16_pad16", "items_loads_pages16",
                         // "shares_pages16_1", "shares_pages16_2"
    std::string shape;
    int copy_bytes = 0, issuers = 0;  // bytes a copy; threads issuing them
    int inflight_bytes = 0, ctas = 0, ctas_per_sm = 0;
    long long bytes_per_cta = 0;
    double us_median = 0, us_min = 0;
};

// Every contiguous reader at one CTA, one CTA per SM and two CTAs per SM. The bulk copies
// need sm_90 code: elsewhere they are left out and `skipped` says why in one line.
std::vector<CopyRate> measure_copy_rates(const pa::DeviceInfo& info, std::string* skipped);

// The single pass's bytes without its math: for each of `shapes` (Table A names, one length,
// a multiple of 128, D 128; any other exits with a one-line error), one CTA per (sequence, KV
// head) reading its K and V tiles, 128 tokens a tile, K and V in turn, as step 12's producers
// copy them (a 4 KiB unit a thread, a ring of three tiles): from K and V laid out contiguously
// ([B, Hkv, ctx, D]: "items_contiguous"), from the lessons' pools of 16-token pages under a
// shuffled block table into 128-byte-aligned units ("items_pages16") or into step 12's units
// 16 bytes apart modulo 128 ("items_pages16_pad16"); the same pages by 16-byte cp.async
// from 128 threads ("items_loads_pages16"); and the same aligned copies in equal shares of the
// batch's tiles over one or two CTAs per SM ("shares_pages16_1", "_2"), a share running on from
// one (sequence, KV head) into the next. The bulk readers need sm_90 code: elsewhere only the
// cp.async one runs, and `skipped` says why in one line.
std::vector<CopyRate> measure_item_reads(const pa::DeviceInfo& info, const std::vector<std::string>& shapes,
                                         std::string* skipped);

}  // namespace lesson02
