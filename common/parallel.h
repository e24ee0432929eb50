// A tiny host-side parallel for: splits [0, n) into contiguous chunks over the
// hardware threads. Used to fill large caches and to run the CPU references.
#pragma once

#include <algorithm>
#include <thread>
#include <vector>

namespace pa {

template <class Fn>
void parallel_for(long long n, Fn fn) {
    const long long workers = std::max(1LL, std::min<long long>(n, std::thread::hardware_concurrency()));
    if (workers <= 1) {
        for (long long i = 0; i < n; ++i) fn(i);
        return;
    }
    std::vector<std::thread> pool;
    const long long chunk = (n + workers - 1) / workers;
    for (long long w = 0; w < workers; ++w) {
        const long long lo = w * chunk, hi = std::min(n, lo + chunk);
        if (lo >= hi) break;
        pool.emplace_back([=, &fn] { for (long long i = lo; i < hi; ++i) fn(i); });
    }
    for (auto& t : pool) t.join();
}

}  // namespace pa
