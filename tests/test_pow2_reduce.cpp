// Lesson 04's arithmetic on the CPU: segment counts, the power of two above them, scratch
// sizes and the partition size the pipelines use; the merge of per-segment (m, l, acc) in
// double (splitting anywhere gives the unsplit softmax, sentinel segments change nothing);
// and the host models of the reduces' float order, which must ignore sentinel segments bit
// for bit whatever power of two they are padded to.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "pow2_plan.h"
#include "random.h"

using lesson04::Fix;

namespace {

// Real segments then `sentinels` sentinel segments (-inf, 0, 0): a scratch as lesson 03's
// partition kernel leaves it for a sequence shorter than the batch's longest.
struct HostScratch {
    std::vector<float> m, l, acc;
    int D = 0;

    HostScratch(int real, int D_, uint64_t seed) : D(D_) {
        pa::Rng rng(seed, static_cast<uint64_t>(real) * 1000 + static_cast<uint64_t>(D_));
        for (int s = 0; s < real; ++s) {
            m.push_back(rng.uniform(-6.f, 6.f));
            l.push_back(rng.uniform(1.f, 64.f));
            for (int d = 0; d < D; ++d) acc.push_back(rng.uniform(-20.f, 20.f));
        }
    }
    HostScratch with_sentinels(int sentinels) const {
        HostScratch out = *this;
        for (int s = 0; s < sentinels; ++s) {
            out.m.push_back(-INFINITY);
            out.l.push_back(0.f);
            out.acc.insert(out.acc.end(), D, 0.f);
        }
        return out;
    }
    int count() const { return static_cast<int>(m.size()); }
    lesson04::SegmentsView view() const {
        lesson04::SegmentsView v;
        v.m = m.data();
        v.l = l.data();
        v.acc = acc.data();
        v.count = count();
        v.D = D;
        return v;
    }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double rel_err(const std::vector<double>& out, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        num += (out[i] - ref[i]) * (out[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("lesson04 segment counts, powers of two and scratch sizes", "[cpu][lesson04]") {
    CHECK(lesson04::next_pow2(0) == 1);
    CHECK(lesson04::next_pow2(1) == 1);
    CHECK(lesson04::next_pow2(17) == 32);
    CHECK(lesson04::next_pow2(32) == 32);
    CHECK(lesson04::next_pow2(513) == 1024);
    CHECK(lesson04::segments_for(513, 32) == 17);  // the post's case
    CHECK(lesson04::segments_for(1, 512) == 1);
    CHECK(lesson04::segments_for(131072, 128) == 1024);
    // pad_scratch allocates the power of two, the others the real count
    CHECK(lesson04::scratch_partitions(Fix::pad_scratch, 17) == 32);
    CHECK(lesson04::scratch_partitions(Fix::pow2_lanes, 17) == 17);
    CHECK(lesson04::scratch_partitions(Fix::loop, 17) == 17);
    // (m, l, 128 acc) floats per entry: 520 bytes
    CHECK(lesson04::scratch_bytes(16, 8, 128, 17) == 16LL * 8 * 17 * 520);
    CHECK(lesson04::scratch_bytes(16, 8, 128, 1024) == 16LL * 8 * 1024 * 520);
}

TEST_CASE("lesson04 pipelines pick the smallest partition size with at most 1024 segments", "[cpu][lesson04]") {
    CHECK(lesson04::pick_partition_size(1) == 32);
    CHECK(lesson04::pick_partition_size(513) == 32);
    CHECK(lesson04::pick_partition_size(32768) == 32);
    CHECK(lesson04::pick_partition_size(32769) == 64);
    CHECK(lesson04::pick_partition_size(131072) == 128);
    CHECK(lesson04::pick_partition_size(524288) == 512);
    CHECK(lesson04::pick_partition_size(524289) == 0);  // refused: more than 1024 segments at any size
    CHECK(lesson04::is_partition_size(256));
    CHECK_FALSE(lesson04::is_partition_size(96));
}

TEST_CASE("lesson04 variant names parse back", "[cpu][lesson04]") {
    for (Fix f : lesson04::all_fixes()) {
        Fix back = Fix::loop;
        REQUIRE(lesson04::parse_fix(lesson04::fix_name(f), &back));
        CHECK(back == f);
    }
    Fix unused = Fix::loop;
    CHECK_FALSE(lesson04::parse_fix("pow2", &unused));
}

TEST_CASE("lesson04 merge: splitting a context anywhere gives the unsplit softmax", "[cpu][lesson04]") {
    const int D = 8, ctx = 97;
    pa::Rng rng(20250404);
    std::vector<double> logits(ctx), v(static_cast<size_t>(ctx) * D);
    for (double& x : logits) x = rng.uniform(-8.f, 8.f);
    for (double& x : v) x = rng.uniform(-1.f, 1.f);
    const std::vector<double> ref = lesson04::softmax_exact(logits, v, D);
    for (int trial = 0; trial < 200; ++trial) {
        // random cuts, empty segments allowed (they come out as sentinels), one token at least
        // in the first segment, as a partition kernel guarantees
        std::vector<int> cuts = {0, 1 + static_cast<int>(rng.below(ctx))};
        const int more = static_cast<int>(rng.below(12));
        for (int i = 0; i < more; ++i) cuts.push_back(cuts[1] + static_cast<int>(rng.below(ctx - cuts[1] + 1)));
        cuts.push_back(ctx);
        std::sort(cuts.begin(), cuts.end());
        INFO("trial " << trial << ", " << cuts.size() - 1 << " segments");
        const lesson04::PartialsD p = lesson04::partials_of(logits, v, D, cuts);
        CHECK(rel_err(lesson04::merge_exact(p, D), ref) < 1e-13);
    }
}

TEST_CASE("lesson04 merge: appended sentinel segments change no bit, in double", "[cpu][lesson04]") {
    const int D = 4;
    std::vector<double> logits = {0.5, -1.0, 2.0, 3.5, -0.25};
    std::vector<double> v;
    for (int i = 0; i < 5 * D; ++i) v.push_back(0.1 * i - 0.7);
    const lesson04::PartialsD p = lesson04::partials_of(logits, v, D, {0, 2, 5});
    const lesson04::PartialsD q = lesson04::partials_of(logits, v, D, {0, 2, 5, 5, 5, 5});  // three empty segments
    REQUIRE(q.m.size() == 5);
    CHECK(std::isinf(q.m[4]));
    CHECK(q.m[4] < 0);
    CHECK(q.l[4] == 0.0);
    CHECK(lesson04::merge_exact(p, D) == lesson04::merge_exact(q, D));
}

TEST_CASE("lesson04 pow2 order: padding to any wider power of two changes no bit", "[cpu][lesson04]") {
    std::vector<int> counts;
    for (int c = 1; c <= 64; ++c) counts.push_back(c);
    for (int c : {100, 127, 128, 129, 255, 256, 257, 513, 1000, 1023, 1024}) counts.push_back(c);
    int compared = 0;
    for (int D : {64, 128, 256})
        for (int count : counts) {
            const HostScratch real(count, D, 7);
            const std::vector<float> base = lesson04::pow2_merge_model(real.view(), lesson04::next_pow2(count));
            for (int p2 = lesson04::next_pow2(count); p2 <= lesson04::kMaxSegments; p2 *= 2) {
                INFO("D " << D << ", " << count << " segments, width " << p2);
                // pow2_lanes: the real scratch, the padding lanes masked
                CHECK(same_bits(lesson04::pow2_merge_model(real.view(), p2), base));
                // pad_scratch: the padding is in the scratch, as sentinels
                const HostScratch padded = real.with_sentinels(p2 - count);
                CHECK(same_bits(lesson04::pow2_merge_model(padded.view(), p2), base));
                ++compared;
            }
            // sentinels inside the real count (a short sequence of the batch) at the same width
            if (count < lesson04::kMaxSegments) {
                const HostScratch one_more = real.with_sentinels(1);
                CHECK(same_bits(lesson04::pow2_merge_model(one_more.view(), lesson04::next_pow2(count + 1)), base));
            }
        }
    CHECK(compared > 500);
}

TEST_CASE("lesson04 loop order: appended sentinel segments change no bit", "[cpu][lesson04]") {
    for (int D : {64, 128})
        for (int count : {1, 2, 17, 33, 513}) {
            const HostScratch real(count, D, 11);
            const std::vector<float> base = lesson04::loop_merge_model(real.view());
            for (int extra : {1, 15, 600}) {
                INFO("D " << D << ", " << count << " segments + " << extra << " sentinels");
                CHECK(same_bits(lesson04::loop_merge_model(real.with_sentinels(extra).view()), base));
            }
        }
}

TEST_CASE("lesson04 the float orders agree with the double merge", "[cpu][lesson04]") {
    for (int count : {1, 3, 17, 64, 1000}) {
        const int D = 128;
        const HostScratch s(count, D, 13);
        lesson04::PartialsD p;
        p.m.assign(s.m.begin(), s.m.end());
        p.l.assign(s.l.begin(), s.l.end());
        p.acc.assign(s.acc.begin(), s.acc.end());
        const std::vector<double> ref = lesson04::merge_exact(p, D);
        for (const auto& out : {lesson04::pow2_merge_model(s.view(), lesson04::next_pow2(count)),
                                lesson04::loop_merge_model(s.view())}) {
            INFO(count << " segments");
            REQUIRE(out.size() == ref.size());
            CHECK(rel_err(std::vector<double>(out.begin(), out.end()), ref) < 1e-5);
            CHECK(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }));
        }
    }
}

TEST_CASE("lesson04 one real segment and the rest sentinels: no -inf - -inf anywhere", "[cpu][lesson04]") {
    const int D = 64;
    const HostScratch s = HostScratch(1, D, 17).with_sentinels(1023);
    const std::vector<float> pow2 = lesson04::pow2_merge_model(s.view(), 1024);
    const std::vector<float> loop = lesson04::loop_merge_model(s.view());
    for (int d = 0; d < D; ++d) {
        INFO("d " << d);
        CHECK(pow2[d] == s.acc[d] / s.l[0]);  // w_0 = e^0 = 1 exactly
        CHECK(loop[d] == s.acc[d] / s.l[0]);
    }
}
