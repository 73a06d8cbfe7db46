"""2-D tile programs (issue 19) shared by the interpreter, compile-only and GPU tests, each with a NumPy
reference written without coop_tiles (`programs.Case`)."""

from __future__ import annotations

import numpy as np
from programs import Case
from programs_sorting import make_sort_cases

import coop_tiles as ct
from coop_tiles import tile


# ----- programs --------------------------------------------------------------------------------------
@ct.jit
def row_softmax(x, y, m, n, BM: ct.constexpr, BN: ct.constexpr):
    r = ct.program_id(0) * BM
    t = tile.load(x, (r, 0), (BM, BN), valid=(m - r, n), other=-np.inf).astype(np.float32)
    e = ct.exp(t - tile.max(t, axis=1, keepdims=True))
    s = e / tile.sum(e, axis=1)[:, None]
    tile.store(y, (r, 0), s, valid=(m - r, n))


@ct.jit
def layer_norm(x, w, bias, y, mean_out, rstd_out, m, n, eps, BM: ct.constexpr, BN: ct.constexpr):
    r = ct.program_id(0) * BM
    t = tile.load(x, (r, 0), (BM, BN), valid=(m - r, n), other=0).astype(np.float32)
    mean = tile.sum(t, axis=1, keepdims=True) / n
    cols = tile.arange(BN)[None, :] < n
    d = ct.where(cols, t - mean, 0.0)
    var = tile.sum(d * d, axis=1) / n
    rstd = 1.0 / ct.sqrt(var + eps)
    wv = tile.load(w, 0, BN, valid=n)
    bv = tile.load(bias, 0, BN, valid=n)
    out = d * rstd[:, None] * wv[None, :] + bv
    tile.store(y, (r, 0), out, valid=(m - r, n))
    tile.store(mean_out, r, tile.reshape(mean, BM), valid=m - r)
    tile.store(rstd_out, r, rstd, valid=m - r)


@ct.jit
def row_scans(x, inc, exc, mx, col, totals, m, n, BM: ct.constexpr, BN: ct.constexpr):
    r = ct.program_id(0) * BM
    t = tile.load(x, (r, 0), (BM, BN), valid=(m - r, n), other=0)
    seeds = tile.arange(BM).astype(x.dtype) + r
    s, total = tile.scan(t, axis=1, initial=seeds, return_total=True)
    tile.store(inc, (r, 0), s, valid=(m - r, n))
    tile.store(exc, (r, 0), tile.scan(t, exclusive=True), valid=(m - r, n))
    tile.store(mx, (r, 0), tile.scan(t, "max", axis=-1), valid=(m - r, n))
    tile.store(col, (r, 0), tile.scan(t, axis=0), valid=(m - r, n))
    tile.store(totals, r, total, valid=m - r)


@ct.jit
def reverse_row_scans(x, inc, exc, col, totals, m, n, BM: ct.constexpr, BN: ct.constexpr):
    """Suffix scans of each row (seeded per row, with per-row totals), exclusive ones, and of each column."""
    r = ct.program_id(0) * BM
    t = tile.load(x, (r, 0), (BM, BN), valid=(m - r, n), other=0)
    seeds = tile.arange(BM).astype(x.dtype) + r
    s, total = tile.scan(t, axis=1, reverse=True, initial=seeds, return_total=True)
    tile.store(inc, (r, 0), s, valid=(m - r, n))
    tile.store(exc, (r, 0), tile.scan(t, reverse=True, exclusive=True), valid=(m - r, n))
    tile.store(col, (r, 0), tile.scan(t, axis=0, reverse=True), valid=(m - r, n))
    tile.store(totals, r, total, valid=m - r)


@ct.combine
def linrec(a_l, b_l, a_r, b_r):
    return a_r * a_l, a_r * b_l + b_r


@ct.jit
def chunked_rows_linrec(a, b, h, last, n, BM: ct.constexpr, CHUNK: ct.constexpr):
    """h[i, t] = a[i, t] * h[i, t - 1] + b[i, t] along each row, over column chunks (per-row carries)."""
    r = ct.program_id(0) * BM
    carry = (tile.full(BM, 1.0, np.float32), tile.zeros(BM, np.float32))
    for c in range(0, n, CHUNK):
        ta = tile.load(a, (r, c), (BM, CHUNK), valid=(BM, n - c), other=1)
        tb = tile.load(b, (r, c), (BM, CHUNK), valid=(BM, n - c), other=0)
        (_, hs), carry = tile.scan((ta, tb), linrec, axis=1, initial=carry, return_total=True)
        tile.store(h, (r, c), hs, valid=(BM, n - c))
    tile.store(last, r, carry[1])


