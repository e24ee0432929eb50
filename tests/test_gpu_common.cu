// The GPU side of common/: the two measured ceilings and the event timer. Labelled `gpu`.
#include <catch2/catch_test_macros.hpp>

#include "ceilings.cuh"
#include "gpu_cases.h"
#include "timer.cuh"

TEST_CASE("the streaming-read ceiling is measured and plausible", "[gpu][common]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const double gbps = pa::measured_read_bandwidth_gbps(info);
    INFO(info.name << ": " << gbps << " GB/s");
    CHECK(gbps > 100.0);    // any GPU these lessons run on
    CHECK(gbps < 20000.0);  // faster than any memory: the kernel read nothing
}

TEST_CASE("the dense bf16 GEMM ceiling runs through cuBLAS and is plausible", "[gpu][common]") {
    const pa::DeviceInfo info = pa::testing::gpu_for_test();
    const double tflops = pa::measured_bf16_gemm_tflops();
    INFO(info.name << ": " << tflops << " TFLOP/s");
    CHECK(tflops > 5.0);
    CHECK(tflops < 5000.0);
}

TEST_CASE("cold_copies rotates through more than twice the L2", "[gpu][common]") {
    const long long l2 = 60LL << 20;
    for (long long bytes : {1LL << 10, 1LL << 20, 16LL << 20, 60LL << 20, 1LL << 30}) {
        const int copies = pa::cold_copies(bytes, l2);
        INFO(bytes << " bytes per copy: " << copies << " copies");
        CHECK(copies >= 2);
        CHECK(static_cast<long long>(copies - 1) * bytes >= 2 * l2);  // touched between two uses of one copy
    }
}
