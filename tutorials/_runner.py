"""Shared by the tutorials: run on the GPU when there is one (with CuPy arrays), else in the NumPy interpreter."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import coop_tiles as ct

#: where `report_speed` writes each tutorial's plot and table (git-ignored)
PLOTS = Path(__file__).parent / "plots"


def _cupy_sees_a_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver or no device
        return False


ON_GPU = _cupy_sees_a_gpu()


def hopper() -> bool:
    """Whether the GPU is a 9.0 one (H100, H200), whose arch-specific code (`ct.jit(arch="sm_90a")`) runs there only."""
    if not ON_GPU:
        return False
    import cupy

    return cupy.cuda.Device().compute_capability == "90"


def to_device(*arrays: np.ndarray):
    """The arrays on the GPU (CuPy) when there is one, else unchanged."""
    if not ON_GPU:
        return arrays
    import cupy as cp

    return tuple(cp.asarray(a) for a in arrays)


def to_host(array) -> np.ndarray:
    return array.get() if hasattr(array, "get") else np.asarray(array)


def kernel(k: ct.JITFunction) -> ct.JITFunction:
    """`k` itself on a GPU; an interpreting copy of it without one."""
    return k if ON_GPU else ct.jit(k.fn, interpret=True)


def where() -> str:
    return "on the GPU" if ON_GPU else "in the NumPy interpreter (no GPU, or no CuPy, found)"


def report_speed(bench) -> None:
    """Run a tutorial's `ct.testing.perf_report` sweep on the GPU, printing its table and writing its plot (and CSV)
    into tutorials/plots/; without a GPU, one line says it was skipped (the interpreter has no speed to report)."""
    if not ON_GPU:
        print("performance report skipped: no GPU")
        return
    bench.run(print_data=True, save_path=PLOTS)
