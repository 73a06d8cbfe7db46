"""What scans and reductions share: how `op=` is typed (a built-in op or a `@ct.combine`
function over a tuple of tiles), the NumPy folds, and the C++ item and operator they run on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import (
    BITWISE_OPS,
    accumulator,
    as_dtype,
    bitwise_on_float,
    bool_,
    check_op,
    cxx_name,
    is_float,
    is_half,
    storage_dtype,
)
from ..errors import TileTypeError, TileValueError
from ..lang import ir
from ..lang.combine import CombineFunction
from ..lang.values import Const, describe, is_tile
from .base import seq
from .options import COMBINE, TILE, TUPLE, Forbidden, Option

UFUNCS = {
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
}
FUNCTORS = {
    "add": "coop::add",
    "mul": "coop::mul",
    "max": "coop::max",
    "min": "coop::min",
    "and": "coop::bit_and",
    "or": "coop::bit_or",
    "xor": "coop::bit_xor",
}


#: the errors of `dtype=` (the accumulator dtype of a scan or reduction)
COMBINE_DTYPE = (
    "dtype= converts the tile for a built-in op; a @ct.combine function runs in the dtypes of its tiles "
    "(convert them with t.astype(...))"
)
TUPLE_NEEDS_COMBINE = "{what} of a tuple of tiles needs a @ct.combine function as op"


def half_dtype(name: str) -> str:
    return (
        f"dtype={name}: built-in scans and reductions accumulate 16-bit floats in float32 and return float32; "
        "pass dtype=np.float32"
    )


BOOL_DTYPE = "dtype=bool: scans and reductions don't run on bool; pass an integer dtype"


#: the options scans and reductions share (`ops/options.py`)
OPTIONS = (
    Option("t", (TILE, TUPLE)),
    Option("op", (*UFUNCS, COMBINE)),
    Option("dtype", (None, np.int64, np.float32, np.float16, np.bool_)),
)


def _dtype(choice: Any) -> np.dtype | None:
    return None if choice.get("dtype") is None else np.dtype(choice["dtype"])


#: what the contract forbids of them, in the order `typed_op` checks it
FORBIDS = (
    Forbidden(
        lambda c: c.get("op") is COMBINE and c["dtype"] is not None, TileValueError, lambda public, c: COMBINE_DTYPE
    ),
    Forbidden(
        lambda c: c["t"] is TUPLE and c.get("op") is not COMBINE,
        TileTypeError,
        lambda public, c: TUPLE_NEEDS_COMBINE.format(what=public),
    ),
    Forbidden(lambda c: is_half(_dtype(c)), TileValueError, lambda public, c: half_dtype(_dtype(c).name)),
    Forbidden(lambda c: _dtype(c) == bool_, TileValueError, lambda public, c: BOOL_DTYPE),
    Forbidden(
        lambda c: c.get("op", "add") in BITWISE_OPS and _dtype(c) is not None and is_float(_dtype(c)),
        TileTypeError,
        lambda public, c: bitwise_on_float(c["op"], _dtype(c).name),
    ),
)


def typed_op(
    b: Any, op: Any, t: Any, what: str, dtype: Any
) -> tuple[str | ir.Combine, tuple[ir.Var, ...], tuple[np.dtype, ...]]:
    """(op, source tiles, item dtypes) of a scan or reduction. A built-in op runs on the tile
    converted to `dtype` when given (as `torch.cumsum(dtype=)`), else on the tile, 16-bit floats
    converted to float32."""
    items = seq(t)
    if not items or not all(is_tile(v) for v in items):
        raise TileTypeError(f"{what} expects a tile or a tuple of tiles, got {describe(t)}")
    if len({v.type.shape for v in items}) > 1:
        raise TileTypeError(f"{what} of tiles of different sizes: " + ", ".join(str(v.type) for v in items))
    dtype = b.optional(dtype)
    if isinstance(op, Const) and isinstance(op.value, CombineFunction):
        if dtype is not None:
            raise TileValueError(COMBINE_DTYPE)
        dtypes = tuple(v.type.dtype for v in items)
        return b.combine(op.value, dtypes), tuple(items), dtypes
    if isinstance(op, Const) and callable(op.value) and hasattr(op.value, "__code__"):
        raise TileValueError(
            f"op must be one of {', '.join(repr(o) for o in UFUNCS)} or a @ct.combine function, "
            f"got the plain function {op.value.__name__}; decorate it with @ct.combine"
        )
    if not (isinstance(op, Const) and isinstance(op.value, str)):
        raise TileValueError(
            f"op must be one of {', '.join(repr(o) for o in UFUNCS)} or a @ct.combine function, got {describe(op)}"
        )
    if len(items) != 1 or not isinstance(t, ir.Var):
        raise TileTypeError(TUPLE_NEEDS_COMBINE.format(what=what))
    src = items[0]
    acc = accumulator(src.type.dtype) if dtype is None else accumulator_dtype(b, dtype)
    check_op(op.value, acc)
    src = b.convert(src, acc)
    return op.value, (src,), (acc,)


def accumulator_dtype(b: Any, dtype: Any) -> np.dtype:
    """The dtype a built-in op runs in when `dtype=` is given: any supported dtype but bool and 16-bit floats."""
    dt = as_dtype(b.constant(dtype, "dtype"))
    if is_half(dt):
        raise TileValueError(half_dtype(dt.name))
    if dt == bool_:
        raise TileValueError(BOOL_DTYPE)
    return dt


def combine_operands(b: Any, value: Any, dtypes: tuple[np.dtype, ...], what: str) -> tuple[ir.Value, ...]:
    """`initial` of a scan: one block-uniform scalar per item dtype, converted to it."""
    if isinstance(value, Const) and isinstance(value.value, tuple):
        value = tuple(Const(v) for v in value.value)
    values = value if isinstance(value, tuple) else (value,)
    if len(values) != len(dtypes):
        raise TileTypeError(f"{what} must have {len(dtypes)} value{'s' if len(dtypes) > 1 else ''}, one per tile")
    return tuple(b.convert(b.scalar(v, what), dt) for v, dt in zip(values, dtypes))


def combine_scan(frame: Any, fn: ir.Combine, xs: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Inclusive scan with a combine function along the last axis (each row of a 2-D array on its own):
    log2(n) vectorized steps, the earlier element always on the left (Hillis and Steele)."""
    evaluate_combine = frame.evaluate_combine
    xs = tuple(x.copy() for x in xs)
    n, d = xs[0].shape[-1], 1
    while d < n:
        new = evaluate_combine(fn, tuple(x[..., :-d] for x in xs), tuple(x[..., d:] for x in xs))
        for x, v in zip(xs, new):
            x[..., d:] = v
        d *= 2
    return xs


