"""Element-wise operations, each defined once: its NumPy semantics (which also give its typing,
through NumPy's promotion on stand-in values) and its lowering to one scalar expression.

The front end types `ScalarOp`/`TileMap` statements with `numpy`, the interpreter evaluates them
with `numpy`, and the body generator writes `lower(...)` per element. Operands are converted to
the statement's compute dtype first; 16-bit floats are computed on in float32 and rounded.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ElementOp:
    """`numpy(*operands)` is the reference; `lower(xs, lit)` the expression over operand strings
    already in the compute dtype (`lit(v)` spells a literal of that dtype)."""

    name: str
    numpy: Callable
    lower: Callable[[list[str], Callable[[float], str]], str]
    boolean: bool = False  # the result is a bool whatever the compute dtype
    #: the lowering for integer compute dtypes, where it differs from `lower`
    lower_integer: Callable[[list[str], Callable[[float], str]], str] | None = None


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _softplus(x):
    # log(1 + e^x), and x itself past 20 (as PyTorch and Mamba do)
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def _rsqrt(x):
    return 1 / np.sqrt(x)


def _erf(x):
    """math.erf per element (NumPy has no erf), typed as NumPy types its float functions (np.sin)."""
    dtype = np.sin(np.zeros_like(x)).dtype
    values = np.frompyfunc(math.erf, 1, 1)(x)
    return np.asarray(values, dtype) if np.ndim(x) else dtype.type(values)


def _floordiv(a, b):
    """`a // b`, but 0 for the most negative integer over -1 (which NumPy wraps around to itself), as the GPU gives:
    division by zero is already 0 in both."""
    q = operator.floordiv(a, b)
    dtype = np.result_type(q)
    if dtype.kind != "i":
        return q
    overflow = (a == np.iinfo(dtype).min) & (b == -1)
    return np.where(overflow, dtype.type(0), q)[()] if np.any(overflow) else q


def _infix(symbol: str, boolean: bool = False, fn: Callable | None = None) -> Callable:
    return lambda xs, lit: f"({xs[0]} {symbol} {xs[1]})"


def _nan_first(compare: str) -> Callable:
    """minimum/maximum propagating NaN from either side, as NumPy does."""
    return lambda xs, lit: f"select(({xs[0]} != {xs[0]}) | ({xs[0]} {compare} {xs[1]}), {xs[0]}, {xs[1]})"


_TABLE = [
    ElementOp("add", operator.add, _infix("+")),
    ElementOp("sub", operator.sub, _infix("-")),
    ElementOp("mul", operator.mul, _infix("*")),
    ElementOp("truediv", operator.truediv, _infix("/")),
    # (integers: a branch-free division that loop-invariant code motion can lift, runtime/toolchain.py)
    ElementOp("floordiv", _floordiv, _infix("//"), lower_integer=lambda xs, lit: f"int_floordiv({xs[0]}, {xs[1]})"),
    ElementOp("mod", operator.mod, _infix("%"), lower_integer=lambda xs, lit: f"int_mod({xs[0]}, {xs[1]})"),
    ElementOp("pow", operator.pow, _infix("**")),
    ElementOp("and", operator.and_, _infix("&")),
    ElementOp("or", operator.or_, _infix("|")),
    ElementOp("xor", operator.xor, _infix("^")),
    ElementOp("lshift", operator.lshift, _infix("<<")),
    ElementOp("rshift", operator.rshift, _infix(">>")),
    ElementOp("lt", operator.lt, _infix("<"), boolean=True),
    ElementOp("le", operator.le, _infix("<="), boolean=True),
    ElementOp("gt", operator.gt, _infix(">"), boolean=True),
    ElementOp("ge", operator.ge, _infix(">="), boolean=True),
    ElementOp("eq", operator.eq, _infix("=="), boolean=True),
    ElementOp("ne", operator.ne, _infix("!="), boolean=True),
    ElementOp("land", np.logical_and, _infix("and"), boolean=True),
    ElementOp("lor", np.logical_or, _infix("or"), boolean=True),
    ElementOp("not", np.logical_not, lambda xs, lit: f"(not {xs[0]})", boolean=True),
    ElementOp("neg", operator.neg, lambda xs, lit: f"(-{xs[0]})"),
    ElementOp("pos", operator.pos, lambda xs, lit: xs[0]),
    ElementOp("invert", operator.invert, lambda xs, lit: f"(~{xs[0]})"),
    ElementOp("exp", np.exp, lambda xs, lit: f"math.exp({xs[0]})"),
    ElementOp("exp2", np.exp2, lambda xs, lit: f"math.exp2({xs[0]})"),
    ElementOp("log", np.log, lambda xs, lit: f"math.log({xs[0]})"),
    ElementOp("log1p", np.log1p, lambda xs, lit: f"math.log1p({xs[0]})"),
    ElementOp("log2", np.log2, lambda xs, lit: f"math.log2({xs[0]})"),
    ElementOp("sqrt", np.sqrt, lambda xs, lit: f"math.sqrt({xs[0]})"),
    ElementOp("rsqrt", _rsqrt, lambda xs, lit: f"({lit(1)} / math.sqrt({xs[0]}))"),
    ElementOp("sin", np.sin, lambda xs, lit: f"math.sin({xs[0]})"),
    ElementOp("cos", np.cos, lambda xs, lit: f"math.cos({xs[0]})"),
    ElementOp("tanh", np.tanh, lambda xs, lit: f"math.tanh({xs[0]})"),
    ElementOp("erf", _erf, lambda xs, lit: f"math.erf({xs[0]})"),
    ElementOp("abs", np.abs, lambda xs, lit: f"abs({xs[0]})"),
    ElementOp("sigmoid", _sigmoid, lambda xs, lit: f"({lit(1)} / ({lit(1)} + math.exp(-{xs[0]})))"),
    ElementOp(
        "softplus",
        _softplus,
        lambda xs, lit: f"({xs[0]} if {xs[0]} > {lit(20)} else math.log1p(math.exp({xs[0]})))",
    ),
    ElementOp("minimum", np.minimum, _nan_first("<")),
    ElementOp("maximum", np.maximum, _nan_first(">")),
    ElementOp("where", np.where, lambda xs, lit: f"select({xs[0]}, {xs[1]}, {xs[2]})"),
    ElementOp("cast", lambda x: x, lambda xs, lit: xs[0]),
]

#: every element-wise op, by IR name
ELEMENTWISE: dict[str, ElementOp] = {op.name: op for op in _TABLE}
