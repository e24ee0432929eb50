#include "sparsity.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "parallel.h"

namespace lesson05 {

Sparsity measure_sparsity(const pa::DecodeProblem& p, const pa::reference::GateParams& g) {
    pa::reference::validate_gate(g);  // on this thread: a throw inside parallel_for's workers would terminate
    const pa::DecodeShape& s = p.shape;
    const pa::PagedDecodeView view(p);
    const int group = s.group();
    Sparsity z;
    z.head_zero_share.assign(s.H, 0.0);
    z.max_ctx = s.max_ctx();
    z.row_used.assign(static_cast<size_t>(s.B) * s.Hkv * z.max_ctx, 0);
    std::vector<long long> head_zeros(s.H, 0);
    std::mutex mu;
    pa::parallel_for(static_cast<long long>(s.B) * s.Hkv, [&](long long i) {
        const int seq = static_cast<int>(i / s.Hkv), kvh = static_cast<int>(i % s.Hkv);
        const int ctx = p.table.context_lens[seq];
        std::vector<char> used(ctx, 0);
        std::vector<long long> zeros(group, 0);
        for (int j = 0; j < group; ++j) {
            const std::vector<double> w = pa::reference::gated_p(view, p.scale, g, seq, kvh * group + j);
            for (int t = 0; t < ctx; ++t) {
                if (w[t] == 0.0) ++zeros[j];
                else used[t] = 1;
            }
        }
        long long skippable = 0;
        uint8_t* row_used = z.row_used.data() + static_cast<size_t>(i) * z.max_ctx;  // [seq][kvh][.]: this worker's own
        for (int t = 0; t < ctx; ++t) {
            skippable += used[t] ? 0 : 1;
            row_used[t] = used[t] ? 1 : 0;
        }
        std::lock_guard<std::mutex> lock(mu);
        for (int j = 0; j < group; ++j) {
            head_zeros[kvh * group + j] += zeros[j];
            z.zero_weights += zeros[j];
        }
        z.weights += static_cast<long long>(group) * ctx;
        z.kv_rows += ctx;
        z.skippable_rows += skippable;
    });
    const long long tokens = s.total_tokens();
    for (int h = 0; h < s.H; ++h) z.head_zero_share[h] = tokens ? static_cast<double>(head_zeros[h]) / tokens : 0;
    return z;
}

long long sparse_bytes_needed(long long dense_bytes, const pa::DecodeShape& s, const Sparsity& z) {
    const long long row_bytes = static_cast<long long>(s.D) * 2;  // one V row of one KV head
    return dense_bytes - z.skippable_rows * row_bytes;
}

double limit_speedup(long long dense_bytes, long long needed_bytes) {
    return needed_bytes > 0 ? static_cast<double>(dense_bytes) / static_cast<double>(needed_bytes) : 0;
}

int split_partition_size(int B, int Hkv, int max_ctx, int sms) {
    constexpr int kTileTokens = 128;
    const long long ctas = std::max(1LL, static_cast<long long>(B) * Hkv);
    const int tiles = std::max(1, (max_ctx + kTileTokens - 1) / kTileTokens);
    const int wanted = static_cast<int>(std::lround(2.0 * sms / static_cast<double>(ctas)));
    // A grid that already gives most SMs a CTA gains little from splitting, and a partition
    // of one to three tiles spends most of its time starting and merging: split it only into
    // partitions of 4 tiles or more. A grid of a quarter of the SMs or fewer splits down to
    // single tiles.
    const int min_tiles = ctas * 4 <= sms ? 1 : 4;
    const int parts = std::clamp(std::min(wanted, tiles / min_tiles), 1, tiles);
    const int tiles_per_part = (tiles + parts - 1) / parts;
    return tiles_per_part * kTileTokens;
}

int seqs_per_cta(int B, int Hkv, int max_ctx, int block_size, int sms, int page_slots) {
    const long long ctas = static_cast<long long>(B) * Hkv;
    const long long halved = static_cast<long long>((B + 1) / 2) * Hkv;
    const long long wave = 2LL * sms;  // two CTAs per SM
    const int pages = (max_ctx + block_size - 1) / block_size;
    const bool fits = pages <= page_slots / 2;
    return B >= 2 && ctas > wave && 10 * halved >= 9 * wave && fits ? 2 : 1;
}

}  // namespace lesson05
