#!/usr/bin/env bash
# Builds everything (every lesson and the tests) and runs the test suite with CTest.
# Where a GPU is visible it runs all tests, GPU and compute-sanitizer ones included;
# without one it runs the CPU tests and excludes the tests labelled `gpu`.
#
#   bash scripts/run_tests.sh          (from anywhere; .ci/run calls exactly this)
#
# Installs Catch2 v3, python3 and python3-matplotlib when missing and it can (apt, as root or
# through sudo); python3 runs plots/tables.py, whose tests check the README tables against the
# CSVs, and the plot and TABLES.md tests (plots/test_plots.py, plots/make_tables_md.py --check).
# Exit code: ctest's (or 1 when a prerequisite is missing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/install_prereqs.sh
. scripts/install_prereqs.sh

pa_ensure_build_tools
pa_ensure_catch2
pa_ensure_python3
pa_ensure_matplotlib
pa_configure_and_build -DPA_BUILD_TESTS=ON

jobs=$(pa_jobs)
rc=0
if pa_gpu_visible; then
    ctest --test-dir "$PA_BUILD_DIR" --output-on-failure -j "$jobs" || rc=$?
else
    ctest --test-dir "$PA_BUILD_DIR" --output-on-failure -j "$jobs" -LE gpu || rc=$?
    echo "No CUDA GPU visible: ran the CPU tests only; the gpu-labelled tests were excluded (ctest -LE gpu)."
fi
exit "$rc"
