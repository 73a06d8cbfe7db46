"""Whole-array stream compaction in one launch, on the chained select (`tile.select(..., chained=True)`):
`compact(x, flags)` as `torch.masked_select`, `nonzero(x)` as `torch.nonzero` of a 1-D array."""

from __future__ import annotations

from typing import Any

import numpy as np

import coop_tiles as ct
from coop_tiles import tile

from ._arrays import empty_like

#: elements per program: 32 per thread at the chained scan's 128 threads (`ops/chained.py::MIN_THREADS`)
TILE = 4096


@ct.jit
def compact_kernel(x, flags, out, total, n, TILE: ct.constexpr):
    """`out[:total] = x[flags]`: each program's flagged elements go after those of the programs before it."""
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    f = tile.load(flags, base, TILE, valid=n - base, other=False)
    s, count, offset = tile.select(t, f, valid=n - base, chained=True)
    tile.store(out, offset, s, valid=count)
    if ct.program_id(0) == ct.num_programs(0) - 1:
        total[0] = offset + count


@ct.jit
def nonzero_kernel(x, out, total, n, TILE: ct.constexpr):
    """`out[:total]` = the indices of the nonzero elements of `x`, in order."""
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    s, count, offset = tile.select(tile.arange(TILE, np.int64) + base, t != 0, valid=n - base, chained=True)
    tile.store(out, offset, s, valid=count)
    if ct.program_id(0) == ct.num_programs(0) - 1:
        total[0] = offset + count


_INTERPRETING = {k: ct.jit(k.fn, interpret=True) for k in (compact_kernel, nonzero_kernel)}


def _interpreting(kernel: ct.JITFunction, x: Any) -> ct.JITFunction:
    """`kernel`, or its interpreting copy for NumPy arrays."""
    return _INTERPRETING[kernel] if isinstance(x, np.ndarray) else kernel


def tile_for(dtype: Any) -> int:
    """Elements per program: `TILE`, half as many for 8-byte elements (the shared memory they take)."""
    return TILE // 2 if dtype.itemsize == 8 else TILE


def compact(x: Any, flags: Any) -> Any:
    """The elements of the 1-D array `x` where the bool array `flags` is true, in order (`torch.masked_select`),
    as a new 1-D array of the caller's library (CuPy, PyTorch; NumPy runs the interpreter). One launch; reading the
    count back waits for it, as `torch.masked_select` does."""
    n = len(x)
    out, total = empty_like(x, (n,), x.dtype), empty_like(x, (1,), "int64")
    if n == 0:
        return out
    size = tile_for(x.dtype)
    _interpreting(compact_kernel, x)[ct.cdiv(n, size)](x, flags, out, total, n, TILE=size)
    return out[: int(total[0])]


def nonzero(x: Any) -> Any:
    """The int64 indices of the nonzero elements of the 1-D array `x`, as an `(count, 1)` array (what
    `torch.nonzero` gives for a 1-D tensor), of the caller's library. One launch."""
    n = len(x)
    out, total = empty_like(x, (n,), "int64"), empty_like(x, (1,), "int64")
    if n > 0:
        _interpreting(nonzero_kernel, x)[ct.cdiv(n, TILE // 2)](x, out, total, n, TILE=TILE // 2)
    count = int(total[0]) if n > 0 else 0
    return out[:count].reshape(count, 1)
