"""Triton baselines of issue 19's row kernels, written as Triton's tutorials write them: fused softmax (tutorial 02,
one row per program), layer-norm forward (tutorial 05) and row scans over a block of rows (`tl.cumsum(axis=1)`,
`tl.associative_scan(..., reverse=True)`). Kept apart, as benchmarks/_baselines.py is, so that a machine without
Triton or PyTorch still runs every other section: the sections import this module inside their measurements.

No `from __future__ import annotations` here: Triton reads the `tl.constexpr` annotations at run time.
"""

from collections.abc import Callable
from typing import Any

import triton
import triton.language as tl

# ----- softmax: Triton's tutorial 02 ------------------------------------------------------------------------------


@triton.jit
def _softmax_rows(y, x, x_row_stride, y_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    # one program per row, the whole row in one block of BLOCK_SIZE (the next power of two of n_cols)
    r = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    inside = cols < n_cols
    row = tl.load(x + r * x_row_stride + cols, mask=inside, other=-float("inf")).to(tl.float32)
    shifted = row - tl.max(row, axis=0)
    numerator = tl.exp(shifted)
    out = numerator / tl.sum(numerator, axis=0)
    tl.store(y + r * y_row_stride + cols, out.to(y.dtype.element_ty), mask=inside)


def softmax_warps(block_size: int) -> int:
    """The tutorial's heuristic: 4 warps, 8 from 2048 columns, 16 from 4096."""
    return 16 if block_size >= 4096 else 8 if block_size >= 2048 else 4


def triton_softmax(x: Any, y: Any, *, warps: int | None = None) -> Callable[[], None]:
    """A launch of the row softmax of the 2-D tensor x (unit column stride) into y: one program per row,
    BLOCK_SIZE = next_power_of_2(n_cols), `warps` warps (None: the tutorial's heuristic)."""
    rows, cols = x.shape
    block = triton.next_power_of_2(cols)
    warps = warps or softmax_warps(block)

    def launch() -> None:
        _softmax_rows[(rows,)](y, x, x.stride(0), y.stride(0), cols, BLOCK_SIZE=block, num_warps=warps)

    return launch


# ----- layer-norm forward: Triton's tutorial 05 -------------------------------------------------------------------


@triton.jit
def _layer_norm_rows(x, y, w, b, mean, rstd, row_stride, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    # one program per row, in three passes of BLOCK_SIZE columns (the tutorial's loop: rows longer than a block
    # are read in blocks): the mean, the variance of the centred row, then the normalised, scaled and shifted row
    r = tl.program_id(0)
    x += r * row_stride
    y += r * row_stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    mu = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        v = tl.load(x + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        v = tl.where(cols < n_cols, v - mu, 0.0)
        acc += v * v
    rs = 1 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    tl.store(mean + r, mu)
    tl.store(rstd + r, rs)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        inside = cols < n_cols
        wt = tl.load(w + cols, mask=inside).to(tl.float32)
        bt = tl.load(b + cols, mask=inside).to(tl.float32)
        v = tl.load(x + cols, mask=inside, other=0.0).to(tl.float32)
        tl.store(y + cols, ((v - mu) * rs * wt + bt).to(y.dtype.element_ty), mask=inside)


def layer_norm_block(cols: int, itemsize: int) -> tuple[int, int]:
    """The tutorial's (BLOCK_SIZE, num_warps): at most 64 KB of a row per block, warps = BLOCK_SIZE / 256 in [1, 8]."""
    block = min(65536 // itemsize, triton.next_power_of_2(cols))
    return block, min(max(block // 256, 1), 8)


def triton_layer_norm(
    x: Any, y: Any, w: Any, b: Any, mean: Any, rstd: Any, eps: float, *, warps: int | None = None
) -> Callable[[], None]:
    """A launch of the layer-norm forward of the 2-D tensor x (contiguous rows) into y, writing each row's mean and
    1/std (float32); `warps` None: the tutorial's heuristic."""
    rows, cols = x.shape
    block, default_warps = layer_norm_block(cols, x.element_size())
    warps = warps or default_warps

    def launch() -> None:
        _layer_norm_rows[(rows,)](x, y, w, b, mean, rstd, x.stride(0), cols, eps, BLOCK_SIZE=block, num_warps=warps)

    return launch


# ----- scans along axis 1 of a block of rows -----------------------------------------------------------------------


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def _rows_scan(x, y, n_rows, N: tl.constexpr, BM: tl.constexpr, REVERSE: tl.constexpr):
    # BM rows of N (a power of two) contiguous columns per program, scanned along the rows
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    offsets = rows[:, None] * N + tl.arange(0, N)[None, :]
    inside = rows[:, None] < n_rows
    t = tl.load(x + offsets, mask=inside, other=0.0)
    if REVERSE:
        s = tl.associative_scan(t, 1, _add, reverse=True)
    else:
        s = tl.cumsum(t, axis=1)
    tl.store(y + offsets, s, mask=inside)


def triton_rows_scan(x: Any, y: Any, *, rows_per_program: int, warps: int, reverse: bool) -> Callable[[], None]:
    """A launch of the inclusive scan along axis 1 of the contiguous 2-D tensor x (its row length a power of two)
    into y: `tl.cumsum(t, axis=1)`, or with `reverse` `tl.associative_scan(t, 1, add, reverse=True)` (the suffix
    sums), over (rows_per_program, N) blocks."""
    rows, cols = x.shape
    assert x.is_contiguous() and y.is_contiguous() and cols == triton.next_power_of_2(cols)
    grid = (triton.cdiv(rows, rows_per_program),)

    def launch() -> None:
        _rows_scan[grid](x, y, rows, N=cols, BM=rows_per_program, REVERSE=reverse, num_warps=warps)

    return launch
