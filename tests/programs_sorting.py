"""Row-wise sorts of 2-D tiles (issue 19) and top-k (issue 22), each with a NumPy reference written without
coop_tiles (`programs.Case`); part of `programs_2d.CASES_2D`, so they run in the interpreter, compiled to
cubins (sm_90, sm_80) and on the GPU."""

from __future__ import annotations

import numpy as np
from programs import Case

import coop_tiles as ct
from coop_tiles import tile


# ----- programs --------------------------------------------------------------------------------------
@ct.jit
def row_sort(x, counts, keys, idx, m, n, BM: ct.constexpr, BN: ct.constexpr, DESC: ct.constexpr):
    """Each row sorted by the radix rules with its column index as payload, `counts[r]` valid columns in row r."""
    r = ct.program_id(0) * BM
    t = tile.load(x, (r, 0), (BM, BN), valid=(m - r, n), other=0)
    cols = tile.broadcast_to(tile.arange(BN)[None, :], (BM, BN))
    valid = tile.load(counts, r, BM, valid=m - r, other=0)
    sk, sv = tile.sort(t, cols, valid=valid, descending=DESC)
    tile.store(keys, (r, 0), sk, valid=(m - r, n))
    tile.store(idx, (r, 0), sv, valid=(m - r, n))


@ct.combine
def by_abs_then_tag(a_key, a_tag, b_key, b_tag):
    return (ct.abs(a_key) < ct.abs(b_key)) | ((ct.abs(a_key) == ct.abs(b_key)) & (a_tag > b_tag))


@ct.jit
def row_sort_compare(x, g, keys, tags, idx, m, n, BM: ct.constexpr, BN: ct.constexpr):
    """Each row's first n - 2 columns sorted by a comparison of (key, tag) pairs, with their column index."""
    r = ct.program_id(0) * BM
    t = tile.load(x, (r, 0), (BM, BN), valid=(m - r, n), other=0)
    tg = tile.load(g, (r, 0), (BM, BN), valid=(m - r, n), other=0)
    cols = tile.broadcast_to(tile.arange(BN)[None, :], (BM, BN))
    (sk, sg), sv = tile.sort((t, tg), cols, valid=n - 2, compare=by_abs_then_tag)
    tile.store(keys, (r, 0), sk, valid=(m - r, n))
    tile.store(tags, (r, 0), sg, valid=(m - r, n))
    tile.store(idx, (r, 0), sv, valid=(m - r, n))


@ct.jit
def topk_1d(x, keys, idx, n, T: ct.constexpr, K: ct.constexpr, LARGEST: ct.constexpr):
    """The K largest (smallest) of the first n elements, with their indices."""
    t = tile.load(x, 0, T, valid=n, other=0)
    v, i = tile.topk(t, K, tile.arange(T), largest=LARGEST, valid=n)
    tile.store(keys, 0, v)
    tile.store(idx, 0, i)


@ct.jit
def topk_rows(x, counts, keys, idx, ckeys, m, n, BM: ct.constexpr, BN: ct.constexpr, K: ct.constexpr):
    """The K largest of each row (`counts[r]` valid columns), with their column indices; the K smallest of each
    column (axis=0)."""
    r = ct.program_id(0) * BM
    t = tile.load(x, (r, 0), (BM, BN), valid=(m - r, n), other=0)
    cols = tile.broadcast_to(tile.arange(BN)[None, :], (BM, BN))
    v, i = tile.topk(t, K, cols, valid=tile.load(counts, r, BM, valid=m - r, other=0))
    tile.store(keys, (r, 0), v, valid=(m - r, K))
    tile.store(idx, (r, 0), i, valid=(m - r, K))
    tile.store(ckeys, (ct.program_id(0) * 2, 0), tile.topk(t, 2, largest=False, axis=0), valid=(2, n))


# ----- references --------------------------------------------------------------------------------------
def stable_order(keys: np.ndarray, descending: bool) -> np.ndarray:
    """The stable sorting permutation of a row of keys, NaNs last in both directions (numpy.sort's place)."""
    k = keys.astype(np.float64) if keys.dtype.kind == "f" else keys.astype(np.int64)
    if descending:
        k = -k  # (a NaN stays a NaN, last)
    return np.argsort(k, kind="stable")


def ref_row_sort(x, counts, keys, idx, m, n, BM, BN, DESC):
    for r in range(m):
        row = np.concatenate([x[r], np.zeros(BN - n, x.dtype)])  # the tile's row: padded with `other`
        c = int(np.clip(counts[r], 0, BN))
        order = stable_order(row[:c], DESC)
        keys[r] = np.concatenate([row[:c][order], row[c:]])[:n]
        idx[r] = np.concatenate([order, np.arange(c, BN)])[:n]
    return [keys, idx]  # (a sorted NaN is the canonical one: NaNs compare equal whatever their bits)


def ref_row_sort_compare(x, g, keys, tags, idx, m, n, BM, BN):
    c = max(n - 2, 0)
    for r in range(m):
        order = np.lexsort((-g[r, :c].astype(np.int64), np.abs(x[r, :c])))  # (stable: ties keep input order)
        keys[r] = np.concatenate([x[r, :c][order], x[r, c:]])
        tags[r] = np.concatenate([g[r, :c][order], g[r, c:]])
        idx[r] = np.concatenate([order, np.arange(c, n)])
    return [keys, tags, idx]


