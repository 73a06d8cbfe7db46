"""The project's dtype model: which dtypes tiles, arrays and scalars have, how they promote,
how each is spelled in C++ and in the generated body, and the identities of the built-in ops.

NumPy dtypes are the vocabulary (``np.float32``; ``ct.bfloat16`` is ``ml_dtypes.bfloat16``).
Promotion follows NumPy 2 with "weak" Python scalars; ``bfloat16`` promotes as ``float16``
does, and the two 16-bit floats together give ``float32``. 16-bit floats are kept as their
bits (``uint16``) in registers and memory and computed on in ``float32``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import TileTypeError, TileValueError

bfloat16 = np.dtype(ml_dtypes.bfloat16)
float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)
HALF_DTYPES = frozenset({float16, bfloat16})

#: every supported dtype with its C++ spelling in the shims (16-bit floats travel as their bits).
CXX_NAMES: dict[np.dtype, str] = {
    np.dtype(np.int8): "cuda::std::int8_t",
    np.dtype(np.int16): "cuda::std::int16_t",
    np.dtype(np.int32): "cuda::std::int32_t",
    np.dtype(np.int64): "cuda::std::int64_t",
    np.dtype(np.uint8): "cuda::std::uint8_t",
    np.dtype(np.uint16): "cuda::std::uint16_t",
    np.dtype(np.uint32): "cuda::std::uint32_t",
    np.dtype(np.uint64): "cuda::std::uint64_t",
    float16: "cuda::std::uint16_t",
    bfloat16: "cuda::std::uint16_t",
    float32: "float",
    np.dtype(np.float64): "double",
    bool_: "bool",
}
SUPPORTED = tuple(CXX_NAMES)

SCAN_OPS = ("add", "mul", "max", "min", "and", "or", "xor")
BITWISE_OPS = ("and", "or", "xor")


def as_dtype(obj: object) -> np.dtype:
    """`obj` as a supported dtype, or a TileTypeError."""
    try:
        dt = np.dtype(obj)  # type: ignore[call-overload]
    except TypeError:
        raise TileTypeError(f"{obj!r} is not a dtype") from None
    if dt not in CXX_NAMES:
        raise TileTypeError(f"dtype {dt.name} is not supported; use one of {', '.join(d.name for d in SUPPORTED)}")
    return dt


def is_half(dt: np.dtype) -> bool:
    return dt in HALF_DTYPES


def is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt == bfloat16


def kind(dt: np.dtype) -> str:
    """NumPy's kind letter, with bfloat16 (kind "V" to NumPy) a float."""
    return "f" if dt == bfloat16 else dt.kind


def compute_dtype(dt: np.dtype) -> np.dtype:
    """The dtype arithmetic on `dt` is carried out in: float32 for 16-bit floats."""
    return float32 if dt in HALF_DTYPES else dt


def storage_dtype(dt: np.dtype) -> np.dtype:
    """The dtype a value of `dt` occupies in registers of the generated body (16-bit floats as bits)."""
    return np.dtype(np.uint16) if dt in HALF_DTYPES else dt


def accumulator(dt: np.dtype) -> np.dtype:
    """The dtype built-in scans and reductions of `dt` run in: float32 for 16-bit floats."""
    return float32 if dt in HALF_DTYPES else dt


def promote(dtypes: list[np.dtype], result: np.dtype) -> np.dtype:
    """Map NumPy's `result` (computed with float16 standing in for bfloat16) back to the project's rule."""
    if result != float16:
        return result
    has_bf, has_f16 = bfloat16 in dtypes, float16 in dtypes
    if has_bf and has_f16:
        return float32
    return bfloat16 if has_bf else float16


def numpy_stand_in(dt: np.dtype) -> np.dtype:
    """The NumPy dtype used to ask NumPy for promotions (float16 for bfloat16)."""
    return float16 if dt == bfloat16 else dt


def cxx_name(dt: np.dtype) -> str:
    return CXX_NAMES[dt]


def check_op(op: str, dt: np.dtype) -> None:
    """Raise unless the built-in scan/reduce operator `op` is defined for `dt`."""
    if op not in SCAN_OPS:
        raise TileValueError(
            f"unknown operator {op!r}; expected one of {', '.join(SCAN_OPS)} or a @ct.combine function"
        )
    if op in BITWISE_OPS and is_float(dt):
        raise TileTypeError(bitwise_on_float(op, dt.name))
    if dt == bool_:
        raise TileTypeError("scans and reductions of bool tiles are not supported; convert with t.astype(np.int32)")


def bitwise_on_float(op: str, dtype_name: str) -> str:
    """The error of a bitwise scan or reduction over floats."""
    return f"operator {op!r} needs an integer tile, got {dtype_name}"


def identity(op: str, dt: np.dtype) -> object:
    """The identity element of `op` over `dt`, as a NumPy scalar."""
    check_op(op, dt)
    if op in ("add", "or", "xor"):
        return dt.type(0)
    if op == "mul":
        return dt.type(1)
    if op == "and":
        return dt.type(-1) if dt.kind == "i" else np.iinfo(dt).max
    if is_float(dt):
        return dt.type(-np.inf if op == "max" else np.inf)
    info = np.iinfo(dt)
    return dt.type(info.min if op == "max" else info.max)


def cxx_identity(op: str, dt: np.dtype) -> str:
    """The identity of `op` over `dt` as a C++ expression (16-bit floats never reach CUB's built-in ops)."""
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


def cast(x: object, dt: np.dtype) -> object:
    """`x` (a NumPy scalar or array) converted to `dt` as the generated code converts it: to bool
    as `x != 0`, 16-bit floats through float32, other conversions as C does them."""
    if dt == bool_:
        return np.asarray(x) != 0 if np.ndim(x) else np.bool_(np.asarray(x) != 0)
    a = np.asarray(x)
    if a.dtype in HALF_DTYPES and dt != float32:
        a = a.astype(float32)
    with np.errstate(all="ignore"):
        out = a.astype(dt)
    return out if out.ndim else out[()]
