#!/usr/bin/env bash
# Grades a class: every submission of one exercise, one line per student (TEACHING.md).
#
#   bash scripts/grade_class.sh LESSON EXERCISE FOLDER [--seed S] [--out DIR] [--build DIR]
#
#   LESSON    lesson01 .. lesson07
#   EXERCISE  the exercise's name in that lesson (its exercise/README.md; e.g. fill, window)
#   FOLDER    the submissions: either one file per student (alice.cuh, bob.cuh: the student's
#             name is the file's name) or one folder per student holding the graded file under
#             its usual name (alice/student.cuh)
#   --seed S  the grader's seed: a secret seed draws shapes no student saw (default 0)
#   --out DIR where each student's JSON result and log go, and class.csv (default FOLDER/grades)
#   --build DIR  the build folder (default build-grade; configured for this machine's GPU)
#
# Each submission is compiled into its own grader (<lesson>_exercise_submission, through the CMake
# cache variable PA_EXERCISE_SUBMISSION; the harness and the lesson compile once) and graded with
# `--grade --exercise EXERCISE --seed S --json`. A submission that does not compile is graded
# "compile_error". Exit code: 0 when every submission was graded (whatever its grade), 2 on
# invalid input.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { echo "error: $*" >&2; exit 2; }
[ $# -ge 3 ] || die "usage: scripts/grade_class.sh LESSON EXERCISE FOLDER [--seed S] [--out DIR] [--build DIR]"
lesson=$1 exercise=$2 folder=$3
shift 3
seed=0 out="" build=build-grade
while [ $# -gt 0 ]; do
    case "$1" in
        --seed) [ $# -ge 2 ] || die "--seed needs a value"; seed=$2; shift 2 ;;
        --out) [ $# -ge 2 ] || die "--out needs a folder"; out=$2; shift 2 ;;
        --build) [ $# -ge 2 ] || die "--build needs a folder"; build=$2; shift 2 ;;
        *) die "unknown argument '$1'" ;;
    esac
done
[[ "$seed" =~ ^[0-9]+$ ]] || die "--seed must be a non-negative integer, got '$seed'"
[ -d "$folder" ] || die "no such folder: $folder"
folder=$(cd "$folder" && pwd)
out=${out:-$folder/grades}

# The lesson's folder, and the exercise's graded file name from its CMakeLists (GRADED name=file).
lesson_dir=$(ls -d lessons/"${lesson#lesson}"_* 2>/dev/null | head -n1) || true
[ -n "$lesson_dir" ] && [ -f "$lesson_dir/CMakeLists.txt" ] || die "no lesson '$lesson' (lesson01 .. lesson07)"
graded=$(grep -o "GRADED[^)]*" "$lesson_dir/CMakeLists.txt" | tr ' ' '\n' | sed -n "s/^$exercise=//p" | head -n1)
[ -n "$graded" ] || die "$lesson has no exercise '$exercise' (see $lesson_dir/exercise/README.md)"
graded_name=$(basename "$graded")

# The submissions: name -> file.
names=() files=()
for entry in "$folder"/*; do
    [ "$entry" = "$out" ] && continue
    if [ -d "$entry" ]; then
        [ -f "$entry/$graded_name" ] || { echo "skipped $(basename "$entry"): no $graded_name in it" >&2; continue; }
        names+=("$(basename "$entry")") files+=("$entry/$graded_name")
    elif [[ "$entry" == *.cuh || "$entry" == *.h ]]; then
        n=$(basename "$entry"); names+=("${n%.*}") files+=("$entry")
    fi
done
[ ${#files[@]} -gt 0 ] || die "no submissions in $folder (expected NAME.cuh files or NAME/$graded_name folders)"

mkdir -p "$out"
csv="$out/class.csv"
echo "student,outcome,exit_code,result" > "$csv"
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=native -DPA_BUILD_TESTS=OFF >/dev/null
fi
exe="$build/bin/${lesson}_exercise_submission"
printf '%-20s %-14s %s\n' student outcome result
for i in "${!files[@]}"; do
    name=${names[$i]} file=${files[$i]}
    log="$out/$name.log" json="$out/$name.json"
    rm -f "$exe" "$json"
    if ! { cmake -S . -B "$build" "-DPA_EXERCISE_SUBMISSION=$lesson/$exercise=$file" &&
           cmake --build "$build" --target "${lesson}_exercise_submission"; } >"$log" 2>&1; then
        outcome=compile_error rc=1
        result="does not compile: $(grep -m1 -i 'error' "$log" | cut -c1-160)"
    else
        rc=0
        "$exe" --grade --exercise "$exercise" --seed "$seed" --json "$json" >>"$log" 2>&1 || rc=$?
        case $rc in
            0) outcome=pass ;; 1) outcome=wrong ;; 2) outcome=bad_input ;; 3) outcome=no_gpu ;; 4) outcome=hang ;;
            *) outcome=crashed ;;
        esac
        result=$(grep -E '^(RESULT|HANG)' "$log" | tail -n1)
        [ -n "$result" ] || result="exit code $rc, no RESULT line (see $log)"
    fi
    printf '%-20s %-14s %s\n' "$name" "$outcome" "$result"
    printf '%s,%s,%s,"%s"\n' "$name" "$outcome" "$rc" "${result//\"/\'}" >> "$csv"
done
# Leave the build without a submission, so that a later build does not keep grading the last one.
cmake -S . -B "$build" -DPA_EXERCISE_SUBMISSION= >/dev/null
echo "graded ${#files[@]} submissions of $lesson $exercise (seed $seed): $csv"
