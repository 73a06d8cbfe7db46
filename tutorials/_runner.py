"""Shared by the tutorials: run on the GPU when there is one, else in the NumPy interpreter."""

from __future__ import annotations

import numpy as np

import coop_tiles as ct
from coop_tiles.runtime.launcher import gpu_available

ON_GPU = gpu_available()


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
    return "on the GPU" if ON_GPU else "in the NumPy interpreter (no GPU found)"
