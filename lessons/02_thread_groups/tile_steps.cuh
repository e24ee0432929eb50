// Host side shared by steps 7, 8 and 9 (they differ only in their kernels and how many heads
// a CTA serves): what a shape needs, the launch (one CTA per (KV head, sequence)), the
// geometry. Included by step7_tile_stream.cu, step8_mma_qk.cu and step9_tensor_cores.cu, each
// of which names its kernels through a Kernels struct:
//   struct Kernels {
//       static constexpr const char* kStep = "step 7 (tile_stream)";
//       static constexpr int kThreads = step7::kThreads;
//       static constexpr const char* kHeads = "1, 2, 4, 8, 32";  // the instantiated heads per CTA
//       static int heads_per_cta(int group);                      // 0 for a group above 32
//       // calls f(kernel, TypeTag<scalar_t>, dynamic shared memory in bytes); false: not built
//       template <class F> static bool with_kernel(pa::DType t, int D, int heads, F&& f);
//   };
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "cuda_check.cuh"
#include "decode_args.h"
#include "decode_driver.cuh"
#include "dispatch.cuh"
#include "launch_utils.cuh"
#include "table.h"

namespace lesson02::tile_steps {

template <class Kernels>
std::string not_built(pa::DType t, int D, int group) {
    return pa::strf("lesson02 %s: no kernel built for %s, D %d, group %d (built: D 64/128/256, groups up to 32)",
                    Kernels::kStep, pa::dtype_name(t), D, group);
}

template <class Kernels>
std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    const int group = s.group();
    if (group > 32)
        return pa::strf("group %d needs the per-head mapping (steps 1-2): one grouped CTA serves at most 32 query heads",
                        group);
    if (s.block_size < 1 || s.block_size > 32 || (s.block_size & (s.block_size - 1)) != 0)
        return pa::strf("block size %d: %s needs a power of two up to 32 (its tiles start on page boundaries)",
                        s.block_size, Kernels::kStep);
    std::string reason;
    const bool built = Kernels::with_kernel(s.dtype, s.D, Kernels::heads_per_cta(group), [&](auto kernel, auto, int smem) {
        const int limit = pa::max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        if (smem > limit)
            reason = pa::strf("needs %d bytes of shared memory per CTA, more than the %d a CTA can have on %s", smem,
                              limit, info.name.c_str());
    });
    return built ? reason : not_built<Kernels>(s.dtype, s.D, group);
}

template <class Kernels>
void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    const int group = a.H / a.Hkv;
    const bool built = Kernels::with_kernel(a.dtype, a.D, Kernels::heads_per_cta(group), [&](auto kernel, auto tag, int smem) {
        using T = typename decltype(tag)::type;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        const dim3 grid(a.Hkv, a.B);  // one CTA per (KV head, sequence)
        kernel<<<grid, Kernels::kThreads, smem, stream>>>(
            static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
            static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.H, a.Hkv, group, a.block_size,
            a.max_blocks_per_seq, a.scale);
        CUDA_CHECK_LAUNCH();
    });
    if (!built) throw pa::CudaError(not_built<Kernels>(a.dtype, a.D, group));
}

template <class Kernels>
pa::LaunchGeometry geometry(const pa::DecodeShape& s) {
    pa::LaunchGeometry g;
    g.ctas = static_cast<long long>(s.Hkv) * s.B;
    g.threads = Kernels::kThreads;
    const bool built = Kernels::with_kernel(s.dtype, s.D, Kernels::heads_per_cta(s.group()), [&](auto kernel, auto, int smem) {
        g.smem_bytes = smem;
        pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
        g.ctas_per_sm = pa::resident_ctas_per_sm(reinterpret_cast<const void*>(kernel), g.threads, g.smem_bytes);
    });
    if (!built) throw pa::CudaError(not_built<Kernels>(s.dtype, s.D, s.group()));
    return g;
}

}  // namespace lesson02::tile_steps
