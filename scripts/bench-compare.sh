#!/usr/bin/env bash
# Benchmarks before and after, in one sitting on one GPU machine: an earlier commit's tree (the git-ignored .baseline/)
# and this tree, section by section in fresh processes, then every time side by side with ratios per section
# (benchmarks/run.py --baseline-tree; benchmarks/compare.py). Reports go under $OUT (the lent device) or bench-compare/:
# compare.md, and in compare-runs/ both trees' pages (baseline.md, current.md), results (.pkl) and the runs' log.
#
#   bash scripts/bench-compare.sh --prepare [REV]    # here, with git: .baseline/ = REV's tree (default main)
#   bash scripts/bench-compare.sh [run.py options]   # on the GPU machine, e.g. --only bandwidth,half [--quick]
#
# Carry .baseline (and .whl, benchmarks/.mamba for the mamba section) to the device. A full run of every section twice
# does not fit in one 10-minute call: choose sections with --only (see the report's wall times per run).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--prepare" ]; then
    rev="${2:-main}"
    commit="$(git rev-parse --verify "$rev^{commit}")"
    rm -rf .baseline
    mkdir .baseline
    git archive "$commit" | tar -x -C .baseline
    echo "$commit" > .baseline/BASELINE_COMMIT
    echo ".baseline/ = $rev ($commit)"
    exit 0
fi
if [ ! -f .baseline/benchmarks/run.py ]; then
    echo "no .baseline/: run 'bash scripts/bench-compare.sh --prepare REV' where git is, and carry .baseline" >&2
    exit 2
fi
source scripts/gpu-env.sh
# the baseline's C launch path, built in place as gpu-env.sh builds this tree's (the launch section times it)
(cd .baseline && python3 setup.py -q build_ext --inplace >/dev/null 2>&1) || echo "note: baseline's C launch path not built" >&2
# What the baselines build and fetch, shared: the CUB library (named by a hash of its source, flags and nvcc) and
# Mamba's sources and build. Mamba's extension is rebuilt when its source paths change, so when both trees have the
# same benchmarks/_mamba_cuda.py the baseline's is a link to this one (its paths resolve to this tree's).
mkdir -p benchmarks/.build
[ -e .baseline/benchmarks/.build ] || ln -s "$PWD/benchmarks/.build" .baseline/benchmarks/.build
if [ -d benchmarks/.mamba ] && [ ! -e .baseline/benchmarks/.mamba ]; then
    ln -s "$PWD/benchmarks/.mamba" .baseline/benchmarks/.mamba
fi
if [ -f .baseline/benchmarks/_mamba_cuda.py ] && cmp -s .baseline/benchmarks/_mamba_cuda.py benchmarks/_mamba_cuda.py; then
    ln -sf "$PWD/benchmarks/_mamba_cuda.py" .baseline/benchmarks/_mamba_cuda.py
fi
out="${OUT:-bench-compare}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/device.txt" 2>/dev/null || true
echo "baseline: $(cat .baseline/BASELINE_COMMIT 2>/dev/null || echo '?')" >> "$out/device.txt"
python3 benchmarks/run.py --baseline-tree .baseline --out "$out/compare.md" "$@"
