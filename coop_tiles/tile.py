"""Tile operations: what a whole thread block does to a tile, collectively.

``from coop_tiles import tile``. These bodies are the NumPy reference semantics (the
interpreter runs them); inside ``@ct.jit`` programs each call is compiled to a CUB block
primitive chosen by the planner.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .dtypes import as_dtype, check_op, identity
from .errors import TileTypeError, TileValueError
from .lang.interpreter import Tile

__all__ = ["load", "store", "full", "zeros", "arange", "scan", "reduce", "sum", "max", "min"]

_UFUNCS = {
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
}


def _tile_size(size: Any) -> int:
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) or size < 1:
        raise TileValueError(f"tile size must be a positive int, got {size!r}")
    return int(size)


def _valid_count(valid: Any, size: int) -> int:
    return size if valid is None else int(np.clip(int(valid), 0, size))


def _check_array(a: Any, what: str) -> np.ndarray:
    if isinstance(a, Tile) or not isinstance(a, np.ndarray):
        raise TileTypeError(f"{what} expects an array argument, got {type(a).__name__}")
    as_dtype(a.dtype)
    return a.reshape(-1)


def _check_range(a: np.ndarray, offset: int, count: int, what: str) -> None:
    if count and (offset < 0 or offset + count > a.size):
        raise TileValueError(f"{what} touches elements [{offset}, {offset + count}) of an array of {a.size} elements")


def load(a: Any, offset: int, size: int, *, valid: int | None = None, other: Any = 0) -> Tile:
    """Load ``a[offset : offset + size]`` as a tile of ``a``'s dtype.

    Element ``i`` with ``i >= valid`` (when given) is ``other`` and is never read.
    Example: ``t = tile.load(x, base, TILE, valid=n - base, other=0)``.
    """
    a = _check_array(a, "tile.load")
    size = _tile_size(size)
    count = _valid_count(valid, size)
    offset = int(offset)
    _check_range(a, offset, count, "tile.load")
    data = np.full(size, np.asarray(other).astype(a.dtype), dtype=a.dtype)
    data[:count] = a[offset : offset + count]
    return Tile(data)


def store(a: Any, offset: int, t: Tile, *, valid: int | None = None) -> None:
    """Write tile ``t`` to ``a[offset:]``, converted to ``a``'s dtype, skipping ``i >= valid``."""
    flat = _check_array(a, "tile.store")
    if not isinstance(t, Tile):
        raise TileTypeError(f"tile.store expects a tile to store, got {type(t).__name__}")
    count = _valid_count(valid, t.size)
    offset = int(offset)
    _check_range(flat, offset, count, "tile.store")
    with np.errstate(all="ignore"):
        flat[offset : offset + count] = t.data[:count].astype(flat.dtype)


def full(size: int, value: Any, dtype: Any) -> Tile:
    """A tile of ``size`` copies of ``value``: ``tile.full(256, 1.0, np.float32)``."""
    return Tile(np.full(_tile_size(size), value, dtype=as_dtype(dtype)))


def zeros(size: int, dtype: Any) -> Tile:
    """A tile of ``size`` zeros of ``dtype``."""
    return full(size, 0, dtype)


def arange(size: int, dtype: Any = np.int32) -> Tile:
    """The tile ``0, 1, ..., size - 1``."""
    return Tile(np.arange(_tile_size(size), dtype=as_dtype(dtype)))


def _check_tile(t: Any, what: str) -> Tile:
    if isinstance(t, tuple):
        raise TileTypeError(f"{what} of a tuple of tiles needs a @ct.combine function, which is not supported yet")
    if not isinstance(t, Tile):
        raise TileTypeError(f"{what} expects a tile, got {type(t).__name__}")
    return t


def _check_named_op(op: Any, dt: np.dtype) -> str:
    if not isinstance(op, str):
        raise TileValueError(f"op must be one of {', '.join(_UFUNCS)}; @ct.combine functions are not supported yet")
    check_op(op, dt)
    return op


def scan(
    t: Tile, op: str = "add", *, exclusive: bool = False, initial: Any = None, return_total: bool = False
) -> Tile | tuple[Tile, Any]:
    """Block-wide scan of a tile (inclusive unless ``exclusive=True``), in the tile's dtype.

    ``initial`` seeds the scan with a block-uniform value; with ``return_total=True`` the
    result is ``(scanned, total)`` where ``total`` folds ``initial`` and every element, the
    carry for the next chunk. An exclusive scan without ``initial`` starts from the
    operator's identity (0 for add, -inf or the lowest integer for max, ...).
    Example: ``s, carry = tile.scan(t, initial=carry, return_total=True)``.
    """
    t = _check_tile(t, "tile.scan")
    dt = t.dtype
    ufunc = _UFUNCS[_check_named_op(op, dt)]
    seed = identity(op, dt) if initial is None else np.asarray(initial).astype(dt)[()]
    with np.errstate(all="ignore"):
        acc = ufunc.accumulate(np.concatenate([[seed], t.data]).astype(dt), dtype=dt)
    if initial is None and not exclusive:
        with np.errstate(all="ignore"):
            out = ufunc.accumulate(t.data, dtype=dt)
    else:
        out = acc[:-1] if exclusive else acc[1:]
    result = Tile(np.ascontiguousarray(out))
    return (result, acc[-1]) if return_total else result


def reduce(t: Tile, op: str = "add") -> Any:
    """Block-wide reduction to a block-uniform scalar of the tile's dtype."""
    t = _check_tile(t, "tile.reduce")
    ufunc = _UFUNCS[_check_named_op(op, t.dtype)]
    with np.errstate(all="ignore"):
        return t.dtype.type(ufunc.reduce(t.data, dtype=t.dtype))


def sum(t: Tile) -> Any:  # noqa: A001 - the contract spells it tile.sum
    """``tile.reduce(t, "add")``: the sum in the tile's dtype."""
    return reduce(t, "add")


def max(t: Tile) -> Any:  # noqa: A001
    """``tile.reduce(t, "max")``."""
    return reduce(t, "max")


def min(t: Tile) -> Any:  # noqa: A001
    """``tile.reduce(t, "min")``."""
    return reduce(t, "min")
