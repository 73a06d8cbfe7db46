"""The option matrix: every combination of every tile op's declared options (`TileOp.options`, see
`coop_tiles/ops/options.py`), each made into a call in a generated tile program, with a NumPy
reference written without coop_tiles.

`tests/test_option_matrix.py` runs the programs in the interpreter against the references, compiles
them to sm_90 cubins, and checks that each combination the contract forbids raises its declared
error at the call's line in both modes; `tests/test_gpu_option_matrix.py` and
`scripts/sanitize_matrix.py` run them on a GPU against the interpreter.

Every call runs in `GRID` programs, each on its own tile of `T` elements, `T` one of `SIZES`: a
tile that fills the block's items exactly and one that leaves padding (the two code paths of most
shims). Which one a combination gets alternates with its samples (the parity of the sum of their
indices), so every pair of sample values meets both sizes. A `COUNT` sample is `n - base` with
`n = (GRID - 1) * T - SHORT`: the whole tile and more in the first programs, part of it in the one
before last, and a negative count (nothing) in the last.

Allowed combinations of one op are packed into few programs (`GROUP` calls each; at most one call
per program with a sample an option declares `once`, such as a chained scan), because compiling is
the matrix's cost. When a program fails, each of its combinations is tried alone, so a failure is
always reported against the combination that causes it.

Each op's `Harness` writes its calls (operands, keyword options, where the results go) and their
reference. A harness lists the options it knows: an option declared on an op but unknown to its
harness fails the matrix, so that the reference learns what the option means.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import multiprocessing
import os
import zlib
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.ops.base import BY_PUBLIC
from coop_tiles.ops.options import COMBINE, COUNT, SCALAR, TILE, TUPLE, Forbidden, Sample, combinations, forbidden
from coop_tiles.runtime.cache import DiskCache

BLOCK = 128
SIZES = (512, 300)  # 4 items per thread exactly; 3 items per thread with 84 of padding
GRID = 4
SHORT = 37
GROUP = 12
ARCH = "sm_90"


# ================================================================================================
# Combinations
# ================================================================================================
def show(value: Any) -> str:
    """A sample as it appears in a combination's name."""
    if isinstance(value, (Sample, str)):
        return str(value)
    if isinstance(value, type) and issubclass(value, np.generic):
        return np.dtype(value).name
    return repr(value)


@dataclass(frozen=True)
class Combination:
    """One combination of an op's option samples, the tile size it runs at, and the rule that
    forbids it (None: the contract allows it)."""

    public: Callable
    choice: tuple[tuple[str, Any], ...]
    size: int
    rule: Forbidden | None = field(compare=False)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.choice)

    @property
    def once(self) -> bool:
        """Whether a program may make this call only once (a chained scan)."""
        declared = {o.name: o for o in BY_PUBLIC[self.public].options}
        return any(v in declared[k].once for k, v in self.choice)

    def __str__(self) -> str:
        return f"{self.public.__name__}[{','.join(f'{k}={show(v)}' for k, v in self.choice)}]"


def all_combinations() -> list[Combination]:
    """Every combination of every op of `tile` (`tile.__all__`)."""
    out = []
    for name in tile.__all__:
        public = getattr(tile, name)
        op = BY_PUBLIC[public]
        samples = {o.name: o.samples for o in op.options}
        for choice in combinations(op.options, public):
            parity = sum(_index(samples[k], v) for k, v in choice.items()) % 2
            out.append(Combination(public, tuple(choice.items()), SIZES[parity], forbidden(op.forbids, choice)))
    return out


def _index(samples: tuple, value: Any) -> int:
    """Where `value` is among `samples` (by identity or same type and value: `0` is not `False`)."""
    return next(i for i, s in enumerate(samples) if s is value or (type(s) is type(value) and s == value))


# ================================================================================================
# Generated programs
# ================================================================================================
@dataclass
class Output:
    """An array a call writes, what it must hold, and which of its elements are specified."""

    param: str
    expected: np.ndarray
    where: np.ndarray | None = None


class Source:
    """A generated tile program: its lines, its parameters with their values, and its constants."""

    def __init__(self, name: str, label: str):
        self.name = name
        self.filename = f"<option matrix: {label}>"
        self.lines = [f"def {name}({{params}}):", "    pid = ct.program_id(0)"]
        self.params: dict[str, Any] = {}
        self.names: dict[str, Any] = {"ct": ct, "tile": tile, "np": np}
        self.outputs: dict[str, list[Output]] = {}
        self.call_lines: dict[str, int] = {}

    def param(self, name: str, value: Any) -> str:
        self.params[name] = value
        return name

    def const(self, name: str, value: Any) -> str:
        self.names[name] = value
        return name

    def line(self, text: str) -> None:
        self.lines.append("    " + text)

    def call(self, c: Combination, text: str) -> None:
        """The line that calls the op (where its errors are located)."""
        self.line(text)
        self.call_lines[str(c)] = len(self.lines)

    def output(
        self, c: Combination, name: str, initial: np.ndarray, expected: np.ndarray, where: np.ndarray | None = None
    ) -> str:
        self.outputs.setdefault(str(c), []).append(Output(name, expected, where))
        return self.param(name, initial)

    @functools.cached_property
    def fn(self) -> Callable:
        text = "\n".join(self.lines).replace("{params}", ", ".join(self.params)) + "\n"
        linecache.cache[self.filename] = (len(text), None, text.splitlines(True), self.filename)
        exec(compile(text, self.filename, "exec"), self.names)
        return self.names[self.name]

    def text(self) -> str:
        return "".join(linecache.cache[self.filename][2])

    def args(self) -> list[Any]:
        return [v.copy() if isinstance(v, np.ndarray) else v for v in self.params.values()]


