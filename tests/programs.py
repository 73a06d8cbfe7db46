"""Tile programs shared by the interpreter, compile-only and GPU tests (the same program, three modes).

Each `Case` makes its inputs, launches one program, and checks the outputs against a
sequential NumPy reference written independently of coop_tiles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import coop_tiles as ct
from coop_tiles import tile

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

    def expected(self) -> list[np.ndarray]:
        return self.reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in self.args], **self.constexprs)

    def check(self, got: list[np.ndarray]) -> None:
        for g, e, i in zip(got, self.expected(), self.outputs):
            assert g.dtype == e.dtype, f"{self.name}: output {i} dtype {g.dtype} != {e.dtype}"
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
def scaled_cumsum(x, y, n, alpha, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    s = tile.scan(t * alpha, op="add")
    tile.store(y, base, s, valid=n - base)


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


def ref_integer_ops(x, out, n, TILE):
    t = x[:n]
    idx = np.arange(n, dtype=np.int32)
    with np.errstate(all="ignore"):
        out[:n] = (t & 7) | (idx << 2)
        out[n : 2 * n] = (t ^ idx) - (t >> 1) + t // 3 - t % 5
        out[2 * n : 3 * n] = np.where((t > 3) & (idx % 2 == 0), t * -1, t + 1)
        out[3 * n : 4 * n] = 7
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


# ----- cases ---------------------------------------------------------------------------------------------
def _rand(rng: np.random.Generator, n: int, dt: Any, lo: float = -100, hi: float = 100) -> np.ndarray:
    dt = np.dtype(dt)
    if dt.kind == "f":
        return rng.uniform(lo, hi, n).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(max(info.min, int(lo)), min(info.max, int(hi)), n, endpoint=True).astype(dt)


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
    return cases


CASES = make_cases()
