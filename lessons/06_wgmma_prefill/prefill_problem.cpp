#include "prefill_problem.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <regex>
#include <set>

#include "flags.h"
#include "gated_reference.h"
#include "parallel.h"
#include "prefill_reference.h"
#include "random.h"

namespace lesson06 {

long long PrefillShape::total_new() const { return std::accumulate(new_lens.begin(), new_lens.end(), 0LL); }

int PrefillShape::max_new() const { return new_lens.empty() ? 0 : *std::max_element(new_lens.begin(), new_lens.end()); }

int PrefillShape::max_total() const {
    int m = 0;
    for (int b = 0; b < B(); ++b) m = std::max(m, prefix_lens[b] + new_lens[b]);
    return m;
}

bool PrefillShape::uniform_prefix() const {
    return std::all_of(prefix_lens.begin(), prefix_lens.end(), [&](int p) { return p == prefix_lens[0]; });
}

std::string PrefillShape::prefix_label() const {
    return uniform_prefix() ? std::to_string(prefix_lens.empty() ? 0 : prefix_lens[0]) : "mixed";
}

std::string PrefillShape::ctx_label() const {
    const bool uniform = std::all_of(new_lens.begin(), new_lens.end(), [&](int n) { return n == new_lens[0]; });
    return uniform && !new_lens.empty() ? std::to_string(new_lens[0]) : "mixed";
}

std::string prefill_shape_name(int B, int T, int H, int Hkv) {
    return "B" + std::to_string(B) + "-T" + std::to_string(T) + "-H" + std::to_string(H) + "-Hkv" + std::to_string(Hkv);
}

PrefillShape make_mixed_prefill_shape(std::string name, int H, int Hkv, std::vector<int> new_lens,
                                      std::vector<int> prefix_lens) {
    PrefillShape s;
    s.name = std::move(name);
    s.H = H;
    s.Hkv = Hkv;
    s.new_lens = std::move(new_lens);
    s.prefix_lens = std::move(prefix_lens);
    if (s.prefix_lens.size() == 1 && s.new_lens.size() > 1) s.prefix_lens.assign(s.new_lens.size(), s.prefix_lens[0]);
    validate_prefill_shape(s);
    return s;
}

PrefillShape make_prefill_shape(int B, int T, int H, int Hkv, int prefix) {
    return make_mixed_prefill_shape(prefill_shape_name(B, T, H, Hkv), H, Hkv, std::vector<int>(std::max(B, 0), T),
                                    std::vector<int>(std::max(B, 0), prefix));
}

PrefillShape parse_prefill_shape(const std::string& name) {
    static const std::regex re(R"(B(\d{1,6})-T(\d{1,7})-H(\d{1,4})-Hkv(\d{1,4})(-P(\d{1,7}))?)");
    std::smatch m;
    if (!std::regex_match(name, m, re))
        throw pa::FlagError("unknown prefill shape '" + name + "' (expected B<b>-T<t>-H<h>-Hkv<hkv>, optionally -P<prefix>, "
                            "e.g. B32-T256-H8-Hkv4 or B16-T1024-H8-Hkv4-P1024)");
    const int prefix = m[6].matched ? std::stoi(m[6].str()) : 0;
    return make_prefill_shape(std::stoi(m[1].str()), std::stoi(m[2].str()), std::stoi(m[3].str()),
                              std::stoi(m[4].str()), prefix);
}

void validate_prefill_shape(const PrefillShape& s) {
    auto fail = [&](const std::string& why) { throw pa::FlagError("shape " + s.name + ": " + why); };
    if (s.B() < 1) fail("needs at least one sequence");
    if (s.prefix_lens.size() != s.new_lens.size())
        fail("has " + std::to_string(s.new_lens.size()) + " prompt lengths but " + std::to_string(s.prefix_lens.size()) +
             " prefix lengths");
    if (s.H < 1 || s.Hkv < 1 || s.H % s.Hkv != 0)
        fail("H must be a positive multiple of Hkv (got H " + std::to_string(s.H) + ", Hkv " + std::to_string(s.Hkv) + ")");
    if (s.H > 256) fail("at most 256 query heads (got " + std::to_string(s.H) + ")");
    if (s.D != kHeadSize) fail("lesson 06 is built for D 128 only (got D " + std::to_string(s.D) + ")");
    if (s.block_size != kPageSize)
        fail("lesson 06 is built for pages of 16 tokens only (got " + std::to_string(s.block_size) + ")");
    if (s.dtype != pa::DType::bf16) fail("lesson 06 is bf16 only (the wgmma steps are built for bf16)");
    long long total = 0;
    for (int b = 0; b < s.B(); ++b) {
        if (s.new_lens[b] < 1) fail("sequence " + std::to_string(b) + " has no new token (new_len must be >= 1)");
        if (s.prefix_lens[b] < 0) fail("sequence " + std::to_string(b) + " has a negative prefix");
        if (static_cast<long long>(s.prefix_lens[b]) + s.new_lens[b] > (1 << 20))
            fail("sequence " + std::to_string(b) + " is longer than 1M tokens");
        total += s.new_lens[b];
    }
    if (total * s.H * s.D > (1LL << 31) - 1) fail("q has more than 2^31 elements");
}

long long causal_pairs(const PrefillShape& s) {
    long long pairs = 0;
    for (int b = 0; b < s.B(); ++b) {
        const long long n = s.new_lens[b], p = s.prefix_lens[b];
        pairs += n * p + n * (n + 1) / 2;  // sum over i < n of (p + i + 1)
    }
    return pairs;
}

double causal_flops(const PrefillShape& s) { return 4.0 * s.D * s.H * static_cast<double>(causal_pairs(s)); }

long long prefill_bytes(const PrefillShape& s) {
    long long kv_tokens = 0, pages = 0;
    for (int b = 0; b < s.B(); ++b) {
        const long long total = s.prefix_lens[b] + s.new_lens[b];
        kv_tokens += total;
        pages += (total + s.block_size - 1) / s.block_size;
    }
    const long long qo = 2LL * s.total_new() * s.H * s.D * 2;  // q in, out back, 2 bytes each
    return 2LL * kv_tokens * s.Hkv * s.D * 2 + qo + pages * 4 + 8LL * s.B();
}

const char* policy_name(Policy p) { return p == Policy::softmax ? "softmax" : "gate"; }

pa::DecodeShape cache_shape(const PrefillShape& s) {
    std::vector<int> ctx(s.B());
    for (int b = 0; b < s.B(); ++b) ctx[b] = s.prefix_lens[b] + s.new_lens[b];
    return pa::make_shape(s.name, s.H, s.Hkv, ctx, s.D, s.block_size, s.dtype);
}

PrefillProblem make_prefill_problem(const PrefillShape& s, uint64_t seed) {
    validate_prefill_shape(s);
    // The cache and its table are a decode problem's with ctx = prefix + new: common/ fills the
    // real tokens and leaves NaN everywhere else. Its q ([B, H, D]) is not used.
    pa::DecodeProblem dp = pa::make_decode_problem(cache_shape(s), seed);

    PrefillProblem p;
    p.shape = s;
    p.seed = seed;
    p.scale = dp.scale;
    p.table = std::move(dp.table);
    p.cache = std::move(dp.cache);
    p.q_start.assign(s.B() + 1, 0);
    for (int b = 0; b < s.B(); ++b) p.q_start[b + 1] = p.q_start[b] + s.new_lens[b];
    // q: a stream per row, so that filling in parallel gives the same values for any thread count
    const long long rows = s.total_new();
    const int row_elems = s.H * s.D;
    p.q.resize(static_cast<size_t>(rows) * row_elems);
    pa::parallel_for(rows, [&](long long r) {
        pa::Rng rng(seed, 0x51ULL << 40 | static_cast<uint64_t>(r));
        for (int e = 0; e < row_elems; ++e)
            p.q[static_cast<size_t>(r) * row_elems + e] = pa::encode(s.dtype, rng.uniform(-3.f, 3.f));
    });
    return p;
}

std::vector<long long> checked_rows(const PrefillShape& s, int stride) {
    std::vector<long long> rows;
    long long start = 0;
    for (int b = 0; b < s.B(); ++b) {
        const int n = s.new_lens[b];
        for (int i = 0; i < n; ++i)
            if (stride <= 1 || i % stride == 0 || i < 16 || i >= n - 16) rows.push_back(start + i);
        start += n;
    }
    return rows;
}

std::vector<double> reference_rows(const PrefillProblem& p, Policy policy, const GateSetting& g,
                                   const std::vector<long long>& rows) {
    const PrefillShape& s = p.shape;
    const PagedPrefillView view(p);
    const int H = s.H, D = s.D, group = s.group();
    if (static_cast<long long>(rows.size()) == s.total_new()) {  // every row: the repository's reference itself
        if (policy == Policy::softmax) return pa::reference::softmax_prefill(view, p.scale);
        pa::reference::GateParams gp;
        gp.gamma = g.gamma;
        gp.sigma = g.sigma;
        return pa::reference::gated_prefill(view, p.scale, gp);
    }
    // Sampled rows: the same arithmetic (reference/'s policies on each row's scores), one task per
    // (sequence, KV head) reading that sequence's K and V once.
    pa::reference::GateParams gp;
    gp.gamma = g.gamma;
    gp.sigma = g.sigma;
    const pa::reference::GateP gate(gp);
    const pa::reference::SoftmaxP softmax;
    std::vector<double> out(rows.size() * H * D, 0.0);
    std::vector<int> seq_of(rows.size());
    for (size_t k = 0; k < rows.size(); ++k)
        seq_of[k] = static_cast<int>(std::upper_bound(p.q_start.begin(), p.q_start.end(), rows[k]) - p.q_start.begin() - 1);
    pa::parallel_for(static_cast<long long>(s.B()) * s.Hkv, [&](long long task) {
        const int b = static_cast<int>(task / s.Hkv), kvh = static_cast<int>(task % s.Hkv);
        const int prefix = s.prefix_lens[b], total = prefix + s.new_lens[b];
        std::vector<double> k(static_cast<size_t>(total) * D), v(static_cast<size_t>(total) * D), q(D), sc;
        for (int t = 0; t < total; ++t)
            for (int d = 0; d < D; ++d) {
                k[static_cast<size_t>(t) * D + d] = view.k(b, t, kvh, d);
                v[static_cast<size_t>(t) * D + d] = view.v(b, t, kvh, d);
            }
        for (size_t r = 0; r < rows.size(); ++r) {
            if (seq_of[r] != b) continue;
            const int i = static_cast<int>(rows[r] - p.q_start[b]);
            const int ctx = prefix + i + 1;
            for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
                for (int d = 0; d < D; ++d) q[d] = view.q(b, i, h, d);
                sc.resize(ctx);
                for (int t = 0; t < ctx; ++t) {
                    double dot = 0;
                    for (int d = 0; d < D; ++d) dot += q[d] * k[static_cast<size_t>(t) * D + d];
                    sc[t] = dot * p.scale;
                }
                const std::vector<double> w = policy == Policy::softmax ? softmax(sc) : gate(sc);
                double* o = &out[(r * H + h) * D];
                for (int t = 0; t < ctx; ++t) {
                    if (w[t] == 0.0) continue;
                    for (int d = 0; d < D; ++d) o[d] += w[t] * v[static_cast<size_t>(t) * D + d];
                }
            }
        }
    });
    return out;
}

