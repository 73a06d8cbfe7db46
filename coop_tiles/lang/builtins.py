"""Scalar and element-wise functions of the `ct` namespace (`ct.program_id`, `ct.exp`, `ct.where`...).

The bodies are the NumPy reference semantics, used by the interpreter and to type calls in
compiled programs; the compiler lowers each call by its own rules (see codegen).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .interpreter import Tile, current_program, elementwise


class constexpr:  # noqa: N801 - the contract spells it ct.constexpr
    """Annotation for a parameter whose value is baked into the compiled kernel.

    Example: ``def k(x, TILE: ct.constexpr): ...`` then ``k[grid](x, TILE=1024)``.
    """


def program_id(axis: int) -> int:
    """Index of this program instance (thread block) along grid axis 0, 1 or 2."""
    return current_program().program_id[_axis(axis)]


def num_programs(axis: int) -> int:
    """Number of program instances along grid axis 0, 1 or 2."""
    return current_program().num_programs[_axis(axis)]


def _axis(axis: int) -> int:
    if axis not in (0, 1, 2):
        from ..errors import TileValueError

        raise TileValueError(f"grid axis must be 0, 1 or 2, got {axis!r}")
    return axis


def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers: ``cdiv(10, 4) == 3``."""
    return -(-a // b)


def _sigmoid(x: Any) -> Any:
    return 1 / (1 + np.exp(-x))


def _softplus(x: Any) -> Any:
    # Same formula as the generated code: log(1 + e^x), and x itself past 20.
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def _maximum(a: Any, b: Any) -> Any:
    return np.maximum(a, b)


def _minimum(a: Any, b: Any) -> Any:
    return np.minimum(a, b)


#: NumPy reference of each element-wise function, by public name.
ELEMENTWISE = {
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log1p": np.log1p,
    "sqrt": np.sqrt,
    "abs": np.abs,
    "sin": np.sin,
    "cos": np.cos,
    "sigmoid": _sigmoid,
    "softplus": _softplus,
    "minimum": _minimum,
    "maximum": _maximum,
    "where": np.where,
}


def exp(x: Tile | float) -> Tile | float:
    """Element-wise e**x (NumPy promotion: integer inputs give float64)."""
    return elementwise(np.exp, x)


def exp2(x: Tile | float) -> Tile | float:
    """Element-wise 2**x."""
    return elementwise(np.exp2, x)


def log(x: Tile | float) -> Tile | float:
    """Element-wise natural logarithm."""
    return elementwise(np.log, x)


def log1p(x: Tile | float) -> Tile | float:
    """Element-wise log(1 + x), accurate for small x."""
    return elementwise(np.log1p, x)


def sqrt(x: Tile | float) -> Tile | float:
    """Element-wise square root."""
    return elementwise(np.sqrt, x)


def abs(x: Tile | float) -> Tile | float:  # noqa: A001 - the contract spells it ct.abs
    """Element-wise absolute value."""
    return elementwise(np.abs, x)


def sin(x: Tile | float) -> Tile | float:
    """Element-wise sine."""
    return elementwise(np.sin, x)


def cos(x: Tile | float) -> Tile | float:
    """Element-wise cosine."""
    return elementwise(np.cos, x)


def sigmoid(x: Tile | float) -> Tile | float:
    """Element-wise 1 / (1 + e**-x)."""
    return elementwise(_sigmoid, x)


def softplus(x: Tile | float) -> Tile | float:
    """Element-wise log(1 + e**x); returns x itself where x > 20."""
    return elementwise(_softplus, x)


def minimum(a: Tile | float, b: Tile | float) -> Tile | float:
    """Element-wise minimum; NaN if either side is NaN (as numpy.minimum)."""
    return elementwise(_minimum, a, b)


def maximum(a: Tile | float, b: Tile | float) -> Tile | float:
    """Element-wise maximum; NaN if either side is NaN (as numpy.maximum)."""
    return elementwise(_maximum, a, b)


def where(cond: Tile | bool, a: Tile | float, b: Tile | float) -> Tile | float:
    """Element-wise ``a if cond else b``; ``ct.where(t > 0, t, 0)``."""
    return elementwise(np.where, cond, a, b)
