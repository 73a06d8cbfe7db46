#!/usr/bin/env bash
# One command for a GPU machine: the GPU test suite, the option matrix under compute-sanitizer's
# memcheck, then the benchmarks (which rewrite docs/benchmarks.md). Reports go under $OUT when it is set (the lent device), else ./gpu-reports.
#   bash scripts/gpu-check.sh            # tests + benchmarks
#   bash scripts/gpu-check.sh --tests    # tests only
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-env.sh
out="${OUT:-gpu-reports}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/device.txt"
# the GPU suite, plus the tutorials (which run on the GPU when there is one)
python3 -m pytest -q -p no:cacheprovider tests/test_gpu*.py tests/test_tutorials.py 2>&1 | tee "$out/gpu-tests.log"
status=${PIPESTATUS[0]}
# every allowed combination of every op's options once under memcheck (tests/option_matrix.py)
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
"$sanitizer" --tool memcheck --error-exitcode 1 --report-api-errors no \
    python3 scripts/sanitize_matrix.py 2>&1 | tee "$out/sanitize-matrix.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
if [ "${1:-}" != "--tests" ]; then
    python3 benchmarks/run.py --out docs/benchmarks.md 2>&1 | tee "$out/benchmarks.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    cp docs/benchmarks.md "$out/benchmarks.md"
fi
exit "$status"
