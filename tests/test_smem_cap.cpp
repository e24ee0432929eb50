// PA_SMEM_CAP_KIB (common/smem_cap.h): the values it takes and the ones it refuses.
#include <catch2/catch_test_macros.hpp>

#include "flags.h"
#include "smem_cap.h"

TEST_CASE("PA_SMEM_CAP_KIB: unset or empty means no cap", "[smem_cap]") {
    CHECK(pa::parse_smem_cap_kib(nullptr) == 0);
    CHECK(pa::parse_smem_cap_kib("") == 0);
}

TEST_CASE("PA_SMEM_CAP_KIB: a whole number of KiB becomes bytes", "[smem_cap]") {
    CHECK(pa::parse_smem_cap_kib("99") == 99 * 1024);
    CHECK(pa::parse_smem_cap_kib("163") == 163 * 1024);
    CHECK(pa::parse_smem_cap_kib("16") == 16 * 1024);
    CHECK(pa::parse_smem_cap_kib("1024") == 1024 * 1024);
}

TEST_CASE("PA_SMEM_CAP_KIB: anything else is refused by name", "[smem_cap]") {
    for (const char* bad : {"15", "1025", "-99", "99k", "9 9", "abc", "99.5", "0"}) {
        INFO(bad);
        CHECK_THROWS_AS(pa::parse_smem_cap_kib(bad), pa::FlagError);
    }
}

TEST_CASE("PA_SMEM_CAP_KIB: no cap leaves the GPU's limits", "[smem_cap]") {
    // The tests run without the variable (CTest sets it only for the capped --check runs).
    if (pa::smem_cap_bytes() != 0) SKIP("PA_SMEM_CAP_KIB is set in this environment");
    CHECK(pa::capped_smem_per_cta(227 * 1024) == 227 * 1024);
    CHECK(pa::capped_smem_per_sm(228 * 1024) == 228 * 1024);
    CHECK(pa::smem_cap_note().empty());
}
