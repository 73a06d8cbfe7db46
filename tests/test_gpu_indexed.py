"""Gathers, scatters and index-tile atomics on a GPU, against NumPy, for every dtype each takes: what the
interpreter can't run (indices outside the array, which the GPU reads as `other`), and atomics under heavy
contention (every duplicate counts). The shared programs (tests/programs.py) run on the GPU in test_gpu.py."""

import numpy as np
import pytest
from programs import ATOMIC_ADD_DTYPES, ATOMIC_EXTREME_DTYPES, GATHER_DTYPES

import coop_tiles as ct
from coop_tiles import tile

pytestmark = pytest.mark.gpu


@ct.jit
def gather_unchecked(table, idx, out, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    i = tile.load(idx, base, TILE, valid=n - base, other=0)
    tile.store(out, base, tile.gather(table, i, other=3), valid=n - base)


@ct.jit
def count_at(idx, counts, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    tile.atomic_add(counts, tile.load(idx, base, TILE, valid=n - base, other=0), 1, valid=n - base)


@ct.jit
def extremes_at(idx, vals, maxs, mins, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    i = tile.load(idx, base, TILE, valid=n - base, other=0)
    v = tile.load(vals, base, TILE, valid=n - base, other=0)
    tile.atomic_max(maxs, i, v, valid=n - base)
    tile.atomic_min(mins, i, v, valid=n - base)


def _device(a: np.ndarray):
    """A device copy of `a`: CuPy, or PyTorch for bfloat16 (moved as its bits)."""
    if a.dtype == ct.bfloat16:
        torch = pytest.importorskip("torch")
        return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
    cp = pytest.importorskip("cupy")
    return cp.asarray(a)


def _host(d, dt) -> np.ndarray:
    if np.dtype(dt) == ct.bfloat16:
        import torch

        return d.view(torch.int16).cpu().numpy().view(ct.bfloat16)
    import cupy as cp

    return cp.asnumpy(d)


@pytest.mark.parametrize("dt", GATHER_DTYPES, ids=lambda d: np.dtype(d).name)
def test_gather_outside_the_array_reads_other(dt):
    rng = np.random.default_rng(1)
    m, n = 1000, 50_000
    table = rng.integers(0, 100, m).astype(np.float32).astype(dt)
    idx = rng.integers(-m, 2 * m, n).astype(np.int64)
    idx[::7] = np.iinfo(np.int64).min  # wraps past any extent as unsigned
    out = _device(np.zeros(n, dt))
    gather_unchecked[ct.cdiv(n, 2048)](_device(table), _device(idx), out, n, TILE=2048)
    inside = (idx >= 0) & (idx < m)
    expected = np.where(inside, table[np.where(inside, idx, 0)], np.asarray(3).astype(dt))
    np.testing.assert_array_equal(_host(out, dt).astype(np.float64), expected.astype(np.float64))


@pytest.mark.parametrize("dt", ATOMIC_ADD_DTYPES, ids=lambda d: np.dtype(d).name)
def test_atomic_add_counts_every_duplicate(dt):
    rng = np.random.default_rng(2)
    bins = 64
    n = 1 << (12 if np.dtype(dt) == ct.bfloat16 else 14 if np.dtype(dt) == np.float16 else 20)  # exact counts
    idx = rng.integers(-4, bins + 4, n).astype(np.int32)
    counts = _device(np.zeros(bins, dt))
    count_at[ct.cdiv(n, 4096)](_device(idx), counts, n, TILE=4096)
    kept = idx[(idx >= 0) & (idx < bins)]
    expected = np.bincount(kept, minlength=bins)
    np.testing.assert_array_equal(_host(counts, dt).astype(np.float64), expected.astype(np.float64))


@pytest.mark.parametrize("dt", ATOMIC_EXTREME_DTYPES, ids=lambda d: np.dtype(d).name)
def test_atomic_max_min_under_contention(dt):
    rng = np.random.default_rng(3)
    bins, n = 16, 1 << 20
    idx = rng.integers(0, bins, n).astype(np.int32)
    lo = 0 if np.dtype(dt).kind == "u" else -(10**6)
    vals = rng.integers(lo, 10**6, n).astype(dt)
    if np.dtype(dt).kind == "f":
        vals = vals + np.asarray(0.25, dt)  # no signed zeros
        vals[12345] = np.nan  # its bin becomes NaN in both
    start = np.full(bins, 7, dt)
    maxs, mins = _device(start), _device(start)
    extremes_at[ct.cdiv(n, 4096)](_device(idx), _device(vals), maxs, mins, n, TILE=4096)
    want_max, want_min = start.copy(), start.copy()
    with np.errstate(invalid="ignore"):
        np.maximum.at(want_max, idx, vals)
        np.minimum.at(want_min, idx, vals)
    np.testing.assert_array_equal(_host(maxs, dt), want_max)
    np.testing.assert_array_equal(_host(mins, dt), want_min)