def keywords(s: Source, c: Combination, i: int, operands: tuple[str, ...], realize: Callable[[str, Any], str]) -> str:
    """`, name=value` for each option of `c` that is not an operand and not left at its default:
    constants by name, `COUNT` as the program's valid count, other samples as `realize` makes them."""
    params = inspect.signature(c.public).parameters
    out = ""
    for name, value in c.choice:
        default = params[name].default
        at_default = not isinstance(value, Sample) and default is not inspect.Parameter.empty and _same(value, default)
        if name in operands or at_default:
            continue
        if value is COUNT:
            expr = f"{(GRID - 1) * c.size - SHORT} - base{i}"
        elif isinstance(value, Sample):
            expr = realize(name, value)
        else:
            expr = s.const(f"opt_{name}{i}", value)
        out += f", {name}={expr}"
    return out


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def counts(c: Combination) -> list[int]:
    """Each program's count of valid elements for a `COUNT` valid (else the whole tile)."""
    valid = c.options.get("valid")
    n = (GRID - 1) * c.size - SHORT
    return [int(np.clip(n - p * c.size, 0, c.size)) if valid is COUNT else c.size for p in range(GRID)]


def rng_for(c: Combination) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(str(c).encode()))


# ================================================================================================
# Harnesses: each op's calls and references
# ================================================================================================
@dataclass(frozen=True)
class Harness:
    """How the matrix calls one op: `write(source, combination, i)` adds call `i` and its expected
    outputs; `knows` are the options its reference understands."""

    write: Callable[[Source, Combination, int], None]
    knows: frozenset[str]


HARNESSES: dict[Callable, Harness] = {}


def harness(*publics: Callable, knows: tuple[str, ...] = ()) -> Callable:
    def register(write: Callable[[Source, Combination, int], None]) -> Callable:
        for public in publics:
            HARNESSES[public] = Harness(write, frozenset(knows))
        return write

    return register


def no_realize(name: str, value: Any) -> str:
    raise AssertionError(f"the matrix cannot make {value!r} for {name}")


# ----- memory ------------------------------------------------------------------------------------
@harness(tile.load, knows=("valid", "other"))
def _load(s: Source, c: Combination, i: int) -> None:
    T, o = c.size, c.options
    x = rng_for(c).integers(-100, 100, GRID * T).astype(np.int32)
    other = {0: 0, -7: -7, SCALAR: 11}[o["other"]] if o["valid"] is COUNT else 0
    expected = x.copy()
    for p, k in enumerate(counts(c)):
        expected[p * T + k : (p + 1) * T] = other
    kw = keywords(s, c, i, (), lambda name, v: s.param(f"other{i}", 11))
    s.line(f"base{i} = pid * {T}")
    s.call(c, f"t{i} = tile.load({s.param(f'x{i}', x)}, base{i}, {T}{kw})")
    s.line(f"tile.store({s.output(c, f'y{i}', np.zeros_like(x), expected)}, base{i}, t{i})")


@harness(tile.store, knows=("valid",))
def _store(s: Source, c: Combination, i: int) -> None:
    T = c.size
    x = rng_for(c).integers(-100, 100, GRID * T).astype(np.int32)
    expected = np.full_like(x, -1)
    for p, k in enumerate(counts(c)):
        expected[p * T : p * T + k] = x[p * T : p * T + k]
    kw = keywords(s, c, i, (), no_realize)
    s.line(f"base{i} = pid * {T}")
    y = s.output(c, f"y{i}", np.full_like(x, -1), expected)
    s.call(c, f"tile.store({y}, base{i}, tile.load({s.param(f'x{i}', x)}, base{i}, {T}){kw})")


def _mask_data(c: Combination, rng: np.random.Generator, size: int) -> np.ndarray:
    """Each program's mask (all true without `mask=`)."""
    return rng.random(GRID * size) < 0.7 if c.options.get("mask") is TILE else np.ones(GRID * size, bool)


def _mask_text(s: Source, c: Combination, i: int, data: np.ndarray, size: int) -> Callable[[str, Any], str]:
    """`realize` for a `mask=` tile (loaded from `data`, `size` elements per program)."""

    def realize(name: str, value: Any) -> str:
        assert name == "mask" and value is TILE, (name, value)
        s.line(f"m{i} = tile.load({s.param(f'xm{i}', data)}, pid * {size}, {size})")
        return f"m{i}"

    return realize


ATOMIC_FOLDS = {tile.atomic_add: lambda a, b: a + b, tile.atomic_max: max, tile.atomic_min: min}
BINS = 37


@harness(tile.atomic_add, tile.atomic_max, tile.atomic_min, knows=("offset_or_index", "t", "valid", "mask"))
def _atomic(s: Source, c: Combination, i: int) -> None:
    """Every program updates the same elements: from offset 0, or at an index tile's elements (duplicates
    and indices outside the array among them)."""
    T, o, rng = c.size, c.options, rng_for(c)
    indexed = o["offset_or_index"] is TILE
    size = T if indexed or o["t"] is TILE else 1  # (a scalar from an offset is a tile of one element)
    x = rng.integers(-100, 100, GRID * T).astype(np.int32)
    idx = rng.integers(-2, BINS + 2, GRID * T).astype(np.int32)
    mask = _mask_data(c, rng, size)
    initial = np.arange(BINS if indexed else T, dtype=np.int32) - 20
    expected, fold = initial.copy(), ATOMIC_FOLDS[c.public]
    for p, k in enumerate(counts(c)):
        for e in range(min(k, size)):
            at = idx[p * T + e] if indexed else e
            value = x[p * T + e] if o["t"] is TILE else 5
            if mask[p * size + e] and 0 <= at < len(expected):
                expected[at] = fold(expected[at], value)
    s.line(f"base{i} = pid * {T}")
    where = f"tile.load({s.param(f'i{i}', idx)}, base{i}, {T})" if indexed else "0"
    value = f"tile.load({s.param(f'x{i}', x)}, base{i}, {T})" if o["t"] is TILE else s.param(f"v{i}", 5)
    kw = keywords(s, c, i, ("offset_or_index", "t"), _mask_text(s, c, i, mask, size))
    y = s.output(c, f"y{i}", initial, expected)
    s.call(c, f"tile.{c.public.__name__}({y}, {where}, {value}{kw})")


