#!/usr/bin/env bash
# What each lesson runs on the GPUs students own, shown on the GPU at hand: every lesson's
# `--check` in an sm_80 build (the driver JIT-compiles its PTX, so no sm_90 instruction is there)
# under a shared-memory cap of 99 KiB a CTA (as an RTX 3090/4090, A10 or L4: sm_86/89) and of
# 163 KiB (an A100), and in the native build with no cap. plots/arch_matrix.py turns the check
# lines (which steps passed on how many shapes, which were refused and why) into
# plots/data/<gpu>/arch_matrix.csv, from which plots/tables.py writes the README's matrix.
#
#   bash scripts/arch_matrix.sh                  (from anywhere; needs a GPU)
#   bash scripts/arch_matrix.sh --lessons 03,05  only these lessons (the CSV keeps the others' rows)
#
# Exit code: 0 when every check passed, 1 when one failed, 2 on bad flags, 3 without a GPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/install_prereqs.sh
. scripts/install_prereqs.sh

only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --lessons) [ $# -ge 2 ] || { echo "error: --lessons needs a value, e.g. --lessons 02,03" >&2; exit 2; }; only=$2; shift 2 ;;
        -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
pa_gpu_visible || { echo "arch_matrix: no CUDA GPU visible; nothing to run" >&2; exit 3; }
pa_ensure_build_tools
pa_ensure_python3

gpu=$(pa_gpu_short_name)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

native_dir=${PA_BUILD_DIR}
(PA_BUILD_DIR=$native_dir; pa_configure_and_build)
(PA_BUILD_DIR=build-sm80; PA_CMAKE_ARGS="${PA_CMAKE_ARGS:-} -DCMAKE_CUDA_ARCHITECTURES=80"; pa_configure_and_build)

rc=0
for spec in "native:$native_dir:none" "sm80:build-sm80:163" "sm80:build-sm80:99"; do
    IFS=: read -r build dir cap <<<"$spec"
    for exe in "$dir"/bin/lesson[0-9][0-9]_*; do
        [ -x "$exe" ] || continue
        [[ "$exe" != *_exercise* ]] || continue  # the exercises' graders (lessons/NN/exercise/)
        name=$(basename "$exe")
        nn=$(cut -c7-8 <<<"$name")
        if [ -n "$only" ] && [[ ",$only," != *",$nn,"* ]]; then continue; fi
        log="$logs/${build}__${cap}__${name}.log"
        echo "== $name ($build build, shared memory cap: $cap)"
        r=0
        if [ "$cap" = none ]; then "$exe" --check >"$log" 2>&1 || r=$?
        else PA_SMEM_CAP_KIB=$cap "$exe" --check >"$log" 2>&1 || r=$?; fi
        echo "exit $r" >>"$log"
        tail -n 2 "$log" | head -n 1
        [ "$r" -eq 0 ] || rc=1
    done
done
mkdir -p "plots/data/$gpu"
python3 plots/arch_matrix.py --gpu "$gpu" --out "plots/data/$gpu/arch_matrix.csv" ${only:+--lessons "$only"} "$logs"/*.log
echo "wrote plots/data/$gpu/arch_matrix.csv"
exit "$rc"
