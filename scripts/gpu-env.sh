#!/usr/bin/env bash
# Prepare a GPU machine that has no package registry: install the carried wheels in .whl/
# (NumPy < 2.5 for numba-cuda, platformdirs, nvidia-cuda-cccl, ml_dtypes, ninja) into /tmp/site and put them
# first on PYTHONPATH. Source it: `source scripts/gpu-env.sh`. See docs/gpu.md.
# (and .whl-dot/: nvidia-libmathdx-cu13, for tile.dot, where a branch carries it apart)
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl $(ls .whl-dot/*.whl 2>/dev/null) \
        || return 1 2>/dev/null || exit 1
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    export PATH="/tmp/site/bin:$PATH"  # ninja, for building Mamba's CUDA kernel (benchmarks/_mamba_cuda.py)
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
# the optional C launch fast path, built in place (coop_tiles works without it)
python3 setup.py -q build_ext --inplace >/dev/null 2>&1 || echo "note: C launch fast path not built" >&2
export PYTHONUNBUFFERED=1
export COOP_TILES_CACHE_DIR="${COOP_TILES_CACHE_DIR:-/tmp/coop_tiles_cache}"
