// Scratch that the CTAs of one launch share (split-k's partials and its merge counters), one
// set per device, grown as needed and never shrunk: the first launch of a size allocates
// (outside the timed launches, which come after warm-up), the later ones only read the
// pointers. The counters start at 0; a launch that uses them must leave them at 0.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include "device_buffer.cuh"

namespace pa {

struct SplitBuffers {
    DeviceBuffer<float> floats;       // partials, laid out as the lesson says
    DeviceBuffer<unsigned> counters;  // merge counters, all 0 between launches
};

class SplitWorkspace {
   public:
    // The current device's buffers, grown to at least these sizes.
    SplitBuffers& at_least(size_t floats, size_t counters);

   private:
    std::mutex mu_;
    std::map<int, SplitBuffers> per_device_;
};

}  // namespace pa
