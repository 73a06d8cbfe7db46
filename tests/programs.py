"""Tile programs shared by the interpreter, compile-only and GPU tests (the same program, three modes).

Each `Case` makes its inputs, launches one program, and checks the outputs against a
sequential NumPy reference written independently of coop_tiles.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.demo import scaled_cumsum  # the README's program

HALVES = (np.dtype(np.float16), np.dtype(ct.bfloat16))
INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOAT_DTYPES = [np.float32, np.float64]
ALL_DTYPES = INT_DTYPES + FLOAT_DTYPES


@dataclass
class Case:
    """One launch of a program: inputs, grid, which arguments are outputs, and the reference."""

    name: str
    kernel: ct.JITFunction
    args: list[Any]
    constexprs: dict[str, Any]
    grid: Any
    outputs: list[int]
    reference: Callable[..., list[np.ndarray]]
    rtol: float = 0.0
    atol: float = 0.0
    extra: dict = field(default_factory=dict)
    #: turns the launch's arrays (NumPy or device) into the arguments passed (views, transposes)
    prepare: Callable[[list[Any]], list[Any]] | None = None
    #: the device array library the GPU test uses ("torch" for bfloat16)
    library: str = "cupy"

    def launch_args(self, args: list[Any]) -> list[Any]:
        return self.prepare(list(args)) if self.prepare is not None else list(args)

    def expected(self) -> list[np.ndarray]:
        return self.reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in self.args], **self.constexprs)

    def check(self, got: list[np.ndarray]) -> None:
        for g, e, i in zip(got, self.expected(), self.outputs):
            assert g.dtype == e.dtype, f"{self.name}: output {i} dtype {g.dtype} != {e.dtype}"
            if g.dtype in HALVES:
                g, e = g.astype(np.float32), e.astype(np.float32)
            if self.rtol or self.atol:
                np.testing.assert_allclose(g, e, rtol=self.rtol, atol=self.atol, err_msg=f"{self.name} output {i}")
            else:
                np.testing.assert_array_equal(g, e, err_msg=f"{self.name} output {i}")


def _tiles(x: np.ndarray, size: int):
    for start in range(0, len(x), size):
        yield start, x[start : start + size]


# ----- programs --------------------------------------------------------------------------------------
@ct.jit
def vector_add(x, y, out, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    a = tile.load(x, base, TILE, valid=n - base)
    b = tile.load(y, base, TILE, valid=n - base)
    tile.store(out, base, a + b, valid=n - base)


@ct.jit
def tile_scan(x, y, n, TILE: ct.constexpr, OP: ct.constexpr, EXCLUSIVE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=1)
    tile.store(y, base, tile.scan(t, op=OP, exclusive=EXCLUSIVE), valid=n - base)


@ct.jit
def carried_cumsum(x, y, n, TILE: ct.constexpr, EXCLUSIVE: ct.constexpr):
    """One program scans the whole array in chunks, carrying the running total."""
    carry = x[0] * 0 + 5
    for base in range(0, n, TILE):
        t = tile.load(x, base, TILE, valid=n - base, other=0)
        s, carry = tile.scan(t, op="add", exclusive=EXCLUSIVE, initial=carry, return_total=True)
        tile.store(y, base, s, valid=n - base)
    y[n] = carry


@ct.jit
def row_max_scan(x, y, n_cols, TILE: ct.constexpr):
    """Per row (one program each): running max over the row, in chunks, with a carry."""
    row = ct.program_id(0)
    carry = -np.inf
    c = 0
    while c < n_cols:
        t = tile.load(x, row * n_cols + c, TILE, valid=n_cols - c, other=0)
        s, carry = tile.scan(t, op="max", initial=carry, return_total=True)
        tile.store(y, row * n_cols + c, s, valid=n_cols - c)
        c += TILE


@ct.jit
def reductions(x, out, n, TILE: ct.constexpr):
    pid = ct.program_id(0)
    base = pid * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    out[pid * 4 + 0] = tile.sum(t)
    out[pid * 4 + 1] = tile.max(tile.load(x, base, TILE, valid=n - base, other=x[base]))
    out[pid * 4 + 2] = tile.min(tile.load(x, base, TILE, valid=n - base, other=x[base]))
    out[pid * 4 + 3] = tile.reduce(t, op=OPS[2]) if t.dtype.kind == "f" else tile.reduce(t, op="xor")


@ct.jit
def row_norms(x, y, n_cols, CHUNK: ct.constexpr):
    """Per row, reductions every thread uses, in a loop (all-reduces): the sum of squares and the largest
    magnitude over the row's chunks; then the row over their sum."""
    start = ct.program_id(0) * n_cols
    sumsq = 0.0
    big = 0.0
    for base in range(0, n_cols, CHUNK):
        t = tile.load(x, start + base, CHUNK, valid=n_cols - base, other=0)
        sumsq = sumsq + tile.sum(t * t)
        m = tile.max(ct.abs(t))
        if m > big:
            big = m
    for base in range(0, n_cols, CHUNK):
        t = tile.load(x, start + base, CHUNK, valid=n_cols - base, other=0)
        tile.store(y, start + base, t / (sumsq + big), valid=n_cols - base)


OPS = ("add", "mul", "max", "min")


