"""Triton baselines for benchmarks/run.py, kept apart so that a machine without Triton or PyTorch still runs
every other section (run.py imports this module only inside the measurement that needs it).

No `from __future__ import annotations` here: Triton reads the `tl.constexpr` annotations at run time.
"""

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def _linrec_combine(a_l, b_l, a_r, b_r):
    return a_r * a_l, a_r * b_l + b_r


@triton.jit
def _tile_linrec(a, b, h, n, TILE: tl.constexpr):
    offsets = tl.program_id(0) * TILE + tl.arange(0, TILE)
    mask = offsets < n
    ta = tl.load(a + offsets, mask=mask, other=1.0)
    tb = tl.load(b + offsets, mask=mask, other=0.0)
    _, th = tl.associative_scan((ta, tb), axis=0, combine_fn=_linrec_combine)
    tl.store(h + offsets, th, mask=mask)


def triton_linrec(a: Any, b: Any, h: Any, n: int, *, tile: int, warps: int) -> Callable[[], None]:
    """A launch of the per-tile recurrence h_i = a_i * h_(i-1) + b_i (h = 0 at each tile's start) on float32
    device arrays (CuPy, or anything with `__cuda_array_interface__`), viewed without a copy as the PyTorch
    tensors Triton takes. It runs on PyTorch's current stream, the legacy default stream, which CuPy's
    null-stream events in run.py time as well."""
    ta, tb, th = (torch.as_tensor(v, device="cuda") for v in (a, b, h))
    grid = (triton.cdiv(n, tile),)

    def launch() -> None:
        _tile_linrec[grid](ta, tb, th, n, TILE=tile, num_warps=warps)

    return launch