def combine_fold(frame: Any, fn: ir.Combine, xs: tuple[np.ndarray, ...]) -> tuple[Any, ...]:
    """The in-order fold of a combine function along the last axis (a pairwise tree, order kept): a
    scalar per operand for 1-D arrays, an array of the rows' folds for 2-D ones."""
    evaluate_combine = frame.evaluate_combine
    while xs[0].shape[-1] > 1:
        n = xs[0].shape[-1]
        even = n - n % 2
        folded = evaluate_combine(fn, tuple(x[..., 0:even:2] for x in xs), tuple(x[..., 1:even:2] for x in xs))
        xs = tuple(np.concatenate([f, x[..., even:]], axis=-1).astype(x.dtype) for f, x in zip(folded, xs))
    return tuple(x[..., 0] for x in xs)


def item_code(
    w: Any, cid: int, op: str, combine: bool, dtypes: list[np.dtype]
) -> tuple[str, str, str, Callable[[str, str], str], Callable[[str, int], str]]:
    """(C++ item type, operator functor, declarations, pack(target, source pattern), unpack(expr, i))
    for a collective over `dtypes` with `op`. A combine function's items are a struct of its k
    dtypes and its operator calls the combine function compiled from the user's Python."""
    if not combine:
        t = cxx_name(dtypes[0])
        return t, FUNCTORS[op], "", lambda dst, src: f"{dst} = {src.format(0)};", lambda expr, i: expr
    item, functor = f"coop_item_{cid}", f"coop_op_{cid}"
    types = [cxx_name(storage_dtype(dt)) for dt in dtypes]
    fields = " ".join(f"{t} f{i};" for i, t in enumerate(types))
    k = len(types)
    fn = w.combine_symbol(op)
    params = ", ".join([*(f"{t}" for t in types), *(f"{t}" for t in types), *(f"{t}*" for t in types)])
    operands = ", ".join(
        [*(f"a.f{i}" for i in range(k)), *(f"b.f{i}" for i in range(k)), *(f"&r.f{i}" for i in range(k))]
    )
    code = (
        f"struct {item} {{ {fields} }};\n"
        f'extern "C" __device__ void {fn}({params});\n'
        f"struct {functor} {{ __device__ __forceinline__ {item} operator()(const {item}& a, const {item}& b) const "
        f"{{ {item} r; {fn}({operands}); return r; }} }};\n"
    )

    def pack(dst: str, src: str) -> str:
        return " ".join(f"{dst}.f{i} = {src.format(i)};" for i in range(k))

    return item, functor, code, pack, lambda expr, i: f"{expr}.f{i}"
