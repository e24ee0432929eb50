// From run-time values (dtype, head size, thread-group size, ...) to a template
// instantiation, with each list of instantiations written once.
//
// A lesson lists what it builds in one function and uses it for everything that needs a
// kernel: the launch (a typed <<<>>> with typed arguments), the occupancy query, the
// shared-memory opt-in. A value that was not instantiated makes the function return false,
// and the caller refuses it by name instead of running another kernel.
//
//   template <class F> bool with_kernel(pa::DType t, int D, int tgs, F&& f) {
//       return pa::dispatch_dtype(t, [&](auto tag) {
//           using T = typename decltype(tag)::type;
//           return pa::dispatch_int<64, 128, 256>(D, [&](auto d) {
//               return pa::dispatch_int<4, 8, 16>(tgs, [&](auto g) {
//                   f(my_kernel<T, d.value, g.value>);
//                   return true;
//               });
//           });
//       });
//   }
//   if (!with_kernel(a.dtype, a.D, tgs, [&](auto kernel) { kernel<<<grid, threads, smem, s>>>(...); }))
//       throw pa::CudaError("no kernel built for ...");
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "dtype.h"

namespace pa {

template <class T>
struct TypeTag {
    using type = T;
};

// Calls f(TypeTag<__half>{}) or f(TypeTag<__nv_bfloat16>{}); returns what f returns (bool).
template <class F>
bool dispatch_dtype(DType t, F&& f) {
    return t == DType::fp16 ? f(TypeTag<__half>{}) : f(TypeTag<__nv_bfloat16>{});
}

// Calls f(std::integral_constant<int, V>{}) for the V in the list equal to `value`;
// returns false when none is.
template <int... Values, class F>
bool dispatch_int(int value, F&& f) {
    bool found = false;
    (void)((value == Values ? (found = f(std::integral_constant<int, Values>{}), true) : false) || ...);
    return found;
}

// The element type of a kernel whose first parameter is its output pointer (`scalar_t* out`):
// lets one generic launch lambda cast the untyped PagedDecodeArgs pointers.
template <class K>
struct KernelScalar;
template <class T, class... Args>
struct KernelScalar<void (*)(T*, Args...)> {
    using type = T;
};

}  // namespace pa
