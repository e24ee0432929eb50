// Step 14's instantiations (dtype x D, 8 heads a CTA), its launcher and its rules. It refuses
// groups above 8 (one 8-head column block), pages smaller than a unit (step 12's rule), a build
// without sm_90 code, and a GPU whose CTA cannot hold the two streams' shared memory.
#include <cuda_runtime.h>

#include "cuda_check.cuh"
#include "decode_args.h"
#include "dispatch.cuh"
#include "grouped_launch.cuh"
#include "step14_two_streams.cuh"
#include "steps.h"

namespace lesson02::step14 {

namespace {

// Calls f(kernel, smem bytes) for the shape's instantiation; false when it was not built.
template <class F>
bool with_kernel(pa::DType t, int D, F&& f) {
    return pa::dispatch_dtype(t, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
            f(grouped_two_stream_decode_kernel<T, d.value>, TwoStreamLayout<d.value>::kSmemBytes);
            return true;
        });
    });
}

}  // namespace

bool one_per_sm(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    const long long ctas = static_cast<long long>(s.B) * s.Hkv;
    return step10::heads_per_cta(s.group()) == 8 && ctas >= kMinGridOfSms * info.sms && ctas <= info.sms &&
           s.max_ctx() >= kMinContext;
}

std::string why_not(const pa::DecodeShape& s, const pa::DeviceInfo& info) {
    if (step10::heads_per_cta(s.group()) != 8)
        return pa::strf("two streams a CTA run one 8-head column block (a group of at most 8); group %d", s.group());
    if (const std::string pages = step12::pages_why_not(s.D, s.block_size); !pages.empty()) return pages;
    std::string why = pa::strf("no kernel built for D %d", s.D);
    with_kernel(s.dtype, s.D, [&](auto kernel, int smem) {
        why = pa::sm90_code_why_not(reinterpret_cast<const void*>(kernel), info, "copies with cp.async.bulk",
                                    "step 10 runs here");
        if (why.empty() && info.smem_per_block_optin > 0 && smem + 1024 > info.smem_per_block_optin)
            why = pa::strf("two streams stage K/V through %d KiB of shared memory per CTA; this GPU (%s) gives %d KiB",
                           smem / 1024, info.name.c_str(), info.smem_per_block_optin / 1024);
    });
    return why;
}

void launch(const pa::PagedDecodeArgs& a, cudaStream_t stream) {
    const std::string pages = step12::pages_why_not(a.D, a.block_size);
    if (!pages.empty()) throw pa::CudaError("lesson02 step 14: " + pages);
    const bool built = with_kernel(
        a.dtype, a.D, [&](auto kernel, int smem) { launch_grouped(kernel, smem, a, stream, kTwoStreamThreads); });
    if (!built) throw pa::CudaError(pa::strf("lesson02 step 14: no kernel built for %s D %d", pa::dtype_name(a.dtype), a.D));
}

pa::LaunchGeometry geometry(const pa::DecodeShape& s, const pa::DeviceInfo&) {
    pa::LaunchGeometry g;
    with_kernel(s.dtype, s.D, [&](auto kernel, int smem) { g = grouped_geometry(kernel, smem, s, kTwoStreamThreads); });
    return g;
}

}  // namespace lesson02::step14
