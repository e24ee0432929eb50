// A shared-memory cap that makes a big GPU refuse and choose as a smaller one would.
//
//   PA_SMEM_CAP_KIB=99  lessonNN_...   behaves as on an RTX 3090 / 4090, A10 or L4
//                                      (99 KiB a CTA, 100 KiB an SM)
//   PA_SMEM_CAP_KIB=163 lessonNN_...   behaves as on an A100 (163 KiB a CTA, 164 KiB an SM)
//
// The launch code reads the per-CTA and per-SM limits through pa::DeviceInfo and
// pa::current_max_smem_optin / pa::resident_ctas_per_sm, which apply the cap: a step whose
// layout needs more is refused by name, a rule that chooses a layout by shared memory (one or
// two CTAs per SM) chooses as on the smaller GPU, and the kernels are opted in to the capped
// size only, so a launch that asks for more fails rather than running. Together with an sm_80
// build (the driver JIT-compiles its PTX, so no sm_90 instruction is there) a Hopper GPU then
// runs what an A100 or an RTX 4090 runs. Host-only: the CPU tests check the parsing.
#pragma once

#include <string>

namespace pa {

// The cap in bytes per CTA, 0 when PA_SMEM_CAP_KIB is unset or empty. Read once. An invalid
// value (not an integer in [16, 1024]) throws FlagError naming it.
int smem_cap_bytes();

// The same parsing, for a given value of the variable (nullptr: unset); for the tests.
int parse_smem_cap_kib(const char* value);

// `per_cta` and `per_sm` limits as the capped GPU has them (unchanged without a cap): a CTA may
// ask for the cap, an SM holds the cap plus 1 KiB (what sm_80, sm_86 and sm_89 reserve per CTA
// beside it), never more than the real GPU.
int capped_smem_per_cta(int per_cta);
int capped_smem_per_sm(int per_sm);

// "" without a cap, else " (shared memory capped at N KiB a CTA by PA_SMEM_CAP_KIB)".
std::string smem_cap_note();

}  // namespace pa
