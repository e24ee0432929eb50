// Lesson 03, step 1 (partitions): every instantiation, compiled once, and its launcher (the
// host side it shares with step 2 is partition_steps.cuh).
#include "partition_steps.cuh"
#include "step1_partitions.cuh"

namespace lesson03::step1 {

namespace {

struct Kernels {
    static constexpr const char* kStep = "step 1 (partitions)";
    static constexpr int kThreads = step1::kThreads;
    static size_t smem_bytes(int D, int partition_size) { return step1::smem_bytes(D, partition_size); }
    template <class T, int D>
    static auto get() {
        return partitions_kernel<T, D, kStepTgs>;
    }
    template <class T, class K>
    static void run(K kernel, dim3 grid, size_t smem, cudaStream_t stream, const pa::PagedDecodeArgs& a, int partition_size,
                    const SplitScratch& s, unsigned*) {
        kernel<<<grid, kThreads, smem, stream>>>(static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
                                                 static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.Hkv,
                                                 a.H / a.Hkv, a.block_size, a.max_blocks_per_seq, a.scale, partition_size, s);
    }
};

}  // namespace

std::string why_not(const pa::DecodeShape& s, int partition_size, const pa::DeviceInfo& info) {
    return partition_steps::why_not<Kernels>(s, partition_size, info);
}

void launch(const pa::PagedDecodeArgs& a, int partition_size, const SplitScratch& s, cudaStream_t stream) {
    partition_steps::launch<Kernels>(a, partition_size, s, nullptr, stream);
}

pa::LaunchGeometry geometry(const pa::DecodeShape& s, int partition_size) {
    return partition_steps::geometry<Kernels>(s, partition_size);
}

}  // namespace lesson03::step1