@ct.jit
def elementwise_math(x, out, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    v = n - base
    t = tile.load(x, base, TILE, valid=v, other=1)
    k = 0
    tile.store(out, base + k * n, ct.exp(t) - ct.exp2(t * 0.5), valid=v)
    k += 1
    tile.store(out, base + k * n, ct.log(t) + ct.log1p(t), valid=v)
    k += 1
    tile.store(out, base + k * n, ct.sqrt(t) * ct.sin(t) + ct.cos(t), valid=v)
    k += 1
    tile.store(out, base + k * n, ct.sigmoid(t - 2) + ct.softplus(t * 10 - 5), valid=v)
    k += 1
    tile.store(out, base + k * n, ct.where(t > 1.5, t, -t) + ct.abs(2 - t), valid=v)
    k += 1
    tile.store(out, base + k * n, ct.maximum(t, 1.25) - ct.minimum(t, 0.75), valid=v)
    k += 1
    tile.store(out, base + k * n, (t // 0.3) + (t % 0.3) + t**2 / 3, valid=v)
    k += 1


@ct.jit
def triton_math(x, out, n, TILE: ct.constexpr):
    """The math functions Triton users reach for, and a compile-time check of the tile size."""
    ct.static_assert(TILE % 32 == 0, "TILE must be a multiple of 32")
    base = ct.program_id(0) * TILE
    v = n - base
    t = tile.load(x, base, TILE, valid=v, other=1)
    tile.store(out, base, ct.tanh(t - 1), valid=v)
    tile.store(out, base + n, ct.erf(t - 1), valid=v)
    tile.store(out, base + 2 * n, ct.rsqrt(t), valid=v)
    tile.store(out, base + 3 * n, ct.log2(t), valid=v)


@ct.jit
def integer_ops(x, out, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    v = n - base
    t = tile.load(x, base, TILE, valid=v, other=0)
    idx = tile.arange(TILE) + base
    tile.store(out, base, (t & 7) | (idx << 2), valid=v)
    tile.store(out, base + n, (t ^ idx) - (t >> 1) + t // 3 - t % 5, valid=v)
    tile.store(out, base + 2 * n, ct.where((t > 3) & (idx % 2 == 0), t * -1, t + 1), valid=v)
    tile.store(out, base + 3 * n, tile.full(TILE, 7, np.int32) + tile.zeros(TILE, np.int32), valid=v)


@ct.jit
def integer_division(x, d, out, n, s, TILE: ct.constexpr):
    """Python's floor division and remainder of integer tiles by a tile and by a scalar, signs and zero divisors
    included; in a loop, the scalar's divisions are of loop invariants."""
    base = ct.program_id(0) * TILE
    v = n - base
    t = tile.load(x, base, TILE, valid=v, other=0)
    q = tile.load(d, base, TILE, valid=v, other=1)
    tile.store(out, base, t // q, valid=v)
    tile.store(out, base + n, t % q, valid=v)
    acc = tile.zeros(TILE, t.dtype)
    for k in range(3):
        acc = acc + t // s + t % s + (n + k) // s
    tile.store(out, base + 2 * n, acc, valid=v)


@ct.jit
def cast_and_compare(x, out, n, scale, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    f = t.astype(np.float32) * scale
    flag = (f >= 2.5) | (f < -1)
    tile.store(out, base, ct.where(flag, f, f * 0).astype(np.int16).astype(np.float32), valid=n - base)


def helper_clamp(t, lo, hi):
    return ct.minimum(ct.maximum(t, lo), hi)


@ct.jit
def uses_helper(x, out, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base)
    tile.store(out, base, helper_clamp(t, -0.5, 0.5), valid=n - base)


@ct.jit
def control_flow(x, out, n, mode, TILE: ct.constexpr):
    """Scalar if/elif/else, a for loop carrying a tile, and a while loop."""
    pid = ct.program_id(0)
    base = pid * TILE
    acc = tile.zeros(TILE, np.float32)
    for k in range(3):
        acc = acc + tile.load(x, base, TILE, valid=n - base, other=0) * (k + 1)
    if mode == 0:
        acc = acc * 2
    elif mode == 1:
        acc = acc - 1
    else:
        acc = -acc
    steps = 0
    total = tile.sum(acc)
    while total > 1.0 and steps < 20:
        total = total / 2
        steps += 1
    tile.store(out, base, acc + steps, valid=n - base)


@ct.jit
def scalar_io(x, out, n):
    """Scalar reads and writes of array elements; a read after a write sees it."""
    pid = ct.program_id(0)
    out[pid] = x[pid] * 2 + ct.num_programs(0)
    out[pid] = out[pid] + 1
    if pid == 0:
        out[n] = ct.cdiv(n, 3)


@ct.jit
def arange_sum(out, TILE: ct.constexpr):
    t = tile.arange(TILE, dtype=np.int64)
    out[ct.program_id(0)] = tile.sum(t * t) + tile.max(t) - tile.min(t + 1)


@ct.combine
def linrec(a_l, b_l, a_r, b_r):
    """h_t = a_t * h_{t-1} + b_t: (a, b) pairs compose as affine maps, the earlier on the left."""
    return a_r * a_l, a_r * b_l + b_r


@ct.jit
def tile_linrec(a, b, h, total, n, TILE: ct.constexpr, EXCLUSIVE: ct.constexpr):
    """Per tile: the recurrence from h = 0.5 (exclusive: the state before each element)."""
    pid = ct.program_id(0)
    base = pid * TILE
    ta = tile.load(a, base, TILE, valid=n - base, other=1)
    tb = tile.load(b, base, TILE, valid=n - base, other=0)
    (_, th), (ca, cb) = tile.scan((ta, tb), op=linrec, exclusive=EXCLUSIVE, initial=(1.0, 0.5), return_total=True)
    tile.store(h, base, th, valid=n - base)
    total[pid] = cb


@ct.jit
def chunked_linrec(a, b, h, n, CHUNK: ct.constexpr):
    """One program walks the array, carrying the state between chunks."""
    carry = (1.0, 0.0)
    for base in range(0, n, CHUNK):
        ta = tile.load(a, base, CHUNK, valid=n - base, other=1)
        tb = tile.load(b, base, CHUNK, valid=n - base, other=0)
        (_, th), carry = tile.scan((ta, tb), op=linrec, initial=carry, return_total=True)
        tile.store(h, base, th, valid=n - base)


@ct.combine
def matmul2(a, b, c, d, e, f, g, h):
    """2x2 matrix product [[a, b], [c, d]] @ [[e, f], [g, h]]: not commutative."""
    return a * e + b * g, a * f + b * h, c * e + d * g, c * f + d * h


@ct.jit
def matrix_scan(m, out, red, n, TILE: ct.constexpr):
    """Running products of 2x2 matrices (row-major in m[:, 0:4]) and the product of each tile."""
    pid = ct.program_id(0)
    base = pid * TILE
    cols = (
        tile.load(m[0], base, TILE, valid=n - base, other=1),
        tile.load(m[1], base, TILE, valid=n - base, other=0),
        tile.load(m[2], base, TILE, valid=n - base, other=0),
        tile.load(m[3], base, TILE, valid=n - base, other=1),
    )
    s = tile.scan(cols, op=matmul2)
    tile.store(out[0], base, s[0], valid=n - base)
    tile.store(out[1], base, s[1], valid=n - base)
    tile.store(out[2], base, s[2], valid=n - base)
    tile.store(out[3], base, s[3], valid=n - base)
    p = tile.reduce(cols, op=matmul2)
    red[pid, 0] = p[0]
    red[pid, 1] = p[1]
    red[pid, 2] = p[2]
    red[pid, 3] = p[3]


@ct.combine
def argmax(v_l, i_l, v_r, i_r):
    """(value, index) of the larger value; the earlier index on ties."""
    take_right = v_r > v_l
    return ct.where(take_right, v_r, v_l), ct.where(take_right, i_r, i_l)


@ct.jit
def tile_argmax(x, out_v, out_i, n, TILE: ct.constexpr):
    pid = ct.program_id(0)
    base = pid * TILE
    v = tile.load(x, base, TILE, valid=n - base, other=-np.inf)
    best, where = tile.reduce((v, tile.arange(TILE, dtype=np.int64) + base), op=argmax)
    out_v[pid] = best
    out_i[pid] = where


@ct.jit
def half_ops(x, y, s, z, n, TILE: ct.constexpr):
    """16-bit floats: math in float32 rounded to the dtype; scans and sums in float32."""
    pid = ct.program_id(0)
    base = pid * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    u = t * 2 + 1
    tile.store(y, base, tile.scan(u), valid=n - base)
    s[pid] = tile.sum(ct.exp(t))
    tile.store(z, base, ct.sigmoid(t) - u, valid=n - base)


@ct.jit
def rows_cumsum(x, y, CHUNK: ct.constexpr):
    """One program per row of a 2-D array (any strides), chunks carried through the row."""
    r = ct.program_id(0)
    row, out = x[r], y[r]
    n = x.shape[1]
    carry = 0.0
    for base in range(0, n, CHUNK):
        t = tile.load(row, base, CHUNK, valid=n - base, other=0)
        s, carry = tile.scan(t, initial=carry, return_total=True)
        tile.store(out, base, s, valid=n - base)
    y[r, 0] = y[r, 0] + x.ndim * 0


@ct.jit
def batched_rows(u, out, last, TILE: ct.constexpr):
    """(batch, dim, L) views: u[b, d] is a row; element reads and writes with full indices."""
    b = ct.program_id(0)
    d = ct.program_id(1)
    L = u.shape[2]
    row = u[b, d]
    t = tile.load(row, 0, TILE, valid=L, other=0)
    tile.store(out[b, d], 0, t * 2 + u[b, d, 0], valid=L)
    last[b, d] = u[b, d, L - 1] + tile.max(t)


@ct.jit
def bool_copy(x, y, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=False)
    tile.store(y, base, ~t | (tile.arange(TILE) % 3 == 0), valid=n - base)


@ct.jit
def histogram_loop(x, out, n, BINS: ct.constexpr, CHUNK: ct.constexpr, ALGO: ct.constexpr):
    """Per-program counts accumulated over a strided loop, merged with atomics."""
    h = tile.zeros(BINS, np.int32)
    for base in range(ct.program_id(0) * CHUNK, n, ct.num_programs(0) * CHUNK):
        t = tile.load(x, base, CHUNK, valid=n - base, other=0)
        h = h + tile.histogram(t, BINS, valid=n - base, algorithm=ALGO)
    tile.atomic_add(out, 0, h)


@ct.jit
def tile_histograms(x, out, n, TILE: ct.constexpr, BINS: ct.constexpr):
    """One histogram per tile, stored as a row of a (programs, BINS) array."""
    pid = ct.program_id(0)
    base = pid * TILE
    tile.store(out[pid], 0, tile.histogram(tile.load(x, base, TILE, valid=n - base, other=0), BINS, valid=n - base))


@ct.jit
def run_length(values, lengths, out, totals, n, RUNS: ct.constexpr, SIZE: ct.constexpr):
    """Each program decodes its RUNS runs into a tile of SIZE items and reports the full count."""
    pid = ct.program_id(0)
    base = pid * RUNS
    v = tile.load(values, base, RUNS, valid=n - base, other=0)
    k = tile.load(lengths, base, RUNS, valid=n - base, other=0)
    decoded, total = tile.run_length_decode(v, k, SIZE)
    tile.store(out[pid], 0, decoded, valid=total)
    totals[pid] = total


@ct.jit
def atomic_sums(x, out, n, TILE: ct.constexpr):
    """Every program adds its tile into the same slots: out[i] = sum over programs of x[p * TILE + i]."""
    base = ct.program_id(0) * TILE
    tile.atomic_add(out, 0, tile.load(x, base, TILE, valid=n - base, other=0), valid=n - base)


@ct.jit
def atomic_running_sums(x, sums, tops, n, TILE: ct.constexpr):
    """Every program adds its tile's running sums into the same slots and raises `tops` to them: a scan's
    tile is blocked, several items per thread, so its atomics go to warp-striped order first."""
    base = ct.program_id(0) * TILE
    running = tile.scan(tile.load(x, base, TILE, valid=n - base, other=0))
    tile.atomic_add(sums, 0, running, valid=n - base)
    tile.atomic_max(tops, 0, running, valid=n - base)


@ct.jit
def neighbors(x, heads, diffs, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(heads, base, tile.flag_heads(t), valid=n - base)
    tile.store(diffs, base, tile.adjacent_difference(t), valid=n - base)


@ct.jit
def segment_sort(keys, values, out_k, out_v, n, TILE: ct.constexpr, DESCENDING: ct.constexpr):
    """Each program sorts its segment (keys with a payload); the tail segment is partial."""
    base = ct.program_id(0) * TILE
    k = tile.load(keys, base, TILE, valid=n - base, other=0)
    v = tile.load(values, base, TILE, valid=n - base, other=0)
    sk, sv = tile.sort(k, v, valid=n - base, descending=DESCENDING)
    tile.store(out_k, base, sk, valid=n - base)
    tile.store(out_v, base, sv, valid=n - base)


@ct.combine
def by_abs_then_sign(a_key, a_tag, b_key, b_tag):
    """Order by |key|, then by tag, descending: a user comparison over a tuple of keys."""
    return (ct.abs(a_key) < ct.abs(b_key)) | ((ct.abs(a_key) == ct.abs(b_key)) & (a_tag > b_tag))


@ct.jit
def segment_merge_sort(keys, tags, out_k, out_t, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    k = tile.load(keys, base, TILE, valid=n - base, other=0)
    g = tile.load(tags, base, TILE, valid=n - base, other=0)
    sk, sg = tile.sort((k, g), valid=n - base, compare=by_abs_then_sign)
    tile.store(out_k, base, sk, valid=n - base)
    tile.store(out_t, base, sg, valid=n - base)


@ct.jit
def chained_scan(x, y, n, TILE: ct.constexpr, OP: ct.constexpr, EXCLUSIVE: ct.constexpr):
    """One scan over the whole array: each program continues from the previous one's last element."""
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=1)
    tile.store(y, base, tile.scan(t, op=OP, exclusive=EXCLUSIVE, chained=True), valid=n - base)


@ct.jit
def chained_carry(x, y, totals, n, TILE: ct.constexpr, EXCLUSIVE: ct.constexpr):
    """A whole-array cumsum seeded with 5 (program 0 only), each program's fold through its end."""
    pid = ct.program_id(0)
    base = pid * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    s, total = tile.scan(t, exclusive=EXCLUSIVE, initial=x[0] * 0 + 5, return_total=True, chained=True)
    tile.store(y, base, s, valid=n - base)
    totals[pid] = total


@ct.jit
def chained_linrec(a, b, h, totals, n, TILE: ct.constexpr, EXCLUSIVE: ct.constexpr):
    """The recurrence over the whole array from h = 0.5 (exclusive: the state before each element)."""
    pid = ct.program_id(0)
    base = pid * TILE
    ta = tile.load(a, base, TILE, valid=n - base, other=1)
    tb = tile.load(b, base, TILE, valid=n - base, other=0)
    (_, th), (_a, hb) = tile.scan(
        (ta, tb), op=linrec, exclusive=EXCLUSIVE, initial=(1.0, 0.5), return_total=True, chained=True
    )
    tile.store(h, base, th, valid=n - base)
    totals[pid] = hb


@ct.jit
def chained_argmax(x, best, where, n, TILE: ct.constexpr):
    """Running (max, first index of it) over the whole array: a chained scan of mixed dtypes, unseeded."""
    base = ct.program_id(0) * TILE
    v = tile.load(x, base, TILE, valid=n - base, other=-np.inf)
    bv, bi = tile.scan((v, tile.arange(TILE, dtype=np.int64) + base), op=argmax, chained=True)
    tile.store(best, base, bv, valid=n - base)
    tile.store(where, base, bi, valid=n - base)


# ----- reverse scans ---------------------------------------------------------------------------------
@ct.jit
def reverse_scan(
    x, y, totals, n, other, TILE: ct.constexpr, OP: ct.constexpr, EXCLUSIVE: ct.constexpr, DTYPE: ct.constexpr
):
    """Per tile, from its last element to its first (elements past n hold `other` and come first)."""
    pid = ct.program_id(0)
    base = pid * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=other)
    s, total = tile.scan(t, op=OP, reverse=True, exclusive=EXCLUSIVE, return_total=True, dtype=DTYPE)
    tile.store(y, base, s, valid=n - base)
    totals[pid] = total


@ct.jit
def reverse_carried_cumsum(x, y, n, CHUNK: ct.constexpr, EXCLUSIVE: ct.constexpr):
    """One program: suffix sums of the whole array after a seed of 3, chunk by chunk from the last."""
    carry = x[0] * 0 + 3
    for chunk in range((n + CHUNK - 1) // CHUNK - 1, -1, -1):
        base = chunk * CHUNK
        t = tile.load(x, base, CHUNK, valid=n - base, other=0)
        s, carry = tile.scan(t, reverse=True, exclusive=EXCLUSIVE, initial=carry, return_total=True)
        tile.store(y, base, s, valid=n - base)


@ct.jit
def reverse_linrec(a, b, h, total, n, TILE: ct.constexpr, EXCLUSIVE: ct.constexpr):
    """Per tile, h_t = a_t * h_{t+1} + b_t from h = 0.5 after the tile's end (exclusive: the state after
    each element); `total` is the state before the tile's first element."""
    pid = ct.program_id(0)
    base = pid * TILE
    ta = tile.load(a, base, TILE, valid=n - base, other=1)
    tb = tile.load(b, base, TILE, valid=n - base, other=0)
    (_, th), (_a, hb) = tile.scan(
        (ta, tb), op=linrec, reverse=True, exclusive=EXCLUSIVE, initial=(1.0, 0.5), return_total=True
    )
    tile.store(h, base, th, valid=n - base)
    total[pid] = hb


@ct.jit
def chunked_reverse_linrec(a, b, h, n, CHUNK: ct.constexpr):
    """One program walks the array from its end (a backward pass's recurrence), carrying the state."""
    carry = (1.0, 0.0)
    for chunk in range((n + CHUNK - 1) // CHUNK - 1, -1, -1):
        base = chunk * CHUNK
        ta = tile.load(a, base, CHUNK, valid=n - base, other=1)
        tb = tile.load(b, base, CHUNK, valid=n - base, other=0)
        (_, th), carry = tile.scan((ta, tb), op=linrec, reverse=True, initial=carry, return_total=True)
        tile.store(h, base, th, valid=n - base)


@ct.jit
def reverse_matrix_scan(m, out, n, TILE: ct.constexpr):
    """Products of 2x2 matrices from each one to its tile's end, the later matrix on the left (unseeded)."""
    base = ct.program_id(0) * TILE
    cols = (
        tile.load(m[0], base, TILE, valid=n - base, other=1),
        tile.load(m[1], base, TILE, valid=n - base, other=0),
        tile.load(m[2], base, TILE, valid=n - base, other=0),
        tile.load(m[3], base, TILE, valid=n - base, other=1),
    )
    s = tile.scan(cols, op=matmul2, reverse=True)
    tile.store(out[0], base, s[0], valid=n - base)
    tile.store(out[1], base, s[1], valid=n - base)
    tile.store(out[2], base, s[2], valid=n - base)
    tile.store(out[3], base, s[3], valid=n - base)


@ct.jit
def reverse_half(x, y, n, TILE: ct.constexpr):
    """16-bit floats: a reverse scan in float32, returned in float32."""
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, tile.scan(t, reverse=True), valid=n - base)


@ct.jit
def chained_reverse(x, y, totals, n, other, TILE: ct.constexpr, OP: ct.constexpr, EXCLUSIVE: ct.constexpr):
    """One scan over the whole array from its last element (the last program) to its first: elements past
    n hold `other` and come first; each program's total is the fold from the end through its first element."""
    pid = ct.program_id(0)
    base = pid * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=other)
    s, total = tile.scan(t, op=OP, reverse=True, exclusive=EXCLUSIVE, return_total=True, chained=True)
    tile.store(y, base, s, valid=n - base)
    totals[pid] = total


@ct.jit
def chained_reverse_linrec(a, b, h, totals, n, TILE: ct.constexpr, EXCLUSIVE: ct.constexpr):
    """h_t = a_t * h_{t+1} + b_t over the whole array from h = 0.5 after its end (seeding the last program)."""
    pid = ct.program_id(0)
    base = pid * TILE
    ta = tile.load(a, base, TILE, valid=n - base, other=1)
    tb = tile.load(b, base, TILE, valid=n - base, other=0)
    (_, th), (_a, hb) = tile.scan(
        (ta, tb), op=linrec, reverse=True, exclusive=EXCLUSIVE, initial=(1.0, 0.5), return_total=True, chained=True
    )
    tile.store(h, base, th, valid=n - base)
    totals[pid] = hb


# ----- references --------------------------------------------------------------------------------------
def ref_vector_add(x, y, out, n, TILE):
    out[:n] = x[:n] + y[:n]
    return [out]


def ref_scaled_cumsum(x, y, n, alpha, TILE):
    for start, chunk in _tiles(x[:n], TILE):
        y[start : start + len(chunk)] = np.cumsum(chunk * alpha)
    return [y]


_ACC = {
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
}


def _sequential_scan(chunk: np.ndarray, op: str, exclusive: bool, seed: Any) -> np.ndarray:
    out = np.empty_like(chunk)
    acc = seed
    with np.errstate(all="ignore"):
        for i, v in enumerate(chunk):
            if exclusive:
                out[i] = acc
                acc = _ACC[op](acc, v) if acc is not None else v
            else:
                acc = _ACC[op](acc, v) if acc is not None else v
                out[i] = acc
    return out


_IDENTITY = {"add": 0, "mul": 1, "or": 0, "xor": 0}


def _identity(op: str, dt: np.dtype):
    if op in _IDENTITY:
        return dt.type(_IDENTITY[op])
    if op == "and":
        return dt.type(-1) if dt.kind == "i" else np.iinfo(dt).max
    if dt.kind == "f":
        return dt.type(-np.inf if op == "max" else np.inf)
    return dt.type(np.iinfo(dt).min if op == "max" else np.iinfo(dt).max)


def ref_tile_scan(x, y, n, TILE, OP, EXCLUSIVE):
    for start, chunk in _tiles(x[:n], TILE):
        seed = _identity(OP, x.dtype) if EXCLUSIVE else None
        y[start : start + len(chunk)] = _sequential_scan(chunk, OP, EXCLUSIVE, seed)
    return [y]


def ref_carried_cumsum(x, y, n, TILE, EXCLUSIVE):
    dt = x.dtype
    seed = dt.type(5)
    with np.errstate(all="ignore"):
        y[:n] = (
            _sequential_scan(x[:n], "add", EXCLUSIVE, seed)
            if EXCLUSIVE
            else _sequential_scan(np.concatenate([[seed], x[:n]]).astype(dt), "add", False, None)[1:]
        )
        y[n] = dt.type(seed + x[:n].sum(dtype=dt))
    return [y]


def ref_row_max_scan(x, y, n_cols, TILE):
    rows = x.reshape(-1, n_cols)
    y[:] = np.maximum.accumulate(rows, axis=1).reshape(-1)
    return [y]


def ref_row_norms(x, y, n_cols, CHUNK):
    rows = x.reshape(-1, n_cols).astype(np.float64)
    scale = (rows * rows).sum(axis=1) + np.abs(rows).max(axis=1)
    y[:] = (rows / scale[:, None]).reshape(-1)
    return [y]


def ref_reductions(x, out, n, TILE):
    with np.errstate(all="ignore"):
        for pid, (start, chunk) in enumerate(_tiles(x[:n], TILE)):
            padded = np.concatenate([chunk, np.zeros(TILE - len(chunk), x.dtype)])
            out[pid * 4 + 0] = padded.sum(dtype=x.dtype)
            out[pid * 4 + 1] = chunk.max()
            out[pid * 4 + 2] = chunk.min()
            out[pid * 4 + 3] = padded.max() if x.dtype.kind == "f" else np.bitwise_xor.reduce(padded)
    return [out]


def ref_elementwise_math(x, out, n, TILE):
    t = x[:n].astype(x.dtype)
    with np.errstate(all="ignore"):
        f = t.dtype.type
        results = [
            np.exp(t) - np.exp2(t * f(0.5)),
            np.log(t) + np.log1p(t),
            np.sqrt(t) * np.sin(t) + np.cos(t),
            1 / (1 + np.exp(-(t - 2))) + np.where(t * 10 - 5 > 20, t * 10 - 5, np.log1p(np.exp(t * 10 - 5))),
            np.where(t > 1.5, t, -t) + np.abs(2 - t),
            np.maximum(t, f(1.25)) - np.minimum(t, f(0.75)),
            (t // f(0.3)) + (t % f(0.3)) + t**2 / 3,
        ]
    for k, r in enumerate(results):
        out[k * n : (k + 1) * n] = r
    return [out]


def ref_triton_math(x, out, n, TILE):
    t = x[:n]
    result = np.sin(t[:1]).dtype  # NumPy's dtype for a float function of x's dtype (float16 for int8)
    functions = [lambda v: math.tanh(v - 1), lambda v: math.erf(v - 1), lambda v: 1 / math.sqrt(v), math.log2]
    for k, f in enumerate(functions):
        out[k * n : (k + 1) * n] = np.array([f(float(v)) for v in t]).astype(result)
    return [out]


def ref_integer_ops(x, out, n, TILE):
    t = x[:n]
    idx = np.arange(n, dtype=np.int32)
    with np.errstate(all="ignore"):
        out[:n] = (t & 7) | (idx << 2)
        out[n : 2 * n] = (t ^ idx) - (t >> 1) + t // 3 - t % 5
        out[2 * n : 3 * n] = np.where((t > 3) & (idx % 2 == 0), t * -1, t + 1)
        out[3 * n : 4 * n] = 7
    return [out]


def ref_integer_division(x, d, out, n, s, TILE):
    """Python's `//` and `%` on Python integers, 0 for a zero divisor and for the most negative value over -1 (whose
    quotient the dtype does not hold)."""
    low = int(np.iinfo(x.dtype).min)

    def floordiv(a: int, b: int) -> int:
        return 0 if b == 0 or (a == low and b == -1) else a // b

    def mod(a: int, b: int) -> int:
        return 0 if b == 0 else a % b

    t, q, s = [int(v) for v in x[:n]], [int(v) for v in d[:n]], int(s)
    out[:n] = [floordiv(a, b) for a, b in zip(t, q)]
    out[n : 2 * n] = [mod(a, b) for a, b in zip(t, q)]
    out[2 * n : 3 * n] = [sum(floordiv(a, s) + mod(a, s) + floordiv(n + k, s) for k in range(3)) for a in t]
    return [out]


def ref_cast_and_compare(x, out, n, scale, TILE):
    f = x[:n].astype(np.float32) * np.float32(scale)
    flag = (f >= 2.5) | (f < -1)
    out[:n] = np.where(flag, f, f * 0).astype(np.int16).astype(np.float32)
    return [out]


def ref_uses_helper(x, out, n, TILE):
    out[:n] = np.clip(x[:n], -0.5, 0.5)
    return [out]


def ref_control_flow(x, out, n, mode, TILE):
    for pid, (start, chunk) in enumerate(_tiles(x[:n], TILE)):
        acc = np.zeros(TILE, np.float32)
        padded = np.concatenate([chunk, np.zeros(TILE - len(chunk), np.float32)])
        for k in range(3):
            acc = acc + padded * np.float32(k + 1)
        acc = acc * 2 if mode == 0 else (acc - 1 if mode == 1 else -acc)
        total, steps = acc.sum(dtype=np.float32), 0
        while total > 1.0 and steps < 20:
            total, steps = total / 2, steps + 1
        out[start : start + len(chunk)] = (acc + steps)[: len(chunk)]
    return [out]


def ref_scalar_io(x, out, n):
    out[:n] = x[:n] * 2 + n + 1
    out[n] = -(-n // 3)
    return [out]


def ref_arange_sum(out, TILE):
    t = np.arange(TILE, dtype=np.int64)
    out[:] = (t * t).sum() + t.max() - (t + 1).min()
    return [out]


def _linrec_seq(a, b, h0):
    out, h = np.empty(len(a)), float(h0)
    for i in range(len(a)):
        h = float(a[i]) * h + float(b[i])
        out[i] = h
    return out


def ref_tile_linrec(a, b, h, total, n, TILE, EXCLUSIVE):
    for pid, (start, chunk) in enumerate(_tiles(a[:n], TILE)):
        inc = _linrec_seq(chunk, b[start : start + len(chunk)], 0.5)
        h[start : start + len(chunk)] = np.concatenate([[0.5], inc[:-1]]) if EXCLUSIVE else inc
        total[pid] = (
            inc[-1]
            if len(chunk) == TILE
            else _linrec_seq(
                np.concatenate([chunk, np.ones(TILE - len(chunk))]),
                np.concatenate([b[start : start + len(chunk)], np.zeros(TILE - len(chunk))]),
                0.5,
            )[-1]
        )
    return [h, total]


def ref_chunked_linrec(a, b, h, n, CHUNK):
    h[:n] = _linrec_seq(a[:n], b[:n], 0.0)
    return [h]


def ref_matrix_scan(m, out, red, n, TILE):
    for pid, (start, _) in enumerate(_tiles(m[0, :n], TILE)):
        acc = np.eye(2)
        for i in range(start, min(start + TILE, n)):
            acc = acc @ m[:, i].astype(np.float64).reshape(2, 2)
            out[:, i] = acc.reshape(4)
        red[pid] = acc.reshape(4)
    return [out, red]


def ref_tile_argmax(x, out_v, out_i, n, TILE):
    for pid, (start, chunk) in enumerate(_tiles(x[:n], TILE)):
        out_v[pid] = chunk.max()
        out_i[pid] = start + int(np.argmax(chunk))
    return [out_v, out_i]


def ref_half_ops(x, y, s, z, n, TILE):
    dt, f32 = x.dtype, np.float32
    for pid, (start, chunk) in enumerate(_tiles(x[:n], TILE)):
        t = np.concatenate([chunk, np.zeros(TILE - len(chunk), dt)])
        u = ((t.astype(f32) * 2).astype(dt).astype(f32) + 1).astype(dt)
        y[start : start + len(chunk)] = np.cumsum(u.astype(f32))[: len(chunk)]
        s[pid] = np.exp(t.astype(f32)).astype(dt).astype(f32).sum(dtype=f32)
        sig = (1 / (1 + np.exp(-t.astype(f32)))).astype(dt)
        z[start : start + len(chunk)] = (sig.astype(f32) - u.astype(f32)).astype(dt)[: len(chunk)]
    return [y, s, z]


def ref_rows_cumsum(x, y, CHUNK):
    y[...] = np.cumsum(x.astype(np.float64), axis=1).astype(y.dtype)
    return [y]


def ref_batched_rows(u, out, last, TILE):
    L = u.shape[2]
    out[:, :, :L] = u * 2 + u[:, :, :1]
    last[...] = u[:, :, L - 1] + u.max(axis=2)
    return [out, last]


def ref_bool_copy(x, y, n, TILE):
    idx = np.arange(n) % TILE
    y[:n] = ~x[:n] | (idx % 3 == 0)
    return [y]


def _column_major(a: Any) -> Any:
    """The same values laid out column by column (NumPy, CuPy or PyTorch): rows become strided."""
    return (a.T.copy() if hasattr(a, "copy") else a.T.contiguous()).T


def ref_histogram_loop(x, out, n, BINS, CHUNK, ALGO):
    v = x[:n].astype(np.int64) if x.dtype.kind == "i" else x[:n].astype(np.uint64)
    out[:] += np.bincount(v[(v >= 0) & (v < BINS)].astype(np.int64), minlength=BINS).astype(out.dtype)
    return [out]


def ref_tile_histograms(x, out, n, TILE, BINS):
    for pid, (start, chunk) in enumerate(_tiles(x[:n], TILE)):
        v = chunk.astype(np.int64)
        out[pid] = np.bincount(v[(v >= 0) & (v < BINS)], minlength=BINS)
    return [out]


def ref_run_length(values, lengths, out, totals, n, RUNS, SIZE):
    for pid, (start, chunk) in enumerate(_tiles(values[:n], RUNS)):
        decoded = [v for v, k in zip(chunk, lengths[start : start + len(chunk)]) for _ in range(max(0, int(k)))]
        out[pid, : min(SIZE, len(decoded))] = decoded[:SIZE]
        totals[pid] = len(decoded)
    return [out, totals]


def ref_atomic_sums(x, out, n, TILE):
    with np.errstate(all="ignore"):
        for start, chunk in _tiles(x[:n], TILE):
            out[: len(chunk)] += chunk.astype(out.dtype)
    return [out]


def ref_atomic_running_sums(x, sums, tops, n, TILE):
    with np.errstate(all="ignore"):
        for start, chunk in _tiles(x[:n], TILE):
            running = np.cumsum(chunk).astype(sums.dtype)
            sums[: len(chunk)] += running
            tops[: len(chunk)] = np.maximum(tops[: len(chunk)], running)
    return [sums, tops]


def ref_neighbors(x, heads, diffs, n, TILE):
    for start, chunk in _tiles(x[:n], TILE):
        heads[start : start + len(chunk)] = [True] + [chunk[i] != chunk[i - 1] for i in range(1, len(chunk))]
        with np.errstate(all="ignore"):
            d = [chunk[0]] + [chunk[i] - chunk[i - 1] for i in range(1, len(chunk))]
        diffs[start : start + len(chunk)] = np.array(d, dtype=x.dtype)
    return [heads, diffs]


def ref_segment_sort(keys, values, out_k, out_v, n, TILE, DESCENDING):
    for start, chunk in _tiles(keys[:n], TILE):
        f = [
            v.item()
            for v in (chunk.astype(np.float64) if chunk.dtype.kind == "f" or chunk.dtype == ct.bfloat16 else chunk)
        ]
        nan = [v != v for v in f]  # NaNs go last either way; equal keys keep their order (stable)
        sign = -1 if DESCENDING else 1
        # -0.0 and +0.0 may come in either order (the contract); this pins the radix order, -0.0 first
        zero_sign = [math.copysign(1.0, v) if v == 0 else 0.0 for v in f]
        order = sorted(range(len(chunk)), key=lambda i: (nan[i], 0 if nan[i] else sign * f[i], sign * zero_sign[i]))
        out_k[start : start + len(chunk)] = chunk[order]
        out_v[start : start + len(chunk)] = values[start : start + len(chunk)][order]
    return [out_k, out_v]


def ref_segment_merge_sort(keys, tags, out_k, out_t, n, TILE):
    for start, chunk in _tiles(keys[:n], TILE):
        t = tags[start : start + len(chunk)]
        order = sorted(range(len(chunk)), key=lambda i: (abs(int(chunk[i])), -int(t[i])))
        out_k[start : start + len(chunk)] = chunk[order]
        out_t[start : start + len(chunk)] = t[order]
    return [out_k, out_t]


def ref_chained_scan(x, y, n, TILE, OP, EXCLUSIVE):
    y[:n] = _sequential_scan(x[:n], OP, EXCLUSIVE, _identity(OP, x.dtype) if EXCLUSIVE else None)
    return [y]


def ref_chained_carry(x, y, totals, n, TILE, EXCLUSIVE):
    dt = x.dtype
    inclusive = _sequential_scan(x[:n], "add", False, dt.type(5))
    y[:n] = np.concatenate([[dt.type(5)], inclusive[:-1]]) if EXCLUSIVE else inclusive
    ends = np.minimum(np.arange(1, len(totals) + 1) * TILE, n) - 1  # padding elements add 0
    totals[:] = inclusive[ends]
    return [y, totals]


def ref_chained_linrec(a, b, h, totals, n, TILE, EXCLUSIVE):
    inc = _linrec_seq(a[:n], b[:n], 0.5)
    h[:n] = np.concatenate([[0.5], inc[:-1]]) if EXCLUSIVE else inc
    totals[:] = inc[np.minimum(np.arange(1, len(totals) + 1) * TILE, n) - 1]  # padding is (1, 0): no change
    return [h, totals]


def ref_chained_argmax(x, best, where, n, TILE):
    for i in range(n):
        j = i if i == 0 or x[i] > best[i - 1] else where[i - 1]
        best[i], where[i] = x[j], j
    return [best, where]


def linrec_cases(rng: np.random.Generator, kernel, reference, params: list) -> list[Case]:
    """Cases of a linear recurrence over tiles (`tile_linrec`, `chained_linrec`: arrays a, b, h, the
    tiles' totals, n), one per (dtype, n, TILE, EXCLUSIVE) of `params`, a in [0.5, 1) and b in [-1, 1)."""
    cases = []
    for dt, n, tile_size, exclusive in params:
        a, b = rng.uniform(0.5, 1.0, n).astype(dt), rng.uniform(-1, 1, n).astype(dt)
        grid = ct.cdiv(n, tile_size)
        cases.append(
            Case(
                f"{kernel.__name__}[{np.dtype(dt).name},tile={tile_size},{'ex' if exclusive else 'in'}]",
                kernel,
                [a, b, np.zeros(n, dt), np.zeros(grid, dt), n],
                {"TILE": tile_size, "EXCLUSIVE": exclusive},
                grid,
                [2, 3],
                reference,
                rtol=1e-4 if dt == np.float32 else 1e-10,
                atol=1e-5 if dt == np.float32 else 1e-12,
            )
        )
    return cases


def chained_cases(rng: np.random.Generator) -> list[Case]:
    """Chained scans: built-in ops, seeds and totals, tuple scans packed (8 bytes) and not (16 bytes),
    padded tiles (TILE not a multiple of the block) and not, 1 and 2 programs."""
    cases = []
    for dt, op, exclusive, n, tile_size in [
        (np.int32, "add", False, 5000, 256),
        (np.float64, "max", True, 2000, 300),
        (np.int64, "min", False, 3001, 1000),
        (np.uint8, "xor", True, 700, 64),
        (np.int32, "add", False, 100, 256),  # one program
        (np.float64, "max", True, 500, 300),  # two
    ]:
        lo, hi = (-1, 1) if np.dtype(dt).kind == "f" else (-100, 100)
        cases.append(
            Case(
                f"chained_scan[{np.dtype(dt).name},{op},{'ex' if exclusive else 'in'},{ct.cdiv(n, tile_size)}]",
                chained_scan,
                [_rand(rng, n, dt, lo, hi), np.zeros(n, dt), n],
                {"TILE": tile_size, "OP": op, "EXCLUSIVE": exclusive},
                ct.cdiv(n, tile_size),
                [1],
                ref_chained_scan,
            )
        )
    for dt, n, tile_size, exclusive in [(np.int32, 3000, 512, False), (np.float64, 1000, 100, True)]:
        grid = ct.cdiv(n, tile_size)
        cases.append(
            Case(
                f"chained_carry[{np.dtype(dt).name},{'ex' if exclusive else 'in'}]",
                chained_carry,
                [_rand(rng, n, dt, 0, 9), np.zeros(n, dt), np.zeros(grid, dt), n],
                {"TILE": tile_size, "EXCLUSIVE": exclusive},
                grid,
                [1, 2],
                ref_chained_carry,
                rtol=1e-12 if np.dtype(dt).kind == "f" else 0,
            )
        )
    cases += linrec_cases(
        rng,
        chained_linrec,
        ref_chained_linrec,
        [(np.float32, 3000, 256, False), (np.float32, 1000, 300, True), (np.float64, 2049, 512, True),
         (np.float64, 999, 1000, False)],
    )  # fmt: skip
    for n, tile_size in [(2000, 256), (1000, 300)]:
        x = rng.integers(0, 50, n).astype(np.float32)  # ties: the first index wins
        cases.append(
            Case(
                f"chained_argmax[tile={tile_size}]",
                chained_argmax,
                [x, np.zeros(n, np.float32), np.zeros(n, np.int64), n],
                {"TILE": tile_size},
                ct.cdiv(n, tile_size),
                [1, 2],
                ref_chained_argmax,
            )
        )
    return cases


def toolbox_cases(rng: np.random.Generator) -> list[Case]:
    """Histogram, atomics, discontinuities, adjacent differences, radix and merge sort."""
    cases = []
    for dt, n, bins, lo, hi, algo, chunk in [
        (np.uint8, 5000, 256, 0, 255, "auto", 512),
        (np.int32, 4000, 1000, -100, 1100, "atomic", 512),
        (np.int8, 777, 50, -128, 127, "sort", 512),
        (np.uint64, 600, 7, 0, 12, "auto", 512),
        (np.int16, 300, 1, -2, 2, "atomic", 512),
        (np.int64, 2000, 4096, -10, 5000, "auto", 512),
        (np.uint16, 900, 33, 0, 40, "sort", 512),
        (np.int16, 1300, 100, -5, 105, "auto", 480),  # lane copies: out of range, padding
    ]:
        x = _rand(rng, n, dt, lo, hi)
        cases.append(
            Case(
                f"histogram_loop[{np.dtype(dt).name},bins={bins},{algo}]",
                histogram_loop,
                [x, np.zeros(bins, np.int32), n],
                {"BINS": bins, "CHUNK": chunk, "ALGO": algo},
                3,
                [1],
                ref_histogram_loop,
            )
        )
    for dt, bins in [(np.int16, 100), (np.uint8, 3), (np.int32, 513)]:
        n, tile_size = 1000, 384
        grid = ct.cdiv(n, tile_size)
        cases.append(
            Case(
                f"tile_histograms[{np.dtype(dt).name},bins={bins}]",
                tile_histograms,
                [_rand(rng, n, dt, -5, bins + 5), np.zeros((grid, bins), np.int32), n],
                {"TILE": tile_size, "BINS": bins},
                grid,
                [1],
                ref_tile_histograms,
            )
        )
    for dt, runs, size, hi in [(np.float32, 64, 512, 9), (np.int16, 100, 300, 5), (np.uint8, 37, 64, 4)]:
        n = 300
        grid = ct.cdiv(n, runs)
        values, lengths = _rand(rng, n, dt, 0, 100), _rand(rng, n, np.int32, -2, hi)  # some negative: count as 0
        cases.append(
            Case(
                f"run_length[{np.dtype(dt).name},runs={runs},size={size}]",
                run_length,
                [values, lengths, np.zeros((grid, size), dt), np.zeros(grid, np.int64), n],
                {"RUNS": runs, "SIZE": size},
                grid,
                [2, 3],
                ref_run_length,
            )
        )
    for dt in (np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64):
        n = 1000
        x = _rand(rng, n, dt, 0, 50)
        cases.append(
            Case(
                f"atomic_sums[{np.dtype(dt).name}]",
                atomic_sums,
                [x, np.zeros(128, dt), n],
                {"TILE": 128},
                ct.cdiv(n, 128),
                [1],
                ref_atomic_sums,
                rtol=1e-5 if np.dtype(dt).kind == "f" else 0,
            )
        )
    for dt in (np.int32, np.float32, np.float64):
        n = 5000  # (the last tile partial, ending within a warp)
        x = _rand(rng, n, dt, -20, 50)
        cases.append(
            Case(
                f"atomic_running_sums[{np.dtype(dt).name}]",
                atomic_running_sums,
                [x, np.zeros(1024, dt), np.full(1024, -(10**6), dt), n],
                {"TILE": 1024},
                ct.cdiv(n, 1024),
                [1, 2],
                ref_atomic_running_sums,
                rtol=1e-5 if np.dtype(dt).kind == "f" else 0,
                atol=1e-2 if np.dtype(dt).kind == "f" else 0,
            )
        )
    for dt in (np.int8, np.uint16, np.int32, np.int64, np.float32, np.float64, np.float16, ct.bfloat16):
        n = 700
        x = _rand(rng, n, np.float32, -3, 3).round().astype(dt)  # repeats, so there are runs
        cases.append(
            Case(
                f"neighbors[{np.dtype(dt).name}]",
                neighbors,
                [x, np.zeros(n, bool), np.zeros(n, dt), n],
                {"TILE": 256},
                ct.cdiv(n, 256),
                [1, 2],
                ref_neighbors,
                library="torch" if np.dtype(dt) == ct.bfloat16 else "cupy",
            )
        )
    for dt in INT_DTYPES + FLOAT_DTYPES + [np.float16, ct.bfloat16]:
        for descending in (False, True):
            n, tile_size = 1000, 384
            if np.dtype(dt).kind in "iu":
                keys = _rand(rng, n, dt, -50, 50)
            else:
                keys = rng.uniform(-5, 5, n).round(1).astype(dt)
                keys[::37] = np.nan
                keys[1::53] = -np.asarray(np.nan, dtype=dt)
                keys[2::41] = -0.0
            values = np.arange(n, dtype=np.int32)
            cases.append(
                Case(
                    f"segment_sort[{np.dtype(dt).name},{'desc' if descending else 'asc'}]",
                    segment_sort,
                    [keys, values, np.zeros(n, dt), np.zeros(n, np.int32), n],
                    {"TILE": tile_size, "DESCENDING": descending},
                    ct.cdiv(n, tile_size),
                    [2, 3],
                    ref_segment_sort,
                    library="torch" if np.dtype(dt) == ct.bfloat16 else "cupy",
                )
            )
    n = 500
    keys, tags = _rand(rng, n, np.int32, -20, 20), _rand(rng, n, np.int16, 0, 3)
    cases.append(
        Case(
            "segment_merge_sort[(int32, int16)]",
            segment_merge_sort,
            [keys, tags, np.zeros(n, np.int32), np.zeros(n, np.int16), n],
            {"TILE": 128},
            ct.cdiv(n, 128),
            [2, 3],
            ref_segment_merge_sort,
        )
    )
    return cases


def _to_dtype(a: np.ndarray, dt: Any) -> np.ndarray:
    return a.astype(np.float32).astype(dt)


def new_feature_cases(rng: np.random.Generator) -> list[Case]:
    """Tuples and combine functions, 16-bit floats, N-D and strided arrays, bool arrays."""
    cases = []
    cases += linrec_cases(
        rng,
        tile_linrec,
        ref_tile_linrec,
        [(np.float32, 1000, 256, False), (np.float32, 777, 100, True), (np.float64, 513, 64, False),
         (np.float64, 5, 1, True), (np.float32, 300, 300, False)],
    )  # fmt: skip
    for dt, n, chunk in [(np.float32, 3000, 512), (np.float64, 1001, 96)]:
        a, b = rng.uniform(0.9, 1.0, n).astype(dt), rng.uniform(-1, 1, n).astype(dt)
        cases.append(
            Case(
                f"chunked_linrec[{np.dtype(dt).name},chunk={chunk}]",
                chunked_linrec,
                [a, b, np.zeros(n, dt), n],
                {"CHUNK": chunk},
                1,
                [2],
                ref_chunked_linrec,
                rtol=1e-4 if dt == np.float32 else 1e-10,
                atol=1e-4,
            )
        )
    for dt, n, tile_size in [(np.float32, 500, 128), (np.float64, 37, 10)]:
        m = rng.uniform(-1.2, 1.2, (4, n)).astype(dt)
        grid = ct.cdiv(n, tile_size)
        cases.append(
            Case(
                f"matrix_scan[{np.dtype(dt).name},tile={tile_size}]",
                matrix_scan,
                [m, np.zeros((4, n), dt), np.zeros((grid, 4), dt), n],
                {"TILE": tile_size},
                grid,
                [1, 2],
                ref_matrix_scan,
                rtol=1e-3 if dt == np.float32 else 1e-9,
                atol=1e-4 if dt == np.float32 else 1e-12,
            )
        )
    for n, tile_size in [(1000, 256), (50, 7)]:
        x = np.round(rng.uniform(-5, 5, n), 1).astype(np.float32)  # ties: the earlier index wins
        grid = ct.cdiv(n, tile_size)
        cases.append(
            Case(
                f"tile_argmax[tile={tile_size}]",
                tile_argmax,
                [x, np.zeros(grid, np.float32), np.zeros(grid, np.int64), n],
                {"TILE": tile_size},
                grid,
                [1, 2],
                ref_tile_argmax,
            )
        )
    for dt, lib in [(np.float16, "cupy"), (ct.bfloat16, "torch")]:
        n, tile_size = 700, 256
        grid = ct.cdiv(n, tile_size)
        x = _to_dtype(rng.uniform(-2, 2, n), dt)
        cases.append(
            Case(
                f"half_ops[{np.dtype(dt).name}]",
                half_ops,
                [x, np.zeros(n, np.float32), np.zeros(grid, np.float32), np.zeros(n, dt), n],
                {"TILE": tile_size},
                grid,
                [1, 2, 3],
                ref_half_ops,
                rtol=1e-3,
                atol=1e-2,
                library=lib,
            )
        )
    x = rng.uniform(0, 1, (5, 700)).astype(np.float32)
    for name, prepare in [
        ("contiguous", None),
        ("transposed", lambda args: [_column_major(args[0]), args[1]]),
    ]:
        cases.append(
            Case(
                f"rows_cumsum[{name}]",
                rows_cumsum,
                [x, np.zeros_like(x)],
                {"CHUNK": 256},
                5,
                [1],
                ref_rows_cumsum,
                rtol=1e-5,
                atol=1e-4,
                prepare=prepare,
            )
        )
    xt = rng.uniform(0, 1, (300, 4)).astype(np.float64)
    cases.append(
        Case(
            "rows_cumsum[strided view of a transpose]",
            rows_cumsum,
            [xt, np.zeros((4, 300), np.float64)],
            {"CHUNK": 128},
            4,
            [1],
            lambda xt_, y, CHUNK: [np.cumsum(xt_.T, axis=1)],
            rtol=1e-12,
            prepare=lambda args: [args[0].T, args[1]],
        )
    )
    cases.append(
        Case(
            "rows_cumsum[negative stride]",
            rows_cumsum,
            [x, np.zeros_like(x)],
            {"CHUNK": 200},
            5,
            [1],
            lambda x_, y, CHUNK: [np.cumsum(x_[:, ::-1], axis=1, dtype=np.float64).astype(np.float32)],
            rtol=1e-5,
            atol=1e-4,
            prepare=lambda args: [args[0][:, ::-1], args[1]],
        )
    )
    u = rng.integers(-50, 50, (2, 3, 40)).astype(np.int32)
    cases.append(
        Case(
            "batched_rows[int32]",
            batched_rows,
            [u, np.zeros((2, 3, 64), np.int32), np.zeros((2, 3), np.int32)],
            {"TILE": 64},
            (2, 3),
            [1, 2],
            ref_batched_rows,
        )
    )
    xb = rng.integers(0, 2, 300).astype(bool)
    cases.append(Case("bool_copy", bool_copy, [xb, np.zeros(300, bool), 300], {"TILE": 128}, 3, [1], ref_bool_copy))
    return cases


# ----- cases ---------------------------------------------------------------------------------------------
@ct.jit
def large_tile(x, y, totals, n, TILE: ct.constexpr):
    """Tiles past 32 items per thread: in shared memory when they fit, else in local memory."""
    pid = ct.program_id(0)
    base = pid * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    s = tile.scan(t * 2 + 1)
    tile.store(y, base, s - t, valid=n - base)
    totals[pid] = tile.sum(t)


def ref_large_tile(x, y, totals, n, TILE):
    for p, base in enumerate(range(0, n, TILE)):
        t = np.zeros(TILE, x.dtype)
        t[: min(TILE, n - base)] = x[base : base + TILE]
        s = np.cumsum(t * 2 + 1, dtype=x.dtype) - t
        y[base : base + TILE] = s[: min(TILE, n - base)]
        totals[p] = t.sum(dtype=x.dtype)
    return [y, totals]


@ct.jit
def tiles_across_scans(x, y, n, TILE: ct.constexpr):
    """Tiles alive across two scans, more than a thread's registers: some go to shared memory."""
    a = tile.load(x, 0, TILE, valid=n, other=0)
    b = tile.load(x, TILE, TILE, valid=n - TILE, other=0)
    c = tile.load(x, 2 * TILE, TILE, valid=n - 2 * TILE, other=0)
    e = tile.scan(a)
    f = tile.scan(e, op="max")
    tile.store(y, 0, a + b * 3 + c * 5 + e + f, valid=n)


def ref_tiles_across_scans(x, y, n, TILE):
    parts = [np.zeros(TILE, x.dtype) for _ in range(3)]
    for k in range(3):
        chunk = x[k * TILE : min(n, (k + 1) * TILE)]
        parts[k][: len(chunk)] = chunk
    a, b, c = parts
    e = np.cumsum(a, dtype=x.dtype)
    y[: min(n, TILE)] = (a + b * 3 + c * 5 + e + np.maximum.accumulate(e))[: min(n, TILE)]
    return [y]


@ct.jit(block_threads=256)
def scan_then_sort(x, y, z, n, TILE: ct.constexpr):
    """Issue 17: a tile in shared memory (36 items per thread), scanned, then sorted, both stored (its first
    carve put the scan's TempStorage over its own result, and the last store's over the tile the sort reads)."""
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, tile.scan(t), valid=n - base)
    tile.store(z, base, tile.sort(t, valid=n - base), valid=n - base)


def ref_scan_then_sort(x, y, z, n, TILE):
    for base in range(0, n, TILE):
        chunk = x[base : min(n, base + TILE)]
        y[base : base + len(chunk)] = np.cumsum(chunk, dtype=x.dtype)
        z[base : base + len(chunk)] = np.sort(chunk)
    return [y, z]


def storage_cases(rng: np.random.Generator) -> list[Case]:
    """Large tiles: 40 items per thread at 1024 threads (shared memory on sm_90), and 64 (local)."""
    cases = []
    for dt, tile_size in [(np.int32, 40000), (np.int32, 65536)]:
        n = 2 * tile_size + 12345
        grid = -(-n // tile_size)
        args = [_rand(rng, n, dt, -1000, 1000), np.zeros(n, dt), np.zeros(grid, dt), n]
        cases.append(
            Case(f"large_tile[{tile_size}]", large_tile, args, {"TILE": tile_size}, grid, [1, 2], ref_large_tile)
        )
    n = 3 * 8192 - 5  # 32 items per thread at 256 threads: four such tiles exceed 128 registers
    args = [_rand(rng, n, np.int32, -1000, 1000), np.zeros(8192, np.int32), n]
    cases.append(Case("tiles_across_scans", tiles_across_scans, args, {"TILE": 8192}, 1, [1], ref_tiles_across_scans))
    own = np.random.default_rng(17)  # (the other cases' inputs stay as they were)
    for n in (22583, 14346):  # a partial last tile of 4583 and 5346 elements
        args = [own.integers(-1000, 1000, n).astype(np.int32), np.zeros(n, np.int32), np.zeros(n, np.int32), n]
        name, grid = f"scan_then_sort[n={n}]", -(-n // 9000)
        cases.append(Case(name, scan_then_sort, args, {"TILE": 9000}, grid, [1, 2], ref_scan_then_sort))
    return cases


# ----- reverse scans: sequential references, from the last element -----------------------------------
def _padded(x: np.ndarray, n: int, size: int, other: Any) -> np.ndarray:
    """x[:n] followed by `other` up to `size` elements."""
    return np.concatenate([x[:n], np.full(size - n, other, x.dtype)])


def _suffix(values: list[np.ndarray], fold: Callable, seed: tuple | None, exclusive: bool):
    """(scanned arrays, total): each element's fold from the last element down to it (exclusive: down to
    the one after it), `fold(earlier, later)` on tuples, `seed` first."""
    out = [np.empty_like(v) for v in values]
    acc = seed
    with np.errstate(all="ignore"):
        for i in range(len(values[0]) - 1, -1, -1):
            item = tuple(v[i] for v in values)
            before = acc
            acc = item if acc is None else tuple(o.dtype.type(r) for o, r in zip(out, fold(acc, item)))
            for o, r in zip(out, before if exclusive else acc):
                o[i] = r
    return out, acc


def ref_reverse_scan(x, y, totals, n, other, TILE, OP, EXCLUSIVE, DTYPE):
    dt = np.dtype(DTYPE) if DTYPE is not None else x.dtype
    seed = (_identity(OP, dt),) if EXCLUSIVE else None
    for pid, (start, chunk) in enumerate(_tiles(x[:n], TILE)):
        t = _padded(chunk, len(chunk), TILE, other).astype(dt)
        (s,), (total,) = _suffix([t], lambda l, r: (_ACC[OP](l[0], r[0]),), seed, EXCLUSIVE)
        y[start : start + len(chunk)] = s[: len(chunk)]
        totals[pid] = total
    return [y, totals]


def ref_reverse_carried_cumsum(x, y, n, CHUNK, EXCLUSIVE):
    (s,), _ = _suffix([x[:n]], lambda l, r: (l[0] + r[0],), (x.dtype.type(3),), EXCLUSIVE)
    y[:n] = s
    return [y]


def _linrec_pair(l, r):
    return r[0] * l[0], r[0] * l[1] + r[1]


def ref_reverse_linrec(a, b, h, total, n, TILE, EXCLUSIVE):
    for pid, (start, chunk) in enumerate(_tiles(a[:n], TILE)):
        ta = _padded(chunk, len(chunk), TILE, 1).astype(np.float64)
        tb = _padded(b[start:], len(chunk), TILE, 0).astype(np.float64)
        (_, th), (_, hb) = _suffix([ta, tb], _linrec_pair, (1.0, 0.5), EXCLUSIVE)
        h[start : start + len(chunk)] = th[: len(chunk)]
        total[pid] = hb
    return [h, total]


def ref_chunked_reverse_linrec(a, b, h, n, CHUNK):
    (_, th), _ = _suffix([a[:n].astype(np.float64), b[:n].astype(np.float64)], _linrec_pair, (1.0, 0.0), False)
    h[:n] = th
    return [h]


def ref_reverse_matrix_scan(m, out, n, TILE):
    for start, _ in _tiles(m[0, :n], TILE):
        acc = np.eye(2)
        for i in range(min(start + TILE, n) - 1, start - 1, -1):
            acc = acc @ m[:, i].astype(np.float64).reshape(2, 2)  # the later (earlier in scan order) on the left
            out[:, i] = acc.reshape(4)
    return [out]


def ref_reverse_half(x, y, n, TILE):
    for start, chunk in _tiles(x[:n], TILE):
        t = _padded(chunk, len(chunk), TILE, 0).astype(np.float32)
        y[start : start + len(chunk)] = np.cumsum(t[::-1], dtype=np.float32)[::-1][: len(chunk)]
    return [y]


def ref_chained_reverse(x, y, totals, n, other, TILE, OP, EXCLUSIVE):
    size = len(totals) * TILE
    seed = (_identity(OP, x.dtype),) if EXCLUSIVE else None
    (s,), _ = _suffix([_padded(x, n, size, other)], lambda l, r: (_ACC[OP](l[0], r[0]),), seed, EXCLUSIVE)
    (inclusive,), _ = _suffix([_padded(x, n, size, other)], lambda l, r: (_ACC[OP](l[0], r[0]),), None, False)
    y[:n] = s[:n]
    totals[:] = inclusive[::TILE]  # the fold from the end through each program's first element
    return [y, totals]


def ref_chained_reverse_linrec(a, b, h, totals, n, TILE, EXCLUSIVE):
    size = len(totals) * TILE
    ta, tb = _padded(a, n, size, 1).astype(np.float64), _padded(b, n, size, 0).astype(np.float64)
    (_, th), _ = _suffix([ta, tb], _linrec_pair, (1.0, 0.5), EXCLUSIVE)
    (_, inclusive), _ = _suffix([ta, tb], _linrec_pair, (1.0, 0.5), False)
    h[:n] = th[:n]
    totals[:] = inclusive[::TILE]
    return [h, totals]


def reverse_cases(rng: np.random.Generator) -> list[Case]:
    """Reverse scans: built-in ops (exclusive, dtype=), tiles not a multiple of the block (padding, which
    must not enter the fold: in reverse order it would come first), seeds carried from the last chunk to
    the first, non-commutative combine functions (the recurrence, 2x2 matrix products), 16-bit floats,
    and chained reverse scans over 1 to 20 programs with a partial last tile."""
    cases = []
    for dt, op, exclusive, acc, n, tile_size in [
        (np.int32, "add", False, None, 1000, 300),
        (np.int32, "add", True, None, 1000, 256),
        (np.float64, "max", False, None, 777, 100),
        (np.int64, "min", True, None, 999, 1000),
        (np.uint8, "xor", False, None, 700, 64),
        (np.int32, "mul", True, None, 300, 37),
        (np.int8, "add", False, np.int64, 1500, 512),
        (np.uint16, "or", True, np.int32, 500, 129),
    ]:
        lo, hi = (-1, 1) if np.dtype(dt).kind == "f" else (-100, 100)
        x = _rand(rng, n, dt, lo, hi) if op != "mul" else rng.choice(np.array([1, -1, 2], dt), n)
        grid = ct.cdiv(n, tile_size)
        acc_dt = np.dtype(acc) if acc is not None else np.dtype(dt)
        cases.append(
            Case(
                f"reverse_scan[{np.dtype(dt).name},{op},{'ex' if exclusive else 'in'},{acc_dt.name},tile={tile_size}]",
                reverse_scan,
                [x, np.zeros(n, acc_dt), np.zeros(grid, acc_dt), n, _identity(op, np.dtype(dt))],
                {"TILE": tile_size, "OP": op, "EXCLUSIVE": exclusive, "DTYPE": acc},
                grid,
                [1, 2],
                ref_reverse_scan,
            )
        )
    for n, chunk, exclusive in [(1000, 256, False), (1000, 300, True), (90, 1000, False)]:
        cases.append(
            Case(
                f"reverse_carried_cumsum[n={n},chunk={chunk},{'ex' if exclusive else 'in'}]",
                reverse_carried_cumsum,
                [_rand(rng, n, np.int64, -1000, 1000), np.zeros(n, np.int64), n],
                {"CHUNK": chunk, "EXCLUSIVE": exclusive},
                1,
                [1],
                ref_reverse_carried_cumsum,
            )
        )
    cases += linrec_cases(
        rng,
        reverse_linrec,
        ref_reverse_linrec,
        [(np.float32, 1000, 256, False), (np.float32, 1000, 300, True), (np.float64, 777, 100, False)],
    )
    for dt, n, chunk in [(np.float32, 1000, 256), (np.float64, 999, 300)]:
        a, b = rng.uniform(0.5, 1.0, n).astype(dt), rng.uniform(-1, 1, n).astype(dt)
        cases.append(
            Case(
                f"chunked_reverse_linrec[{np.dtype(dt).name},chunk={chunk}]",
                chunked_reverse_linrec,
                [a, b, np.zeros(n, dt), n],
                {"CHUNK": chunk},
                1,
                [2],
                ref_chunked_reverse_linrec,
                rtol=1e-4 if dt == np.float32 else 1e-10,
                atol=1e-5 if dt == np.float32 else 1e-12,
            )
        )
    n = 700
    m = rng.uniform(-1, 1, (4, n)).round(1)
    cases.append(
        Case(
            "reverse_matrix_scan[tile=300]",
            reverse_matrix_scan,
            [m, np.zeros((4, n)), n],
            {"TILE": 300},
            ct.cdiv(n, 300),
            [1],
            ref_reverse_matrix_scan,
            rtol=1e-9,
            atol=1e-9,
        )
    )
    for dt in HALVES:
        n = 600
        cases.append(
            Case(
                f"reverse_half[{dt.name}]",
                reverse_half,
                [rng.uniform(-2, 2, n).astype(dt), np.zeros(n, np.float32), n],
                {"TILE": 160},
                ct.cdiv(n, 160),
                [1],
                ref_reverse_half,
                rtol=1e-5,
                atol=1e-4,
                library="torch" if dt == np.dtype(ct.bfloat16) else "cupy",
            )
        )
    for dt, op, exclusive, n, tile_size in [
        (np.int32, "add", False, 5000, 256),
        (np.int32, "add", True, 5000, 300),
        (np.float64, "max", False, 2000, 300),
        (np.int64, "min", True, 3001, 1000),
        (np.uint8, "xor", False, 700, 64),
        (np.int32, "add", False, 100, 256),  # one program
    ]:
        lo, hi = (-1, 1) if np.dtype(dt).kind == "f" else (-100, 100)
        grid = ct.cdiv(n, tile_size)
        cases.append(
            Case(
                f"chained_reverse[{np.dtype(dt).name},{op},{'ex' if exclusive else 'in'},{grid}]",
                chained_reverse,
                [_rand(rng, n, dt, lo, hi), np.zeros(n, dt), np.zeros(grid, dt), n, _identity(op, np.dtype(dt))],
                {"TILE": tile_size, "OP": op, "EXCLUSIVE": exclusive},
                grid,
                [1, 2],
                ref_chained_reverse,
            )
        )
    cases += linrec_cases(
        rng,
        chained_reverse_linrec,
        ref_chained_reverse_linrec,
        [(np.float32, 3000, 256, False), (np.float32, 1000, 300, True), (np.float64, 2049, 512, True)],
    )
    return cases


def _rand(rng: np.random.Generator, n: int, dt: Any, lo: float = -100, hi: float = 100) -> np.ndarray:
    dt = np.dtype(dt)
    if dt.kind == "f":
        return rng.uniform(lo, hi, n).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(max(info.min, int(lo)), min(info.max, int(hi)), n, endpoint=True).astype(dt)


# ----- gathers, scatters and atomics on index tiles ---------------------------------------------------
@ct.jit
def gather_masked(table, idx, out, n, TILE: ct.constexpr):
    """out[j] = table[idx[j]] where the index is inside the table, else 7 (the mask keeps the others
    unread and unchecked)."""
    base = ct.program_id(0) * TILE
    i = tile.load(idx, base, TILE, valid=n - base, other=0)
    inside = (i >= 0) & (i < table.shape[0])
    tile.store(out, base, tile.gather(table, i, mask=inside, other=7), valid=n - base)


@ct.jit
def gather_2d(table, rows, cols, out, n, TILE: ct.constexpr):
    """out[j] = table[rows[j], cols[j]]."""
    base = ct.program_id(0) * TILE
    r = tile.load(rows, base, TILE, valid=n - base, other=0)
    c = tile.load(cols, base, TILE, valid=n - base, other=0)
    tile.store(out, base, tile.gather(table, (r, c)), valid=n - base)


@ct.jit
def scatter_masked(x, idx, out, n, TILE: ct.constexpr):
    """out[idx[j]] = x[j] except where idx[j] % 5 == 0 (masked off) or idx[j] is outside out (skipped)."""
    base = ct.program_id(0) * TILE
    i = tile.load(idx, base, TILE, valid=n - base, other=-1)
    tile.scatter(out, i, tile.load(x, base, TILE, valid=n - base), mask=i % 5 != 0)


@ct.jit
def scatter_2d(rows, cols, x, out, hit, n, TILE: ct.constexpr):
    """out[rows[j], cols[j]] = x[j] and hit[rows[j], cols[j]] = 1 (a scalar scattered)."""
    base = ct.program_id(0) * TILE
    r = tile.load(rows, base, TILE, valid=n - base, other=-1)
    c = tile.load(cols, base, TILE, valid=n - base, other=-1)
    tile.scatter(out, (r, c), tile.load(x, base, TILE, valid=n - base))
    tile.scatter(hit, (r, c), 1)


@ct.jit
def atomic_sums_at(idx, vals, sums, counts, total, n, TILE: ct.constexpr):
    """sums[idx[j]] += vals[j] (but where idx[j] % 7 == 3), counts[idx[j]] += 1, total[0] += 1 per
    program; indices outside the arrays are skipped."""
    base = ct.program_id(0) * TILE
    i = tile.load(idx, base, TILE, valid=n - base, other=0)
    tile.atomic_add(sums, i, tile.load(vals, base, TILE, valid=n - base, other=0), valid=n - base, mask=i % 7 != 3)
    tile.atomic_add(counts, i, 1, valid=n - base)
    tile.atomic_add(total, 0, 1)


@ct.jit
def atomic_extremes_at(idx, vals, maxs, mins, n, TILE: ct.constexpr):
    """maxs[idx[j]] = max(maxs[idx[j]], vals[j]) and mins likewise, for the valid elements."""
    base = ct.program_id(0) * TILE
    i = tile.load(idx, base, TILE, valid=n - base, other=0)
    v = tile.load(vals, base, TILE, valid=n - base, other=0)
    tile.atomic_max(maxs, i, v, valid=n - base)
    tile.atomic_min(mins, i, v, valid=n - base)


@ct.jit
def atomic_2d(rows, cols, vals, sums, maxs, tops, n, TILE: ct.constexpr):
    """Atomics at (rows[j], cols[j]) of 2-D arrays, and from offset 0 of a 1-D one with a mask:
    tops[k] is the max over programs of their element k where its row is 0."""
    base = ct.program_id(0) * TILE
    r = tile.load(rows, base, TILE, valid=n - base, other=-1)
    c = tile.load(cols, base, TILE, valid=n - base, other=-1)
    v = tile.load(vals, base, TILE, valid=n - base, other=0)
    tile.atomic_add(sums, (r, c), v)
    tile.atomic_max(maxs, (r, c), v)
    tile.atomic_max(tops, 0, v, valid=n - base, mask=r == 0)


def ref_gather_masked(table, idx, out, n, TILE):
    for j in range(n):
        k = int(idx[j])
        out[j] = table[k] if 0 <= k < len(table) else np.asarray(7).astype(out.dtype)
    return [out]


@ct.jit
def gather_block(table, rows, cols, out, M: ct.constexpr, N: ct.constexpr):
    """out = table[rows[:, None], cols[None, :]]: two index tiles broadcast together into an (M, N) block."""
    r = tile.load(rows, 0, M)
    c = tile.load(cols, 0, N)
    tile.store(out, (0, 0), tile.gather(table, (r[:, None], c[None, :])))


def ref_gather_block(table, rows, cols, out, M, N):
    for i in range(M):
        for j in range(N):
            out[i, j] = table[rows[i], cols[j]]
    return [out]


def ref_gather_2d(table, rows, cols, out, n, TILE):
    for j in range(n):
        out[j] = table[rows[j], cols[j]]
    return [out]


def ref_gather_2d_of(view, table, rows, cols, out, n, TILE):
    """`ref_gather_2d` of the view of `table` the program gathers from."""
    return ref_gather_2d(view(table), rows, cols, out, n, TILE)


def ref_scatter_masked(x, idx, out, n, TILE):
    for j in range(n):
        k = int(idx[j])
        if k % 5 != 0 and 0 <= k < len(out):
            out[k] = x[j]
    return [out]


def ref_scatter_2d(rows, cols, x, out, hit, n, TILE):
    for j in range(n):
        r, c = int(rows[j]), int(cols[j])
        if 0 <= r < out.shape[0] and 0 <= c < out.shape[1]:
            out[r, c] = x[j]
            hit[r, c] = 1
    return [out, hit]


def ref_atomic_sums_at(idx, vals, sums, counts, total, n, TILE):
    for j in range(n):
        k = int(idx[j])
        if 0 <= k < len(sums):
            if k % 7 != 3:
                sums[k] = (sums[k].astype(np.float64) + vals[j].astype(np.float64)).astype(sums.dtype)
            counts[k] += 1
    total[0] += -(-n // TILE)
    return [sums, counts, total]


def ref_atomic_extremes_at(idx, vals, maxs, mins, n, TILE):
    for j in range(n):
        k, v = int(idx[j]), vals[j]
        if 0 <= k < len(maxs):
            maxs[k] = v if (v != v or v > maxs[k]) and maxs[k] == maxs[k] else maxs[k]
            mins[k] = v if (v != v or v < mins[k]) and mins[k] == mins[k] else mins[k]
    return [maxs, mins]


def ref_atomic_2d(rows, cols, vals, sums, maxs, tops, n, TILE):
    for j in range(n):
        r, c, v = int(rows[j]), int(cols[j]), vals[j]
        if 0 <= r < sums.shape[0] and 0 <= c < sums.shape[1]:
            sums[r, c] += v
            maxs[r, c] = max(maxs[r, c], v)
        if r == 0:
            tops[j % TILE] = max(tops[j % TILE], v)
    return [sums, maxs, tops]


GATHER_DTYPES = [*ALL_DTYPES, np.float16, ct.bfloat16, np.bool_]
ATOMIC_ADD_DTYPES = [np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64, np.float16, ct.bfloat16]
ATOMIC_EXTREME_DTYPES = [np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64]


def _values(rng: np.random.Generator, n: int, dt: Any, lo: int = -100, hi: int = 100) -> np.ndarray:
    """n small integers of `dt` (booleans for bool; never negative for unsigned dtypes)."""
    if np.dtype(dt) == np.bool_:
        return rng.integers(0, 2, n).astype(bool)
    lo = max(lo, 0) if np.dtype(dt).kind == "u" else lo
    return rng.integers(lo, hi, n).astype(np.float32).astype(dt)


def _torch_for(dt: Any) -> str:
    return "torch" if np.dtype(dt) == ct.bfloat16 else "cupy"


def indexed_cases(rng: np.random.Generator) -> list[Case]:
    """Gathers, scatters and index-tile atomics: every dtype each takes, masks, indices outside the
    arrays, strided and 2-D arrays, scalar values, duplicate indices."""
    cases = []
    for dt in GATHER_DTYPES:
        name = np.dtype(dt).name
        n, m = 1000, 300
        table, idx = _values(rng, m, dt), rng.integers(-20, m + 20, n).astype(np.int32)
        cases.append(
            Case(
                f"gather_masked[{name}]",
                gather_masked,
                [table, idx, np.zeros(n, dt), n],
                {"TILE": 256},
                ct.cdiv(n, 256),
                [2],
                ref_gather_masked,
                library=_torch_for(dt),
            )
        )
        perm = rng.permutation(n).astype(np.int64)
        perm[::17] = -3  # outside: skipped
        perm[1::23] = n + 5
        cases.append(
            Case(
                f"scatter_masked[{name}]",
                scatter_masked,
                [_values(rng, n, dt), perm, np.zeros(n, dt), n],
                {"TILE": 300},
                ct.cdiv(n, 300),
                [2],
                ref_scatter_masked,
                library=_torch_for(dt),
            )
        )
    for dt in (np.int16, np.float32, ct.bfloat16):
        n, m = 700, 150
        table, idx = _values(rng, 3 * m, dt), rng.integers(0, m, n).astype(np.uint16)
        step = 3 if dt == ct.bfloat16 else -3  # (bfloat16 runs on PyTorch tensors, which have no negative strides)
        cases.append(
            Case(
                f"gather_masked[{np.dtype(dt).name},strided view]",
                gather_masked,
                [table, idx, np.zeros(n, dt), n],
                {"TILE": 512},
                ct.cdiv(n, 512),
                [2],
                lambda table, idx, out, n, TILE, step=step: ref_gather_masked(table[::step], idx, out, n, TILE),
                prepare=lambda args, step=step: [args[0][::step], *args[1:]],
                library=_torch_for(dt),
            )
        )
    for dt, transposed in ((np.float64, False), (np.int8, True), (np.float16, True)):
        n, shape = 900, (40, 30)
        table = _values(rng, shape[0] * shape[1], dt).reshape(shape if not transposed else shape[::-1])
        rows, cols = rng.integers(0, shape[0], n).astype(np.int64), rng.integers(0, shape[1], n).astype(np.int32)
        view = (lambda a: a.T) if transposed else (lambda a: a)
        cases.append(
            Case(
                f"gather_2d[{np.dtype(dt).name},{'transposed' if transposed else 'contiguous'}]",
                gather_2d,
                [table, rows, cols, np.zeros(n, dt), n],
                {"TILE": 256},
                ct.cdiv(n, 256),
                [3],
                functools.partial(ref_gather_2d_of, view),
                prepare=lambda args, view=view: [view(args[0]), *args[1:]],
            )
        )
    for dt in (np.float32, np.int16):
        table = _values(rng, 40 * 30, dt).reshape(40, 30)
        rows, cols = rng.integers(0, 40, 8).astype(np.int32), rng.integers(0, 30, 16).astype(np.int64)
        cases.append(
            Case(
                f"gather_block[{np.dtype(dt).name}]",
                gather_block,
                [table, rows, cols, np.zeros((8, 16), dt)],
                {"M": 8, "N": 16},
                1,
                [3],
                ref_gather_block,
            )
        )
    for dt in (np.float32, np.uint8, ct.bfloat16):
        shape = (25, 40)
        flat = rng.permutation(shape[0] * shape[1])[:800]
        rows, cols = (flat // shape[1]).astype(np.int32), (flat % shape[1]).astype(np.int32)
        rows[::31] = shape[0]  # outside: skipped
        n = len(flat)
        cases.append(
            Case(
                f"scatter_2d[{np.dtype(dt).name}]",
                scatter_2d,
                [rows, cols, _values(rng, n, dt), np.zeros(shape, dt), np.zeros(shape, np.int8), n],
                {"TILE": 256},
                ct.cdiv(n, 256),
                [3, 4],
                ref_scatter_2d,
                library=_torch_for(dt),
            )
        )
    for dt in ATOMIC_ADD_DTYPES:
        n, bins = 1000, 40
        idx = rng.integers(-3, bins + 3, n).astype(np.int32)
        vals = _values(rng, n, dt, -3, 4)
        cases.append(
            Case(
                f"atomic_sums_at[{np.dtype(dt).name}]",
                atomic_sums_at,
                [idx, vals, np.zeros(bins, dt), np.zeros(bins, np.int32), np.zeros(1, np.int64), n],
                {"TILE": 384},
                ct.cdiv(n, 384),
                [2, 3, 4],
                ref_atomic_sums_at,
                library=_torch_for(dt),
            )
        )
    for dt in ATOMIC_EXTREME_DTYPES:
        n, bins = 1200, 50
        idx = rng.integers(-2, bins + 2, n).astype(np.int64)
        vals = _values(rng, n, dt, -1000, 1000)
        if np.dtype(dt).kind == "f":
            vals[::97] = np.nan
            vals[1::89] = -np.inf
            vals[2::101] = -np.nan
        start = np.zeros(bins, dt)
        cases.append(
            Case(
                f"atomic_extremes_at[{np.dtype(dt).name}]",
                atomic_extremes_at,
                [idx, vals, start.copy(), start.copy(), n],
                {"TILE": 256},
                ct.cdiv(n, 256),
                [2, 3],
                ref_atomic_extremes_at,
            )
        )
    for dt in (np.int32, np.float64):
        n, shape = 800, (12, 9)
        rows, cols = rng.integers(-1, shape[0] + 1, n).astype(np.int32), rng.integers(0, shape[1], n).astype(np.int32)
        cases.append(
            Case(
                f"atomic_2d[{np.dtype(dt).name}]",
                atomic_2d,
                [rows, cols, _values(rng, n, dt), np.zeros(shape, dt), np.zeros(shape, dt), np.zeros(200, dt), n],
                {"TILE": 200},
                ct.cdiv(n, 200),
                [3, 4, 5],
                ref_atomic_2d,
            )
        )
    return cases


def make_cases(seed: int = 0) -> list[Case]:
    """Every shared case; small enough for the interpreter, varied in sizes, tails and dtypes."""
    rng = np.random.default_rng(seed)
    cases: list[Case] = []

    for dt, n, tile_size in [(np.float32, 1000, 256), (np.float64, 999, 100), (np.int32, 5, 7), (np.int8, 64, 1)]:
        cases.append(
            Case(
                f"vector_add[{np.dtype(dt).name},n={n},tile={tile_size}]",
                vector_add,
                [_rand(rng, n, dt, -50, 50), _rand(rng, n, dt, -50, 50), np.zeros(n, dt), n],
                {"TILE": tile_size},
                ct.cdiv(n, tile_size),
                [2],
                ref_vector_add,
            )
        )

    n = 5000
    cases.append(
        Case(
            "scaled_cumsum[int32->float64]",
            scaled_cumsum,
            [_rand(rng, n, np.int32), np.zeros(n, np.float64), n, 2.0],
            {"TILE": 1024},
            ct.cdiv(n, 1024),
            [1],
            ref_scaled_cumsum,
        )
    )

    for dt in ALL_DTYPES:
        ops = ["add", "max", "min", "mul"] + (["and", "or", "xor"] if np.dtype(dt).kind != "f" else [])
        for op in ops:
            for exclusive in (False, True):
                tile_size = 300 if op != "mul" else 37
                n = 777
                lo, hi = (-1, 2) if op == "mul" else (-100, 100)
                if np.dtype(dt).kind == "f" and op == "mul":
                    lo, hi = 0.5, 1.5
                cases.append(
                    Case(
                        f"tile_scan[{np.dtype(dt).name},{op},{'ex' if exclusive else 'in'}]",
                        tile_scan,
                        [_rand(rng, n, dt, lo, hi), np.zeros(n, dt), n],
                        {"TILE": tile_size, "OP": op, "EXCLUSIVE": exclusive},
                        ct.cdiv(n, tile_size),
                        [1],
                        ref_tile_scan,
                        rtol=1e-4 if np.dtype(dt) == np.float32 else 1e-10,
                        atol=1e-3 if np.dtype(dt).kind == "f" else 0,
                    )
                )

    for dt, n, tile_size, exclusive in [
        (np.int32, 3000, 512, False),
        (np.int64, 1000, 100, True),
        (np.float64, 2049, 256, False),
        (np.uint8, 300, 33, True),
    ]:
        cases.append(
            Case(
                f"carried_cumsum[{np.dtype(dt).name},tile={tile_size},{'ex' if exclusive else 'in'}]",
                carried_cumsum,
                [_rand(rng, n, dt, 0, 9), np.zeros(n + 1, dt), n],
                {"TILE": tile_size, "EXCLUSIVE": exclusive},
                1,
                [1],
                ref_carried_cumsum,
                rtol=1e-12 if np.dtype(dt).kind == "f" else 0,
            )
        )

    rows, cols = 6, 1000
    cases.append(
        Case(
            "row_max_scan[float32]",
            row_max_scan,
            [_rand(rng, rows * cols, np.float32), np.zeros(rows * cols, np.float32), cols],
            {"TILE": 384},
            rows,
            [1],
            ref_row_max_scan,
        )
    )

    for dt in FLOAT_DTYPES:
        rows, cols = 5, 1000
        x = _rand(rng, rows * cols, dt, -3, 3)
        cases.append(
            Case(
                f"row_norms[{np.dtype(dt).name}]",
                row_norms,
                [x, np.zeros(rows * cols, dt), cols],
                {"CHUNK": 256},
                rows,
                [1],
                ref_row_norms,
                rtol=1e-5,
                atol=1e-7,
            )
        )

    for dt in ALL_DTYPES:
        n, tile_size = 1000, 384
        small = np.dtype(dt).itemsize < 4 or np.dtype(dt).kind == "f"
        x = _rand(rng, n, dt, -3 if small else -1000, 3 if small else 1000)
        cases.append(
            Case(
                f"reductions[{np.dtype(dt).name}]",
                reductions,
                [x, np.zeros(4 * ct.cdiv(n, tile_size), dt), n],
                {"TILE": tile_size},
                ct.cdiv(n, tile_size),
                [1],
                ref_reductions,
                rtol=1e-5 if np.dtype(dt).kind == "f" else 0,
                atol=1e-4 if np.dtype(dt).kind == "f" else 0,
            )
        )

    for dt in FLOAT_DTYPES:
        n = 700
        x = _rand(rng, n, dt, 0.05, 3.0)
        cases.append(
            Case(
                f"elementwise_math[{np.dtype(dt).name}]",
                elementwise_math,
                [x, np.zeros(7 * n, dt), n],
                {"TILE": 256},
                ct.cdiv(n, 256),
                [1],
                ref_elementwise_math,
                rtol=2e-5 if np.dtype(dt) == np.float32 else 1e-12,
                atol=1e-5,
            )
        )

    for dt, rtol in [(np.float32, 2e-6), (np.float64, 1e-14), (np.float16, 1e-3), (np.int8, 1e-3)]:
        n = 500
        x = _rand(rng, n, dt, 0.05, 3.0) if np.dtype(dt).kind == "f" else _rand(rng, n, dt, 1, 100)
        cases.append(
            Case(
                f"triton_math[{np.dtype(dt).name}]",
                triton_math,
                [x, np.zeros(4 * n, np.float32 if np.dtype(dt).itemsize < 4 else dt), n],
                {"TILE": 256},
                ct.cdiv(n, 256),
                [1],
                ref_triton_math,
                rtol=rtol,
                atol=1e-6 if np.dtype(dt) != np.float64 else 1e-14,
            )
        )

    n = 600
    cases.append(
        Case(
            "integer_ops[int32]",
            integer_ops,
            [_rand(rng, n, np.int32), np.zeros(4 * n, np.int32), n],
            {"TILE": 200},
            3,
            [1],
            ref_integer_ops,
        )
    )
    for dt, lo, s in ((np.int32, -1000, -7), (np.int64, -(2**40), 3), (np.uint32, 0, 7), (np.int16, -300, 0)):
        x = _rand(rng, n, dt, lo, -lo if lo else 2**31)
        d = _rand(rng, n, dt, -9 if lo else 0, 9)  # zeros among them
        if dt == np.int64:
            d[::5] = rng.integers(-(2**34), 2**34, len(d[::5]))  # divisors past 32 bits: the 64-bit division
        if lo < 0:
            x[:2], d[:2] = np.iinfo(dt).min, (-1, 0)  # the quotient the dtype does not hold; a zero divisor
        cases.append(
            Case(
                f"integer_division[{np.dtype(dt).name}]",
                integer_division,
                [x, d, np.zeros(3 * n, dt), n, dt(s)],
                {"TILE": 256},
                3,
                [2],
                ref_integer_division,
            )
        )
    cases.append(
        Case(
            "cast_and_compare",
            cast_and_compare,
            [_rand(rng, n, np.int64, -5, 5), np.zeros(n, np.float32), n, 0.75],
            {"TILE": 128},
            ct.cdiv(n, 128),
            [1],
            ref_cast_and_compare,
        )
    )
    cases.append(
        Case(
            "uses_helper",
            uses_helper,
            [_rand(rng, n, np.float64, -1, 1), np.zeros(n, np.float64), n],
            {"TILE": 96},
            ct.cdiv(n, 96),
            [1],
            ref_uses_helper,
        )
    )
    for mode in (0, 1, 2):
        cases.append(
            Case(
                f"control_flow[mode={mode}]",
                control_flow,
                [_rand(rng, n, np.float32, 0, 1), np.zeros(n, np.float32), n, mode],
                {"TILE": 160},
                ct.cdiv(n, 160),
                [1],
                ref_control_flow,
                rtol=1e-5,
                atol=1e-5,
            )
        )
    n = 40
    cases.append(
        Case("scalar_io", scalar_io, [_rand(rng, n, np.int64), np.zeros(n + 1, np.int64), n], {}, n, [1], ref_scalar_io)
    )
    cases.append(Case("arange_sum[tile=1]", arange_sum, [np.zeros(3, np.int64)], {"TILE": 1}, 3, [0], ref_arange_sum))
    cases.append(
        Case("arange_sum[tile=1000]", arange_sum, [np.zeros(2, np.int64)], {"TILE": 1000}, 2, [0], ref_arange_sum)
    )
    n = 100
    cases.append(
        Case(
            "vector_add[valid=0 tail]",
            vector_add,
            [_rand(rng, n, np.float32), _rand(rng, n, np.float32), np.zeros(n, np.float32), n],
            {"TILE": 64},
            3,
            [2],
            ref_vector_add,
        )
    )  # the third program has valid < 0
    return (
        cases
        + new_feature_cases(rng)
        + toolbox_cases(rng)
        + storage_cases(rng)
        + chained_cases(rng)
        + reverse_cases(rng)
        + indexed_cases(rng)
    )


CASES = make_cases()
