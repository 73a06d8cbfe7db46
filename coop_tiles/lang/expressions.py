"""Expression handlers of the front end: one function per Python expression type (names,
attributes, operators, calls, subscripts), each returning a compile-time value or an IR value,
and the tables of the Python operators they map to element-wise ops.
"""

from __future__ import annotations

import ast
import builtins as py
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import as_dtype
from ..errors import TileSyntaxError, TileTypeError, TileValueError
from ..ops.base import BY_PUBLIC, build_call
from . import ir
from .builder import Builder
from .combine import CombineFunction
from .suggest import did_you_mean, instead_of
from .types import (
    BOOL,
    INT64,
    WEAK_FLOAT,
    WEAK_INT,
    ArrayType,
    ScalarType,
    TileType,
)
from .values import Const, Method, Shape, Undefined, describe, is_tile

#: Python operators -> the element-wise op (`coop_tiles.ops.elementwise`) they mean.
BINOPS: dict[type, str] = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "truediv",
    ast.FloorDiv: "floordiv",
    ast.Mod: "mod",
    ast.Pow: "pow",
    ast.BitAnd: "and",
    ast.BitOr: "or",
    ast.BitXor: "xor",
    ast.LShift: "lshift",
    ast.RShift: "rshift",
}
CMPOPS: dict[type, str] = {
    ast.Lt: "lt",
    ast.LtE: "le",
    ast.Gt: "gt",
    ast.GtE: "ge",
    ast.Eq: "eq",
    ast.NotEq: "ne",
}
UNARYOPS: dict[type, str] = {ast.USub: "neg", ast.UAdd: "pos", ast.Invert: "invert"}
#: Python's own debugging calls, which can't run inside a program, and what to use instead.
PYTHON_DEBUGGING: dict[Callable, str] = {
    py.print: "print() can't run inside a tile program: use ct.static_print(...) to print types, constexprs and "
    "tile sizes at compile time, or ct.device_print(prefix, ...) to print values as the program runs",
    py.breakpoint: "breakpoint() can't stop a tile program (the interpreter runs its typed IR, not the Python "
    "function): print values with ct.device_print(prefix, ...) or ct.static_print(...), or check them with "
    "ct.device_assert(cond, msg)",
}


def _expr_constant(b: Builder, e: ast.Constant) -> Any:
    return Const(e.value)


def _expr_name(b: Builder, e: ast.Name) -> Any:
    if e.id in b.scope:
        value = b.scope[e.id]
        if isinstance(value, Undefined):
            raise TileSyntaxError(f"variable {e.id!r} is not assigned on every path before this use: {value.why}")
        return value
    found, value = b.fn.resolve_global(e.id)
    if not found:
        raise TileSyntaxError(f"name {e.id!r} is not defined")
    if isinstance(value, np.ndarray):
        raise TileTypeError(f"global {e.id!r} is a NumPy array; tile programs read arrays passed as arguments only")
    return Const(value)


def _expr_attribute(b: Builder, e: ast.Attribute) -> Any:
    base = b.expr(e.value)
    if isinstance(base, Const):
        try:
            return Const(getattr(base.value, e.attr))
        except AttributeError:
            what = f"module {base.value.__name__!r}" if inspect.ismodule(base.value) else repr(base.value)
            ours = inspect.ismodule(base.value) and base.value.__name__ in ("coop_tiles", "coop_tiles.tile")
            raise TileSyntaxError(f"{what} has no attribute {e.attr!r}{did_you_mean(e.attr) if ours else ''}") from None
    if isinstance(base, (ir.Var, ir.Lit)):
        t = base.type
        if e.attr == "dtype":
            return Const(t.dtype)
        if isinstance(t, TileType):
            if e.attr == "size":
                return Const(t.size)
            if e.attr == "shape":
                return Const(t.shape)
            if e.attr == "ndim":
                return Const(t.ndim)
            if e.attr == "T":
                return b.remap(base, ir.TRANSPOSE, t.shape[::-1])
            if e.attr == "astype":
                return Method("astype", base)
        if isinstance(t, ArrayType):
            if e.attr == "shape":
                return Shape(base)
            if e.attr == "ndim":
                return Const(t.ndim)
    raise TileSyntaxError(f"attribute {e.attr!r} of {describe(base)} is not supported")


def _expr_binop(b: Builder, e: ast.BinOp) -> Any:
    if type(e.op) not in BINOPS:
        raise TileSyntaxError(f"operator {type(e.op).__name__} is not supported")
    return b.apply(BINOPS[type(e.op)], (b.expr(e.left), b.expr(e.right)))


def _expr_unaryop(b: Builder, e: ast.UnaryOp) -> Any:
    operand = b.expr(e.operand)
    if isinstance(e.op, ast.Not):
        if isinstance(operand, Const):
            return Const(not operand.value)
        cond = b.truth(b.scalar(operand, "the operand of `not`"))
        return b.map_op("not", (cond,), BOOL, cond.type.dtype)
    return b.apply(UNARYOPS[type(e.op)], (operand,))


