#include "staging_ring.h"

#include <stdexcept>
#include <string>

namespace lesson07 {

bool prefill_may_write(const RingAllocation& a, const Watermark& wm) {
    if (a.round == 0) return true;  // the first lap overwrites nothing
    const int64_t previous = a.round - 1;  // the lap whose bytes this write replaces
    return previous < wm.round || (previous == wm.round && a.end() <= wm.tail);
}

StagingRing::StagingRing(int64_t capacity, int64_t alignment, WhenEmpty when_empty)
    : capacity_(capacity), alignment_(alignment), when_empty_(when_empty) {
    if (alignment_ < 1) throw std::invalid_argument("staging ring alignment must be at least 1");
    if (capacity_ < alignment_ || capacity_ % alignment_ != 0)
        throw std::invalid_argument("staging ring capacity " + std::to_string(capacity_) +
                                    " must be a positive multiple of its alignment " + std::to_string(alignment_));
}

std::optional<RingAllocation> StagingRing::allocate(int64_t bytes, AllocStatus* status) {
    auto refuse = [&](AllocStatus s) -> std::optional<RingAllocation> {
        if (status) *status = s;
        return std::nullopt;
    };
    if (bytes <= 0) return refuse(AllocStatus::invalid);
    if (bytes > capacity_) return refuse(AllocStatus::oversized);  // checked before rounding: no overflow
    const int64_t rounded = (bytes + alignment_ - 1) / alignment_ * alignment_;  // <= capacity_: it is a multiple
    std::lock_guard<std::mutex> lock(mutex_);
    RingAllocation a;
    if (rounded <= capacity_ - head_) {
        a.offset = head_;
    } else {
        ++round_;  // wrap: the tail [head_, capacity_) stays unused this round
        a.offset = 0;
    }
    head_ = a.offset + rounded;
    a.bytes = rounded;
    a.round = round_;
    a.id = next_id_++;
    live_.emplace(a.id, a);
    if (status) *status = AllocStatus::ok;
    return a;
}

void StagingRing::free(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (live_.erase(id) == 0) throw std::logic_error("staging ring: free of allocation " + std::to_string(id) + ", which is not live");
    if (!live_.empty()) {
        const RingAllocation& oldest = live_.begin()->second;
        published_ = {oldest.round, oldest.offset};
    } else if (when_empty_ == WhenEmpty::restart_new_round) {
        // Everything is free: the next allocation starts a new round at 0, and a watermark
        // one round ahead of anything written lets it (and all of that round) through.
        ++round_;
        head_ = 0;
        published_ = {round_, 0};
    } else {
        published_ = {round_, head_};
    }
}

Watermark StagingRing::watermark() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return published_;
}

int64_t StagingRing::live_count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(live_.size());
}

int64_t StagingRing::round() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return round_;
}

int64_t StagingRing::head() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return head_;
}

}  // namespace lesson07
