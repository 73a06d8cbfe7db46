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


@triton.jit
def _histogram(x, out, n, BINS: tl.constexpr, HBINS: tl.constexpr, BLOCK: tl.constexpr):
    # persistent: each program strides over the array, keeps its histogram in registers, and adds it to `out`
    # with one atomic per bin at the end. HBINS is BINS rounded up to a power of two (tl.histogram's bins);
    # values outside [0, BINS) are masked out, since tl.histogram does not define them.
    h = tl.zeros((HBINS,), dtype=tl.int32)
    for base in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offsets = base + tl.arange(0, BLOCK)
        inside = offsets < n
        v = tl.load(x + offsets, mask=inside, other=0).to(tl.int32)
        h += tl.histogram(v, HBINS, mask=inside & (v >= 0) & (v < BINS))
    bins = tl.arange(0, HBINS)
    tl.atomic_add(out + bins, h, mask=bins < BINS)


def triton_histogram(x: Any, out: Any, n: int, bins: int, *, block: int, programs: int) -> Callable[[], None]:
    """A launch of a persistent `tl.histogram` kernel on `programs` programs of `block` elements per step, that
    adds the counts of the values of x (an integer device array) in [0, bins) to the int32 array `out` (which
    must be zeroed before each launch). Zero-copy PyTorch views of CuPy arrays, on PyTorch's current stream."""
    tx, tout = torch.as_tensor(x, device="cuda"), torch.as_tensor(out, device="cuda")
    hbins = max(32, triton.next_power_of_2(bins))

    def launch() -> None:
        _histogram[(programs,)](tx, tout, n, BINS=bins, HBINS=hbins, BLOCK=block, num_warps=4)

    return launch


@triton.jit
def _segment_sort_keys(keys, keys_out, SEGMENT: tl.constexpr):
    offsets = tl.program_id(0) * SEGMENT + tl.arange(0, SEGMENT)
    tl.store(keys_out + offsets, tl.sort(tl.load(keys + offsets)))


@triton.jit
def _segment_sort_pairs(keys, keys_out, vals, vals_out, SEGMENT: tl.constexpr):
    # tl.sort sorts one tensor: sort (key << 32 | position) as int64, which orders ties by position (a stable
    # sort), then unpack the key and gather the payload from the positions
    base = tl.program_id(0) * SEGMENT
    position = tl.arange(0, SEGMENT)
    packed = (tl.load(keys + base + position).to(tl.int64) << 32) | position.to(tl.int64)
    packed = tl.sort(packed)
    tl.store(keys_out + base + position, (packed >> 32).to(tl.int32))
    source = (packed & (SEGMENT - 1)).to(tl.int32)
    tl.store(vals_out + base + position, tl.load(vals + base + source))


def triton_segment_sort(
    keys: Any, keys_out: Any, vals: Any = None, vals_out: Any = None, *, segment: int, warps: int
) -> Callable[[], None]:
    """A launch that sorts each segment of `segment` (a power of two) int32 keys with `tl.sort`, one program per
    segment; with `vals`, the int32 payload goes along (a packed 64-bit key, stable). Zero-copy PyTorch views of
    CuPy arrays, on PyTorch's current stream."""
    tk, tko = torch.as_tensor(keys, device="cuda"), torch.as_tensor(keys_out, device="cuda")
    grid = (tk.numel() // segment,)
    if vals is None:

        def launch() -> None:
            _segment_sort_keys[grid](tk, tko, SEGMENT=segment, num_warps=warps)

        return launch
    tv, tvo = torch.as_tensor(vals, device="cuda"), torch.as_tensor(vals_out, device="cuda")

    def launch_pairs() -> None:
        _segment_sort_pairs[grid](tk, tko, tv, tvo, SEGMENT=segment, num_warps=warps)

    return launch_pairs