# ----- gathers and scatters ----------------------------------------------------------------------
COLS = 64


def _index_data(c: Combination, rng: np.random.Generator, extent: int, positions: np.ndarray) -> list[np.ndarray]:
    """The index tiles' data for element positions `positions` of an array of `extent` elements: one
    index, or (row, column) of a (extent // COLS, COLS) array for a `TUPLE` index."""
    if c.options["index"] is TUPLE:
        return [(positions // COLS).astype(np.int32), (positions % COLS).astype(np.int64)]
    return [positions.astype(np.int32)]


def _index_text(s: Source, c: Combination, i: int, data: list[np.ndarray]) -> str:
    names = []
    for j, d in enumerate(data):
        s.line(f"j{i}_{j} = tile.load({s.param(f'xj{i}_{j}', d)}, base{i}, {c.size})")
        names.append(f"j{i}_{j}")
    return f"({', '.join(names)})" if len(names) > 1 else names[0]


def _shaped(c: Combination, flat: np.ndarray) -> np.ndarray:
    return flat.reshape(-1, COLS) if c.options["index"] is TUPLE else flat


@harness(tile.gather, knows=("index", "mask", "other"))
def _gather(s: Source, c: Combination, i: int) -> None:
    """Each element reads a random element of the table; masked-off ones point outside it (never
    checked) and give `other`."""
    T, o, rng = c.size, c.options, rng_for(c)
    extent = 8 * COLS
    table = rng.integers(-1000, 1000, extent).astype(np.int32)
    mask = _mask_data(c, rng, T)
    positions = np.where(mask, rng.integers(0, extent, GRID * T), extent + 100)
    other = {0: 0, -7: -7, SCALAR: 11}[o["other"]]
    expected = np.where(mask, table[np.minimum(positions, extent - 1)], other).astype(np.int32)
    s.line(f"base{i} = pid * {T}")
    index = _index_text(s, c, i, _index_data(c, rng, extent, positions))
    realize_mask = _mask_text(s, c, i, mask, T)

    def realize(name: str, value: Any) -> str:
        return s.param(f"other{i}", 11) if name == "other" else realize_mask(name, value)

    kw = keywords(s, c, i, ("index",), realize)
    s.call(c, f"g{i} = tile.gather({s.param(f'x{i}', _shaped(c, table))}, {index}{kw})")
    s.line(f"tile.store({s.output(c, f'y{i}', np.zeros_like(expected), expected)}, base{i}, g{i})")


@harness(tile.scatter, knows=("index", "t", "mask"))
def _scatter(s: Source, c: Combination, i: int) -> None:
    """The programs write a permutation of the array's elements (some indices outside it: skipped);
    masked-off elements write nothing."""
    T, o, rng = c.size, c.options, rng_for(c)
    extent = -(-GRID * T // COLS) * COLS + COLS
    positions = rng.permutation(extent)[: GRID * T]
    positions[::29] = extent + 7  # outside
    mask = _mask_data(c, rng, T)
    x = rng.integers(-1000, 1000, GRID * T).astype(np.int32)
    expected = np.full(extent, -1, np.int32)
    keep = mask & (positions < extent)
    expected[positions[keep]] = x[keep] if o["t"] is TILE else 9
    s.line(f"base{i} = pid * {T}")
    index = _index_text(s, c, i, _index_data(c, rng, extent, positions))
    value = f"tile.load({s.param(f'x{i}', x)}, base{i}, {T})" if o["t"] is TILE else s.param(f"v{i}", 9)
    kw = keywords(s, c, i, ("index", "t"), _mask_text(s, c, i, mask, T))
    y = s.output(c, f"y{i}", _shaped(c, np.full(extent, -1, np.int32)), _shaped(c, expected))
    s.call(c, f"tile.scatter({y}, {index}, {value}{kw})")


# ----- constructors ------------------------------------------------------------------------------
@harness(tile.full, tile.zeros, tile.arange, knows=("dtype",))
def _construct(s: Source, c: Combination, i: int) -> None:
    T, dt = c.size, np.dtype(c.options["dtype"])
    one = {tile.full: np.full(T, 3, dt), tile.zeros: np.zeros(T, dt), tile.arange: np.arange(T).astype(dt)}
    value = ", 3" if c.public is tile.full else ""
    s.line(f"base{i} = pid * {T}")
    y = s.output(c, f"y{i}", np.zeros(GRID * T, dt), np.tile(one[c.public], GRID))
    s.call(c, f"t{i} = tile.{c.public.__name__}({T}{value}{keywords(s, c, i, (), no_realize)})")
    s.line(f"tile.store({y}, base{i}, t{i})")


# ----- scans and reductions ----------------------------------------------------------------------
@ct.combine
def last_nonzero(a, b):
    """The later operand unless it is 0: associative, not commutative."""
    return ct.where(b != 0, b, a)


@ct.combine
def affine(a_l, b_l, a_r, b_r):
    """Affine maps x -> a x + b composed, the earlier one first."""
    return a_r * a_l, a_r * b_l + b_r


BUILTINS: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "max": max,
    "min": min,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
}
#: the seeds `initial` takes, by op
SEEDS = {"add": 5, "mul": -1, "max": 10, "min": -10, "and": 0x0FFFFFFF, "or": 0x100, "xor": 0x5A5}


def _op_of(c: Combination) -> Any:
    named = {tile.sum: "add", tile.max: "max", tile.min: "min"}
    return named.get(c.public, c.options.get("op", "add"))


def _operands(c: Combination) -> tuple[list[np.ndarray], Callable, tuple]:
    """The input tiles' data (int32), the fold as a Python function of (earlier, later) tuples,
    and the seed `initial` takes."""
    rng, n, op, o = rng_for(c), GRID * c.size, _op_of(c), c.options
    if op is COMBINE and o["t"] is TUPLE:
        a = rng.choice(np.array([1, -1], np.int32), n)
        return [a, rng.integers(-3, 4, n).astype(np.int32)], (lambda l, r: (r[0] * l[0], r[0] * l[1] + r[1])), (1, 3)
    if op is COMBINE:
        x = np.where(rng.random(n) < 0.5, 0, rng.integers(1, 10, n)).astype(np.int32)
        return [x], (lambda l, r: (r[0] if r[0] != 0 else l[0],)), (7,)
    wide = o.get("dtype") is np.int64
    data = {
        "add": lambda: rng.integers(0, 2**27, n) if wide else rng.integers(-50, 50, n),
        "mul": lambda: np.where(rng.random(n) < 1 / 128, 2, rng.choice([1, -1], n)),
        "max": lambda: rng.integers(-1000, 1000, n),
        "min": lambda: rng.integers(-1000, 1000, n),
        "and": lambda: ~(1 << rng.integers(0, 28, n)),
        "or": lambda: 1 << rng.integers(0, 28, n),
        "xor": lambda: rng.integers(0, 2**20, n),
    }
    fold = BUILTINS[op]
    return [data[op]().astype(np.int32)], (lambda l, r: (fold(l[0], r[0]),)), (SEEDS[op],)


def _acc_dtypes(c: Combination, k: int) -> list[np.dtype]:
    """The results' dtypes: `dtype`'s, else the operands' (int32; also for a forbidden `dtype`, which
    never runs)."""
    dt = c.options.get("dtype")
    return [np.dtype(np.int32 if dt is None or c.rule is not None else dt)] * k


def _identity(op: Any, dt: np.dtype) -> Any:
    if op is COMBINE or op in ("add", "or", "xor"):
        return dt.type(0)
    if op == "mul":
        return dt.type(1)
    if op == "and":
        return dt.type(-1)
    if dt.kind == "f":
        return dt.type(-np.inf if op == "max" else np.inf)
    return np.iinfo(dt).min if op == "max" else np.iinfo(dt).max


def _operand_text(s: Source, c: Combination, i: int, data: list[np.ndarray]) -> str:
    """Loads of the operand tiles; the operand as the call takes it (a tuple of two for `TUPLE`, the
    second a copy of the first for a built-in op, which the contract forbids)."""
    names = [f"a{i}", f"b{i}"][: len(data)]
    for name, x in zip(names, data):
        s.line(f"{name} = tile.load({s.param(f'x{name}', x)}, base{i}, {c.size})")
    if c.options.get("t") is not TUPLE:
        return names[0]
    return f"({names[0]}, {names[-1]})"


def _combine_or_seed(s: Source, c: Combination, i: int, seed: tuple) -> Callable[[str, Any], str]:
    def realize(name: str, value: Any) -> str:
        if value is COMBINE:
            return s.const(f"combine{i}", affine if c.options["t"] is TUPLE else last_nonzero)
        assert name == "initial" and value is SCALAR, (name, value)
        names = [s.param(f"seed{i}_{j}", v) for j, v in enumerate(seed)]
        return f"({', '.join(names)})" if c.options["t"] is TUPLE else names[0]

    return realize


@harness(tile.scan, knows=("t", "op", "dtype", "reverse", "exclusive", "initial", "return_total", "chained"))
def _scan(s: Source, c: Combination, i: int) -> None:
    T, o = c.size, c.options
    data, fold, seed = _operands(c)
    k = len(data)
    dts = _acc_dtypes(c, k)
    s.line(f"base{i} = pid * {T}")
    operands = _operand_text(s, c, i, data)
    kw = keywords(s, c, i, ("t",), _combine_or_seed(s, c, i, seed))
    scanned = [f"r{i}_{j}" for j in range(k)]
    totals = [f"q{i}_{j}" for j in range(k)]
    target = f"({', '.join(scanned)})" if k > 1 or o["t"] is TUPLE else scanned[0]
    if o["return_total"]:
        target += ", " + (f"({', '.join(totals)})" if k > 1 or o["t"] is TUPLE else totals[0])
    s.call(c, f"{target} = tile.scan({operands}{kw})")
    ys, zs = _scan_reference(c, data, fold, seed, dts) if c.rule is None else ([data[0]] * k, [data[0]] * k)
    for j in range(k):
        s.line(f"tile.store({s.output(c, f'y{i}_{j}', np.zeros_like(ys[j]), ys[j])}, base{i}, {scanned[j]})")
        if o["return_total"]:
            s.line(f"{s.output(c, f'z{i}_{j}', np.zeros_like(zs[j]), zs[j])}[pid] = {totals[j]}")


def _scan_reference(c: Combination, data: list[np.ndarray], fold: Callable, seed: tuple, dts: list[np.dtype]):
    """(scanned arrays, totals by program): a sequential fold per tile, or over the whole array for a
    chained scan; from the last element (and program) to the first for a reverse one."""
    T, o = c.size, c.options
    xs = [x.astype(dt) for x, dt in zip(data, dts)]
    seeded = o["initial"] is not None
    start = tuple(dt.type(v) for v, dt in zip(seed, dts)) if seeded else None
    ys = [np.zeros(GRID * T, dt) for dt in dts]
    zs = [np.zeros(GRID, dt) for dt in dts]
    acc = start
    backwards = o.get("reverse", False)
    for p in range(GRID - 1, -1, -1) if backwards and o["chained"] else range(GRID):
        if not o["chained"]:
            acc = start
        for j in range((p + 1) * T - 1, p * T - 1, -1) if backwards else range(p * T, (p + 1) * T):
            item = tuple(x[j] for x in xs)
            before = acc if acc is not None else tuple(_identity(_op_of(c), dt) for dt in dts)
            with np.errstate(all="ignore"):
                acc = item if acc is None else tuple(dt.type(v) for v, dt in zip(fold(acc, item), dts))
            for y, v in zip(ys, before if o["exclusive"] else acc):
                y[j] = v
        for z, v in zip(zs, acc):
            z[p] = v
    return ys, zs


@harness(tile.reduce, tile.sum, tile.max, tile.min, knows=("t", "op", "dtype"))
def _reduce(s: Source, c: Combination, i: int) -> None:
    T, o = c.size, c.options
    data, fold, _ = _operands(c)
    k = len(data)
    dts = _acc_dtypes(c, k)
    s.line(f"base{i} = pid * {T}")
    operands = _operand_text(s, c, i, data)
    kw = keywords(s, c, i, ("t",), _combine_or_seed(s, c, i, ()))
    results = [f"r{i}_{j}" for j in range(k)]
    target = f"({', '.join(results)})" if k > 1 or o["t"] is TUPLE else results[0]
    s.call(c, f"{target} = tile.{c.public.__name__}({operands}{kw})")
    zs = _reduce_reference(c, data, fold, dts) if c.rule is None else [np.zeros(GRID, np.int32)] * k
    for j in range(k):
        s.line(f"{s.output(c, f'z{i}_{j}', np.zeros_like(zs[j]), zs[j])}[pid] = {results[j]}")


def _reduce_reference(c: Combination, data: list[np.ndarray], fold: Callable, dts: list[np.dtype]):
    """Each program's fold of its tile, in order."""
    T = c.size
    xs = [x.astype(dt) for x, dt in zip(data, dts)]
    zs = [np.zeros(GRID, dt) for dt in dts]
    for p in range(GRID):
        acc = tuple(x[p * T] for x in xs)
        for j in range(p * T + 1, (p + 1) * T):
            with np.errstate(all="ignore"):
                acc = tuple(dt.type(v) for v, dt in zip(fold(acc, tuple(x[j] for x in xs)), dts))
        for z, v in zip(zs, acc):
            z[p] = v
    return zs


# ----- shapes and arg-extremes ------------------------------------------------------------------
@harness(tile.broadcast_to, tile.reshape, tile.transpose, tile.flip)
def _remap(s: Source, c: Combination, i: int) -> None:
    """A 1-D tile through the shape op (over a 2-D detour where the op needs one), back to 1-D."""
    T = c.size
    x = rng_for(c).integers(-100, 100, GRID * T).astype(np.int32)
    rows = x.reshape(GRID, T)
    call, one = {
        tile.broadcast_to: (f"tile.sum(tile.broadcast_to(t{i}[None, :], (3, {T})), axis=0)", rows * 3),
        tile.reshape: (f"tile.reshape(tile.reshape(t{i}, (2, {T // 2})).T.T, {T})", rows),
        tile.transpose: (f"tile.reshape(tile.transpose(tile.reshape(t{i}, (2, {T // 2}))), {T})", None),
        tile.flip: (f"tile.flip(t{i})", rows[:, ::-1]),
    }[c.public]
    if one is None:
        one = rows.reshape(GRID, 2, T // 2).transpose(0, 2, 1)
    s.line(f"base{i} = pid * {T}")
    s.line(f"t{i} = tile.load({s.param(f'x{i}', x)}, base{i}, {T})")
    y = s.output(c, f"y{i}", np.zeros_like(x), one.reshape(-1).astype(np.int32))
    s.call(c, f"tile.store({y}, base{i}, {call})")


@harness(tile.argmax, tile.argmin)
def _arg_extreme(s: Source, c: Combination, i: int) -> None:
    T = c.size
    x = rng_for(c).integers(-20, 20, GRID * T).astype(np.int32)  # (many ties: the first index wins)
    rows = x.reshape(GRID, T)
    expected = (rows.argmax(axis=1) if c.public is tile.argmax else rows.argmin(axis=1)).astype(np.int32)
    s.line(f"base{i} = pid * {T}")
    z = s.output(c, f"z{i}", np.zeros(GRID, np.int32), expected)
    s.call(c, f"{z}[pid] = tile.{c.public.__name__}(tile.load({s.param(f'x{i}', x)}, base{i}, {T}))")


# ----- histogram, sort ---------------------------------------------------------------------------
@harness(tile.histogram, knows=("bins", "valid", "algorithm"))
def _histogram(s: Source, c: Combination, i: int) -> None:
    T, bins = c.size, c.options["bins"]
    x = rng_for(c).integers(-3, bins + 3, GRID * T).astype(np.int32)
    expected = np.zeros(GRID * bins, np.int32)
    for p, k in enumerate(counts(c)):
        part = x[p * T : p * T + k]
        expected[p * bins : (p + 1) * bins] = np.bincount(part[(part >= 0) & (part < bins)], minlength=bins)
    s.line(f"base{i} = pid * {T}")
    s.line(f"t{i} = tile.load({s.param(f'x{i}', x)}, base{i}, {T})")
    s.call(c, f"h{i} = tile.histogram(t{i}{keywords(s, c, i, (), no_realize)})")
    s.line(f"tile.store({s.output(c, f'y{i}', np.zeros_like(expected), expected)}, pid * {bins}, h{i})")


@ct.combine
def by_magnitude(a, b):
    return ct.abs(a) < ct.abs(b)


@ct.combine
def by_key_then_tag_descending(a_key, a_tag, b_key, b_tag):
    return (a_key < b_key) | ((a_key == b_key) & (a_tag > b_tag))


@harness(tile.sort, knows=("keys", "values", "valid", "descending", "begin_bit", "end_bit", "compare"))
def _sort(s: Source, c: Combination, i: int) -> None:
    T, o, rng = c.size, c.options, rng_for(c)
    keys = [rng.integers(-5000, 5000, GRID * T).astype(np.int32)]
    if o["keys"] is TUPLE:
        keys.append(rng.integers(0, 3, GRID * T).astype(np.int32))
    payload = np.arange(GRID * T, dtype=np.int32)[::-1].copy()
    s.line(f"base{i} = pid * {T}")
    names = [f"k{i}_{j}" for j in range(len(keys))]
    for name, x in zip(names, keys):
        s.line(f"{name} = tile.load({s.param(f'x{name}', x)}, base{i}, {T})")
    if o["values"] is TILE:
        s.line(f"v{i} = tile.load({s.param(f'xv{i}', payload)}, base{i}, {T})")

    def realize(name: str, value: Any) -> str:
        if value is TILE:
            return f"v{i}"
        return s.const(f"compare{i}", by_key_then_tag_descending if o["keys"] is TUPLE else by_magnitude)

    kw = keywords(s, c, i, ("keys",), realize)
    sorted_keys = [f"s{name}" for name in names]
    target = f"({', '.join(sorted_keys)})" if o["keys"] is TUPLE else sorted_keys[0]
    if o["values"] is TILE:
        target += f", sv{i}"
    operand = f"({', '.join(names)})" if o["keys"] is TUPLE else names[0]
    s.call(c, f"{target} = tile.sort({operand}{kw})")
    # the reference: a stable order of each tile's valid elements, the rest after them in their order
    outs = [x.copy() for x in keys] + [payload.copy()]
    for p, count in enumerate(counts(c)):
        seg = slice(p * T, p * T + count)
        order = _sort_order([x[seg] for x in keys], o)
        for x, out in zip([*keys, payload], outs):
            out[seg] = x[seg][order]
    for name, x, out in zip(sorted_keys, keys, outs):
        s.line(f"tile.store({s.output(c, f'y{name}', np.zeros_like(x), out)}, base{i}, {name})")
    if o["values"] is TILE:
        s.line(f"tile.store({s.output(c, f'yv{i}', np.zeros_like(payload), outs[-1])}, base{i}, sv{i})")


def _sort_order(keys: list[np.ndarray], o: dict[str, Any]) -> np.ndarray:
    if o["compare"] is None:
        bits = (keys[0].astype(np.int64) + 2**31).astype(np.uint64)  # int32's order as unsigned
        end = 32 if o["end_bit"] is None else o["end_bit"]
        mask = np.uint64((1 << (end - o["begin_bit"])) - 1)
        field = (bits >> np.uint64(o["begin_bit"])) & mask
        return np.argsort(mask - field if o["descending"] else field, kind="stable")
    if len(keys) == 1:
        return np.argsort(np.abs(keys[0]), kind="stable")
    return np.lexsort((-keys[1], keys[0]))  # by key, then by tag descending; stable


@harness(tile.topk, knows=("values", "largest", "valid"))
def _topk(s: Source, c: Combination, i: int) -> None:
    T, o, K = c.size, c.options, 7
    x = rng_for(c).integers(-50, 50, GRID * T).astype(np.int32)  # (ties: they keep their input order)
    payload = np.arange(GRID * T, dtype=np.int32)[::-1].copy()
    s.line(f"base{i} = pid * {T}")
    s.line(f"k{i} = tile.load({s.param(f'xk{i}', x)}, base{i}, {T})")
    if o["values"] is TILE:
        s.line(f"v{i} = tile.load({s.param(f'xv{i}', payload)}, base{i}, {T})")
    target = f"tk{i}, tv{i}" if o["values"] is TILE else f"tk{i}"
    s.call(c, f"{target} = tile.topk(k{i}, {K}{keywords(s, c, i, (), lambda name, value: f'v{i}')})")
    # the reference: a stable order of each tile's valid elements, the rest after them in their order
    keys, values = np.zeros(GRID * K, np.int32), np.zeros(GRID * K, np.int32)
    for p, count in enumerate(counts(c)):
        seg = slice(p * T, (p + 1) * T)
        order = np.argsort(-x[seg][:count] if o["largest"] else x[seg][:count], kind="stable")
        first = np.concatenate([order, np.arange(count, T)])[:K]
        keys[p * K : (p + 1) * K], values[p * K : (p + 1) * K] = x[seg][first], payload[seg][first]
    s.line(f"tile.store({s.output(c, f'yk{i}', np.zeros_like(keys), keys)}, pid * {K}, tk{i})")
    if o["values"] is TILE:
        s.line(f"tile.store({s.output(c, f'yv{i}', np.zeros_like(values), values)}, pid * {K}, tv{i})")


@harness(tile.sort_key)
def _sort_key(s: Source, c: Combination, i: int) -> None:
    T = c.size
    x = rng_for(c).integers(-50, 50, GRID * T).astype(np.int32)
    expected = (x.astype(np.int64) + 2**31).astype(np.uint32)  # (int32's order as unsigned)
    s.line(f"base{i} = pid * {T}")
    s.call(c, f"t{i} = tile.sort_key(tile.load({s.param(f'x{i}', x)}, base{i}, {T}))")
    s.line(f"tile.store({s.output(c, f'y{i}', np.zeros_like(expected), expected)}, base{i}, t{i})")


# ----- neighbours, run-length decoding -----------------------------------------------------------
@harness(tile.flag_heads, tile.adjacent_difference)
def _neighbors(s: Source, c: Combination, i: int) -> None:
    T = c.size
    x = rng_for(c).integers(0, 3, GRID * T).astype(np.int32)
    tiles = x.reshape(GRID, T)
    if c.public is tile.flag_heads:
        expected = np.concatenate([np.ones((GRID, 1), bool), tiles[:, 1:] != tiles[:, :-1]], axis=1).ravel()
    else:
        expected = np.concatenate([tiles[:, :1], tiles[:, 1:] - tiles[:, :-1]], axis=1).ravel()
    s.line(f"base{i} = pid * {T}")
    s.call(c, f"t{i} = tile.{c.public.__name__}(tile.load({s.param(f'x{i}', x)}, base{i}, {T}))")
    s.line(f"tile.store({s.output(c, f'y{i}', np.zeros_like(expected), expected)}, base{i}, t{i})")


@harness(tile.run_length_decode)
def _run_length_decode(s: Source, c: Combination, i: int) -> None:
    T, rng = c.size, rng_for(c)
    runs = T // 4
    values = rng.integers(-100, 100, GRID * runs).astype(np.int32)
    lengths = rng.integers(-1, 7, GRID * runs).astype(np.int32)
    decoded, where = np.zeros(GRID * T, np.int32), np.zeros(GRID * T, bool)
    totals = np.zeros(GRID, np.int64)
    for p in range(GRID):
        part = slice(p * runs, (p + 1) * runs)
        run = np.repeat(values[part], np.maximum(lengths[part], 0))[:T]
        decoded[p * T : p * T + len(run)] = run
        where[p * T : p * T + len(run)] = True
        totals[p] = np.maximum(lengths[part], 0).sum()
    s.line(f"base{i} = pid * {T}")
    s.line(f"v{i} = tile.load({s.param(f'xv{i}', values)}, pid * {runs}, {runs})")
    s.line(f"l{i} = tile.load({s.param(f'xl{i}', lengths)}, pid * {runs}, {runs})")
    s.call(c, f"d{i}, n{i} = tile.run_length_decode(v{i}, l{i}, {T})")
    s.line(f"tile.store({s.output(c, f'y{i}', np.zeros_like(decoded), decoded, where)}, base{i}, d{i})")
    s.line(f"{s.output(c, f'z{i}', np.zeros_like(totals), totals)}[pid] = n{i}")


# ----- selection ---------------------------------------------------------------------------------
@harness(tile.select, tile.partition, tile.unique, tile.run_length_encode, knows=("t", "flags", "valid", "chained"))
def _selection(s: Source, c: Combination, i: int) -> None:
    """Each program's valid elements selected by flags (or by runs, from sorted data): stored at the program's
    base, or at its offset for a chained select (the whole array compacted), with counts and offsets."""
    T, o, rng = c.size, c.options, rng_for(c)
    runs = "flags" not in o
    data = [np.sort(rng.integers(0, T // 4, (GRID, T)), axis=1).ravel() if runs else rng.integers(-99, 99, GRID * T)]
    data = [d.astype(np.int32) for d in data + ([rng.integers(0, 9, GRID * T)] if o["t"] is TUPLE else [])]
    flags = rng.random(GRID * T) < 0.4
    chained = o.get("chained", False)
    ys = [np.full(GRID * T, -1, np.int32) for _ in data]
    lengths, zs, offsets = np.full(GRID * T, -1, np.int32), np.zeros(GRID, np.int32), np.zeros(GRID, np.int64)
    at = 0
    for p, k in enumerate(counts(c)):
        lo = p * T
        if runs:
            first = [j for j in range(k) if j == 0 or data[0][lo + j] != data[0][lo + j - 1]]
        else:
            first = [j for j in range(k) if flags[lo + j]]
        order = first + [j for j in range(T) if j not in first] if c.public is tile.partition else first
        start = at if chained else lo
        for y, x in zip(ys, data):
            y[start : start + len(order)] = x[lo + np.array(order, int)] if order else []
        lengths[lo : lo + len(first)] = np.diff([*first, k])
        zs[p], offsets[p] = len(first), at
        at += len(first)
    s.line(f"base{i} = pid * {T}")
    names = [f"a{i}_{j}" for j in range(len(data))]
    for name, x in zip(names, data):
        s.line(f"{name} = tile.load({s.param(f'x{name}', x)}, base{i}, {T})")
    operand = f"({', '.join(names)})" if o["t"] is TUPLE else names[0]
    if not runs:
        s.line(f"f{i} = tile.load({s.param(f'xf{i}', flags)}, base{i}, {T})")
        operand += f", f{i}"
    outs = [f"s{i}_{j}" for j in range(len(data))]
    target = (f"({', '.join(outs)})" if o["t"] is TUPLE else outs[0]) + (
        f", l{i}" if c.public is tile.run_length_encode else ""
    )
    target += f", c{i}" + (f", o{i}" if chained else "")
    s.call(c, f"{target} = tile.{c.public.__name__}({operand}{keywords(s, c, i, ('t', 'flags'), no_realize)})")
    where = f"o{i}" if chained else f"base{i}"
    count = "" if c.public is tile.partition else f", valid=c{i}"
    for j, (out, y) in enumerate(zip(outs, ys)):
        s.line(f"tile.store({s.output(c, f'y{i}_{j}', np.full_like(y, -1), y)}, {where}, {out}{count})")
    if c.public is tile.run_length_encode:
        s.line(f"tile.store({s.output(c, f'n{i}', np.full_like(lengths, -1), lengths)}, base{i}, l{i}, valid=c{i})")
    s.line(f"{s.output(c, f'z{i}', np.zeros_like(zs), zs)}[pid] = c{i}")
    if chained:
        s.line(f"{s.output(c, f'w{i}', np.zeros_like(offsets), offsets)}[pid] = o{i}")


# ----- matrix products ---------------------------------------------------------------------------
@harness(tile.dot, knows=("allow_tf32",))
def _dot(s: Source, c: Combination, i: int) -> None:
    """Each program's (8, 12) block of small integers times one (12, 6) tile: exact in tf32 too."""
    rng = rng_for(c)
    x = rng.integers(-4, 5, (GRID * 8, 12)).astype(np.float32)
    y = rng.integers(-4, 5, (12, 6)).astype(np.float32)
    s.line(f"a{i} = tile.load({s.param(f'x{i}', x)}, (pid * 8, 0), (8, 12))")
    s.line(f"b{i} = tile.load({s.param(f'w{i}', y)}, (0, 0), (12, 6))")
    z = s.output(c, f"z{i}", np.zeros((GRID * 8, 6), np.float32), x @ y)
    s.call(c, f"tile.store({z}, (pid * 8, 0), tile.dot(a{i}, b{i}{keywords(s, c, i, (), no_realize)}))")


# ================================================================================================
# Programs: the combinations packed, and what running them gives
# ================================================================================================
COMBINATIONS = all_combinations()
ALLOWED = [c for c in COMBINATIONS if c.rule is None]
FORBIDDEN = [c for c in COMBINATIONS if c.rule is not None]


def _groups() -> list[list[Combination]]:
    """The allowed combinations of each op packed into programs: at most one `once` call each."""
    groups = []
    for name in tile.__all__:
        public = getattr(tile, name)
        cs = [c for c in ALLOWED if c.public is public]
        once = [c for c in cs if c.once]
        rest = [c for c in cs if not c.once]
        n = max(len(once), -(-len(cs) // GROUP))
        packed: list[list[Combination]] = [[c] for c in once] + [[] for _ in range(n - len(once))]
        for j, c in enumerate(rest):
            packed[j % n].append(c)
        groups += packed
    return groups


GROUPS = _groups()
GROUP_OF = {c: g for g, cs in enumerate(GROUPS) for c in cs}


@functools.cache
def group_source(g: int) -> Source:
    return make_source(f"{GROUPS[g][0].public.__name__}_{g}", f"program {g}", GROUPS[g])


@functools.cache
def alone_source(c: Combination) -> Source:
    return make_source(f"{c.public.__name__}_alone", str(c), [c])


def make_source(name: str, label: str, cs: list[Combination]) -> Source:
    s = Source(name, label)
    for i, c in enumerate(cs):
        HARNESSES[c.public].write(s, c, i)
    return s


def interpret(s: Source) -> dict[str, np.ndarray]:
    """The program's output arrays after an interpreted launch, by parameter name."""
    args = s.args()
    ct.jit(s.fn, interpret=True, block_threads=BLOCK)[GRID](*args)
    return dict(zip(s.params, args))


def run_on_gpu(s: Source) -> dict[str, np.ndarray]:
    """The program's output arrays after a launch on the GPU (CuPy arrays), back on the host."""
    import cupy as cp

    args = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in s.args()]
    ct.jit(s.fn, block_threads=BLOCK)[GRID](*args)
    return {name: cp.asnumpy(a) if isinstance(a, cp.ndarray) else a for name, a in zip(s.params, args)}


def compile_source(s: Source) -> Any:
    return ct.jit(s.fn, block_threads=BLOCK).compile(*s.args(), arch=ARCH)


#: the lock of the process that warms the cache, held until it exits (see `warm_cache`)
_warming: list = []


def warm_cache(jobs: int = min(len(os.sched_getaffinity(0)), 8)) -> None:
    """Compile every program into the disk cache in `jobs` processes at once: compiling is the matrix's
    cost, and the tests' compiles then read the cubins. (Failures are left for the tests to report.)

    One process of those sharing the cache directory does it (pytest-xdist workers: the first to take a lock
    in the directory, held until it exits); another skips it, and its tests compile what they need (reading
    what the pool has made)."""
    if jobs <= 1:
        return
    try:
        import fcntl

        root = DiskCache().root
        root.mkdir(parents=True, exist_ok=True)
        lock = open(root / ".option-matrix-warm.lock", "w")  # (held open until the process exits)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:
        lock = None  # (no fcntl: warm it here)
    except OSError:
        return  # another process warms it, or has
    _warming.append(lock)
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_compile_quietly, range(len(GROUPS)), chunksize=4))


def _compile_quietly(g: int) -> None:
    try:
        compile_source(group_source(g))
    except Exception:  # noqa: BLE001, S110 - the test that compiles it reports it
        pass


def check(s: Source, c: Combination, got: dict[str, np.ndarray], against: dict[str, np.ndarray] | None = None) -> None:
    """`c`'s outputs in `got` equal the reference (or `against`'s, another run's outputs)."""
    for out in s.outputs[str(c)]:
        want = out.expected if against is None else against[out.param]
        value = got[out.param]
        assert value.dtype == want.dtype, f"{c}: {out.param} is {value.dtype}, expected {want.dtype}"
        if out.where is not None:
            value, want = value[out.where], want[out.where]
        np.testing.assert_array_equal(value, want, err_msg=f"{c}: output {out.param}\n{s.text()}")


def outcome(run: Callable[[Source], Any], c: Combination, cache: dict) -> tuple[Source, Any]:
    """(program, result) of `run` on the program holding `c`; when that program fails, `c` alone,
    so that the failure is `c`'s own (or says that `c` fails only beside others)."""
    g = GROUP_OF[c]
    if g not in cache:
        try:
            cache[g] = run(group_source(g))
        except Exception as e:  # noqa: BLE001 - reported per combination below
            cache[g] = e
    if not isinstance(cache[g], Exception):
        return group_source(g), cache[g]
    run(alone_source(c))  # raises c's own failure
    raise AssertionError(
        f"{c} runs alone but not in program {group_source(g).name} with {', '.join(map(str, GROUPS[g]))}: {cache[g]!r}"
    )
