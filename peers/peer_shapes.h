// The shapes the peers run, beside the lessons' catalogue (common/shapes.h): lesson 06's prompt
// shapes for prefill, and the few shapes of a --quick run. One list for the FlashInfer peer and,
// through `peer_info --shapes`, for the Python peer.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace peers {

// B prompts of T new tokens each, no cached prefix, causal, bf16, D 128, page 16.
struct PrefillShape {
    std::string name;
    int B, T, H, Hkv;
};

inline std::vector<PrefillShape> prefill_shapes() {
    return {{"B32-T256-H8-Hkv4", 32, 256, 8, 4},
            {"B16-T1024-H8-Hkv4", 16, 1024, 8, 4},
            {"B4-T4096-H32-Hkv8", 4, 4096, 32, 8},
            {"B1-T8192-H32-Hkv8", 1, 8192, 32, 8}};
}

// --quick: one shape of each kind the tables lean on.
inline const std::set<std::string>& quick_shapes() {
    static const std::set<std::string> s = {"llama7b-B1-ctx1k", "llama70b-B4-ctx2k", "mqa-B16-ctx4k",
                                            "qwen1.5b-B1-ctx512", "h8kv4-B32-ctx256", "B32-T256-H8-Hkv4"};
    return s;
}

}  // namespace peers