def _expr_compare(b: Builder, e: ast.Compare) -> Any:
    left = b.expr(e.left)
    result = None
    for op, right_node in zip(e.ops, e.comparators):
        if type(op) not in CMPOPS:
            raise TileSyntaxError(f"comparison {type(op).__name__} is not supported")
        right = b.expr(right_node)
        part = b.apply(CMPOPS[type(op)], (left, right), compare=True)
        result = part if result is None else b.apply("and", (result, part))
        left = right
    return result


def _expr_boolop(b: Builder, e: ast.BoolOp) -> Any:
    name = "land" if isinstance(e.op, ast.And) else "lor"
    result = None
    for value_node in e.values:
        value = b.expr(value_node)
        if isinstance(value, Const) and result is None:
            if isinstance(e.op, ast.And) != bool(value.value):
                return Const(value.value)  # short-circuits at compile time
            continue
        if is_tile(value):
            raise TileTypeError("`and`/`or`/`not` need scalars; combine boolean tiles with & and |")
        cond = b.truth(b.scalar(value, "an operand of and/or"))
        result = cond if result is None else b.map_op(name, (result, cond), BOOL, np.dtype(np.bool_))
    return result if result is not None else Const(isinstance(e.op, ast.And))


def _expr_ifexp(b: Builder, e: ast.IfExp) -> Any:
    cond = b.condition(e.test, "if expression")
    if isinstance(cond, Const):
        return b.expr(e.body if cond.value else e.orelse)
    a, c = b.expr(e.body), b.expr(e.orelse)
    if is_tile(a) or is_tile(c):
        raise TileTypeError("`x if c else y` needs scalars; use ct.where(c, x, y) for tiles")
    return b.apply("where", (cond, a, c))


def _expr_call(b: Builder, e: ast.Call) -> Any:
    func = b.expr(e.func)
    if any(isinstance(a, ast.Starred) for a in e.args) or any(k.arg is None for k in e.keywords):
        raise TileSyntaxError("*args and **kwargs in calls are not supported")
    args = tuple(b.expr(a) for a in e.args)
    kwargs = {k.arg: b.expr(k.value) for k in e.keywords}
    if isinstance(func, Method):
        return _call_method(b, func, args, kwargs)
    if not isinstance(func, Const):
        raise TileTypeError(f"only functions can be called, not {describe(func)}")
    target = func.value
    if target in (py.min, py.max, py.abs):
        return _python_builtin(b, target, args, kwargs)
    if target in PYTHON_DEBUGGING:
        raise TileSyntaxError(PYTHON_DEBUGGING[target])
    op = BY_PUBLIC.get(target) if _hashable(target) else None
    if op is not None:
        return build_call(op, b, target, bind_call(target, args, kwargs))
    if isinstance(target, type) and (issubclass(target, np.generic) or target in (int, float, bool)):
        return _cast_call(b, target, args, kwargs)
    if isinstance(target, np.dtype):
        return _cast_call(b, target, args, kwargs)
    if isinstance(target, CombineFunction):
        raise TileTypeError(f"@ct.combine function {target.__name__} is called by tile.scan/tile.reduce (op=...)")
    if _library_function(target):
        name = getattr(target, "__qualname__", target)
        raise TileSyntaxError(f"{name!r} can't be called in a tile program{instead_of(target)}")
    if inspect.isfunction(target):
        return b.inline(target, args, kwargs, e)
    raise TileSyntaxError(f"{getattr(target, '__qualname__', target)!r} can't be called in a tile program")


def _library_function(target: Any) -> bool:
    """Whether `target` is NumPy's, math's or coop_tiles' own (not a helper to inline; the examples' helpers are
    user code)."""
    module = getattr(target, "__module__", "") or ""
    return module.startswith(("numpy", "coop_tiles", "math")) and not module.startswith("coop_tiles.examples.")


