// Lesson 06's MMA floor: the last step's kernel (step 21) with the policy's arithmetic taken out,
// so that what is left is its copies, its MMAs and its turn-taking: how fast the ladder's
// structure could go with a free softmax. `lesson06_wgmma_prefill --floor` times it beside step
// 21 on each shape (NOTES.md, "The MMA floor"). Its output is not attention and is never checked.
#pragma once

#include <cuda_runtime.h>

#include "lesson06.h"

namespace lesson06 {

// Launches the floor on a batch (sm_90a; built where the build has 90a, PA_BUILT_SM90A).
void launch_mma_floor(const PrefillArgs& a, cudaStream_t stream);

}  // namespace lesson06
