// peer_info: what the Python peer (peers/sdpa_peer.py) needs from the C++ side, so that it
// measures the same shapes against the same ceilings as every lesson row.
//
//   peer_info                 this GPU's short name and its two measured ceilings
//                             (common/ceilings.cuh), one `key value` a line:
//                               gpu h200 | name NVIDIA H200 | sms 132 | l2_bytes 62914560
//                               read_bw_gbps 4478.2   streaming read, 16-byte loads, > 16 x L2
//                               bf16_tflops 760.5     8192^3 bf16 GEMM through cuBLAS
//   peer_info --read-only     the same without the GEMM
//   peer_info --shapes [--quick]   the shapes, no GPU needed, one a line:
//                               decode <name> <dtype> <B> <H> <Hkv> <D> <block_size> <ctx>
//                               prefill <name> bf16 <B> <H> <Hkv> 128 16 <T>
//
// Exit codes as the lessons': 0, 2 bad flags, 3 no usable GPU.
#include <cstdio>
#include <cstring>
#include <exception>

#include "ceilings.cuh"
#include "device_info.cuh"
#include "dtype.h"
#include "flags.h"
#include "peer_shapes.h"
#include "shapes.h"

namespace {

void print_shapes(bool quick) {
    for (const auto& list : {pa::table_a(), pa::table_b(), pa::table_c()})
        for (const auto& s : list) {
            if (quick && !peers::quick_shapes().count(s.name)) continue;
            std::printf("decode %s %s %d %d %d %d %d %d\n", s.name.c_str(), pa::dtype_name(s.dtype), s.B, s.H, s.Hkv, s.D,
                        s.block_size, s.max_ctx());
        }
    for (const auto& p : peers::prefill_shapes())
        if (!quick || peers::quick_shapes().count(p.name))
            std::printf("prefill %s bf16 %d %d %d 128 16 %d\n", p.name.c_str(), p.B, p.H, p.Hkv, p.T);
}

}  // namespace

int main(int argc, char** argv) {
    bool read_only = false, shapes = false, quick = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--read-only") == 0) {
            read_only = true;
        } else if (std::strcmp(argv[i], "--shapes") == 0) {
            shapes = true;
        } else if (std::strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (std::strcmp(argv[i], "--help") == 0) {
            std::printf("usage: peer_info [--read-only] | --shapes [--quick]\n"
                        "Prints the GPU's short name and its measured streaming-read bandwidth and dense bf16 GEMM rate,\n"
                        "one `key value` a line (--read-only: no GEMM); with --shapes, the peers' shapes (no GPU needed).\n");
            return 0;
        } else {
            std::fprintf(stderr, "error: peer_info: unknown argument '%s' (see --help)\n", argv[i]);
            return pa::kExitBadInput;
        }
    }
    if (quick && !shapes) {
        std::fprintf(stderr, "error: peer_info: --quick goes with --shapes\n");
        return pa::kExitBadInput;
    }
    if (shapes) {
        print_shapes(quick);
        return 0;
    }
    const pa::DeviceInfo info = pa::require_gpu("peer_info");
    try {
        std::printf("gpu %s\nname %s\nsms %d\nl2_bytes %lld\n", info.short_name.c_str(), info.name.c_str(), info.sms,
                    info.l2_bytes);
        std::fflush(stdout);
        std::printf("read_bw_gbps %.1f\n", pa::measured_read_bandwidth_gbps(info));
        if (!read_only) std::printf("bf16_tflops %.1f\n", pa::measured_bf16_gemm_tflops());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: peer_info: %s\n", e.what());
        return 1;
    }
    return 0;
}