def topk_order(row: np.ndarray, count: int, largest: bool) -> np.ndarray:
    """The positions torch.topk's order gives a row's first `count` elements (NaNs the largest), stable (ties in
    input order), then the positions past `count` in order."""
    v = row[:count].astype(np.float64)
    nan = np.isnan(v)
    order = np.lexsort((-v, ~nan)) if largest else np.lexsort((v, nan))
    return np.concatenate([order, np.arange(count, len(row))])


def ref_topk_1d(x, keys, idx, n, T, K, LARGEST):
    row = np.concatenate([x[:n], np.zeros(T - n, x.dtype)])
    first = topk_order(row, n, LARGEST)[:K]
    return [row[first], first.astype(np.int32)]


def ref_topk_rows(x, counts, keys, idx, ckeys, m, n, BM, BN, K):
    for r in range(m):
        row = np.concatenate([x[r], np.zeros(BN - n, x.dtype)])
        first = topk_order(row, int(np.clip(counts[r], 0, BN)), True)[:K]
        keys[r], idx[r] = row[first], first
    for p in range(-(-m // BM)):
        block = np.zeros((BM, n), x.dtype)
        rows = x[p * BM : (p + 1) * BM]
        block[: len(rows)] = rows
        for c in range(n):
            ckeys[2 * p : 2 * p + 2, c] = block[:, c][topk_order(block[:, c], BM, False)[:2]]
    return [keys, idx, ckeys]


def make_sort_cases() -> list[Case]:
    rng = np.random.default_rng(22)
    cases = []
    # rows of 1 lane (thread-sequential), 16 and 32 lanes (logical warps), across warps (block-wide, in the rows
    # arrangement already, or exchanged into it: 100 columns over 128 lanes), padded
    for m, n, bm, bn, dt in (
        (300, 4, 256, 4, np.int32),
        (20, 13, 8, 16, np.float32),
        (40, 32, 16, 32, np.float16),
        (5, 100, 2, 128, np.uint8),
        (3, 700, 1, 1024, np.int32),
        (20, 13, 8, 16, np.uint8),
        (40, 32, 16, 32, np.int32),
        (5, 100, 2, 100, np.float32),
    ):
        desc = len(cases) % 2 == 1
        x = rng.integers(0 if dt == np.uint8 else -20, 20, (m, n)).astype(dt)
        if np.dtype(dt).kind == "f":
            x[rng.random((m, n)) < 0.05] = np.nan
        counts = rng.integers(-2, n + 3, m).astype(np.int32)
        counts[0] = n
        cases.append(
            Case(
                f"row_sort[{np.dtype(dt).name}-{m}x{n}-{bm}x{bn}-{'desc' if desc else 'asc'}]",
                row_sort,
                [x, counts, np.zeros_like(x), np.zeros((m, n), np.int32), m, n],
                {"BM": bm, "BN": bn, "DESC": desc},
                (-(-m // bm),),
                [2, 3],
                ref_row_sort,
            )
        )
    for m, n, bm, bn in ((9, 30, 4, 32), (4, 200, 2, 200)):
        x = rng.integers(-5, 6, (m, n)).astype(np.float32)
        g = rng.integers(0, 4, (m, n)).astype(np.int16)
        cases.append(
            Case(
                f"row_sort_compare[{m}x{n}-{bm}x{bn}]",
                row_sort_compare,
                [x, g, np.zeros_like(x), np.zeros_like(g), np.zeros((m, n), np.int32), m, n],
                {"BM": bm, "BN": bn},
                (-(-m // bm),),
                [2, 3, 4],
                ref_row_sort_compare,
            )
        )
    # top-k of every integer and float dtype the sort takes (NaNs and infinities among the floats)
    dtypes = (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
    dtypes += (np.float16, ct.bfloat16, np.float32, np.float64)
    for j, dt in enumerate(dtypes):
        x = rng.integers(0 if np.dtype(dt).kind == "u" else -30, 30, 300).astype(dt)
        if np.dtype(dt).kind == "f":
            x[rng.integers(0, 300, 12)] = np.nan
            x[rng.integers(0, 300, 3)] = np.inf
            x[rng.integers(0, 300, 3)] = -np.inf
        largest, k = j % 2 == 0, (1, 50, 256)[j % 3]
        cases.append(
            Case(
                f"topk_1d[{np.dtype(dt).name}-{'largest' if largest else 'smallest'}-k{k}]",
                topk_1d,
                [x, np.zeros(k, dt), np.zeros(k, np.int32), 290],
                {"T": 300, "K": k, "LARGEST": largest},
                (1,),
                [1, 2],
                ref_topk_1d,
                library="torch" if dt == ct.bfloat16 else "cupy",
            )
        )
    for m, n, bm, bn, k in ((20, 13, 8, 16, 4), (5, 100, 2, 128, 10)):
        x = rng.integers(-20, 20, (m, n)).astype(np.float32)
        x[rng.random((m, n)) < 0.05] = np.nan
        counts = rng.integers(-2, n + 3, m).astype(np.int32)
        grid = -(-m // bm)
        cases.append(
            Case(
                f"topk_rows[{m}x{n}-{bm}x{bn}-k{k}]",
                topk_rows,
                [
                    x,
                    counts,
                    np.zeros((m, k), np.float32),
                    np.zeros((m, k), np.int32),
                    np.zeros((2 * grid, n), np.float32),
                    m,
                    n,
                ],
                {"BM": bm, "BN": bn, "K": k},
                (grid,),
                [2, 3, 4],
                ref_topk_rows,
            )
        )
    return cases
