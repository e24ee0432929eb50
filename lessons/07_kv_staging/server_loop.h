// A prefill server and a decode server on one GPU, handing off a stream of requests of
// different lengths through each decode rank's staging ring:
//
//   decode side   allocate in every decode rank's ring (overcommit: never waits)
//   prefill side  wait until each allocation's bytes are past the watermark, then
//                 gather (one launch per prefill rank) and copy each chunk into the ring
//   decode side   scatter (one launch per decode rank) once the copies landed; a host
//                 callback queued behind the scatters frees the allocations, on CUDA's own
//                 thread, while the main thread goes on allocating
//
// The decode stream is made busy now and then (a stand-in for a forward pass), so that
// the prefill side gets ahead, fills the rings and has to wait: a watermark that let it
// through too early would overwrite bytes a scatter had not read yet, and the check at
// the end (every request bit-exact, cached prefixes and unowned pages untouched) would
// see it.
#pragma once

#include <cstdint>
#include <string>

#include "staging_plan.h"

namespace lesson07 {

struct ServerLoopConfig {
    TpConfig tp{4, 2, 8};
    int layers = 2;
    int requests = 96;
    int max_tokens = 400;          // longest request (cached prefix + handed-off tokens)
    double ring_allocations = 2.5; // ring capacity in units of the largest allocation
    int stall_every = 8;           // every n-th request the decode stream is busy...
    unsigned long long stall_ns = 2000000;  // ...for this long
    uint64_t seed = 1;
};

struct ServerLoopResult {
    int requests = 0;
    int64_t tokens = 0;        // handed off, all requests
    int64_t ring_bytes = 0;    // capacity of each decode rank's ring
    int64_t rounds = 0;        // rounds of the ring that went round least
    int64_t waits = 0;         // times the prefill side had to wait for a free
    uint64_t mismatches = 0;   // wrong elements in the decode pools at the end
    std::string first;         // the first of them
    std::string failure;       // a wait that could never end, a ring left with live allocations
    bool pass() const { return failure.empty() && mismatches == 0; }
};

// Runs on the current device. Throws pa::CudaError on a CUDA failure, PlanError on a bad
// configuration.
ServerLoopResult run_server_loop(const ServerLoopConfig& cfg);

}  // namespace lesson07