@ct.jit
def reverse_scan_options(x, exc, mx, col, coltot, m, n, BM: ct.constexpr, BN: ct.constexpr):
    """Reverse axis scans: exclusive with per-row seeds, max (padding holds -1000, first in scan order), and down
    the columns (axis=0) seeded per column, with per-column totals."""
    p = ct.program_id(0)
    r = p * BM
    t = tile.load(x, (r, 0), (BM, BN), valid=(m - r, n), other=0)
    seeds = tile.arange(BM).astype(x.dtype) * 2 - r
    tile.store(exc, (r, 0), tile.scan(t, axis=1, reverse=True, exclusive=True, initial=seeds), valid=(m - r, n))
    u = tile.load(x, (r, 0), (BM, BN), valid=(m - r, n), other=-1000)
    tile.store(mx, (r, 0), tile.scan(u, "max", axis=-1, reverse=True), valid=(m - r, n))
    cs, tot = tile.scan(t, axis=0, reverse=True, initial=tile.arange(BN).astype(x.dtype), return_total=True)
    tile.store(col, (r, 0), cs, valid=(m - r, n))
    tile.store(coltot, p * BN, tot, valid=n)


@ct.jit
def chunked_rows_reverse_linrec(a, b, h, first, n, BM: ct.constexpr, CHUNK: ct.constexpr):
    """h[i, t] = a[i, t] * h[i, t + 1] + b[i, t] along each row (h[i, n] = 0), over column chunks from the last to
    the first (per-row carries)."""
    r = ct.program_id(0) * BM
    carry = (tile.full(BM, 1.0, np.float32), tile.zeros(BM, np.float32))
    for c in range((n + CHUNK - 1) // CHUNK - 1, -1, -1):
        base = c * CHUNK
        ta = tile.load(a, (r, base), (BM, CHUNK), valid=(BM, n - base), other=1)
        tb = tile.load(b, (r, base), (BM, CHUNK), valid=(BM, n - base), other=0)
        (_, hs), carry = tile.scan((ta, tb), linrec, axis=1, reverse=True, initial=carry, return_total=True)
        tile.store(h, (r, base), hs, valid=(BM, n - base))
    tile.store(first, r, carry[1])


@ct.jit
def axis_reductions(x, s0, s1, mx1, mn0, am1, am0, flat, BM: ct.constexpr, BN: ct.constexpr):
    t = tile.load(x, (0, 0), (BM, BN))
    tile.store(s0, 0, tile.sum(t, axis=0))
    tile.store(s1, (0, 0), tile.sum(t, axis=1, keepdims=True))
    tile.store(mx1, 0, tile.max(t, axis=-1))
    tile.store(mn0, (0, 0), tile.min(t, 0, True))
    tile.store(am1, 0, tile.argmax(t, axis=1))
    tile.store(am0, 0, tile.argmin(t, axis=0))
    flat[0] = tile.argmax(t)
    flat[1] = tile.argmin(t)
    flat[2] = np.int32(tile.sum(t))


@ct.jit
def remaps(x, v, tr, fl0, fl1, rs, outer, bc, BM: ct.constexpr, BN: ct.constexpr):
    t = tile.load(x, (0, 0), (BM, BN))
    u = tile.load(v, 0, BN)
    tile.store(tr, (0, 0), t.T)
    tile.store(fl0, (0, 0), tile.flip(t, axis=0))
    tile.store(fl1, (0, 0), tile.flip(t))
    tile.store(rs, (0, 0), tile.reshape(t, (BN, BM)))
    tile.store(outer, (0, 0), u[:, None] * u[None, :])
    tile.store(bc, (0, 0), tile.broadcast_to(u, (BM, BN)) + tile.transpose(tile.flip(t, 1)).T)


@ct.jit
def masked(x, y, x2, y2, n, m2, n2, TILE: ct.constexpr, BM: ct.constexpr, BN: ct.constexpr):
    i = tile.arange(TILE)
    t = tile.load(x, 0, TILE, mask=(i % 3) != 0, other=-1, valid=n)
    tile.store(y, 0, t, mask=i % 2 == 0)
    even = (tile.arange(BN) % 2 == 0)[None, :]
    u = tile.load(x2, (1, 1), (BM, BN), valid=(m2 - 1, None), mask=even, other=7)
    tile.store(y2, (0, 0), u * 2, valid=(None, n2), mask=tile.arange(BM)[:, None] != 1)


@ct.jit
def strided_block(a, out, BM: ct.constexpr, BN: ct.constexpr):
    """A block of a transposed (strided) view, written to another strided view."""
    r = ct.program_id(0) * BM
    t = tile.load(a, (r, 0), (BM, BN), valid=(a.shape[0] - r, a.shape[1]))
    tile.store(out, (r, 0), t + 1, valid=(a.shape[0] - r, a.shape[1]))


@ct.jit
def vector_folds(x, out, TILE: ct.constexpr):
    """Axis folds of a 1-D tile: a (1,) tile with keepdims, a scalar without."""
    t = tile.load(x, 0, TILE)
    tile.store(out, 0, tile.max(t, axis=0, keepdims=True))
    out[1] = tile.sum(t, axis=-1)
    out[2] = tile.argmax(t, axis=0)


@ct.jit
def batched_blocks(u, out, BM: ct.constexpr, BN: ct.constexpr):
    """The (M, N) block of batch b of a 3-D array (a 2-D view), its column sums into a 2-D view of a 3-D array."""
    b = ct.program_id(0)
    t = tile.load(u[b], (0, 0), (BM, BN), valid=(u.shape[1], u.shape[2]))
    tile.store(out[b], (0, 0), tile.sum(t, axis=0, keepdims=True), valid=(1, u.shape[2]))


# ----- references ------------------------------------------------------------------------------------
def ref_row_softmax(x, y, m, n, BM, BN):
    z = x.astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    y[:] = (e / e.sum(axis=1, keepdims=True)).astype(y.dtype)
    return [y]


def ref_layer_norm(x, w, bias, y, mean_out, rstd_out, m, n, eps, BM, BN):
    z = x.astype(np.float64)
    mean = z.mean(axis=1)
    var = ((z - mean[:, None]) ** 2).mean(axis=1)
    rstd = 1 / np.sqrt(var + eps)
    y[:] = ((z - mean[:, None]) * rstd[:, None] * w + bias).astype(y.dtype)
    mean_out[:] = mean
    rstd_out[:] = rstd
    return [y, mean_out, rstd_out]


def ref_row_scans(x, inc, exc, mx, col, totals, m, n, BM, BN):
    for r0 in range(0, m, BM):
        block = x[r0 : r0 + BM]
        seeds = np.arange(block.shape[0]).astype(x.dtype) + r0
        for i, row in enumerate(block):
            acc, run, hi = seeds[i], x.dtype.type(0), None
            for j, v in enumerate(row):
                exc[r0 + i, j] = run
                run = run + v
                acc = acc + v
                inc[r0 + i, j] = acc
                hi = v if hi is None or v > hi else hi
                mx[r0 + i, j] = hi
            totals[r0 + i] = acc
        col[r0 : r0 + BM] = np.cumsum(block, axis=0)
    return [inc, exc, mx, col, totals]


def ref_reverse_row_scans(x, inc, exc, col, totals, m, n, BM, BN):
    """Sequential suffix sums from each row's last element (padding past n adds 0), seeded per row."""
    for r0 in range(0, m, BM):
        block = x[r0 : r0 + BM]
        for i, row in enumerate(block):
            acc, run = x.dtype.type(r0 + i), x.dtype.type(0)
            for j in range(len(row) - 1, -1, -1):
                exc[r0 + i, j] = run
                run = run + row[j]
                acc = acc + row[j]
                inc[r0 + i, j] = acc
            totals[r0 + i] = acc
        col[r0 : r0 + BM] = np.cumsum(block[::-1], axis=0)[::-1]
    return [inc, exc, col, totals]


def ref_chunked_rows_linrec(a, b, h, last, n, BM, CHUNK):
    for i in range(a.shape[0]):
        acc = np.float32(0)
        for t in range(n):
            acc = np.float32(a[i, t] * acc + b[i, t])
            h[i, t] = acc
        last[i] = acc
    return [h, last]


def ref_reverse_scan_options(x, exc, mx, col, coltot, m, n, BM, BN):
    """Each block of BM rows as the program's (BM, BN) tile (`other` past the array), scanned sequentially from its
    last element."""
    for p, r0 in enumerate(range(0, m, BM)):
        rows = min(BM, m - r0)
        t = np.zeros((BM, BN), x.dtype)
        t[:rows, :n] = x[r0 : r0 + rows]
        u = np.full((BM, BN), -1000, x.dtype)
        u[:rows, :n] = x[r0 : r0 + rows]
        for i in range(BM):
            run, hi = x.dtype.type(2 * i - r0), None
            for j in range(BN - 1, -1, -1):
                if i < rows and j < n:
                    exc[r0 + i, j] = run
                run = run + t[i, j]
                hi = u[i, j] if hi is None or u[i, j] > hi else hi
                if i < rows and j < n:
                    mx[r0 + i, j] = hi
        for j in range(n):
            acc = x.dtype.type(j)
            for i in range(BM - 1, -1, -1):
                acc = acc + t[i, j]
                if i < rows:
                    col[r0 + i, j] = acc
            coltot[p * BN + j] = acc
    return [exc, mx, col, coltot]


def ref_chunked_rows_reverse_linrec(a, b, h, first, n, BM, CHUNK):
    for i in range(a.shape[0]):
        acc = np.float32(0)
        for t in range(n - 1, -1, -1):
            acc = np.float32(a[i, t] * acc + b[i, t])
            h[i, t] = acc
        first[i] = acc
    return [h, first]


def ref_axis_reductions(x, s0, s1, mx1, mn0, am1, am0, flat, BM, BN):
    s0[:] = x.sum(axis=0)
    s1[:] = x.sum(axis=1, keepdims=True)
    mx1[:] = x.max(axis=1)
    mn0[:] = x.min(axis=0, keepdims=True)
    am1[:] = x.argmax(axis=1)
    am0[:] = x.argmin(axis=0)
    flat[:] = [x.argmax(), x.argmin(), int(x.sum())]
    return [s0, s1, mx1, mn0, am1, am0, flat]


def ref_remaps(x, v, tr, fl0, fl1, rs, outer, bc, BM, BN):
    tr[:] = x.T
    fl0[:] = x[::-1]
    fl1[:] = x[:, ::-1]
    rs[:] = x.reshape(BN, BM)
    outer[:] = np.outer(v, v)
    bc[:] = v + x[:, ::-1]
    return [tr, fl0, fl1, rs, outer, bc]


def ref_masked(x, y, x2, y2, n, m2, n2, TILE, BM, BN):
    i = np.arange(TILE)
    t = np.where((i % 3 != 0) & (i < n), x[:TILE], -1)
    y[:TILE][i % 2 == 0] = t[i % 2 == 0]
    u = np.full((BM, BN), 7, x2.dtype)
    for r in range(BM):
        for c in range(BN):
            if r < m2 - 1 and c % 2 == 0:
                u[r, c] = x2[1 + r, 1 + c]
    for r in range(BM):
        for c in range(BN):
            if c < n2 and r != 1:
                y2[r, c] = u[r, c] * 2
    return [y, y2]


def ref_vector_folds(x, out, TILE):
    out[:3] = [x[:TILE].max(), x[:TILE].sum(), x[:TILE].argmax()]
    return [out]


def ref_batched_blocks(u, out, BM, BN):
    out[:] = u.sum(axis=1, keepdims=True)
    return [out]


def ref_strided_block(a, out, BM, BN):
    out[:] = a + 1
    return [out]


# ----- cases -------------------------------------------------------------------------------------------
def make_cases() -> list[Case]:
    rng = np.random.default_rng(19)
    cases = []
    for dt in (np.float32, np.float64):
        for m, n, bm, bn in ((10, 7, 4, 8), (64, 64, 8, 64), (33, 300, 2, 512), (6, 3000, 1, 4096)):
            x = (rng.standard_normal((m, n)) * 3).astype(dt)
            cases.append(
                Case(
                    f"row_softmax[{np.dtype(dt).name}-{m}x{n}-{bm}x{bn}]",
                    row_softmax,
                    [x, np.zeros((m, n), np.float32), m, n],
                    {"BM": bm, "BN": bn},
                    (-(-m // bm),),
                    [1],
                    ref_row_softmax,
                    rtol=1e-5,
                    atol=1e-6,
                )
            )
    for dt in (np.float16, ct.bfloat16):  # 16-bit rows, softmax in float32 (PyTorch tensors on the GPU)
        x = rng.standard_normal((6, 1000)).astype(dt)
        cases.append(
            Case(
                f"row_softmax[{np.dtype(dt).name}-6x1000-2x1024]",
                row_softmax,
                [x, np.zeros((6, 1000), np.float32), 6, 1000],
                {"BM": 2, "BN": 1024},
                (3,),
                [1],
                ref_row_softmax,
                rtol=1e-5,
                atol=1e-6,
                library="torch",
            )
        )
    for m, n, bm, bn in ((12, 50, 4, 64), (16, 128, 16, 128), (9, 1000, 2, 1024)):
        x = rng.standard_normal((m, n)).astype(np.float32)
        w, bias = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        cases.append(
            Case(
                f"layer_norm[{m}x{n}-{bm}x{bn}]",
                layer_norm,
                [x, w, bias, np.zeros_like(x), np.zeros(m, np.float32), np.zeros(m, np.float32), m, n, 1e-5],
                {"BM": bm, "BN": bn},
                (-(-m // bm),),
                [3, 4, 5],
                ref_layer_norm,
                rtol=1e-4,
                atol=1e-4,
            )
        )
    for dt in (np.int32, np.float64):
        for m, n, bm, bn in ((9, 13, 4, 16), (64, 64, 64, 64), (32, 32, 8, 32)):
            x = rng.integers(-9, 10, (m, n)).astype(dt)
            z = np.zeros((m, n), dt)
            cases.append(
                Case(
                    f"row_scans[{np.dtype(dt).name}-{m}x{n}-{bm}x{bn}]",
                    row_scans,
                    [x, z, z.copy(), z.copy(), z.copy(), np.zeros(m, dt), m, n],
                    {"BM": bm, "BN": bn},
                    (-(-m // bm),),
                    [1, 2, 3, 4, 5],
                    ref_row_scans,
                )
            )
    for dt in (np.int32, np.float32):
        for m, n, bm, bn in ((9, 13, 4, 16), (64, 64, 64, 64), (40, 32, 8, 32)):
            x = rng.integers(-9, 10, (m, n)).astype(dt)
            z = np.zeros((m, n), dt)
            cases.append(
                Case(
                    f"reverse_row_scans[{np.dtype(dt).name}-{m}x{n}-{bm}x{bn}]",
                    reverse_row_scans,
                    [x, z, z.copy(), z.copy(), np.zeros(m, dt), m, n],
                    {"BM": bm, "BN": bn},
                    (-(-m // bm),),
                    [1, 2, 3, 4],
                    ref_reverse_row_scans,
                )
            )
    for m, n, bm, chunk in ((8, 100, 4, 32), (32, 64, 16, 64)):
        a = rng.uniform(0.5, 1.0, (m, n)).astype(np.float32)
        b = rng.standard_normal((m, n)).astype(np.float32)
        cases.append(
            Case(
                f"chunked_rows_linrec[{m}x{n}-{bm}x{chunk}]",
                chunked_rows_linrec,
                [a, b, np.zeros_like(a), np.zeros(m, np.float32), n],
                {"BM": bm, "CHUNK": chunk},
                (m // bm,),
                [2, 3],
                ref_chunked_rows_linrec,
                rtol=1e-4,
                atol=1e-4,
            )
        )
    # reverse axis scans at 1, 2, 16, 32 lanes a row and rows across warps (128 and 256 lanes), padded rows and
    # columns: the rows lowering from each row's last column
    for dt in (np.int32, np.float32):
        for m, n, bm, bn in (
            (300, 3, 256, 3),  # 1 lane x 3 items
            (200, 4, 128, 4),  # 2 lanes x 2
            (40, 13, 16, 16),  # 16 lanes x 1, 3 padded columns, padded rows
            (20, 100, 8, 100),  # 32 lanes x 4, 28 padded columns
            (5, 1000, 2, 1000),  # 128 lanes x 8 across 4 warps
            (2, 601, 1, 601),  # 256 lanes x 3: a lane's run partly padding, a warp of padding
        ):
            x = rng.integers(-9, 10, (m, n)).astype(dt)
            z = np.zeros((m, n), dt)
            grid = -(-m // bm)
            cases.append(
                Case(
                    f"reverse_scan_options[{np.dtype(dt).name}-{m}x{n}-{bm}x{bn}]",
                    reverse_scan_options,
                    [x, z, z.copy(), z.copy(), np.zeros(grid * bn, dt), m, n],
                    {"BM": bm, "BN": bn},
                    (grid,),
                    [1, 2, 3, 4],
                    ref_reverse_scan_options,
                )
            )
    for m, n, bm, chunk in ((8, 100, 4, 32), (32, 64, 16, 64), (4, 300, 2, 256)):
        a = rng.uniform(0.5, 1.0, (m, n)).astype(np.float32)
        b = rng.standard_normal((m, n)).astype(np.float32)
        cases.append(
            Case(
                f"chunked_rows_reverse_linrec[{m}x{n}-{bm}x{chunk}]",
                chunked_rows_reverse_linrec,
                [a, b, np.zeros_like(a), np.zeros(m, np.float32), n],
                {"BM": bm, "CHUNK": chunk},
                (m // bm,),
                [2, 3],
                ref_chunked_rows_reverse_linrec,
                rtol=1e-4,
                atol=1e-4,
            )
        )
    for bm, bn in ((4, 8), (16, 64), (5, 12)):
        x = rng.integers(-50, 50, (bm, bn)).astype(np.float32)
        x[0, 1] = x[0, 3] = x.max() + 1  # ties: the first one wins
        f = np.float32
        outs = [np.zeros(bn, f), np.zeros((bm, 1), f), np.zeros(bm, f), np.zeros((1, bn), f)]
        outs += [np.zeros(bm, np.int32), np.zeros(bn, np.int32), np.zeros(3, np.int32)]
        cases.append(
            Case(
                f"axis_reductions[{bm}x{bn}]",
                axis_reductions,
                [x, *outs],
                {"BM": bm, "BN": bn},
                (1,),
                list(range(1, 8)),
                ref_axis_reductions,
            )
        )
    for bm, bn in ((4, 8), (32, 32), (6, 10)):
        x = rng.standard_normal((bm, bn)).astype(np.float32)
        v = rng.standard_normal(bn).astype(np.float32)
        sq = np.zeros((bn, bn), np.float32)
        outs = [np.zeros((bn, bm), np.float32), *(np.zeros((bm, bn), np.float32) for _ in range(2))]
        outs += [np.zeros((bn, bm), np.float32), sq, np.zeros((bm, bn), np.float32)]
        cases.append(
            Case(
                f"remaps[{bm}x{bn}]",
                remaps,
                [x, v, *outs],
                {"BM": bn, "BN": bn} if bm == bn else {"BM": bm, "BN": bn},
                (1,),
                list(range(2, 8)),
                ref_remaps,
            )
        )
    x = np.arange(100, dtype=np.int32)
    x2 = np.arange(9 * 20, dtype=np.int32).reshape(9, 20)
    cases.append(
        Case(
            "masked",
            masked,
            [x, np.full(64, -5, np.int32), x2, np.full((4, 16), -5, np.int32), 50, 4, 13],
            {"TILE": 64, "BM": 4, "BN": 16},
            (1,),
            [1, 3],
            ref_masked,
        )
    )
    v = rng.integers(-99, 99, 300).astype(np.int32)
    cases.append(
        Case("vector_folds", vector_folds, [v, np.zeros(3, np.int32)], {"TILE": 300}, (1,), [1], ref_vector_folds)
    )
    u = rng.integers(-9, 9, (3, 5, 20)).astype(np.int64)
    cases.append(
        Case(
            "batched_blocks",
            batched_blocks,
            [u, np.zeros((3, 1, 20), np.int64)],
            {"BM": 8, "BN": 32},
            (3,),
            [1],
            ref_batched_blocks,
        )
    )
    base = rng.standard_normal((40, 24)).astype(np.float32)
    cases.append(
        Case(
            "strided_block[transposed]",
            strided_block,
            [base, np.zeros((40, 24), np.float32)],
            {"BM": 8, "BN": 64},
            (6,),
            [1],
            ref_strided_block,  # (out.T = a.T + 1 on the views is out = a + 1 on the arrays)
            prepare=lambda args: [args[0].T, args[1].T],
        )
    )
    return cases


CASES_2D = make_cases() + make_sort_cases()
