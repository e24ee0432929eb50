// The host side steps 1 and 2 share (they differ only in their kernel): what is built, what
// a shape needs, the launch grid (H, B, partitions) of 128 threads. Included by
// step1_partitions.cu and step2_fused_merge.cu, each of which names its kernel through a
// Kernels struct:
//   struct Kernels {
//       static constexpr const char* kStep = "step 1 (partitions)";
//       static constexpr int kThreads = step1::kThreads;
//       static size_t smem_bytes(int D, int partition_size);
//       template <class T, int D> static auto get();   // the kernel
//       template <class T, class K> static void run(K kernel, dim3 grid, size_t smem, cudaStream_t,
//                                                   const pa::PagedDecodeArgs&, int partition_size,
//                                                   const SplitScratch&, unsigned* counters);
//   };
#pragma once

#include <string>

#include "cuda_check.cuh"
#include "dispatch.cuh"
#include "launch_utils.cuh"
#include "split_steps.h"
#include "table.h"

namespace lesson03::partition_steps {

// What a step builds: {fp16, bf16} x D {64, 128, 256} at TGS kStepTgs. Calls
// f(kernel, TypeTag<scalar_t>) and returns true, or returns false when not built.
template <class Kernels, class F>
bool with_kernel(pa::DType t, int D, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
            f(Kernels::template get<T, decltype(d)::value>(), tag);
            return true;
        });
    });
}

template <class Kernels>
std::string not_built(pa::DType t, int D) {
    return pa::strf("lesson03 %s: no kernel built for %s, D %d (built: D 64/128/256)", Kernels::kStep, pa::dtype_name(t), D);
}

template <class Kernels>
std::string why_not(const pa::DecodeShape& s, int partition_size, const pa::DeviceInfo& info) {
    if (partition_size < 1) return pa::strf("partition size %d is not positive", partition_size);
    const void* kernel = nullptr;
    with_kernel<Kernels>(s.dtype, s.D, [&](auto k, auto) { kernel = reinterpret_cast<const void*>(k); });
    if (!kernel) return not_built<Kernels>(s.dtype, s.D);
    const size_t need = Kernels::smem_bytes(s.D, partition_size);
    const int limit = pa::max_dynamic_smem(kernel);
    if (need > static_cast<size_t>(limit))
        return pa::strf("partitions of %d tokens need %zu bytes of shared memory for their logits, more than the %d a CTA "
                        "can have on %s; a smaller partition fits",
                        partition_size, need, limit, info.name.c_str());
    const int partitions = num_partitions(s.max_ctx(), partition_size);
    if (partitions > 65535)
        return pa::strf("ctx %d at partition %d gives %d partitions, more than the grid's z limit (65535)", s.max_ctx(),
                        partition_size, partitions);
    return "";
}

template <class Kernels>
void launch(const pa::PagedDecodeArgs& a, int partition_size, const SplitScratch& s, unsigned* counters,
            cudaStream_t stream) {
    if (partition_size < 1) throw pa::CudaError(pa::strf("lesson03 %s: partition size %d is not positive", Kernels::kStep, partition_size));
    if (s.max_partitions < num_partitions(a.max_ctx, partition_size))
        throw pa::CudaError(pa::strf("lesson03 %s: scratch holds %d partitions, ctx %d at partition %d needs %d", Kernels::kStep,
                                     s.max_partitions, a.max_ctx, partition_size, num_partitions(a.max_ctx, partition_size)));
    const bool built = with_kernel<Kernels>(a.dtype, a.D, [&](auto kernel, auto tag) {
        using T = typename decltype(tag)::type;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        const dim3 grid(a.H, a.B, s.max_partitions);  // one CTA per (query head, sequence, partition)
        Kernels::template run<T>(kernel, grid, Kernels::smem_bytes(a.D, partition_size), stream, a, partition_size, s,
                                 counters);
        CUDA_CHECK_LAUNCH();
    });
    if (!built) throw pa::CudaError(not_built<Kernels>(a.dtype, a.D));
}

template <class Kernels>
pa::LaunchGeometry geometry(const pa::DecodeShape& s, int partition_size) {
    pa::LaunchGeometry g;
    g.partitions = num_partitions(s.max_ctx(), partition_size);
    g.ctas = static_cast<long long>(s.H) * s.B * g.partitions;
    g.threads = Kernels::kThreads;
    g.smem_bytes = static_cast<int>(Kernels::smem_bytes(s.D, partition_size));
    const bool built = with_kernel<Kernels>(s.dtype, s.D, [&](auto kernel, auto) {
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        g.ctas_per_sm = pa::resident_ctas_per_sm(reinterpret_cast<const void*>(kernel), g.threads, g.smem_bytes);
    });
    if (!built) throw pa::CudaError(not_built<Kernels>(s.dtype, s.D));
    return g;
}

}  // namespace lesson03::partition_steps
