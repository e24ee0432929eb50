#!/usr/bin/env bash
# Builds every lesson and runs each one's check executable in order: the correctness
# check (N/N PASS) and the measurement table, writing the rows to
# plots/data/<gpu>/lessonNN.csv. Without a GPU it builds everything and says so.
#
#   bash scripts/run_lessons.sh                  (from anywhere)
#   bash scripts/run_lessons.sh --arch 80        an sm_80 build (in build-sm80) on this GPU:
#                                                on a newer GPU the driver compiles its PTX
#                                                at start, as an A100 user's build would run;
#                                                CSVs named lessonNN_sm80.csv
#   bash scripts/run_lessons.sh --lessons 02     only the lessons named (comma-separated)
#
# Exit code: 0 when every lesson passed (or no GPU is visible), 1 otherwise; 2 on bad flags.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/install_prereqs.sh
. scripts/install_prereqs.sh

arch=""
only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --arch) [ $# -ge 2 ] || { echo "error: --arch needs a value, e.g. --arch 80" >&2; exit 2; }; arch=$2; shift 2 ;;
        --lessons) [ $# -ge 2 ] || { echo "error: --lessons needs a value, e.g. --lessons 02,03" >&2; exit 2; }; only=$2; shift 2 ;;
        -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
suffix=""
if [ -n "$arch" ]; then
    [[ "$arch" =~ ^[0-9]+a?$ ]] || { echo "error: --arch takes one architecture such as 80, 86, 89 or 90a, got '$arch'" >&2; exit 2; }
    PA_BUILD_DIR="build-sm$arch"
    PA_CMAKE_ARGS="${PA_CMAKE_ARGS:-} -DCMAKE_CUDA_ARCHITECTURES=$arch"
    suffix="_sm$arch"
fi

pa_ensure_build_tools
pa_configure_and_build -DPA_BUILD_TESTS=OFF

no_gpu_line="No CUDA GPU visible: built every lesson; skipped the GPU runs."

lessons=()
while IFS= read -r exe; do
    nn=$(basename "$exe" | cut -c7-8)  # lessonNN_...
    if [ -n "$only" ] && [[ ",$only," != *",$nn,"* ]]; then continue; fi
    if [ -f "$exe" ] && [ -x "$exe" ]; then lessons+=("$exe"); fi
done < <(find "$PA_BUILD_DIR/bin" -maxdepth 1 -name 'lesson[0-9][0-9]_*' ! -name '*_exercise*' 2>/dev/null | LC_ALL=C sort)
[ "${#lessons[@]}" -gt 0 ] || pa_fail "No lesson executables in $PA_BUILD_DIR/bin after the build (did every lesson get skipped for the configured GPU architectures?)."

if ! pa_gpu_visible; then
    echo "$no_gpu_line"
    exit 0
fi
# nvidia-smi lists a GPU, but the CUDA runtime may still be unable to use it (a driver
# older than the toolkit, say): a one-token check tells, and exits 3 when it cannot.
probe_rc=0
"${lessons[0]}" --check --B 1 --H 1 --Hkv 1 --ctx 1 >/dev/null 2>&1 || probe_rc=$?
if [ "$probe_rc" -eq 3 ]; then
    echo "$no_gpu_line"
    exit 0
fi

gpu=$(pa_gpu_short_name)
[ -n "$gpu" ] || gpu=unknown-gpu
mkdir -p "plots/data/$gpu"

failed=()
skipped=()
first=1
for exe in "${lessons[@]}"; do
    name=$(basename "$exe")
    nn=${name:6:2}  # lessonNN_...
    csv="plots/data/$gpu/lesson$nn$suffix.csv"
    printf '\n===== %s (CSV: %s) =====\n' "$name" "$csv"
    rc=0
    "$exe" --csv "$csv" || rc=$?
    if [ "$rc" -eq 3 ]; then  # no usable GPU, or one this lesson cannot use
        if [ "$first" -eq 1 ]; then
            rmdir -p "plots/data/$gpu" 2>/dev/null || true
            echo "$no_gpu_line"
            exit 0
        fi
        skipped+=("$name")
    elif [ "$rc" -ne 0 ]; then
        failed+=("$name (exit $rc)")
    fi
    # A lesson with a second measurement (its usage has a line starting with the flag) runs it
    # too: --timeline (lesson 02: where its main kernel's time goes), --plans (lesson 04:
    # lesson 03's plans with its reduce), --sweep (lesson 03: its plans across partition sizes),
    # --floor (lesson 06: its last step beside the same kernel without the softmax's arithmetic),
    # --copy-rate (lesson 02: what one CTA's copies read, by kind of copy), each into
    # lessonNN_<mode>.csv (dashes as underscores).
    for mode in timeline plans sweep floor copy-rate; do
        if [ "$rc" -ne 3 ] && [ -z "$suffix" ] && "$exe" --help | grep -q -- "^--$mode"; then
            mode_csv="plots/data/$gpu/lesson${nn}_${mode//-/_}.csv"
            printf '\n===== %s --%s (CSV: %s) =====\n' "$name" "$mode" "$mode_csv"
            mode_rc=0
            "$exe" "--$mode" --csv "$mode_csv" || mode_rc=$?
            [ "$mode_rc" -eq 0 ] || failed+=("$name --$mode (exit $mode_rc)")
        fi
    done
    first=0
done

echo
echo "ran ${#lessons[@]} lessons on $gpu; CSV files in plots/data/$gpu/"
[ "${#skipped[@]}" -eq 0 ] || echo "skipped on this GPU (each said why above): ${skipped[*]}"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "all lessons passed"
