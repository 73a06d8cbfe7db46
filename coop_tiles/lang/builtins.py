"""Scalar and element-wise functions of the `ct` namespace (`ct.program_id`, `ct.exp`, `ct.where`...).

Stubs with the documented signatures; their meaning is defined once in `coop_tiles.ops`.
"""

from __future__ import annotations

from typing import Any

from .stub import stub

__all__ = [
    "abs",
    "cdiv",
    "constexpr",
    "cos",
    "device_assert",
    "device_print",
    "erf",
    "exp",
    "exp2",
    "log",
    "log1p",
    "log2",
    "maximum",
    "minimum",
    "num_programs",
    "program_id",
    "rsqrt",
    "sigmoid",
    "sin",
    "softplus",
    "sqrt",
    "static_assert",
    "static_print",
    "tanh",
    "where",
]


class constexpr:  # noqa: N801 - the contract spells it ct.constexpr
    """Annotation for a parameter whose value is baked into the compiled kernel.

    Example: ``def k(x, TILE: ct.constexpr): ...`` then ``k[grid](x, TILE=1024)``.
    """


@stub
def program_id(axis: int) -> int:
    """Index of this program instance (thread block) along grid axis 0, 1 or 2."""


@stub
def num_programs(axis: int) -> int:
    """Number of program instances along grid axis 0, 1 or 2."""


def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers: ``cdiv(10, 4) == 3`` (on the host and in programs)."""
    return -(-a // b)


@stub
def exp(x: Any) -> Any:
    """Element-wise e**x (NumPy promotion: integer inputs give float64; 16-bit floats compute in float32)."""


@stub
def exp2(x: Any) -> Any:
    """Element-wise 2**x."""


@stub
def log(x: Any) -> Any:
    """Element-wise natural logarithm."""


@stub
def log1p(x: Any) -> Any:
    """Element-wise log(1 + x), accurate for small x."""


@stub
def log2(x: Any) -> Any:
    """Element-wise base-2 logarithm."""


@stub
def sqrt(x: Any) -> Any:
    """Element-wise square root."""


@stub
def rsqrt(x: Any) -> Any:
    """Element-wise 1 / sqrt(x) (a correctly rounded square root, then a division)."""


@stub
def abs(x: Any) -> Any:  # noqa: A001 - the contract spells it ct.abs
    """Element-wise absolute value."""


@stub
def sin(x: Any) -> Any:
    """Element-wise sine."""


@stub
def cos(x: Any) -> Any:
    """Element-wise cosine."""


@stub
def tanh(x: Any) -> Any:
    """Element-wise hyperbolic tangent."""


@stub
def erf(x: Any) -> Any:
    """Element-wise error function, 2/sqrt(pi) * integral of e**-t**2 from 0 to x (as math.erf)."""


@stub
def sigmoid(x: Any) -> Any:
    """Element-wise 1 / (1 + e**-x)."""


@stub
def softplus(x: Any) -> Any:
    """Element-wise log(1 + e**x); x itself where x > 20."""


@stub
def minimum(a: Any, b: Any) -> Any:
    """Element-wise minimum; NaN if either side is NaN (as numpy.minimum)."""


@stub
def maximum(a: Any, b: Any) -> Any:
    """Element-wise maximum; NaN if either side is NaN (as numpy.maximum)."""


@stub
def where(cond: Any, a: Any, b: Any) -> Any:
    """Element-wise ``a if cond else b``: ``ct.where(t > 0, t, 0)``."""


@stub
def static_assert(cond: Any, msg: str = "") -> None:
    """Check a compile-time condition (constexprs, tile sizes, dtypes) when the program is built:
    ``ct.static_assert(TILE % 32 == 0, "TILE must be a multiple of 32")``. A false one is a
    `TileAssertionError` at its line, in the interpreter and the compiler alike."""


@stub
def static_print(*values: Any) -> None:
    """Print at compile time, once per specialisation: constants as Python prints them, runtime
    values as their types (``ct.static_print("t is", t, "TILE =", TILE)`` prints
    ``t is tile<float32, 1024> TILE = 1024``)."""


@stub
def device_print(prefix: str, *values: Any) -> None:
    """Print scalars and every element of tiles as the program runs, one line per program:
    ``ct.device_print("t =", t)`` prints ``pid (0, 0, 0) t = [1 2 3]`` (the same in the interpreter)."""


@stub
def device_assert(cond: Any, msg: str = "") -> None:
    """Check a block-uniform condition, or that every element of a bool tile holds:
    ``ct.device_assert(t >= 0, "negative input")``. The interpreter always checks it; compiled
    kernels only with ``@ct.jit(debug=True)`` or ``COOP_TILES_DEBUG=1`` (otherwise it costs nothing)."""


#: the public element-wise functions, by their op name in `coop_tiles.ops.elementwise`
ELEMENTWISE_FUNCTIONS = {
    f.__name__: f
    for f in (
        exp,
        exp2,
        log,
        log1p,
        log2,
        sqrt,
        rsqrt,
        abs,
        sin,
        cos,
        tanh,
        erf,
        sigmoid,
        softplus,
        minimum,
        maximum,
        where,
    )
}
