"""Selection programs (issue 22: `tile.select`, `tile.partition`, `tile.unique`, `tile.run_length_encode`,
the chained select) shared by the interpreter, compile-only and GPU tests, each with a sequential NumPy
reference written without coop_tiles (`programs.Case`), for every integer and float dtype."""

from __future__ import annotations

import numpy as np
from programs import ALL_DTYPES, HALVES, Case

import coop_tiles as ct
from coop_tiles import tile

SELECT_DTYPES = [np.dtype(d) for d in ALL_DTYPES] + list(HALVES)


# ----- programs --------------------------------------------------------------------------------------
@ct.jit
def select_ops(x, f, sel, where, part, counts, n, TILE: ct.constexpr):
    """A tuple select (values and their int64 indices) and a partition, of the valid part of each tile."""
    pid = ct.program_id(0)
    base = pid * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    flags = tile.load(f, base, TILE, valid=n - base, other=True)  # (past `valid`: never selected anyway)
    (s, i), c = tile.select((t, tile.arange(TILE, np.int64) + base), flags, valid=n - base)
    p, k = tile.partition(t, flags, valid=n - base)
    tile.store(sel, base, s, valid=c)
    tile.store(where, base, i, valid=c)
    tile.store(part, base, p, valid=n - base)
    counts[2 * pid] = c
    counts[2 * pid + 1] = k


@ct.jit
def run_ops(x, uniq, vals, lens, counts, n, TILE: ct.constexpr):
    """The distinct values of each tile's runs, and its run-length encoding."""
    pid = ct.program_id(0)
    base = pid * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    u, c = tile.unique(t, valid=n - base)
    v, k, r = tile.run_length_encode(t, valid=n - base)
    tile.store(uniq, base, u, valid=c)
    tile.store(vals, base, v, valid=r)
    tile.store(lens, base, k, valid=r)
    counts[2 * pid] = c
    counts[2 * pid + 1] = r


@ct.jit
def compact(x, f, out, total, n, TILE: ct.constexpr):
    """The whole array's flagged elements, densely, in one launch (a chained select)."""
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    s, c, offset = tile.select(t, tile.load(f, base, TILE, valid=n - base, other=False), valid=n - base, chained=True)
    tile.store(out, offset, s, valid=c)
    if ct.program_id(0) == ct.num_programs(0) - 1:
        total[0] = offset + c


@ct.jit
def chunked_compact(x, f, out, total, n, CHUNK: ct.constexpr):
    """One program compacts the whole array chunk by chunk, carrying the output offset (a select in a loop)."""
    offset = n - n
    for base in range(0, n, CHUNK):
        t = tile.load(x, base, CHUNK, valid=n - base, other=0)
        s, c = tile.select(t, tile.load(f, base, CHUNK, valid=n - base, other=False), valid=n - base)
        tile.store(out, offset, s, valid=c)
        offset += c
    total[0] = offset


# ----- references ------------------------------------------------------------------------------------
def _pieces(n: int, size: int):
    for start in range(0, n, size):
        yield start, min(start + size, n)


def ref_select_ops(x, f, sel, where, part, counts, n, TILE):
    for pid, (lo, hi) in enumerate(_pieces(n, TILE)):
        trues = [j for j in range(lo, hi) if f[j]]
        falses = [j for j in range(lo, hi) if not f[j]]
        sel[lo : lo + len(trues)] = x[trues]
        where[lo : lo + len(trues)] = trues
        part[lo:hi] = x[trues + falses]
        counts[2 * pid] = counts[2 * pid + 1] = len(trues)
    return [sel, where, part, counts]


def _runs(chunk: np.ndarray) -> list[tuple[int, int]]:
    """(first index, length) of each run of equal elements (as `!=` says: each NaN a run of its own)."""
    runs: list[list[int]] = []
    for j, value in enumerate(chunk):
        if j and not (value != chunk[j - 1]):
            runs[-1][1] += 1
        else:
            runs.append([j, 1])
    return [(a, k) for a, k in runs]


def ref_run_ops(x, uniq, vals, lens, counts, n, TILE):
    for pid, (lo, hi) in enumerate(_pieces(n, TILE)):
        runs = _runs(x[lo:hi].astype(np.float32) if x.dtype in HALVES else x[lo:hi])
        for j, (first, length) in enumerate(runs):
            uniq[lo + j] = vals[lo + j] = x[lo + first]
            lens[lo + j] = length
        counts[2 * pid] = counts[2 * pid + 1] = len(runs)
    return [uniq, vals, lens, counts]


def ref_compact(x, f, out, total, n, TILE=None, CHUNK=None):
    kept = [x[j] for j in range(n) if f[j]]
    out[: len(kept)] = kept
    total[0] = len(kept)
    return [out, total]


# ----- cases -----------------------------------------------------------------------------------------
def _data(dt: np.dtype, n: int, rng: np.random.Generator, runs: bool = False) -> np.ndarray:
    """Values exact in every dtype; with `runs`, in runs of a few equal elements (sorted)."""
    values = np.sort(rng.integers(0, n // 3, n)) if runs else rng.integers(0, 100, n)
    return values.astype(dt)


def select_cases(dt: np.dtype, n: int = 1000, tile_size: int = 300) -> list[Case]:
    rng = np.random.default_rng(22)
    grid = ct.cdiv(n, tile_size)
    x, flags = _data(dt, n, rng), rng.random(n) < 0.4
    library = "torch" if dt == ct.bfloat16 else "cupy"
    zeros = np.zeros(n, dt)
    name = np.dtype(dt).name
    return [
        Case(
            f"select_ops[{name}]",
            select_ops,
            [x, flags, zeros.copy(), np.zeros(n, np.int64), zeros.copy(), np.zeros(2 * grid, np.int32), n],
            {"TILE": tile_size},
            grid,
            [2, 3, 4, 5],
            ref_select_ops,
            library=library,
        ),
        Case(
            f"run_ops[{name}]",
            run_ops,
            [_data(dt, n, rng, runs=True), zeros.copy(), zeros.copy(), np.zeros(n, np.int32)]
            + [np.zeros(2 * grid, np.int32), n],
            {"TILE": tile_size},
            grid,
            [1, 2, 3, 4],
            ref_run_ops,
            library=library,
        ),
        Case(
            f"chunked_compact[{name}]",
            chunked_compact,
            [x, flags, zeros.copy(), np.zeros(1, np.int64), n],
            {"CHUNK": tile_size},
            1,
            [2, 3],
            ref_compact,
            library=library,
        ),
        Case(
            f"compact[{name}]",
            compact,
            [x, flags, zeros.copy(), np.zeros(1, np.int64), n],
            {"TILE": tile_size},
            grid,
            [2, 3],
            ref_compact,
            library=library,
        ),
    ]


CASES_SELECT = [c for dt in SELECT_DTYPES for c in select_cases(dt)]
#: the few compiled to cubins without a GPU (every program, tuples of several dtypes, 16-bit floats)
COMPILED = [
    c
    for c in CASES_SELECT
    if c.name in ("select_ops[int8]", "run_ops[float16]", "compact[float32]", "chunked_compact[uint64]")
]
