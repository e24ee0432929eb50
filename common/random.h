// Deterministic random numbers for inputs: a counter-based generator, so that a
// stream can be split (one per page, one per sequence) and filled in parallel while
// the values depend only on the seed, never on the number of threads.
#pragma once

#include <cstdint>

namespace pa {

inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

class Rng {
  public:
    explicit Rng(uint64_t seed, uint64_t stream = 0) : state_(splitmix64(seed ^ splitmix64(stream + 0x51ed27ULL))) {}
    uint64_t next_u64() { state_ += 0x9e3779b97f4a7c15ULL; return splitmix64(state_); }
    // Uniform in [0, 1).
    double uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
    // Uniform in [lo, hi).
    float uniform(float lo, float hi) { return lo + static_cast<float>(uniform()) * (hi - lo); }
    // Uniform integer in [0, n).
    uint64_t below(uint64_t n) { return next_u64() % n; }

  private:
    uint64_t state_;
};

}  // namespace pa
