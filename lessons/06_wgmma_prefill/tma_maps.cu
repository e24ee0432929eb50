// The tensor maps of the TMA steps. Built for sm_90a only.
#include "tma_maps.cuh"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <mutex>
#include <string>

#include "cuda_check.cuh"
#include "prefill_problem.h"

namespace lesson06 {

namespace {

// cuTensorMapEncodeTiled is a driver API function; the runtime hands out its address, so the
// lesson needs no link against the driver library.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    static std::once_flag once;
    std::call_once(once, [] {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult q{};
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !p)
            throw pa::CudaError("cuTensorMapEncodeTiled is not available from this driver (needs CUDA 12 or newer)");
        fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    });
    return fn;
}

// A bf16 tensor map of `rank` dimensions (dims[0] innermost, strides in bytes for dims 1..),
// boxes of `box`, 128-byte swizzle; out-of-range elements read as zero.
CUtensorMap make_map(const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                     const char* what) {
    CUtensorMap m;
    const cuuint32_t elem_strides[5] = {1, 1, 1, 1, 1};  // up to rank 5
    const CUresult r = encode_tiled()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(base), dims, strides,
                                      box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        throw pa::CudaError(std::string("cuTensorMapEncodeTiled failed for the ") + what + " map (CUresult " +
                            std::to_string(static_cast<int>(r)) + ")");
    return m;
}

}  // namespace

Maps make_maps(const PrefillArgs& a, int q_rows, bool output) {
    Maps maps{};
    {  // q: [total_new][H][128]; a box is 64 dims of one head for q_rows consecutive rows
        const cuuint64_t dims[3] = {kHeadSize, static_cast<cuuint64_t>(a.H), static_cast<cuuint64_t>(a.total_new)};
        const cuuint64_t strides[2] = {kHeadSize * 2, static_cast<cuuint64_t>(a.H) * kHeadSize * 2};
        const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(q_rows)};
        maps.q = make_map(a.q, 3, dims, strides, box, "q");
        const cuuint32_t obox[3] = {64, 1, 64};
        if (output) maps.o = make_map(a.out, 3, dims, strides, obox, "output");
    }
    {  // K and V pools: [num_blocks][Hkv][16][128]; a box is 64 dims of one page of one KV head
        const cuuint64_t dims[4] = {kHeadSize, kPageSize, static_cast<cuuint64_t>(a.Hkv),
                                    static_cast<cuuint64_t>(a.num_blocks)};
        const cuuint64_t strides[3] = {kHeadSize * 2, kPageSize * kHeadSize * 2,
                                       static_cast<cuuint64_t>(a.Hkv) * kPageSize * kHeadSize * 2};
        const cuuint32_t box[4] = {64, kPageSize, 1, 1};
        maps.k = make_map(a.k_cache, 4, dims, strides, box, "K");
        maps.v = make_map(a.v_cache, 4, dims, strides, box, "V");
    }
    return maps;
}

CUtensorMap make_v_pages_map(const PrefillArgs& a) {
    const cuuint64_t dims[5] = {64, kPageSize, static_cast<cuuint64_t>(a.Hkv), static_cast<cuuint64_t>(a.num_blocks), 2};
    const cuuint64_t strides[4] = {kHeadSize * 2, kPageSize * kHeadSize * 2,
                                   static_cast<cuuint64_t>(a.Hkv) * kPageSize * kHeadSize * 2, 64 * 2};
    const cuuint32_t box[5] = {64, kPageSize, 1, 1, 2};
    return make_map(a.v_cache, 5, dims, strides, box, "V pages");
}

}  // namespace lesson06
