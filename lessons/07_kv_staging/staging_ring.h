// The decode side's staging ring and the prefill side's check before writing into it.
// Plain C++ (the CPU tests build it anywhere).
//
// Each decode rank owns one staging buffer of `capacity` bytes. For every request it
// hands out a region for the prefill ranks to write into, and frees it once the scatter
// that reads it has finished on the GPU.
//
//              offset 0                                               capacity
//   round r+1:  [ F ][  G  ]|head
//   round r  :               ....... [ C ][  D  ][ E ]         (tail unused)
//                                    ^ watermark = (r, offset of C), the oldest live
//
// - Overcommit: allocate() never waits. A request that does not fit before the end wraps
//   to offset 0 of a new round, even if the bytes there are still being read (the tail
//   is wasted); whether the prefill side may write is decided later, by the watermark.
//   A request larger than the whole ring is refused.
// - The watermark is (round, offset) of the oldest live allocation: every byte of
//   earlier rounds, and of its round before that offset, has been read and freed. The
//   decode side publishes it whenever it frees (that is what travels to the prefill
//   side); a copy that arrives late is only more careful, never wrong.
// - The prefill side may write allocation (round a, bytes [offset, end)) when a == 0, or
//   a - 1 < wm.round, or a - 1 == wm.round && end <= wm.tail: the bytes it overwrites
//   belong to round a - 1, and those before the watermark are free.
// - An empty ring restarts at offset 0 in a new round, and publishes that as its
//   watermark. Keeping the old head instead (WhenEmpty::keep_head, the known bug) pins
//   the watermark at (r, head): a request that then wraps to round r + 1 and ends past
//   `head` waits for a free that can never come, because nothing is live.
//
// allocate(), free() and watermark() take one mutex: the scheduler allocates on one
// thread while the thread that sees scatters finish frees.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

namespace lesson07 {

struct Watermark {
    int64_t round = 0;
    int64_t tail = 0;
};

struct RingAllocation {
    int64_t id = -1;
    int64_t offset = 0;
    int64_t bytes = 0;  // rounded up to the ring's alignment
    int64_t round = 0;
    int64_t end() const { return offset + bytes; }
};

enum class AllocStatus { ok, oversized, invalid };

// The prefill side's check before writing allocation `a`, given the last watermark it
// received from the decode side.
bool prefill_may_write(const RingAllocation& a, const Watermark& wm);

class StagingRing {
  public:
    enum class WhenEmpty { restart_new_round, keep_head /* the known bug, kept to test against */ };

    // alignment: every offset is a multiple of it (the kernels copy 16-byte vectors).
    explicit StagingRing(int64_t capacity, int64_t alignment = 256, WhenEmpty when_empty = WhenEmpty::restart_new_round);

    // A region of `bytes` (rounded up to the alignment), or nothing: `oversized` when it is
    // larger than the ring, `invalid` when bytes <= 0.
    std::optional<RingAllocation> allocate(int64_t bytes, AllocStatus* status = nullptr);
    // Frees a live allocation by id; throws std::logic_error for an id that is not live.
    void free(int64_t id);
    // The watermark as last published (at construction and at every free).
    Watermark watermark() const;

    int64_t capacity() const { return capacity_; }
    int64_t alignment() const { return alignment_; }
    int64_t live_count() const;
    int64_t round() const;
    int64_t head() const;

  private:
    const int64_t capacity_;
    const int64_t alignment_;
    const WhenEmpty when_empty_;
    mutable std::mutex mutex_;
    int64_t head_ = 0;
    int64_t round_ = 0;
    int64_t next_id_ = 0;
    Watermark published_;
    // Live allocations by id. Ids grow with (round, offset), so the first is the oldest.
    std::map<int64_t, RingAllocation> live_;
};

}  // namespace lesson07
