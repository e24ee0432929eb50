#include "harness.h"

#include <algorithm>
#include <cstdio>

#include "cuda_check.cuh"
#include "decode_reference.h"
#include "device_buffer.cuh"
#include "device_info.cuh"
#include "flags.h"
#include "host_checks.h"
#include "lse_reference.h"
#include "split_k.h"
#include "table.h"

namespace lesson03_exercise {

using pa::exercise::GradeCase;
using pa::exercise::kFullWindow;
using pa::exercise::Suspect;

int partition_size(const pa::DecodeShape& s) {
    return lesson03::ladder_plan(1, s, pa::current_device_info()).partition_size;
}

namespace {

// The grader's own buffers, grown as needed (one stream: the grader's). Never freed: they live
// as long as the program, and a free at exit could run after the CUDA runtime has gone.
pa::DeviceBuffer<float>& scratch_buffer() {
    static auto* b = new pa::DeviceBuffer<float>();
    return *b;
}
pa::DeviceBuffer<float>& lse_buffer_storage() {
    static auto* b = new pa::DeviceBuffer<float>();
    return *b;
}

size_t scratch_rows(const pa::PagedDecodeArgs& a, int partition_size) {
    return static_cast<size_t>(a.B) * a.H * lesson03::num_partitions(a.max_ctx, partition_size);
}

}  // namespace

lesson03::SplitScratch scratch_for(const pa::PagedDecodeArgs& a, int partition_size) {
    const size_t rows = scratch_rows(a, partition_size);
    pa::DeviceBuffer<float>& b = scratch_buffer();
    if (b.size() < rows * (a.D + 2)) b.allocate(rows * (a.D + 2));
    lesson03::SplitScratch s;
    s.m = b.get();
    s.l = s.m + rows;
    s.acc = s.l + rows;
    s.max_partitions = lesson03::num_partitions(a.max_ctx, partition_size);
    return s;
}

float* lse_buffer(const pa::PagedDecodeArgs& a) {
    pa::DeviceBuffer<float>& b = lse_buffer_storage();
    const size_t rows = static_cast<size_t>(a.B) * a.H;
    if (b.size() < rows) b.allocate(rows);
    return b.get();
}

std::string graded_why_not(const pa::DecodeShape& s, const void* kernel) {
    if (!kernel)
        return pa::strf("shape %s: no graded kernel is built for %s with head size %d", s.name.c_str(),
                        pa::dtype_name(s.dtype), s.D);
    return lesson03::step1::why_not(s, partition_size(s), pa::current_device_info());
}

std::vector<GradeCase> grade_cases(const std::string&, uint64_t seed) {
    std::vector<GradeCase> cases = pa::exercise::standard_decode_cases(seed);
    GradeCase neg;
    neg.name = "negative-logits";
    neg.group = "edge";
    neg.shape = pa::make_shape("edge-negative-logits", 8, 2, {1, 700, 40, 300}, 128, 16, pa::DType::fp16);
    neg.q_scale = 1.0;
    neg.adjust = [](pa::DecodeProblem& p) { make_logits_negative(p); };
    neg.teaches = "every logit is below -88, so exp(logit - 0) is 0 in fp32: a sentinel's m must lose every max "
                  "(-inf), and each weight must be taken relative to the max";
    cases.push_back(neg);
    for (GradeCase& c : cases) c.windows = {kFullWindow};  // no window in this lesson
    return cases;
}

std::vector<Suspect> suspects(const pa::DecodeProblem& p, int partition_size) {
    const pa::PagedDecodeView v(p);
    const double scale = p.scale;
    std::vector<Suspect> out;
    out.push_back({"the output is all zeros (or too small to tell from zero)", [&p] {
                       return std::vector<double>(static_cast<size_t>(p.shape.B) * p.shape.H * p.shape.D, 0.0);
                   }});
    out.push_back({"the output leaves out the tokens of the grid's last partition: the reduce stops one partition short",
                   [&p, partition_size] { return decode_without_last_partition(p, partition_size); }});
    out.push_back({"the output is the plain mean of V: every softmax weight is the same", [v, scale] {
                       return pa::reference::decode_with_weights(v, scale, [](const std::vector<double>& s) {
                           return std::vector<double>(s.size(), 1.0 / static_cast<double>(s.size()));
                       });
                   }});
    return out;
}

namespace {

const char* kProgram = "lesson03_exercise";

std::string usage() {
    return std::string("usage: ") + kProgram +
           " [--grade] [--exercise fill|lse] [--seed S] [--json FILE] [--timeout S] [--iters N] [--help]\n"
           "Grades lesson 03's exercises (lessons/03_split_k/exercise/README.md):\n"
           "  fill  student.cuh: step 1's sentinel (TODO(1)) and the reduce's weight (TODO(2))\n"
           "  lse   lse.cuh: the reduce also returns each row's log-sum-exp (to merge two KV segments)\n"
           "Correctness first: Table A, 8 shapes drawn from --seed (a teacher's secret seed gives shapes no\n"
           "student saw) and named edge cases, the output, the split scratch and the log-sum-exp poisoned with\n"
           "NaN before every launch. Then speed: the graded kernels against the lesson's own step 1 (variant\n"
           "partitions), timed alternately in the same run, L2-cold, as a ratio of times (full marks within 1.2).\n"
           "Exit codes: 0 correct, 1 wrong, 2 invalid input, 3 no usable GPU, 4 a kernel hung.\n"
           "With no flags: --grade --exercise fill.\n";
}

}  // namespace

int run(int argc, char** argv, const Graded& g) {
    const pa::exercise::GradeFlags f = pa::exercise::parse_grade_flags(argc, argv, kProgram, usage(), {"fill", "lse"});
    const std::string& exercise = f.exercise;
    const GradedKernel& k = exercise == "fill" ? g.fill : g.lse;
    if (!k.why_not)
        pa::exit_bad_input(kProgram, "this build (" + g.build + ") has no graded file for the " + exercise +
                                         " exercise; lesson03_exercise has both");

    const pa::DecodeVariant lesson = lesson03::ladder_variant(1);
    pa::exercise::GraderSpec spec;
    spec.program = kProgram;
    spec.build = g.build;
    spec.exercise = exercise;
    spec.seed = f.seed;
    spec.cases = grade_cases(exercise, f.seed);
    spec.why_not = k.why_not;
    spec.student = k.launch;
    spec.lesson_variant = lesson.name;
    spec.lesson_why_not = [lesson](const pa::DecodeShape& s) { return lesson.why_not(s, pa::current_device_info()); };
    spec.lesson = lesson.launch;
    spec.reference = [](const pa::DecodeProblem& p, int, int) { return pa::reference::softmax_decode(p); };
    spec.suspects = [](const pa::DecodeProblem& p, int, int) { return suspects(p, partition_size(p.shape)); };
    const bool lse = exercise == "lse";
    spec.poison_extra = [lse](const pa::PagedDecodeArgs& a, cudaStream_t stream) {
        const lesson03::SplitScratch s = scratch_for(a, partition_size(pa::launch_shape(a)));
        const size_t rows = static_cast<size_t>(a.B) * a.H * s.max_partitions;
        CUDA_CHECK(cudaMemsetAsync(s.m, 0xff, rows * (a.D + 2) * sizeof(float), stream));  // NaN
        if (lse) CUDA_CHECK(cudaMemsetAsync(lse_buffer(a), 0xff, static_cast<size_t>(a.B) * a.H * sizeof(float), stream));
    };
    if (lse) {
        spec.check_extra = [](const pa::DecodeProblem& p, int, int) {
            std::vector<float> got(static_cast<size_t>(p.shape.B) * p.shape.H);
            CUDA_CHECK(cudaMemcpy(got.data(), lse_buffer_storage().get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost));
            return check_lse(got, p, partition_size(p.shape));
        };
    }
    for (const char* name : {"llama7b-B1-ctx4k", "llama70b-B4-ctx2k", "mqa-B16-ctx4k"})
        spec.timing_shapes.push_back(*pa::find_shape(name));
    spec.json = f.json;
    spec.timeout_s = f.timeout_s;
    spec.iters = f.iters;
    return pa::exercise::grade(spec);
}

}  // namespace lesson03_exercise
