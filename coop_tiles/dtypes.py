"""Element types: which NumPy dtypes tiles support, their C++ and Numba spellings, op identities."""

from __future__ import annotations

import numpy as np

from .errors import TileTypeError

#: dtypes a tile, array or scalar argument may have, with their C++ spelling (one token each,
#: so `T(0)` is a valid functional cast).
CXX_NAMES: dict[np.dtype, str] = {
    np.dtype(np.int8): "cuda::std::int8_t",
    np.dtype(np.int16): "cuda::std::int16_t",
    np.dtype(np.int32): "cuda::std::int32_t",
    np.dtype(np.int64): "cuda::std::int64_t",
    np.dtype(np.uint8): "cuda::std::uint8_t",
    np.dtype(np.uint16): "cuda::std::uint16_t",
    np.dtype(np.uint32): "cuda::std::uint32_t",
    np.dtype(np.uint64): "cuda::std::uint64_t",
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.bool_): "bool",
}

#: dtypes that may cross a collective (load, store, scan, reduce) or an array argument.
MEMORY_DTYPES = frozenset(d for d in CXX_NAMES if d != np.dtype(np.bool_))

SCAN_OPS = ("add", "mul", "max", "min", "and", "or", "xor")
BITWISE_OPS = ("and", "or", "xor")


def as_dtype(obj: object) -> np.dtype:
    """`obj` as a supported NumPy dtype, or a TileTypeError."""
    try:
        dt = np.dtype(obj)  # type: ignore[call-overload]
    except TypeError:
        raise TileTypeError(f"{obj!r} is not a dtype") from None
    if dt not in CXX_NAMES:
        supported = ", ".join(d.name for d in CXX_NAMES)
        raise TileTypeError(f"dtype {dt.name} is not supported; use one of {supported}")
    return dt


def numba_name(dt: np.dtype) -> str:
    """The NumPy constructor name used in generated Numba source (`np.float32`)."""
    return "np.bool_" if dt == np.bool_ else f"np.{dt.name}"


def cxx_name(dt: np.dtype) -> str:
    return CXX_NAMES[dt]


def check_op(op: str, dt: np.dtype) -> None:
    """Raise unless the builtin scan/reduce operator `op` is defined for `dt`."""
    if op not in SCAN_OPS:
        raise TileTypeError(f"unknown operator {op!r}; expected one of {', '.join(SCAN_OPS)}")
    if op in BITWISE_OPS and dt.kind == "f":
        raise TileTypeError(f"operator {op!r} needs an integer tile, got {dt.name}")
    if dt == np.bool_:
        raise TileTypeError("scans and reductions of bool tiles are not supported; use t.astype(np.int32)")


def identity(op: str, dt: np.dtype) -> object:
    """The identity element of `op` over `dt`, as a NumPy scalar."""
    check_op(op, dt)
    if op in ("add", "or", "xor"):
        return dt.type(0)
    if op == "mul":
        return dt.type(1)
    if op == "and":
        return dt.type(-1) if dt.kind == "i" else np.iinfo(dt).max
    if dt.kind == "f":
        return dt.type(-np.inf if op == "max" else np.inf)
    info = np.iinfo(dt)
    return dt.type(info.min if op == "max" else info.max)


def cxx_identity(op: str, dt: np.dtype) -> str:
    """The identity of `op` over `dt` as a C++ expression."""
    check_op(op, dt)
    t = cxx_name(dt)
    limits = f"cuda::std::numeric_limits<{t}>"
    if op in ("add", "or", "xor"):
        return f"{t}(0)"
    if op == "mul":
        return f"{t}(1)"
    if op == "and":
        return f"{t}(~{t}(0))"
    if dt.kind == "f":
        return f"-{limits}::infinity()" if op == "max" else f"{limits}::infinity()"
    return f"{limits}::lowest()" if op == "max" else f"{limits}::max()"
