// The shape catalogue (common/shapes.h) against the tables of CURRICULUM.md.
#include <catch2/catch_test_macros.hpp>

#include <set>
#include <string>
#include <vector>

#include "flags.h"
#include "random_cases.h"
#include "shapes.h"

namespace {

struct Expected {
    std::string name;
    int H, Hkv, B, ctx;
};

void check_shape(const pa::DecodeShape& s, const Expected& e, pa::DType t) {
    INFO(e.name);
    CHECK(s.name == e.name);
    CHECK(s.H == e.H);
    CHECK(s.Hkv == e.Hkv);
    CHECK(s.B == e.B);
    CHECK(s.ctx == std::vector<int>(e.B, e.ctx));
    CHECK(s.D == 128);
    CHECK(s.block_size == 16);
    CHECK(s.dtype == t);
}

std::vector<std::string> names(const std::vector<pa::DecodeShape>& v) {
    std::vector<std::string> out;
    for (const auto& s : v) out.push_back(s.name);
    return out;
}

}  // namespace

TEST_CASE("ctx_label and shape names use k for multiples of 1024", "[cpu][shapes]") {
    CHECK(pa::ctx_label(1024) == "1k");
    CHECK(pa::ctx_label(4096) == "4k");
    CHECK(pa::ctx_label(8192) == "8k");
    CHECK(pa::ctx_label(512) == "512");
    CHECK(pa::ctx_label(128) == "128");
    CHECK(pa::ctx_label(1536) == "1536");
    CHECK(pa::ctx_label(1) == "1");
    CHECK(pa::decode_shape_name("llama7b", 32, 1024) == "llama7b-B32-ctx1k");
    CHECK(pa::decode_shape_name("mqa", 16, 4096) == "mqa-B16-ctx4k");
    CHECK(pa::decode_shape_name("h8kv4", 64, 128) == "h8kv4-B64-ctx128");
}

TEST_CASE("Table A is exactly the ten softmax decode shapes of the curriculum", "[cpu][shapes]") {
    const std::vector<Expected> want = {
        {"llama7b-B1-ctx1k", 32, 32, 1, 1024},  {"llama7b-B1-ctx4k", 32, 32, 1, 4096},
        {"llama7b-B8-ctx2k", 32, 32, 8, 2048},  {"llama7b-B32-ctx1k", 32, 32, 32, 1024},
        {"llama70b-B1-ctx4k", 64, 8, 1, 4096},  {"llama70b-B4-ctx2k", 64, 8, 4, 2048},
        {"llama70b-B16-ctx8k", 64, 8, 16, 8192}, {"mqa-B1-ctx4k", 32, 1, 1, 4096},
        {"mqa-B16-ctx4k", 32, 1, 16, 4096},     {"mqa-B64-ctx2k", 32, 1, 64, 2048},
    };
    const std::vector<pa::DecodeShape> a = pa::table_a();
    REQUIRE(a.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) check_shape(a[i], want[i], pa::DType::fp16);
}

TEST_CASE("Table B is the split-count sweep: qwen1.5b and qwen7b at B1", "[cpu][shapes]") {
    const std::vector<Expected> want = {
        {"qwen1.5b-B1-ctx128", 12, 2, 1, 128}, {"qwen1.5b-B1-ctx512", 12, 2, 1, 512},
        {"qwen1.5b-B1-ctx1k", 12, 2, 1, 1024}, {"qwen1.5b-B1-ctx2k", 12, 2, 1, 2048},
        {"qwen1.5b-B1-ctx4k", 12, 2, 1, 4096}, {"qwen7b-B1-ctx1k", 28, 4, 1, 1024},
        {"qwen7b-B1-ctx2k", 28, 4, 1, 2048},   {"qwen7b-B1-ctx4k", 28, 4, 1, 4096},
    };
    const std::vector<pa::DecodeShape> b = pa::table_b();
    REQUIRE(b.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) check_shape(b[i], want[i], pa::DType::fp16);
}

TEST_CASE("Table C is the H200 post's bf16 H8/Hkv4 grid, and the lesson-02 lists are inside it", "[cpu][shapes]") {
    const std::vector<pa::DecodeShape> c = pa::table_c();
    std::set<std::string> in_c;
    for (const auto& s : c) {
        INFO(s.name);
        CHECK(s.H == 8);
        CHECK(s.Hkv == 4);
        CHECK(s.dtype == pa::DType::bf16);
        CHECK(s.name == pa::decode_shape_name("h8kv4", s.B, s.ctx.at(0)));
        in_c.insert(s.name);
    }
    CHECK(in_c.count("h8kv4-B64-ctx128") == 1);
    CHECK(in_c.count("h8kv4-B32-ctx1k") == 1);  // the split-k inner-loop shape
    CHECK(names(pa::table_c_tgs_sweep()) ==
          std::vector<std::string>{"h8kv4-B1-ctx256", "h8kv4-B32-ctx256", "h8kv4-B32-ctx512", "h8kv4-B64-ctx128",
                                   "h8kv4-B64-ctx1k", "h8kv4-B128-ctx256", "h8kv4-B128-ctx512"});
    CHECK(names(pa::table_c_ablation()) ==
          std::vector<std::string>{"h8kv4-B1-ctx256", "h8kv4-B32-ctx128", "h8kv4-B32-ctx256", "h8kv4-B32-ctx512",
                                   "h8kv4-B64-ctx128", "h8kv4-B64-ctx256", "h8kv4-B128-ctx256"});
    for (const auto& list : {pa::table_c_tgs_sweep(), pa::table_c_ablation()})
        for (const auto& s : list) {
            INFO(s.name);
            CHECK(in_c.count(s.name) == 1);
        }
}

