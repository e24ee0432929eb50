#include "harness.h"

#include <algorithm>
#include <memory>

#include "cuda_check.cuh"
#include "decode_reference.h"
#include "device_buffer.cuh"
#include "device_info.cuh"
#include "flags.h"
#include "lesson04.h"
#include "table.h"

namespace lesson04_exercise {

using pa::exercise::GradeCase;
using pa::exercise::kFullWindow;
using pa::exercise::Suspect;

namespace {

bool built(const pa::DecodeShape& s) {
    for (const auto& k : pa::exercise::decode_instances())
        if (k.dtype == s.dtype && k.D == s.D) return true;
    return false;
}

GradeCase edge(const std::string& name, std::vector<int> ctx, double q_scale, const std::string& teaches) {
    GradeCase c;
    c.name = name;
    c.group = "edge";
    c.shape = pa::make_shape("edge-" + name, 4, 2, std::move(ctx), 128, 16, pa::DType::fp16);
    c.q_scale = q_scale;
    c.teaches = teaches;
    return c;
}

}  // namespace

std::vector<GradeCase> fill_cases(uint64_t seed) {
    std::vector<GradeCase> cases;
    for (const pa::DecodeShape& s : lesson04::check_shapes()) {
        if (!built(s)) continue;  // a head size or dtype no graded build instantiates
        GradeCase c;
        c.name = s.name;
        c.group = "catalogue";
        c.shape = s;
        c.teaches = "one of the lesson's --check shapes";
        cases.push_back(c);
    }
    for (const GradeCase& c : pa::exercise::seeded_cases(seed, 8, pa::exercise::decode_instances(), 12000)) cases.push_back(c);
    for (const GradeCase& c : pa::exercise::decode_edge_cases(pa::DType::fp16, 128)) cases.push_back(c);
    for (const auto& [t, D] : {std::pair{pa::DType::bf16, 128}, std::pair{pa::DType::fp16, 64}})
        for (const GradeCase& c : pa::exercise::decode_edge_cases(t, D))
            if (c.name.rfind("mixed-lengths", 0) == 0) cases.push_back(c);
    // segment counts (partitions of 32 tokens) just under and over powers of two, each last
    // partition partly filled, beside a short sequence whose later partitions are sentinels
    for (int n : {3, 5, 31, 33, 63, 65, 127, 129, 511, 513, 1023, 1024})
        cases.push_back(edge(pa::strf("segments-%d", n), {32 * (n - 1) + 1, 5}, 2.0,
                             pa::strf("%d segments: a width of %d lanes, %d of them padding that must read no memory "
                                      "and weigh exactly 0",
                                      n, lesson04::next_pow2(n), lesson04::next_pow2(n) - n)));
    cases.push_back(edge("small-logits", {513, 100, 1}, 0.05,
                         "logits near 0 (M near 0): a padding lane's weight e^(m - M) is 0 only if its m is -inf"));
    return cases;
}

namespace {

// Lesson 03's scratch for the pipeline, each array followed by lesson04::kMaxSegments entries
// of NaN: a reduce that reads past a head's segments reads the next head's, or, for the last
// head, NaN, which no tolerance passes. Reallocated (and the tail poisoned again) only when
// the size changes, so never inside a timing loop.
class PoisonedScratch {
  public:
    lesson03::SplitScratch get(int B, int H, int D, int partitions, cudaStream_t stream) {
        const size_t entries = static_cast<size_t>(B) * H * partitions, tail = lesson04::kMaxSegments;
        if (entries != entries_ || D != D_) {
            CUDA_CHECK(cudaStreamSynchronize(stream));  // a launch in flight may still use the old ones
            m_.allocate(entries + tail);                  // [B, H, partitions] + tail
            l_.allocate(entries + tail);
            acc_.allocate((entries + tail) * D);           // [B, H, partitions, D] + tail
            CUDA_CHECK(cudaMemsetAsync(m_.get(), 0xff, m_.bytes(), stream));  // 0xffffffff: NaN
            CUDA_CHECK(cudaMemsetAsync(l_.get(), 0xff, l_.bytes(), stream));
            CUDA_CHECK(cudaMemsetAsync(acc_.get(), 0xff, acc_.bytes(), stream));
            entries_ = entries;
            D_ = D;
        }
        lesson03::SplitScratch s;
        s.m = m_.get();
        s.l = l_.get();
        s.acc = acc_.get();
        s.max_partitions = partitions;
        return s;
    }

