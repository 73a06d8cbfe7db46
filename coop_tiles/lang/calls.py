"""How the front end types calls of public ops (`tile.load`, `ct.exp`, ...) and emits their IR.

Arguments are bound against the public function's own signature, so defaults and keyword
names are exactly the documented ones.
"""

from __future__ import annotations

import builtins as py
import inspect
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import tile
from ..dtypes import MEMORY_DTYPES, as_dtype, check_op
from ..errors import TileTypeError, TileValueError
from . import builtins as ct
from . import ir
from .types import WEAK_INT, ScalarType, TileType

if TYPE_CHECKING:
    from .frontend import Builder


def bind_call(fn: Callable, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Bind front-end values to `fn`'s signature; defaults come back as compile-time constants."""
    from .frontend import Const

    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        raise TileTypeError(f"bad call of {getattr(fn, '__qualname__', fn)}: {e}") from None
    bound.apply_defaults()
    return {k: v if isinstance(v, (Const, ir.Var, ir.Lit, tuple)) else Const(v) for k, v in bound.arguments.items()}


def _memory_dtype(dt: np.dtype, what: str) -> np.dtype:
    if dt not in MEMORY_DTYPES:
        raise TileTypeError(f"{what} of {dt.name} is not supported; convert with .astype(np.uint8) or similar")
    return dt


def _offset(b: Builder, v: Any, what: str) -> ir.Value:
    return b.convert(b.scalar(v, what, "iu"), np.dtype(np.int64))


def _valid(b: Builder, v: Any) -> ir.Value | None:
    from .frontend import Const

    if isinstance(v, Const) and v.value is None:
        return None
    return _offset(b, v, "valid")


def _load(b: Builder, a: dict, node) -> ir.Var:
    array = b.array(a["a"], "tile.load's first argument")
    dt = _memory_dtype(array.type.dtype, "tile.load")
    size = b.tile_size(a["size"])
    other = b.convert(b.scalar(a["other"], "other"), dt)
    out = b.temp(TileType(dt, size))
    b.emit(ir.TileLoad(out, array, _offset(b, a["offset"], "the offset"), _valid(b, a["valid"]), other), node)
    return out


def _store(b: Builder, a: dict, node) -> Any:
    from .frontend import Const

    array = b.array(a["a"], "tile.store's first argument")
    _memory_dtype(array.type.dtype, "tile.store")
    t = b.tile(a["t"], "the stored value")
    _memory_dtype(t.type.dtype, "tile.store")
    b.emit(ir.TileStore(array, _offset(b, a["offset"], "the offset"), t, _valid(b, a["valid"])), node)
    return Const(None)


def _full(b: Builder, a: dict, node) -> ir.Var:
    dt = as_dtype(b.constant(a["dtype"], "the dtype"))
    size = b.tile_size(a["size"])
    out = b.temp(TileType(dt, size))
    b.emit(ir.TileFull(out, b.convert(b.scalar(a["value"], "the fill value"), dt)), node)
    return out


def _zeros(b: Builder, a: dict, node) -> ir.Var:
    from .frontend import Const

    return _full(b, {"size": a["size"], "value": Const(0), "dtype": a["dtype"]}, node)


def _arange(b: Builder, a: dict, node) -> ir.Var:
    dt = as_dtype(b.constant(a["dtype"], "the dtype"))
    out = b.temp(TileType(dt, b.tile_size(a["size"])))
    b.emit(ir.TileArange(out), node)
    return out


def _named_op(b: Builder, v: Any, dt: np.dtype) -> str:
    from .frontend import Const

    if not (isinstance(v, Const) and isinstance(v.value, str)):
        raise TileValueError(
            "op must be one of 'add', 'mul', 'max', 'min', 'and', 'or', 'xor'; "
            "@ct.combine functions are not supported yet"
        )
    check_op(v.value, dt)
    return v.value


def _scan(b: Builder, a: dict, node) -> Any:
    from .frontend import Const

    if isinstance(a["t"], tuple):
        raise TileTypeError("scans of tuples of tiles need @ct.combine, which is not supported yet")
    src = b.tile(a["t"], "the scanned value")
    dt = src.type.dtype
    op = _named_op(b, a["op"], dt)
    exclusive = b.constant(a["exclusive"], "exclusive", bool)
    return_total = b.constant(a["return_total"], "return_total", bool)
    initial = None
    if not (isinstance(a["initial"], Const) and a["initial"].value is None):
        initial = b.convert(b.scalar(a["initial"], "initial"), dt)
    out = b.temp(src.type)
    total = b.temp(ScalarType(dt)) if return_total else None
    b.emit(ir.TileScan(out, src, op, exclusive, initial, total), node)
    return (out, total) if return_total else out


def _reduce(b: Builder, a: dict, node, op: str | None = None) -> ir.Var:
    from .frontend import Const

    src = b.tile(a["t"], "the reduced value")
    op = _named_op(b, a["op"] if op is None else Const(op), src.type.dtype)
    out = b.temp(ScalarType(src.type.dtype))
    b.emit(ir.TileReduce(out, src, op), node)
    return out


def _program_id(b: Builder, a: dict, node, count: bool = False) -> ir.Var:
    axis = b.constant(a["axis"], "the grid axis", int)
    if axis not in (0, 1, 2):
        raise TileValueError(f"grid axis must be 0, 1 or 2, got {axis}")
    out = b.temp(WEAK_INT)
    b.emit(ir.ProgramId(out, axis, count), node)
    return out


def _cdiv(b: Builder, a: dict, node) -> Any:
    neg = b.apply("neg", operator.neg, (a["a"],))
    return b.apply("neg", operator.neg, (b.apply("floordiv", operator.floordiv, (neg, a["b"])),))


def _elementwise(name: str) -> Callable:
    fn = ct.ELEMENTWISE[name]

    def handler(b: Builder, a: dict, node) -> Any:
        return b.apply(name, fn, tuple(a.values()))

    return handler


def _python_minmax(name: str) -> Callable:
    fn = ct.ELEMENTWISE[name]

    def handler(b: Builder, args: tuple, node) -> Any:
        if len(args) != 2:
            raise TileTypeError(f"{'min' if name == 'minimum' else 'max'}() takes two scalars in tile programs")
        if any(isinstance(v, ir.Var) and isinstance(v.type, TileType) for v in args):
            raise TileTypeError(f"use ct.{name} for tiles, or tile.{name[:3]} to reduce one")
        return b.apply(name, fn, args)

    return handler


CALLS: dict[Callable, Callable] = {
    tile.load: _load,
    tile.store: _store,
    tile.full: _full,
    tile.zeros: _zeros,
    tile.arange: _arange,
    tile.scan: _scan,
    tile.reduce: _reduce,
    tile.sum: lambda b, a, n: _reduce(b, a, n, "add"),
    tile.max: lambda b, a, n: _reduce(b, a, n, "max"),
    tile.min: lambda b, a, n: _reduce(b, a, n, "min"),
    ct.program_id: _program_id,
    ct.num_programs: lambda b, a, n: _program_id(b, a, n, count=True),
    ct.cdiv: _cdiv,
    **{getattr(ct, name): _elementwise(name) for name in ct.ELEMENTWISE},
}

#: Python builtins with tile-program meanings; they take positional arguments only.
PY_CALLS: dict[Callable, Callable] = {
    py.min: _python_minmax("minimum"),
    py.max: _python_minmax("maximum"),
}