TEST_CASE("the catalogue has unique, valid names and find_shape finds each one", "[cpu][shapes]") {
    const std::vector<pa::DecodeShape> all = pa::shape_catalogue();
    std::set<std::string> seen;
    for (const auto& s : all) {
        INFO(s.name);
        CHECK(seen.insert(s.name).second);
        CHECK_NOTHROW(pa::validate_decode_shape(s));
        CHECK(s.ctx.size() == static_cast<size_t>(s.B));
        const auto found = pa::find_shape(s.name);
        REQUIRE(found.has_value());
        CHECK(found->H == s.H);
        CHECK(found->Hkv == s.Hkv);
        CHECK(found->B == s.B);
        CHECK(found->ctx == s.ctx);
        CHECK(found->dtype == s.dtype);
    }
    CHECK(all.size() == pa::table_a().size() + pa::table_b().size() + pa::table_c().size());
    for (const char* name : {"llama7b-B32-ctx1k", "mqa-B16-ctx4k", "h8kv4-B64-ctx128", "qwen1.5b-B1-ctx128"})
        CHECK(pa::find_shape(name).has_value());
    for (const char* bad : {"", "llama7b", "llama7b-B32-ctx1024", "LLAMA7B-B32-CTX1K", "mqa-B16-ctx4k ", "llama7b-B3-ctx1k"}) {
        INFO("'" << bad << "'");
        CHECK(!pa::find_shape(bad).has_value());
    }
}

TEST_CASE("shape byte and token counts", "[cpu][shapes]") {
    const pa::DecodeShape s = *pa::find_shape("llama7b-B1-ctx1k");
    CHECK(s.group() == 1);
    CHECK(s.max_ctx() == 1024);
    CHECK(s.total_tokens() == 1024);
    CHECK(s.kv_bytes() == 2LL * 1024 * 32 * 128 * 2);  // K and V, 2 bytes an element
    pa::DecodeShape m = s;
    m.B = 3;
    m.ctx = {5, 900, 17};
    CHECK(m.max_ctx() == 900);
    CHECK(m.total_tokens() == 922);
    CHECK(pa::find_shape("llama70b-B4-ctx2k")->group() == 8);
}

TEST_CASE("the default check shapes are valid and awkward on purpose", "[cpu][shapes]") {
    const std::vector<pa::DecodeShape> shapes = pa::decode_check_shapes();
    std::set<std::string> seen;
    std::set<int> block_sizes, head_sizes;
    std::set<pa::DType> dtypes;
    bool ctx1 = false, not_page_multiple = false, mixed = false;
    for (const auto& s : shapes) {
        INFO(s.name);
        CHECK(seen.insert(s.name).second);
        CHECK_NOTHROW(pa::validate_decode_shape(s));
        block_sizes.insert(s.block_size);
        head_sizes.insert(s.D);
        dtypes.insert(s.dtype);
        for (int c : s.ctx) {
            ctx1 |= c == 1;
            not_page_multiple |= c % s.block_size != 0;
            mixed |= c != s.ctx[0];
        }
    }
    CHECK(ctx1);
    CHECK(not_page_multiple);
    CHECK(mixed);
    CHECK(block_sizes == std::set<int>{8, 16, 32});
    CHECK(head_sizes == std::set<int>{64, 128, 256});
    CHECK(dtypes.size() == 2);
}

TEST_CASE("the random GPU test cases cover what the lesson tests need (seed 20250101)", "[cpu][shapes]") {
    const auto cases = pa::testing::random_decode_cases(20250101, 60);
    REQUIRE(cases.size() == 60);
    std::set<int> block_sizes, head_sizes, groups;
    std::set<pa::DType> dtypes;
    std::set<std::pair<int, int>> page_and_group;
    bool ctx1 = false, not_page_multiple = false, mixed = false;
    int max_ctx = 0, max_B = 0;
    for (const auto& c : cases) {
        const pa::DecodeShape& s = c.shape;
        INFO(c.describe());
        CHECK_NOTHROW(pa::validate_decode_shape(s));
        block_sizes.insert(s.block_size);
        head_sizes.insert(s.D);
        groups.insert(s.group());
        dtypes.insert(s.dtype);
        page_and_group.insert({s.block_size, s.group()});
        for (int x : s.ctx) {
            ctx1 |= x == 1;
            not_page_multiple |= x % s.block_size != 0;
            mixed |= x != s.ctx[0];
        }
        max_ctx = std::max(max_ctx, s.max_ctx());
        max_B = std::max(max_B, s.B);
    }
    CHECK(ctx1);
    CHECK(cases[0].shape.ctx == std::vector<int>{1});
    CHECK(not_page_multiple);
    CHECK(mixed);
    CHECK(block_sizes == std::set<int>{8, 16, 32});
    CHECK(head_sizes == std::set<int>{64, 128, 256});
    CHECK(groups == std::set<int>{1, 2, 4, 8, 32});
    CHECK(page_and_group.size() == 15);  // every page size with every group size
    CHECK(dtypes.size() == 2);
    CHECK(max_ctx <= 2000);
    CHECK(max_B <= 8);
    // deterministic: the same seed gives the same cases
    const auto again = pa::testing::random_decode_cases(20250101, 60);
    for (size_t i = 0; i < cases.size(); ++i) {
        CHECK(again[i].shape.name == cases[i].shape.name);
        CHECK(again[i].shape.ctx == cases[i].shape.ctx);
        CHECK(again[i].seed == cases[i].seed);
    }
}