  private:
    pa::DeviceBuffer<float> m_, l_, acc_;
    size_t entries_ = 0;
    int D_ = 0;
};

// Lesson 04's pow2_lanes pipeline with `reduce` as its reduce: the partition size the lesson
// picks, lesson 03's partitions into the scratch, then the reduce.
void pipeline(const pa::PagedDecodeArgs& a, PoisonedScratch& scratch, const ReduceLaunch& reduce, cudaStream_t stream) {
    const int ps = lesson04::pick_partition_size(a.max_ctx);
    const lesson03::SplitScratch s = scratch.get(a.B, a.H, a.D, lesson04::segments_for(a.max_ctx, ps), stream);
    lesson03::launch_partitions(a, lesson04::partitions_plan(pa::launch_shape(a), ps, pa::current_device_info()), s, stream);
    reduce(a, s, stream);
}

struct MeanOfV {
    std::vector<double> operator()(const std::vector<double>& s) const {
        return std::vector<double>(s.size(), 1.0 / static_cast<double>(s.size()));
    }
};

std::vector<Suspect> suspects(const pa::DecodeProblem& p) {
    const pa::PagedDecodeView v(p);
    const double scale = p.scale;
    return {
        {"the output is all zeros (or too small to tell from zero)",
         [&p] { return std::vector<double>(static_cast<size_t>(p.shape.B) * p.shape.H * p.shape.D, 0.0); }},
        {"the output is the plain mean of V: every softmax weight is the same",
         [v, scale] { return pa::reference::decode_with_weights(v, scale, MeanOfV{}); }},
    };
}

const char* kProgram = "lesson04_exercise";

std::string usage() {
    return std::string("usage: ") + kProgram +
           " [--grade] [--exercise fill|plan] [--seed S] [--json FILE] [--timeout S] [--iters N] [--help]\n"
           "Grades lesson 04's exercises (lessons/04_pow2_padding/exercise/README.md):\n"
           "  fill  student.cuh: the masked pow2 load of the pow2_lanes reduce (GPU)\n"
           "  plan  plan.cuh: the ragged scratch's plan, segments, offsets, width and bytes (CPU, no GPU needed)\n"
           "fill: correctness first, on the lesson's --check shapes, 8 shapes drawn from --seed and named edge\n"
           "cases, every output poisoned with NaN before every launch and the scratch's memory past its end NaN;\n"
           "then speed: lesson 03's partitions + the graded reduce against the same partitions + the lesson's\n"
           "pow2_lanes reduce, timed alternately in the same run, L2-cold, as a ratio (full marks within 1.2).\n"
           "plan: the lesson's batches, 12 drawn from --seed and named edge cases against the CPU reference.\n"
           "Exit codes: 0 correct, 1 wrong, 2 invalid input, 3 no usable GPU (fill only), 4 a kernel hung.\n"
           "With no flags: --grade --exercise fill.\n";
}

}  // namespace

int run(int argc, char** argv, const Graded& g) {
    const pa::exercise::GradeFlags f = pa::exercise::parse_grade_flags(argc, argv, kProgram, usage(), {"fill", "plan"});
    const bool has = f.exercise == "fill" ? static_cast<bool>(g.fill) : static_cast<bool>(g.plan);
    if (!has)
        pa::exit_bad_input(kProgram, "this build (" + g.build + ") has no graded file for the " + f.exercise +
                                         " exercise; lesson04_exercise has both");
    if (f.exercise == "plan") return grade_plan(g.plan, kProgram, g.build, f.seed, f.json);

    auto student_scratch = std::make_shared<PoisonedScratch>();
    auto lesson_scratch = std::make_shared<PoisonedScratch>();
    auto why_not = [](const pa::DecodeShape& s) {
        if (!built(s))
            return pa::strf("shape %s: no graded reduce is built for %s with head size %d", s.name.c_str(),
                            pa::dtype_name(s.dtype), s.D);
        return lesson04::why_not(lesson04::Fix::pow2_lanes, s, pa::current_device_info());
    };
    pa::exercise::GraderSpec spec;
    spec.program = kProgram;
    spec.build = g.build;
    spec.exercise = f.exercise;
    spec.seed = f.seed;
    spec.cases = fill_cases(f.seed);
    spec.why_not = why_not;
    const ReduceLaunch reduce = g.fill;
    spec.student = [student_scratch, reduce](const pa::PagedDecodeArgs& a, int, int, cudaStream_t s) {
        pipeline(a, *student_scratch, reduce, s);
    };
    spec.lesson_variant = lesson04::fix_name(lesson04::Fix::pow2_lanes);
    spec.lesson_why_not = [](const pa::DecodeShape& s) {
        return lesson04::why_not(lesson04::Fix::pow2_lanes, s, pa::current_device_info());
    };
    spec.lesson = [lesson_scratch](const pa::PagedDecodeArgs& a, cudaStream_t s) {
        pipeline(a, *lesson_scratch, [](const pa::PagedDecodeArgs& x, const lesson03::SplitScratch& sc, cudaStream_t st) {
            lesson04::launch_pow2_lanes(x, sc, st);
        }, s);
    };
    spec.reference = [](const pa::DecodeProblem& p, int, int) { return pa::reference::softmax_decode(p); };
    spec.suspects = [](const pa::DecodeProblem& p, int, int) { return suspects(p); };
    for (const char* name : {"llama7b-B32-ctx1k", "llama70b-B4-ctx2k", "mqa-B16-ctx4k"})
        spec.timing_shapes.push_back(*pa::find_shape(name));
    for (const pa::DecodeShape& s : lesson04::check_shapes())
        if (s.name == "segments-514") spec.timing_shapes.push_back(s);  // 514 segments: a 1024-lane reduce
    spec.json = f.json;
    spec.timeout_s = f.timeout_s;
    spec.iters = f.iters;
    return pa::exercise::grade(spec);
}

}  // namespace lesson04_exercise
