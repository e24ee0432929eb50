// The arguments of every paged-decode kernel launcher in lessons 01-05.
#pragma once

#include "dtype.h"

namespace pa {

struct PagedDecodeArgs {
    void* out = nullptr;              // [B, H, D]
    const void* q = nullptr;          // [B, H, D]
    const void* k_cache = nullptr;    // [num_blocks, Hkv, block_size, D]
    const void* v_cache = nullptr;    // [num_blocks, Hkv, block_size, D]
    const int* block_table = nullptr; // [B, max_blocks_per_seq]
    const int* context_lens = nullptr;  // [B]
    // The same lengths on the host ([B]), for launchers that plan on the host from the
    // batch's lengths (lesson 03's split-k rule); may be null.
    const int* context_lens_host = nullptr;
    int B = 0, H = 0, Hkv = 0, D = 0, block_size = 0;
    int max_blocks_per_seq = 0;
    int max_ctx = 0;                  // the longest context in the batch (sizes grids and shared memory)
    float scale = 0;                  // 1 / sqrt(D)
    DType dtype = DType::fp16;
};

}  // namespace pa
