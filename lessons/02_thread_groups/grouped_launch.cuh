// Host side shared by steps 10 to 13: one CTA of kMmaThreads per (sequence, KV head),
// MmaLayout's shared memory, step 10's layout rule (step 12's for 12 and 13). Each step's .cu
// names its kernel family (a struct whose kernel<T, D, HEADS, CTAS_PER_SM>() is the
// instantiation) and includes this header, so that each family still compiles once, in its
// own file.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cuda_check.cuh"
#include "decode_args.h"
#include "decode_driver.cuh"
#include "dispatch.cuh"
#include "launch_utils.cuh"
#include "ws_layout.cuh"                     // MmaLayout, kMmaThreads
#include "steps.h"                     // step10::heads_per_cta
#include "table.h"

namespace lesson02 {

// Every instantiation of a family: dtype x D {64, 128, 256} x heads per CTA {8, 16, 32} x CTAs
// per SM, two per SM only for one 8-head column block (with 16 or 32 heads the logits and q
// leave too little shared memory for two rings). Calls f(kernel, smem bytes) and returns true,
// or returns false when the combination was not built.
template <class Family, class F>
bool with_grouped_kernel(pa::DType t, int D, int heads, int ctas_per_sm, F&& f) {
    if (ctas_per_sm == 2 && heads != 8) return false;
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
            return pa::dispatch_int<8, 16, 32>(heads, [&](auto n) {
                return pa::dispatch_int<1, 2>(ctas_per_sm, [&](auto c) {
                    if constexpr (c.value == 2 && n.value != 8) {
                        return false;
                    } else {
                        f(Family::template kernel<T, d.value, n.value, c.value>(),
                          MmaLayout<d.value, n.value, c.value>::kSmemBytes);
                        return true;
                    }
                });
            });
        });
    });
}

// Launches a kernel of the family on grid (Hkv, B), `threads` a CTA (step 14's: two of kMmaThreads).
template <class Kernel>
void launch_grouped(Kernel kernel, int smem, const pa::PagedDecodeArgs& a, cudaStream_t stream,
                    int threads = kMmaThreads) {
    using T = typename pa::KernelScalar<Kernel>::type;
    pa::opt_in_max_dynamic_smem(reinterpret_cast<const void*>(kernel));
    kernel<<<dim3(a.Hkv, a.B), threads, smem, stream>>>(
        static_cast<T*>(a.out), static_cast<const T*>(a.q), static_cast<const T*>(a.k_cache),
        static_cast<const T*>(a.v_cache), a.block_table, a.context_lens, a.H, a.Hkv, a.H / a.Hkv, a.block_size,
        a.max_blocks_per_seq, a.scale);
    CUDA_CHECK_LAUNCH();
}

template <class Kernel>
pa::LaunchGeometry grouped_geometry(Kernel kernel, int smem, const pa::DecodeShape& s, int threads = kMmaThreads) {
    const void* k = reinterpret_cast<const void*>(kernel);
    pa::opt_in_max_dynamic_smem(k);
    pa::LaunchGeometry g;
    g.ctas = static_cast<long long>(s.Hkv) * s.B;
    g.threads = threads;
    g.smem_bytes = smem;
    g.ctas_per_sm = pa::resident_ctas_per_sm(reinterpret_cast<const void*>(k), g.threads, g.smem_bytes);
    return g;
}

// Steps 11 and 12: launches the family's kernel at `per_sm` CTAs per SM (`step` names it in the
// error when that combination was not built).
template <class Family>
void launch_family(const pa::PagedDecodeArgs& a, int per_sm, const char* step, cudaStream_t stream) {
    const int heads = step10::heads_per_cta(a.H / a.Hkv);
    if (!with_grouped_kernel<Family>(a.dtype, a.D, heads, per_sm,
                                     [&](auto kernel, int smem) { launch_grouped(kernel, smem, a, stream); }))
        throw pa::CudaError(pa::strf("lesson02 %s: no kernel built for %s D %d with %d heads per CTA, %d per SM", step,
                                     pa::dtype_name(a.dtype), a.D, heads, per_sm));
}

template <class Family>
pa::LaunchGeometry family_geometry(const pa::DecodeShape& s, int per_sm) {
    pa::LaunchGeometry g;
    with_grouped_kernel<Family>(s.dtype, s.D, step10::heads_per_cta(s.group()), per_sm,
                                [&](auto kernel, int smem) { g = grouped_geometry(kernel, smem, s); });
    return g;
}

// Steps 11 and 12 (bulk copies): "" when this GPU is sm_90 and the family's kernel for the shape
// was built with sm_90 code; else one line saying why not.
template <class Family>
std::string needs_sm90(const pa::DecodeShape& s, int heads, int ctas_per_sm, const pa::DeviceInfo& info) {
    std::string why;
    with_grouped_kernel<Family>(s.dtype, s.D, heads, ctas_per_sm, [&](auto kernel, int) {
        why = pa::sm90_code_why_not(reinterpret_cast<const void*>(kernel), info, "copies with cp.async.bulk",
                                    "step 10 runs here");
    });
    return why;
}

// Steps 12 and 13 (unit copies, sm_90): step 10's refusals, then pages smaller than a unit
// (step12::pages_why_not), then sm_90 code for the family's kernel; launched and laid out at
// step 12's CTAs per SM (step12::ctas_per_sm). `step` names the step in errors.
template <class Family>
std::string unit_family_why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    std::string why = step10::why_not(s, info);
    if (why.empty()) why = step12::pages_why_not(s.D, s.block_size);
    if (why.empty())
        why = needs_sm90<Family>(s, step10::heads_per_cta(s.group()), step12::ctas_per_sm(s, info), info);
    return why;
}

template <class Family>
void launch_unit_family(const pa::PagedDecodeArgs& a, const char* step, cudaStream_t stream) {
    const std::string pages = step12::pages_why_not(a.D, a.block_size);
    if (!pages.empty()) throw pa::CudaError(std::string("lesson02 ") + step + ": " + pages);
    launch_family<Family>(a, step12::ctas_per_sm(pa::launch_shape(a), pa::current_device_info()), step, stream);
}

template <class Family>
pa::LaunchGeometry unit_family_geometry(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    return family_geometry<Family>(s, step12::ctas_per_sm(s, info));
}

}  // namespace lesson02
