// Scratch that the CTAs of one launch share (split-k's partials and its merge counters), one
// set per (device, stream), grown as needed and never shrunk: the first launch of a size
// allocates (outside the timed launches, which come after warm-up), the later ones only read
// the pointers. Launches on different streams may run at the same time, so each stream gets
// its own set; launches on one stream run in order and share theirs. A set lives as long as
// the program, so a program should reuse its streams rather than create one per launch. The
// counters start at 0; a launch that uses them must leave them at 0.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <utility>

#include "device_buffer.cuh"

namespace pa {

// The key of per-stream state: the current device and the stream's id (cudaStreamGetId), not
// its handle. A new stream may get the handle of one destroyed while its work still runs, but
// never its id; and the default stream's id is the calling thread's own under
// --default-stream per-thread.
using StreamKey = std::pair<int, unsigned long long>;
StreamKey stream_key(cudaStream_t stream);

// One T per (device, stream id), made on first use. with(stream, use) runs use(T&) under a
// lock, so that host threads launching at once never share a half-updated T; what `use`
// returns is returned.
template <class T>
class PerStream {
   public:
    template <class F>
    decltype(auto) with(cudaStream_t stream, F&& use) {
        const StreamKey key = stream_key(stream);
        std::lock_guard<std::mutex> lock(mu_);
        return use(per_stream_[key]);
    }

   private:
    std::mutex mu_;
    std::map<StreamKey, T> per_stream_;
};

struct SplitBuffers {
    DeviceBuffer<float> floats;       // partials, laid out as the lesson says
    DeviceBuffer<unsigned> counters;  // merge counters, all 0 between launches
};

class SplitWorkspace {
   public:
    // The buffers of the current device and this stream, grown to at least these sizes.
    SplitBuffers& at_least(size_t floats, size_t counters, cudaStream_t stream);

   private:
    PerStream<SplitBuffers> sets_;
};

}  // namespace pa
