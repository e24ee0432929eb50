#include "pow2_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace lesson04 {

int next_pow2(int n) {
    int p = 1;
    while (p < n) p *= 2;
    return p;
}

int segments_for(int ctx, int partition_size) {
    if (partition_size < 1) throw std::invalid_argument("partition size must be positive");
    return (ctx + partition_size - 1) / partition_size;
}

int pick_partition_size(int max_ctx) {
    for (int ps : kPartitionSizes)
        if (segments_for(max_ctx, ps) <= kMaxSegments) return ps;
    return 0;
}

bool is_partition_size(int partition_size) {
    return std::find(std::begin(kPartitionSizes), std::end(kPartitionSizes), partition_size) != std::end(kPartitionSizes);
}

const char* fix_name(Fix f) {
    switch (f) {
        case Fix::pad_scratch: return "pad_scratch";
        case Fix::pow2_lanes: return "pow2_lanes";
        case Fix::loop: return "loop";
    }
    return "?";
}

bool parse_fix(const std::string& name, Fix* out) {
    for (Fix f : all_fixes())
        if (name == fix_name(f)) {
            *out = f;
            return true;
        }
    return false;
}

std::vector<Fix> all_fixes() { return {Fix::pad_scratch, Fix::pow2_lanes, Fix::loop}; }

int scratch_partitions(Fix f, int segments) { return f == Fix::pad_scratch ? next_pow2(segments) : segments; }

long long scratch_bytes(int B, int H, int D, int partitions) {
    return static_cast<long long>(B) * H * partitions * (2LL + D) * static_cast<long long>(sizeof(float));
}

// ---- host models ------------------------------------------------------------------------

PartialsD partials_of(const std::vector<double>& logits, const std::vector<double>& v, int D,
                      const std::vector<int>& cuts) {
    const int segments = static_cast<int>(cuts.size()) - 1;
    PartialsD p;
    p.m.assign(segments, -INFINITY);
    p.l.assign(segments, 0.0);
    p.acc.assign(static_cast<size_t>(segments) * D, 0.0);
    for (int s = 0; s < segments; ++s) {
        for (int t = cuts[s]; t < cuts[s + 1]; ++t) p.m[s] = std::max(p.m[s], logits[t]);
        for (int t = cuts[s]; t < cuts[s + 1]; ++t) {
            const double e = std::exp(logits[t] - p.m[s]);
            p.l[s] += e;
            for (int d = 0; d < D; ++d) p.acc[static_cast<size_t>(s) * D + d] += e * v[static_cast<size_t>(t) * D + d];
        }
    }
    return p;
}

std::vector<double> merge_exact(const PartialsD& p, int D) {
    const int segments = static_cast<int>(p.m.size());
    double M = -INFINITY;
    for (double m : p.m) M = std::max(M, m);
    double L = 0;
    std::vector<double> out(D, 0.0);
    for (int s = 0; s < segments; ++s) {
        const double w = std::exp(p.m[s] - M);  // 0 for a sentinel: M is finite
        L += w * p.l[s];
        for (int d = 0; d < D; ++d) out[d] += w * p.acc[static_cast<size_t>(s) * D + d];
    }
    for (double& x : out) x /= L;
    return out;
}

std::vector<double> softmax_exact(const std::vector<double>& logits, const std::vector<double>& v, int D) {
    return merge_exact(partials_of(logits, v, D, {0, static_cast<int>(logits.size())}), D);
}

namespace {

// A butterfly over groups of `width` lanes, as __shfl_xor_sync with offsets width/2 .. 1
// does it: lane i combines with lane i ^ o; every lane of a group ends with the same value.
template <class Op>
void butterfly(std::vector<float>& lanes, int width, Op op) {
    for (int o = width / 2; o > 0; o /= 2) {
        std::vector<float> next(lanes.size());
        for (size_t i = 0; i < lanes.size(); ++i) next[i] = op(lanes[i], lanes[i ^ static_cast<size_t>(o)]);
        lanes = next;
    }
}

}  // namespace

std::vector<float> pow2_merge_model(const SegmentsView& s, int segments_p2) {
    if (segments_p2 < s.count || next_pow2(segments_p2) != segments_p2)
        throw std::invalid_argument("segments_p2 must be a power of two no smaller than the segment count");
    const int width = std::min(segments_p2, 32), warps = segments_p2 / width, D = s.D;
    auto max_op = [](float a, float b) { return std::max(a, b); };
    auto add_op = [](float a, float b) { return a + b; };
    // lanes: segment i on lane i; padding lanes read the sentinel
    std::vector<float> m(segments_p2), wl(segments_p2), w(segments_p2);
    for (int i = 0; i < segments_p2; ++i) m[i] = i < s.count ? s.m[i] : -INFINITY;
    // M: each warp's lanes, then the warps
    std::vector<float> lanes = m;
    butterfly(lanes, width, max_op);
    std::vector<float> per_warp(warps);
    for (int k = 0; k < warps; ++k) per_warp[k] = lanes[static_cast<size_t>(k) * width];
    butterfly(per_warp, warps, max_op);
    const float M = per_warp[0];
    // L: the same two levels over w_s * l_s
    for (int i = 0; i < segments_p2; ++i) {
        w[i] = std::exp(m[i] - M);
        wl[i] = w[i] * (i < s.count ? s.l[i] : 0.f);
    }
    butterfly(wl, width, add_op);
    for (int k = 0; k < warps; ++k) per_warp[k] = wl[static_cast<size_t>(k) * width];
    butterfly(per_warp, warps, add_op);
    const float L = per_warp[0];
    // the output: groups of max(1, D/32) consecutive rows, each walked in order with fma,
    // then folded in halves (group g + groups/2 onto g, ...)
    const int rows = std::max(1, D / 32);
    const int groups = std::max(1, segments_p2 / rows);
    std::vector<float> part(static_cast<size_t>(groups) * D, 0.f);
    for (int g = 0; g < groups; ++g)
        for (int i = 0; i < rows && g * rows + i < s.count; ++i) {
            const int seg = g * rows + i;
            for (int d = 0; d < D; ++d) {
                float& o = part[static_cast<size_t>(g) * D + d];
                o = std::fma(w[seg], s.acc[static_cast<size_t>(seg) * D + d], o);
            }
        }
    for (int half = groups / 2; half > 0; half /= 2)
        for (int g = 0; g < half; ++g)
            for (int d = 0; d < D; ++d)
                part[static_cast<size_t>(g) * D + d] += part[static_cast<size_t>(g + half) * D + d];
    std::vector<float> out(D);
    for (int d = 0; d < D; ++d) out[d] = part[d] / L;
    return out;
}

std::vector<float> loop_merge_model(const SegmentsView& s) {
    float M = -INFINITY;
    for (int i = 0; i < s.count; ++i) M = std::max(M, s.m[i]);
    float L = 0.f;
    std::vector<float> o(s.D, 0.f);
    for (int i = 0; i < s.count; ++i) {
        const float w = std::exp(s.m[i] - M);
        L = std::fma(w, s.l[i], L);
        for (int d = 0; d < s.D; ++d) o[d] = std::fma(w, s.acc[static_cast<size_t>(i) * s.D + d], o[d]);
    }
    for (float& x : o) x /= L;
    return o;
}

}  // namespace lesson04
