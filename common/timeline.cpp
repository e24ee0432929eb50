#include "timeline.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

namespace pa {

namespace {

// The value at fraction q (0..1) of the sorted values, nearest rank.
double quantile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

}  // namespace

TimelineSummary summarize_timeline(const std::vector<uint64_t>& raw, int stride, int Hkv, const std::vector<int>& ctx,
                                   int tile, int row_bytes) {
    const int ctas = Hkv * static_cast<int>(ctx.size());
    if (ctas == 0 || stride < kTlTiles || raw.size() != static_cast<size_t>(ctas) * stride)
        throw std::invalid_argument("timeline: the record does not match the grid");
    auto at = [&](int cta, int slot) { return raw[static_cast<size_t>(cta) * stride + slot]; };

    uint64_t t0 = at(0, kTlStart);
    for (int c = 1; c < ctas; ++c) t0 = std::min(t0, at(c, kTlStart));
    auto us = [t0](uint64_t t) { return static_cast<double>(t - t0) * 1e-3; };

    TimelineSummary s;
    s.ctas = ctas;
    std::set<uint64_t> sms;
    std::vector<std::pair<double, double>> landed;  // (time, bytes) of every stream tile
    std::vector<double> first_copy, first_tile, ends, cta_gbps;
    for (int c = 0; c < ctas; ++c) {
        const int n_ctx = ctx[static_cast<size_t>(c / Hkv)];
        const int tiles = 2 * ((n_ctx + tile - 1) / tile);
        if (kTlTiles + tiles > stride) throw std::invalid_argument("timeline: stride too small for the contexts");
        const uint64_t start = at(c, kTlStart), end = at(c, kTlEnd);
        sms.insert(at(c, kTlSm));
        uint64_t prev = at(c, kTlFirstCopy);
        if (prev < start) throw std::invalid_argument("timeline: CTA " + std::to_string(c) + " copied before it started");
        std::vector<double> when(static_cast<size_t>(tiles)), bytes(static_cast<size_t>(tiles));
        for (int k = 0; k < tiles; ++k) {
            const uint64_t t = at(c, kTlTiles + k);
            if (t < start || (k > 0 && t < prev) || t > end)
                throw std::invalid_argument("timeline: CTA " + std::to_string(c) + " has tile " + std::to_string(k) + " out of order");
            prev = t;
            when[k] = us(t);
            bytes[k] = static_cast<double>(std::min(tile, n_ctx - k / 2 * tile)) * row_bytes;
            landed.emplace_back(when[k], bytes[k]);
            s.bytes += bytes[k];
        }
        first_copy.push_back((at(c, kTlFirstCopy) - start) * 1e-3);
        if (tiles > 0) first_tile.push_back(when[0] - us(start));
        ends.push_back(us(end));
        // The middle half of the CTA's tiles: its rate once started and before its tail.
        const int a = tiles / 4, b = 3 * tiles / 4;
        if (b - a >= 2 && when[b] > when[a]) {
            double mid = 0;
            for (int k = a + 1; k <= b; ++k) mid += bytes[k];
            cta_gbps.push_back(mid / ((when[b] - when[a]) * 1e-6) * 1e-9);
        }
    }
    s.sms_used = static_cast<int>(sms.size());
    s.first_copy_p50 = quantile(first_copy, 0.5);
    s.first_copy_max = quantile(first_copy, 1.0);
    s.first_tile_p50 = quantile(first_tile, 0.5);
    s.first_tile_max = quantile(first_tile, 1.0);
    s.end_first = quantile(ends, 0.0);
    s.end_p50 = quantile(ends, 0.5);
    s.end_last = quantile(ends, 1.0);
    s.cta_gbps_p10 = quantile(cta_gbps, 0.1);
    s.cta_gbps_p50 = quantile(cta_gbps, 0.5);
    s.cta_gbps_p90 = quantile(cta_gbps, 0.9);

    // When 10 %, 50 %, 90 % and all of the bytes had landed.
    std::sort(landed.begin(), landed.end());
    double sum = 0;
    double* marks[] = {&s.landed_10, &s.landed_50, &s.landed_90, &s.landed_all};
    const double shares[] = {0.1, 0.5, 0.9, 1.0};
    int next = 0;
    for (const auto& [t, b] : landed) {
        sum += b;
        while (next < 4 && sum >= shares[next] * s.bytes * (1 - 1e-12)) *marks[next++] = t;
    }
    constexpr double kMinSteadyShare = 0.5;  // of the last CTA's end
    if (s.landed_90 - s.landed_10 >= kMinSteadyShare * s.end_last && s.landed_90 > s.landed_10) {
        s.steady_gbps = 0.8 * s.bytes / ((s.landed_90 - s.landed_10) * 1e-6) * 1e-9;
        s.at_steady_us = s.bytes / (s.steady_gbps * 1e9) * 1e6;
        s.head_us = s.landed_10 - 0.1 * s.at_steady_us;
        s.tail_us = s.end_last - s.landed_90 - 0.1 * s.at_steady_us;
    }
    return s;
}

}  // namespace pa
