// The tensor maps of the TMA steps (5 to 9): q and the two page pools, as the copy engine sees
// them. Made on the host for each launch (tma_maps.cu, sm_90a objects only), passed to the kernel
// as a __grid_constant__ parameter.
#pragma once

#include <cuda.h>  // CUtensorMap (a 128-byte opaque struct); no driver library is linked

#include "lesson06.h"

namespace lesson06 {

struct Maps {
    CUtensorMap q;  // [total_new][H][128] bf16, box 64 x 1 x 128 rows, 128-byte swizzle
    CUtensorMap k;  // [num_blocks][Hkv][16][128] bf16, box 64 x 16 x 1 x 1 (one page half)
    CUtensorMap v;
};

// The maps of a batch, for query tiles of `q_rows` rows.
Maps make_maps(const PrefillArgs& a, int q_rows);

}  // namespace lesson06
