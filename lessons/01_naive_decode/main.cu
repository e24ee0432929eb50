// lesson01_naive_decode: checks the naive paged decode against the CPU reference over
// the awkward check shapes, then measures it over the whole shape catalogue.
//
//   lesson01_naive_decode            check (N/N PASS), then the measurement table
//   lesson01_naive_decode --check    check only (what the sanitizer tests run)
//   lesson01_naive_decode --bench --shape llama7b-B32-ctx1k --csv out.csv
#include "decode_driver.cuh"
#include "decode_reference.h"
#include "naive_decode.h"

int main(int argc, char** argv) {
    pa::DecodeLessonSpec spec;
    spec.program = "lesson01_naive_decode";
    spec.lesson = "01";
    spec.title = "Lesson 01: naive paged decode (one CTA per query head, one thread per token)";
    spec.extra_usage = "Variant: naive. A context longer than shared memory holds is refused (see lesson 03).\n";
    spec.variants = {lesson01::variant()};
    spec.check_shapes = pa::decode_check_shapes();
    spec.bench_shapes = pa::shape_catalogue();
    spec.reference = [](const pa::DecodeProblem& p) { return pa::reference::softmax_decode(p); };
    return pa::run_decode_lesson(argc, argv, spec);
}
