#!/usr/bin/env bash
# One command for a GPU machine: the GPU test suite, the sanitizer sweep, then the benchmarks (which
# rewrite docs/benchmarks.md). Reports go under $OUT when it is set (the lent device), else ./gpu-reports.
#   bash scripts/gpu-check.sh            # tests + sanitizer sweep + benchmarks
#   bash scripts/gpu-check.sh --tests    # tests + sanitizer sweep
#   bash scripts/gpu-check.sh --sanitize # the sanitizer sweep alone
# The sanitizer sweep runs scripts/sanitize_cases.py (every test program, 1-D and 2-D, whose plan has a tile in shared
# memory, reuses shared bytes or runs collectives in a loop, one per kind of plan; issue 17's program; a
# selective scan) under compute-sanitizer's racecheck, then memcheck, and every allowed combination of every
# op's options (scripts/sanitize_matrix.py, tests/option_matrix.py) once under memcheck; it fails on any
# hazard, any error or any result that differs from its reference.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-env.sh
out="${OUT:-gpu-reports}"
mkdir -p "$out"
mode="${1:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/device.txt"
status=0

find_sanitizer() {
    command -v compute-sanitizer && return
    for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda*/bin/compute-sanitizer \
        /usr/local/cuda/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer/compute-sanitizer; do
        [ -x "$c" ] && echo "$c" && return
    done
    return 1
}

sanitize() {  # racecheck and memcheck over the selection; logs in $out/sanitize-<tool>.log
    local sanitizer tool log rc failed=0
    if ! sanitizer=$(find_sanitizer); then
        echo "sanitize: compute-sanitizer not found" | tee "$out/sanitize.log"
        return 1
    fi
    "$sanitizer" --version | tail -1
    python3 scripts/sanitize_cases.py --list | tee "$out/sanitize-cases.txt"
    for tool in racecheck memcheck; do
        log="$out/sanitize-$tool.log"
        # --error-exitcode: non-zero on any error it finds; the script's own status: a wrong result
        "$sanitizer" --tool "$tool" --error-exitcode 86 --report-api-errors no --print-limit 200 \
            python3 scripts/sanitize_cases.py 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
        # racecheck: "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)"; memcheck:
        # "ERROR SUMMARY: N errors". No summary: the tool did not run to the end. Any N > 0 fails.
        if ! grep -qE "(RACECHECK|ERROR) SUMMARY:" "$log"; then
            echo "sanitize: $tool printed no summary (exit status $rc)"
            failed=1
        elif grep -qE "SUMMARY: [1-9]|\([1-9][0-9]* errors|, [1-9][0-9]* warnings" "$log"; then
            echo "sanitize: $tool found hazards or errors:"
            grep -E "SUMMARY:" "$log"
            failed=1
        elif [ "$rc" -ne 0 ]; then
            echo "sanitize: $tool run failed (exit status $rc)"
            failed=1
        else
            echo "sanitize: $tool clean: $(grep -E 'SUMMARY:' "$log" | tr -s ' =' ' ' | paste -sd';')"
        fi
    done
    # every allowed combination of every op's options once under memcheck (tests/option_matrix.py)
    "$sanitizer" --tool memcheck --error-exitcode 86 --report-api-errors no \
        python3 scripts/sanitize_matrix.py 2>&1 | tee "$out/sanitize-matrix.log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -ne 0 ] || ! grep -q "ERROR SUMMARY: 0 errors" "$out/sanitize-matrix.log"; then
        echo "sanitize: the option matrix under memcheck failed (exit status $rc)"
        failed=1
    else
        echo "sanitize: option matrix memcheck clean"
    fi
    return "$failed"
}

if [ "$mode" = "--sanitize" ]; then
    sanitize 2>&1 | tee "$out/sanitize.log"
    exit "${PIPESTATUS[0]}"
fi
# the GPU suite, plus the tutorials (which run on the GPU when there is one)
python3 -m pytest -q -p no:cacheprovider tests/test_gpu*.py tests/test_tutorials.py 2>&1 | tee "$out/gpu-tests.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
# the sanitizer sweep (its kernels compiled by the suite above come from the disk cache)
sanitize 2>&1 | tee "$out/sanitize.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
if [ "$mode" != "--tests" ]; then
    python3 benchmarks/run.py --out docs/benchmarks.md 2>&1 | tee "$out/benchmarks.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    cp docs/benchmarks.md "$out/benchmarks.md"
fi
exit "$status"
