#!/usr/bin/env bash
# One command for a GPU machine: the GPU test suite, the sanitizer sweep, then the benchmarks (which
# rewrite docs/benchmarks.md). Reports go under $OUT when it is set (the lent device), else ./gpu-reports.
#   bash scripts/gpu-check.sh            # tests + sanitizer sweep + benchmarks
#   bash scripts/gpu-check.sh --tests    # tests + sanitizer sweep
#   bash scripts/gpu-check.sh --sanitize # the sanitizer sweep alone
# The sanitizer sweep runs scripts/sanitize_cases.py (every test program, 1-D and 2-D, whose plan has a tile in shared
# memory, reuses shared bytes or runs collectives in a loop, one per kind of plan; issue 17's program; a
# selective scan) under compute-sanitizer's racecheck and memcheck, and every allowed combination of every op's
# options (scripts/sanitize_matrix.py, tests/option_matrix.py) once under memcheck, all runs at once (each its own
# process and log, after one plain run of the pytest entries fills the compile cache); it fails on any hazard, any
# error or any result that differs from its reference.
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

# GPU tests whose programs are not shared test programs (library GEMMs, the examples: SSD, top-k, MoE routing,
# the selective-scan backward, the sm_90a pipelined K loop), small cases, run by pytest under each tool: "file|-k expression"
SANITIZE_TESTS=(
    "tests/test_dot.py|gpu_k_loop_and_transposed or (gpu_fragment_map and 32-48) or gpu_transposed_wide or gpu_mixed_products"
    "tests/test_ssd.py|gpu and small"
    "tests/test_topk_rows.py|gpu and cupy and float32"
    "tests/test_moe.py|gpu and cupy-700"
    "tests/test_selective_scan_backward.py|compiled_kernel and bfloat16"
    "tests/test_gpu_dot_loop.py|(128x128x64 and ragged and not large) or misaligned or two_streams"
)

# verdict of one sanitizer log: racecheck prints "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)",
# memcheck "ERROR SUMMARY: N errors"; no summary means the tool did not run to the end; any N > 0 fails
judge() {  # judge TOOL LOG STATUS
    local tool=$1 log=$2 rc=$3
    if ! grep -qE "(RACECHECK|ERROR) SUMMARY:" "$log"; then
        echo "sanitize: $tool printed no summary (exit status $rc, $log)"
    elif grep -qE "SUMMARY: [1-9]|\([1-9][0-9]* errors|, [1-9][0-9]* warnings" "$log"; then
        echo "sanitize: $tool found hazards or errors ($log):"
        grep -E "SUMMARY:" "$log"
    elif [ "$rc" -ne 0 ]; then
        echo "sanitize: $tool run failed (exit status $rc, $log)"
    else
        echo "sanitize: $tool clean ($log): $(grep -E 'SUMMARY:' "$log" | tr -s ' =' ' ' | paste -sd';')"
        return 0
    fi
    return 1
}

sanitize() {  # racecheck and memcheck over the selection and SANITIZE_TESTS; logs in $out/sanitize-*.log
    local sanitizer tool log failed=0 i file selection
    local -a flags runs
    if ! sanitizer=$(find_sanitizer); then
        echo "sanitize: compute-sanitizer not found" | tee "$out/sanitize.log"
        return 1
    fi
    "$sanitizer" --version | tail -1
    python3 scripts/sanitize_cases.py --list | tee "$out/sanitize-cases.txt"
    # each SANITIZE_TESTS entry once without a sanitizer, all at once: their kernels (GEMMs take seconds of NVRTC
    # each) reach the disk cache, so the runs under the tools spend their time in the tools, not compiling
    # (with pytest-xdist, each entry's tests compile side by side too: the SSD entry's GEMMs took 9 minutes in turn)
    local -a spread=()
    python3 -c "import xdist" 2>/dev/null && spread=(-n 4)
    for i in "${!SANITIZE_TESTS[@]}"; do
        IFS='|' read -r file selection <<< "${SANITIZE_TESTS[$i]}"
        python3 -m pytest -q -p no:cacheprovider "${spread[@]}" "$file" -k "$selection" \
            > "$out/sanitize-warm$i.log" 2>&1 &
    done
    wait
    # every run under a tool at once (each its own process and log), then each log judged:
    # --error-exitcode: non-zero on any error the tool finds; the script's or pytest's own status: a wrong result
    flags=(--error-exitcode 86 --report-api-errors no --print-limit 200)
    for tool in racecheck memcheck; do
        "$sanitizer" --tool "$tool" "${flags[@]}" python3 scripts/sanitize_cases.py > "$out/sanitize-$tool.log" 2>&1 &
        runs+=("$tool|$out/sanitize-$tool.log|$!|")
        for i in "${!SANITIZE_TESTS[@]}"; do
            IFS='|' read -r file selection <<< "${SANITIZE_TESTS[$i]}"
            log="$out/sanitize-$tool-test$i.log"
            "$sanitizer" --tool "$tool" "${flags[@]}" python3 -m pytest -q -p no:cacheprovider "$file" -k "$selection" \
                > "$log" 2>&1 &
            runs+=("$tool|$log|$!|pytest")
        done
    done
    # every allowed combination of every op's options once under memcheck (tests/option_matrix.py)
    "$sanitizer" --tool memcheck "${flags[@]}" python3 scripts/sanitize_matrix.py > "$out/sanitize-matrix.log" 2>&1 &
    runs+=("memcheck|$out/sanitize-matrix.log|$!|")
    local run pid kind rc
    for run in "${runs[@]}"; do
        IFS='|' read -r tool log pid kind <<< "$run"
        wait "$pid"
        rc=$?
        judge "$tool" "$log" "$rc" || failed=1
        if [ "$kind" = pytest ] && ! grep -qE "[1-9][0-9]* passed" "$log"; then
            echo "sanitize: no test ran in $log"
            failed=1
        fi
    done
    return "$failed"
}

if [ "$mode" = "--sanitize" ]; then
    sanitize 2>&1 | tee "$out/sanitize.log"
    exit "${PIPESTATUS[0]}"
fi
# the GPU suite: every test marked gpu, whichever file it is in (side by side with pytest-xdist where it is
# installed: the suite is bound by its compiles), then the tutorials (which run on the GPU when there is one)
workers=()
python3 -c "import xdist" 2>/dev/null && workers=(-n "${GPU_TEST_WORKERS:-8}")
python3 -m pytest -q -p no:cacheprovider "${workers[@]}" -m gpu tests/ --ignore=tests/test_tutorials.py 2>&1 \
    | tee "$out/gpu-tests.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
python3 -m pytest -q -p no:cacheprovider tests/test_tutorials.py 2>&1 | tee "$out/tutorial-tests.log"
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
