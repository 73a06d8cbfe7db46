"""Types of runtime values in a tile program, and NumPy promotion between them.

Promotion is computed by applying the operation to tiny NumPy stand-ins, so the compiled
program and the NumPy interpreter agree on every result dtype by construction
(including NEP 50 "weak" Python scalars).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..dtypes import as_dtype, kind, numpy_stand_in, promote
from ..errors import TileTypeError, TileValueError


@dataclass(frozen=True)
class ScalarType:
    """A block-uniform scalar. `weak` marks Python ints/floats, which adopt a tile's dtype."""

    dtype: np.dtype
    weak: bool = False

    def __str__(self) -> str:
        return f"{self.dtype.name}{' (python scalar)' if self.weak else ''}"


#: the most axes a tile may have
MAX_TILE_NDIM = 2


@dataclass(frozen=True)
class TileType:
    """A tile: its dtype and shape (one or two compile-time extents, row-major); `size` is their
    product. `TileType(dt, n)` is the 1-D tile of `n` elements."""

    dtype: np.dtype
    size: int
    shape: tuple[int, ...] = None  # type: ignore[assignment]  # (size,) when left out

    def __post_init__(self) -> None:
        shape = (self.size,) if self.shape is None else tuple(int(n) for n in self.shape)
        if not 1 <= len(shape) <= MAX_TILE_NDIM or any(n < 1 for n in shape):
            raise TileValueError(f"a tile's shape has one or two positive extents, got {shape}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "size", int(np.prod(shape)))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def with_dtype(self, dtype: np.dtype) -> TileType:
        """The tile of this shape with `dtype`."""
        return TileType(dtype, self.size, self.shape)

    def __str__(self) -> str:
        extent = self.size if self.ndim == 1 else f"({', '.join(str(n) for n in self.shape)})"
        return f"tile<{self.dtype.name}, {extent}>"


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """NumPy's broadcast of `shapes` (trailing axes aligned, extents equal or 1), or None when they don't."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


@dataclass(frozen=True)
class ArrayType:
    """An array argument or a view of one: its dtype, rank, and whether its last axis has unit
    stride (kernels are specialised on that, so contiguous rows load vectorized)."""

    dtype: np.dtype
    ndim: int = 1
    unit_stride: bool = True

    def __str__(self) -> str:
        return f"array<{self.dtype.name}, {self.ndim}d{'' if self.unit_stride else ', strided'}>"


ValueType = ScalarType | TileType | ArrayType

INT64 = ScalarType(np.dtype(np.int64))
WEAK_INT = ScalarType(np.dtype(np.int64), weak=True)
WEAK_FLOAT = ScalarType(np.dtype(np.float64), weak=True)
BOOL = ScalarType(np.dtype(np.bool_))


def type_of_python_scalar(value: object) -> ScalarType:
    """The type of a Python or NumPy scalar value."""
    if isinstance(value, (bool, np.bool_)):
        return BOOL
    if isinstance(value, int):
        return WEAK_INT
    if isinstance(value, float):
        return WEAK_FLOAT
    if isinstance(value, np.generic):
        return ScalarType(as_dtype(value.dtype))
    raise TileTypeError(f"{value!r} is not a number")


def _stand_in(t: ScalarType | TileType) -> object:
    dt = numpy_stand_in(t.dtype)
    if isinstance(t, TileType):
        return np.ones(1, dtype=dt)
    if t.weak:
        return {"b": True, "i": 1, "f": 1.0}[kind(t.dtype)]
    return dt.type(1)


def _from_result(result: object, shape: tuple[int, ...] | None, operands: tuple) -> ScalarType | TileType:
    strong = [t.dtype for t in operands if isinstance(t, TileType) or not t.weak]
    if isinstance(result, np.ndarray) and shape is not None:
        return TileType(as_dtype(promote(strong, result.dtype)), 0, shape)
    if isinstance(result, (bool, int, float)) and not isinstance(result, np.generic):
        t = type_of_python_scalar(result)
        return ScalarType(t.dtype, weak=t.dtype.kind != "b")
    return ScalarType(as_dtype(promote(strong, np.asarray(result).dtype)))


def result_type(fn: Callable, *operands: ScalarType | TileType) -> ScalarType | TileType:
    """The type NumPy gives `fn(*operands)`; the tile operands' shapes must broadcast together
    (the result has their broadcast shape)."""
    shapes = [t.shape for t in operands if isinstance(t, TileType)]
    shape = broadcast_shape(*shapes) if shapes else None
    if shapes and shape is None:
        raise TileTypeError(
            "tiles of different sizes in one element-wise operation: "
            + ", ".join(str(t) for t in operands if isinstance(t, TileType))
        )
    return _cached_result_type(fn, operands, shape)


@functools.lru_cache(maxsize=4096)
def _cached_result_type(fn: Callable, operands: tuple, shape: tuple[int, ...] | None) -> ScalarType | TileType:
    try:
        with np.errstate(all="ignore"):
            result = fn(*(_stand_in(t) for t in operands))
    except TypeError as e:
        names = ", ".join(str(t) for t in operands)
        raise TileTypeError(f"operation not defined for {names}: {e}") from None
    return _from_result(result, shape, operands)


def common_type(*operands: ScalarType | TileType) -> ScalarType | TileType:
    """The type both sides of a comparison are converted to before comparing."""
    if all(isinstance(t, ScalarType) and t.dtype == np.bool_ for t in operands):
        return operands[0]
    return result_type(operator.add, *operands)


def join(a: ValueType, b: ValueType, name: str) -> ValueType:
    """The type a variable assigned both `a` and `b` is given (for loops and branches)."""
    if a == b:
        return a
    if isinstance(a, ScalarType) and isinstance(b, ScalarType):
        if a.dtype == b.dtype:
            return ScalarType(a.dtype, a.weak and b.weak)
        joined = result_type(operator.add, a, b)
        if a.dtype.kind == "b" or b.dtype.kind == "b":
            raise TileTypeError(f"variable {name!r} is assigned both {a} and {b}")
        return joined
    if isinstance(a, TileType) and isinstance(b, TileType):
        if a.shape != b.shape:
            raise TileTypeError(f"variable {name!r} is assigned tiles of different sizes: {a} and {b}; use two names")
        return a.with_dtype(result_type(operator.add, a, b).dtype)
    raise TileTypeError(f"variable {name!r} is assigned both a {_kind(a)} ({a}) and a {_kind(b)} ({b})")


def _kind(t: ValueType) -> str:
    return {ScalarType: "scalar", TileType: "tile", ArrayType: "array"}[type(t)]