std::vector<QueryTile> query_tiles(const PrefillShape& s, int rows, int kv_tile) {
    std::vector<std::pair<int, QueryTile>> work;  // (KV tiles visited, tile)
    for (int b = 0; b < s.B(); ++b)
        for (int r0 = 0; r0 < s.new_lens[b]; r0 += rows) {
            const int kv_end = s.prefix_lens[b] + std::min(r0 + rows, s.new_lens[b]);
            work.push_back({(kv_end + kv_tile - 1) / kv_tile, QueryTile{b, r0}});
        }
    std::stable_sort(work.begin(), work.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<QueryTile> out;
    out.reserve(work.size());
    for (const auto& w : work) out.push_back(w.second);
    return out;
}

pa::DecodeShape as_decode_shape(const PrefillShape& s) {
    std::vector<int> ctx;
    ctx.reserve(static_cast<size_t>(s.total_new()));
    for (int b = 0; b < s.B(); ++b)
        for (int i = 0; i < s.new_lens[b]; ++i) ctx.push_back(s.prefix_lens[b] + i + 1);
    return pa::make_shape(s.name + "-as-decode", s.H, s.Hkv, ctx, s.D, s.block_size, s.dtype);
}

std::vector<int> as_decode_block_table(const PrefillProblem& p) {
    const PrefillShape& s = p.shape;
    const int w = p.table.max_blocks_per_seq;
    std::vector<int> t(static_cast<size_t>(s.total_new()) * w);
    for (int b = 0; b < s.B(); ++b)
        for (int i = 0; i < s.new_lens[b]; ++i)
            std::copy_n(p.table.table.begin() + static_cast<size_t>(b) * w, w,
                        t.begin() + static_cast<size_t>(p.q_start[b] + i) * w);
    return t;
}

}  // namespace lesson06