def bind_call(fn: Callable, args: tuple, kwargs: dict) -> inspect.BoundArguments:
    """Bind front-end values to `fn`'s signature; defaults come back as compile-time constants."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        raise TileTypeError(f"bad call of {getattr(fn, '__qualname__', fn)}: {e}") from None
    bound.apply_defaults()
    for k, v in bound.arguments.items():
        if not isinstance(v, (Const, ir.Var, ir.Lit, tuple, Shape)):
            bound.arguments[k] = Const(v)
    return bound


def _python_builtin(b: Builder, target: Callable, args: tuple, kwargs: dict) -> Any:
    """min(), max() and abs() on scalars."""
    if kwargs:
        raise TileTypeError(f"{target.__name__}() takes positional arguments only")
    if all(isinstance(a, Const) for a in args):
        return Const(target(*(a.value for a in args)))
    if target is py.abs:
        return b.apply("abs", args)
    if len(args) != 2:
        raise TileTypeError(f"{target.__name__}() takes two scalars in tile programs")
    if any(is_tile(v) for v in args):
        raise TileTypeError(f"use ct.{target.__name__}imum for tiles, or tile.{target.__name__} to reduce one")
    return b.apply(f"{target.__name__}imum", args)


def _hashable(obj: Any) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


def _cast_call(b: Builder, target: Any, args: tuple, kwargs: dict) -> Any:
    name = getattr(target, "__name__", str(target))
    if kwargs or len(args) != 1:
        raise TileTypeError(f"{name}() takes one argument here")
    (arg,) = args
    if isinstance(arg, Const):
        return Const(target(arg.value))
    value = b.runtime(arg)
    if isinstance(value.type, TileType):
        raise TileTypeError(f"{name}() of a tile; use t.astype({name})")
    t = {int: WEAK_INT, float: WEAK_FLOAT, bool: BOOL}.get(target) or ScalarType(as_dtype(target))
    return b.map_op("cast", (value,), t, t.dtype)


def _call_method(b: Builder, method: Method, args: tuple, kwargs: dict) -> Any:
    if method.name == "astype":
        if len(args) + len(kwargs) != 1:
            raise TileTypeError("astype() takes one dtype")
        dtype = as_dtype(b.constant((args or tuple(kwargs.values()))[0], "the dtype"))
        return b.convert(method.obj, dtype)
    raise TileSyntaxError(f"method {method.name!r} is not supported")


def _expr_subscript(b: Builder, e: ast.Subscript) -> Any:
    base = b.expr(e.value)
    parts = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
    if is_tile(base):
        return _tile_subscript(b, base, parts)
    if any(isinstance(p, ast.Slice) for p in parts):
        raise TileSyntaxError("arrays are indexed by integers; use tile.load for ranges")
    index = b.expr(e.slice)
    if isinstance(base, tuple):
        i = b.constant(index, "a tuple index", int)
        if not -len(base) <= i < len(base):
            raise TileValueError(f"tuple index {i} out of range for a tuple of {len(base)}")
        return base[i]
    if isinstance(base, Shape):
        axis = b.constant(index, "a shape index", int)
        ndim = base.array.type.ndim
        if not -ndim <= axis < ndim:
            raise TileValueError(f"shape index {axis} out of range for a {ndim}-d array")
        out = b.temp(INT64)
        b.emit(ir.ArrayShape(out, base.array, axis % ndim), e)
        return out
    if isinstance(base, Const) and isinstance(index, Const):
        try:
            return Const(base.value[index.value])
        except Exception as err:
            raise TileValueError(f"compile-time indexing failed: {err}") from None
    array = b.array(base, "the indexed value")
    indices = b.indices(array, index)
    t = array.type
    if len(indices) == t.ndim:
        out = b.temp(ScalarType(t.dtype))
        b.emit(ir.ArrayRead(out, array, indices), e)
    else:
        unit = t.unit_stride
        out = b.temp(ArrayType(t.dtype, t.ndim - len(indices), unit))
        b.emit(ir.ArrayView(out, array, indices), e)
    return out


TILE_INDEX = (
    "a tile is subscripted only to add axes (t[:, None], t[None, :]); to read elements by index use "
    "tile.gather, for per-element choices ct.where, to fold it tile.sum/tile.max"
)


def _tile_subscript(b: Builder, t: ir.Var, parts: list[ast.expr]) -> ir.Var:
    """`t[:, None]`, `t[None, :]`, `t[None]`: `t` with axes of extent 1 inserted (a reshape)."""
    whole = [isinstance(p, ast.Slice) and p.lower is None and p.upper is None and p.step is None for p in parts]
    new = [isinstance(p, ast.Constant) and p.value is None for p in parts]
    if not all(w or n for w, n in zip(whole, new)):
        raise TileSyntaxError(TILE_INDEX)
    kept = sum(whole)
    if kept > t.type.ndim:
        raise TileValueError(f"too many ':' ({kept}) for a tile of shape {t.type.shape}")
    shape, axes = [], iter(t.type.shape)
    for n in new:
        shape.append(1 if n else next(axes))
    shape += list(axes)
    if len(shape) > 2:
        raise TileValueError(f"t[...] would give a tile of shape {tuple(shape)}; tiles have one or two axes")
    return b.remap(t, ir.RESHAPE, tuple(shape)) if tuple(shape) != t.type.shape else t


def _expr_tuple(b: Builder, e: ast.Tuple) -> Any:
    items = tuple(b.expr(x) for x in e.elts)
    if all(isinstance(x, Const) for x in items):
        return Const(tuple(x.value for x in items))
    return items


EXPR_HANDLERS: dict[type, Callable] = {
    ast.Constant: _expr_constant,
    ast.Name: _expr_name,
    ast.Attribute: _expr_attribute,
    ast.BinOp: _expr_binop,
    ast.UnaryOp: _expr_unaryop,
    ast.Compare: _expr_compare,
    ast.BoolOp: _expr_boolop,
    ast.IfExp: _expr_ifexp,
    ast.Call: _expr_call,
    ast.Subscript: _expr_subscript,
    ast.Tuple: _expr_tuple,
}
