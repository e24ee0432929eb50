#include "split_workspace.cuh"

#include "cuda_check.cuh"

namespace pa {

StreamKey stream_key(cudaStream_t stream) {
    StreamKey k;
    CUDA_CHECK(cudaGetDevice(&k.first));
    CUDA_CHECK(cudaStreamGetId(stream, &k.second));
    return k;
}

SplitBuffers& SplitWorkspace::at_least(size_t floats, size_t counters, cudaStream_t stream) {
    return sets_.with(stream, [&](SplitBuffers& b) -> SplitBuffers& {
        if (b.floats.size() < floats) {
            CUDA_CHECK(cudaStreamSynchronize(stream));  // a launch in flight on this stream may still use the old buffer
            b.floats.allocate(floats);
        }
        if (b.counters.size() < counters) {
            CUDA_CHECK(cudaStreamSynchronize(stream));
            b.counters.allocate(counters);
            // zeroed in the stream's order: a stream that does not wait for the default one still sees 0
            CUDA_CHECK(cudaMemsetAsync(b.counters.get(), 0, b.counters.bytes(), stream));
        }
        return b;
    });
}

}  // namespace pa
