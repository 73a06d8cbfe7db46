"""The typed side of the front end: abstract interpretation of a parsed tile program.

For one specialisation (argument types and constexpr values) it walks the AST once per
statement, dispatching on node type through small handlers, evaluating compile-time values
(constexprs, literals, globals) in Python and emitting typed IR for everything else.
Variable types are found by iterating to a fixed point, so a loop-carried ``acc = 0.0``
that accumulates float32 sums is typed float32 from the start.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DivergenceError, TileError, TileSyntaxError, TileTypeError, TileValueError
from . import ir
from .calls import CALLS, PY_CALLS, bind_call
from .source import ParsedFunction, parse_function
from .types import (
    BOOL,
    WEAK_FLOAT,
    WEAK_INT,
    ArrayType,
    ScalarType,
    TileType,
    ValueType,
    common_type,
    join,
    result_type,
    type_of_python_scalar,
)


@dataclass(frozen=True)
class Const:
    """A value known at compile time: a literal, constexpr, global, dtype or function."""

    value: Any


@dataclass(frozen=True)
class Method:
    """A bound method of a tile (``t.astype``)."""

    name: str
    obj: ir.Var


BINOPS: dict[type, tuple[str, Callable]] = {
    ast.Add: ("add", operator.add),
    ast.Sub: ("sub", operator.sub),
    ast.Mult: ("mul", operator.mul),
    ast.Div: ("truediv", operator.truediv),
    ast.FloorDiv: ("floordiv", operator.floordiv),
    ast.Mod: ("mod", operator.mod),
    ast.Pow: ("pow", operator.pow),
    ast.BitAnd: ("and", operator.and_),
    ast.BitOr: ("or", operator.or_),
    ast.BitXor: ("xor", operator.xor),
    ast.LShift: ("lshift", operator.lshift),
    ast.RShift: ("rshift", operator.rshift),
}
CMPOPS: dict[type, tuple[str, Callable]] = {
    ast.Lt: ("lt", operator.lt),
    ast.LtE: ("le", operator.le),
    ast.Gt: ("gt", operator.gt),
    ast.GtE: ("ge", operator.ge),
    ast.Eq: ("eq", operator.eq),
    ast.NotEq: ("ne", operator.ne),
}
UNARYOPS: dict[type, tuple[str, Callable]] = {
    ast.USub: ("neg", operator.neg),
    ast.UAdd: ("pos", operator.pos),
    ast.Invert: ("invert", operator.invert),
}
MAX_FIXPOINT_ROUNDS = 8
MAX_INLINE_DEPTH = 16


class Builder:
    """Builds the IR of one specialisation; `var_types` carries variable types between rounds."""

    def __init__(self, parsed: ParsedFunction, var_types: dict[str, ValueType]):
        self.root = parsed
        self.var_types = var_types
        self.assigned_types: dict[str, ValueType] = {}
        self.stmts: list[ir.Stmt] = []
        self.fn = parsed
        self.prefix = "v_"
        self.scope: dict[str, Any] = {}
        self.counter = 0
        self.cids = 0
        self.inline_depth = 0
        self.returned: Any = None
        self.current: ast.AST | None = None  # the node being handled, for statement locations

    # ----- bookkeeping -------------------------------------------------------------------
    def temp(self, t: ValueType) -> ir.Var:
        self.counter += 1
        return ir.Var(f"t{self.counter}", t)

    def emit(self, stmt: ir.Stmt, node: ast.AST | None = None) -> None:
        node = node if node is not None else self.current
        if node is not None:
            stmt.loc = self.fn.loc(node)
        if isinstance(stmt, ir.Collective):
            stmt.cid = self.cids
            self.cids += 1
        self.stmts.append(stmt)

    @contextmanager
    def block(self, into: list[ir.Stmt]):
        saved = self.stmts
        self.stmts = into
        try:
            yield into
        finally:
            self.stmts = saved

    @contextmanager
    def located(self, node: ast.AST):
        saved, self.current = self.current, node
        try:
            yield
        except TileError as e:
            e.locate(self.fn.loc(node))
            raise
        except RecursionError:
            raise TileSyntaxError("expression nested too deeply", loc=self.fn.loc(node)) from None
        finally:
            self.current = saved

    # ----- values --------------------------------------------------------------------------
    def runtime(self, v: Any, what: str = "value") -> ir.Value:
        """`v` as a runtime IR value (compile-time numbers become literals)."""
        if isinstance(v, (ir.Var, ir.Lit)):
            return v
        if isinstance(v, Const):
            if isinstance(v.value, (bool, int, float, np.bool_, np.number)):
                t = type_of_python_scalar(v.value)
                return ir.Lit(v.value, t)
            raise TileTypeError(f"{what} must be a number or a tile, got {v.value!r}")
        if isinstance(v, tuple):
            raise TileTypeError(f"{what} must be a single value, got a tuple of {len(v)}")
        raise TileTypeError(f"{what} must be a number or a tile, got {v!r}")

    def scalar(self, v: Any, what: str, kinds: str = "biuf") -> ir.Value:
        value = self.runtime(v, what)
        if not isinstance(value.type, ScalarType):
            raise TileTypeError(f"{what} must be a block-uniform scalar, got {value.type}")
        if value.type.dtype.kind not in kinds:
            raise TileTypeError(f"{what} must be {_kind_names(kinds)}, got {value.type}")
        return value

    def tile(self, v: Any, what: str) -> ir.Var:
        if isinstance(v, ir.Var) and isinstance(v.type, TileType):
            return v
        got = v.type if isinstance(v, (ir.Var, ir.Lit)) else (v.value if isinstance(v, Const) else v)
        raise TileTypeError(f"{what} must be a tile, got {got}")

    def array(self, v: Any, what: str) -> ir.Var:
        if isinstance(v, ir.Var) and isinstance(v.type, ArrayType):
            return v
        got = v.type if isinstance(v, (ir.Var, ir.Lit)) else v
        raise TileTypeError(f"{what} must be an array argument, got {got}")

    def constant(self, v: Any, what: str, kind: type | tuple = object) -> Any:
        if not isinstance(v, Const):
            raise TileValueError(
                f"{what} must be a compile-time constant (a literal, a ct.constexpr parameter, "
                f"or an expression of them), got a runtime {v.type if hasattr(v, 'type') else 'value'}"
            )
        if not isinstance(v.value, kind) or (kind is int and isinstance(v.value, bool)):
            raise TileValueError(f"{what} must be of type {getattr(kind, '__name__', kind)}, got {v.value!r}")
        return v.value

    def tile_size(self, v: Any) -> int:
        size = v.value if isinstance(v, Const) else None
        if isinstance(size, np.integer):
            size = int(size)
        size = self.constant(Const(size) if size is not None else v, "tile size", int)
        if size < 1:
            raise TileValueError(f"tile size must be positive, got {size}")
        return size

    def convert(self, v: ir.Value, dtype: np.dtype) -> ir.Value:
        """`v` converted to `dtype` (a literal is converted at compile time)."""
        if v.type.dtype == dtype and (isinstance(v, ir.Var) or not v.type.weak):
            return v
        if isinstance(v, ir.Lit):
            with np.errstate(all="ignore"):
                return ir.Lit(dtype.type(v.value), ScalarType(dtype))
        if isinstance(v.type, TileType):
            return self.map_op("cast", (v,), TileType(dtype, v.type.size), dtype)
        out = self.temp(ScalarType(dtype))
        self.emit(ir.ScalarOp(out, "cast", (v,), dtype))
        return out

    def map_op(self, op: str, args: tuple, out_type: ValueType, compute: np.dtype) -> ir.Var:
        out = self.temp(out_type)
        cls = ir.TileMap if isinstance(out_type, TileType) else ir.ScalarOp
        self.emit(cls(out, op, args, compute))
        return out

    def apply(self, name: str, fn: Callable, args: tuple, compare: bool = False) -> Any:
        """An element-wise operation on scalars and tiles, typed by NumPy's rules."""
        if all(isinstance(a, Const) for a in args):
            try:
                with np.errstate(all="ignore"):
                    return Const(fn(*(a.value for a in args)))
            except Exception as e:  # the user's own compile-time arithmetic failed
                raise TileValueError(f"compile-time evaluation failed: {e}") from None
        values = tuple(self.runtime(a) for a in args)
        for v in values:
            if isinstance(v.type, ArrayType):
                raise TileTypeError("arrays can't be used in arithmetic; load a tile or index an element")
        types = tuple(v.type for v in values)
        out_type = result_type(fn, *types)
        compute = common_type(*types).dtype if compare else out_type.dtype
        if name == "where":
            compute = out_type.dtype
        return self.map_op(name, values, out_type, compute)

    # ----- assignment ------------------------------------------------------------------------
    def assign(self, name: str, value: Any, node: ast.AST) -> None:
        if isinstance(value, Const) and (
            name in self.fn.single_top_level or not isinstance(value.value, (int, float, np.number))
        ):
            self.scope[name] = value
            return
        if isinstance(value, tuple):
            raise TileTypeError(f"can't assign a tuple to {name!r}; unpack it: `a, b = ...`")
        if isinstance(value, Method):
            raise TileTypeError(f"can't assign the method {value.name!r} to a variable")
        value = self.runtime(value, f"value assigned to {name!r}")
        if isinstance(value.type, ArrayType):
            self.scope[name] = value
            return
        key = self.prefix + name
        declared = self.var_types.get(key, value.type)
        joined = join(self.assigned_types.get(key, declared), value.type, name)
        self.assigned_types[key] = joined
        target = ir.Var(key, declared)
        if isinstance(declared, TileType) and isinstance(value.type, TileType) and declared.size != value.type.size:
            raise TileTypeError(f"variable {name!r} is assigned tiles of sizes {declared.size} and {value.type.size}")
        if isinstance(declared, ScalarType) != isinstance(value.type, ScalarType):
            raise TileTypeError(f"variable {name!r} is assigned both a tile and a scalar")
        self.emit(ir.Copy(target, value), node)
        self.scope[name] = target

    def assign_target(self, target: ast.AST, value: Any, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.assign(target.id, value, node)
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = value.value if isinstance(value, Const) and isinstance(value.value, tuple) else value
            if not isinstance(items, tuple):
                raise TileTypeError(f"can't unpack a single value into {len(target.elts)} names")
            if len(items) != len(target.elts):
                raise TileTypeError(f"can't unpack {len(items)} values into {len(target.elts)} names")
            for t, v in zip(target.elts, items):
                self.assign_target(t, Const(v) if isinstance(value, Const) else v, node)
        elif isinstance(target, ast.Subscript):
            array = self.array(self.expr(target.value), "the target of an element write")
            index = self.scalar(self.expr(target.slice), "an array index", "iu")
            stored = self.convert(self.scalar(value, "the value written to an array element"), array.type.dtype)
            self.emit(ir.ArrayWrite(array, self.convert(index, np.dtype(np.int64)), stored), node)
        else:
            raise TileSyntaxError(f"can't assign to {type(target).__name__}")

    # ----- statements and expressions ----------------------------------------------------------
    def body(self, stmts: list[ast.stmt]) -> None:
        for s in stmts:
            if self.returned is not None:
                raise TileSyntaxError("a helper's `return` must be its last statement", loc=self.fn.loc(s))
            handler = STMT_HANDLERS.get(type(s))
            if handler is None:
                raise TileSyntaxError(
                    f"`{type(s).__name__}` statements are not supported in tile programs", loc=self.fn.loc(s)
                )
            with self.located(s):
                handler(self, s)

    def expr(self, node: ast.expr) -> Any:
        handler = EXPR_HANDLERS.get(type(node))
        if handler is None:
            raise TileSyntaxError(
                f"`{type(node).__name__}` expressions are not supported in tile programs", loc=self.fn.loc(node)
            )
        with self.located(node):
            return handler(self, node)

    def condition(self, node: ast.expr, what: str) -> Any:
        cond = self.expr(node)
        if isinstance(cond, ir.Var) and isinstance(cond.type, TileType):
            raise DivergenceError(
                f"the condition of this `{what}` is a tile, so it differs between threads and tile "
                "collectives under it would diverge; use ct.where for per-element choices or reduce "
                "the tile to a scalar (tile.max(t) > 0)"
            )
        if isinstance(cond, Const):
            return cond
        return self.truth(self.scalar(cond, f"the condition of `{what}`"))

    def truth(self, value: ir.Value) -> ir.Value:
        """A scalar as a bool, as Python's truth test does (`value != 0`)."""
        if value.type.dtype == np.bool_:
            return value
        return self.map_op("ne", (value, ir.Lit(0, WEAK_INT)), BOOL, value.type.dtype)

    def inline(self, helper: Callable, args: tuple, kwargs: dict, node: ast.AST) -> Any:
        """Inline a plain Python helper function called from the tile program."""
        if self.inline_depth >= MAX_INLINE_DEPTH:
            raise TileSyntaxError(f"helpers nested deeper than {MAX_INLINE_DEPTH} calls (recursion?)")
        parsed = parse_function(helper)
        import inspect

        try:
            bound = inspect.signature(helper).bind(*args, **kwargs)
        except TypeError as e:
            raise TileTypeError(f"bad call of {helper.__name__}: {e}") from None
        bound.apply_defaults()
        saved = (self.fn, self.prefix, self.scope, self.returned)
        self.counter += 1
        self.fn, self.prefix, self.returned = parsed, f"h{self.counter}_", None
        self.scope = {}
        self.inline_depth += 1
        try:
            for name, value in bound.arguments.items():
                value = value if isinstance(value, (Const, ir.Var, ir.Lit, tuple)) else Const(value)
                if name in parsed.assigned:
                    self.assign(name, value, parsed.tree)
                else:
                    self.scope[name] = value
            self.body(parsed.tree.body)
            return self.returned if self.returned is not None else Const(None)
        finally:
            self.fn, self.prefix, self.scope, self.returned = saved
            self.inline_depth -= 1


# ----- statement handlers ------------------------------------------------------------------------
def _stmt_assign(b: Builder, s: ast.Assign) -> None:
    value = b.expr(s.value)
    for target in s.targets:
        b.assign_target(target, value, s)


def _stmt_annassign(b: Builder, s: ast.AnnAssign) -> None:
    if s.value is None:
        raise TileSyntaxError("a bare annotation without a value is not supported")
    b.assign_target(s.target, b.expr(s.value), s)


def _stmt_augassign(b: Builder, s: ast.AugAssign) -> None:
    name, fn = BINOPS[type(s.op)]
    if isinstance(s.target, ast.Subscript):
        current = b.expr(s.target)
    elif isinstance(s.target, ast.Name):
        current = b.expr(ast.copy_location(ast.Name(s.target.id, ast.Load()), s.target))
    else:
        raise TileSyntaxError("augmented assignment needs a name or an array element")
    b.assign_target(s.target, b.apply(name, fn, (current, b.expr(s.value))), s)


def _stmt_expr(b: Builder, s: ast.Expr) -> None:
    if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
        return  # docstring
    b.expr(s.value)


def _stmt_pass(b: Builder, s: ast.Pass) -> None:
    pass


def _stmt_return(b: Builder, s: ast.Return) -> None:
    if b.inline_depth:
        b.returned = b.expr(s.value) if s.value is not None else Const(None)
        return
    if s.value is not None:
        raise TileSyntaxError("a tile program can't return a value; store results with tile.store")
    b.emit(ir.Return(), s)


def _stmt_if(b: Builder, s: ast.If) -> None:
    cond = b.condition(s.test, "if")
    if isinstance(cond, Const):
        b.body(s.body if cond.value else s.orelse)
        return
    if b.inline_depth and _has_return(s):
        raise TileSyntaxError("a helper's `return` must be its last statement, not inside an `if`")
    before = dict(b.scope)
    then: list[ir.Stmt] = []
    with b.block(then):
        b.body(s.body)
    after_then = b.scope
    b.scope = dict(before)
    orelse: list[ir.Stmt] = []
    with b.block(orelse):
        b.body(s.orelse)
    b.scope = {**after_then, **b.scope}
    b.emit(ir.If(cond, then, orelse), s)


def _has_return(s: ast.stmt) -> bool:
    return any(isinstance(n, ast.Return) for n in ast.walk(s))


def _stmt_for(b: Builder, s: ast.For) -> None:
    if s.orelse:
        raise TileSyntaxError("`for ... else` is not supported")
    if not (isinstance(s.iter, ast.Call) and b.expr(s.iter.func) == Const(range)):
        raise TileSyntaxError("tile programs loop with `for i in range(...)` only")
    if s.iter.keywords or not 1 <= len(s.iter.args) <= 3:
        raise TileSyntaxError("range() takes 1 to 3 positional arguments")
    bounds = [b.scalar(b.expr(a), "a range() bound", "iu") for a in s.iter.args]
    if len(bounds) == 1:
        bounds = [ir.Lit(0, WEAK_INT), bounds[0]]
    if len(bounds) == 2:
        bounds.append(ir.Lit(1, WEAK_INT))
    if isinstance(bounds[2], ir.Lit) and bounds[2].value == 0:
        raise TileValueError("range() step must not be zero")
    bounds = [b.convert(v, np.dtype(np.int64)) for v in bounds]
    if not isinstance(s.target, ast.Name):
        raise TileSyntaxError("the loop variable must be a single name")
    var = ir.Var(b.prefix + s.target.id, ScalarType(np.dtype(np.int64), weak=True))
    b.var_types.setdefault(var.name, var.type)
    b.scope[s.target.id] = var
    body: list[ir.Stmt] = []
    with b.block(body):
        b.body(s.body)
    b.emit(ir.ForRange(var, bounds[0], bounds[1], bounds[2], body), s)


def _stmt_while(b: Builder, s: ast.While) -> None:
    if s.orelse:
        raise TileSyntaxError("`while ... else` is not supported")
    cond_body: list[ir.Stmt] = []
    with b.block(cond_body):
        cond = b.condition(s.test, "while")
    if isinstance(cond, Const):
        if not cond.value:
            return
        raise TileSyntaxError("`while True` loops need `break`, which tile programs don't support")
    body: list[ir.Stmt] = []
    with b.block(body):
        b.body(s.body)
    b.emit(ir.While(cond_body, cond, body), s)


def _stmt_unsupported_jump(b: Builder, s: ast.stmt) -> None:
    raise TileSyntaxError(
        f"`{type(s).__name__.lower()}` is not supported in tile programs; restructure the loop with a condition"
    )


STMT_HANDLERS: dict[type, Callable] = {
    ast.Assign: _stmt_assign,
    ast.AnnAssign: _stmt_annassign,
    ast.AugAssign: _stmt_augassign,
    ast.Expr: _stmt_expr,
    ast.Pass: _stmt_pass,
    ast.Return: _stmt_return,
    ast.If: _stmt_if,
    ast.For: _stmt_for,
    ast.While: _stmt_while,
    ast.Break: _stmt_unsupported_jump,
    ast.Continue: _stmt_unsupported_jump,
}


# ----- expression handlers -----------------------------------------------------------------------
def _expr_constant(b: Builder, e: ast.Constant) -> Any:
    return Const(e.value)


def _expr_name(b: Builder, e: ast.Name) -> Any:
    if e.id in b.scope:
        return b.scope[e.id]
    found, value = b.fn.resolve_global(e.id)
    if not found:
        raise TileSyntaxError(f"name {e.id!r} is not defined")
    return Const(value)


def _expr_attribute(b: Builder, e: ast.Attribute) -> Any:
    base = b.expr(e.value)
    if isinstance(base, Const):
        try:
            return Const(getattr(base.value, e.attr))
        except AttributeError:
            raise TileSyntaxError(f"{base.value!r} has no attribute {e.attr!r}") from None
    if isinstance(base, (ir.Var, ir.Lit)):
        t = base.type
        if e.attr == "dtype":
            return Const(t.dtype)
        if isinstance(t, TileType):
            if e.attr == "size":
                return Const(t.size)
            if e.attr == "astype":
                return Method("astype", base)
    raise TileSyntaxError(f"attribute {e.attr!r} is not supported here")


def _expr_binop(b: Builder, e: ast.BinOp) -> Any:
    if type(e.op) not in BINOPS:
        raise TileSyntaxError(f"operator {type(e.op).__name__} is not supported")
    name, fn = BINOPS[type(e.op)]
    return b.apply(name, fn, (b.expr(e.left), b.expr(e.right)))


def _expr_unaryop(b: Builder, e: ast.UnaryOp) -> Any:
    operand = b.expr(e.operand)
    if isinstance(e.op, ast.Not):
        if isinstance(operand, Const):
            return Const(not operand.value)
        cond = b.scalar(operand, "the operand of `not`")
        return b.map_op("not", (cond,), BOOL, cond.type.dtype)
    name, fn = UNARYOPS[type(e.op)]
    return b.apply(name, fn, (operand,))


def _expr_compare(b: Builder, e: ast.Compare) -> Any:
    left = b.expr(e.left)
    result = None
    for op, right_node in zip(e.ops, e.comparators):
        if type(op) not in CMPOPS:
            raise TileSyntaxError(f"comparison {type(op).__name__} is not supported")
        right = b.expr(right_node)
        name, fn = CMPOPS[type(op)]
        part = b.apply(name, fn, (left, right), compare=True)
        result = part if result is None else b.apply("and", operator.and_, (result, part))
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
        if isinstance(value, ir.Var) and isinstance(value.type, TileType):
            raise TileTypeError("`and`/`or`/`not` need scalars; combine boolean tiles with & and |")
        cond = b.truth(b.scalar(value, "an operand of and/or"))
        result = cond if result is None else b.map_op(name, (result, cond), BOOL, np.dtype(np.bool_))
    return result if result is not None else Const(isinstance(e.op, ast.And))


def _expr_ifexp(b: Builder, e: ast.IfExp) -> Any:
    cond = b.condition(e.test, "if expression")
    if isinstance(cond, Const):
        return b.expr(e.body if cond.value else e.orelse)
    a, c = b.expr(e.body), b.expr(e.orelse)
    if any(isinstance(v, ir.Var) and isinstance(v.type, TileType) for v in (a, c)):
        raise TileTypeError("`x if c else y` needs scalars; use ct.where(c, x, y) for tiles")
    return b.apply("where", np.where, (cond, a, c))


def _expr_call(b: Builder, e: ast.Call) -> Any:
    func = b.expr(e.func)
    if any(isinstance(a, ast.Starred) for a in e.args) or any(k.arg is None for k in e.keywords):
        raise TileSyntaxError("*args and **kwargs in calls are not supported")
    args = tuple(b.expr(a) for a in e.args)
    kwargs = {k.arg: b.expr(k.value) for k in e.keywords}
    if isinstance(func, Method):
        return _call_method(b, func, args, kwargs)
    if not isinstance(func, Const):
        raise TileTypeError("only functions can be called")
    target = func.value
    if any(target is f for f in PY_CALLS) or target is abs:
        if kwargs:
            raise TileTypeError(f"{target.__name__}() takes positional arguments only")
        if all(isinstance(a, Const) for a in args):
            return Const(target(*(a.value for a in args)))
        if target is abs:
            return b.apply("abs", np.abs, args)
        return PY_CALLS[target](b, args, e)
    handler = CALLS.get(target) if _hashable(target) else None
    if handler is not None:
        return handler(b, bind_call(target, args, kwargs), e)
    if isinstance(target, type) and issubclass(target, np.generic):
        return _cast_call(b, target, args, kwargs)
    if target in (int, float, bool):
        return _cast_call(b, target, args, kwargs)
    if getattr(target, "__module__", "").startswith(("numpy", "coop_tiles", "math")):
        raise TileSyntaxError(f"{getattr(target, '__qualname__', target)!r} can't be called in a tile program")
    if callable(target) and hasattr(target, "__code__"):
        return b.inline(target, args, kwargs, e)
    if all(isinstance(a, Const) for a in (*args, *kwargs.values())):
        return Const(target(*(a.value for a in args), **{k: v.value for k, v in kwargs.items()}))
    raise TileSyntaxError(f"{target!r} can't be called in a tile program")


def _hashable(obj: Any) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


def _cast_call(b: Builder, target: Any, args: tuple, kwargs: dict) -> Any:
    if kwargs or len(args) != 1:
        raise TileTypeError(f"{target.__name__}() takes one argument here")
    (arg,) = args
    if isinstance(arg, Const):
        return Const(target(arg.value))
    value = b.runtime(arg)
    if target is int:
        t = WEAK_INT
    elif target is float:
        t = WEAK_FLOAT
    elif target is bool:
        t = BOOL
    else:
        t = ScalarType(np.dtype(target))
    if isinstance(value.type, TileType):
        raise TileTypeError(f"{target.__name__}() of a tile; use t.astype({target.__name__})")
    out = b.temp(t)
    b.emit(ir.ScalarOp(out, "cast", (value,), t.dtype))
    return out


def _call_method(b: Builder, method: Method, args: tuple, kwargs: dict) -> Any:
    from ..dtypes import as_dtype

    if method.name == "astype":
        if len(args) + len(kwargs) != 1:
            raise TileTypeError("astype() takes one dtype")
        dtype = as_dtype(b.constant((args or tuple(kwargs.values()))[0], "the dtype"))
        return b.convert(method.obj, dtype)
    raise TileSyntaxError(f"method {method.name!r} is not supported")


def _expr_subscript(b: Builder, e: ast.Subscript) -> Any:
    base = b.expr(e.value)
    index = b.expr(e.slice)
    if isinstance(base, tuple):
        i = b.constant(index, "a tuple index", int)
        return base[i]
    if isinstance(base, Const) and isinstance(index, Const):
        return Const(base.value[index.value])
    array = b.array(base, "the indexed value")
    if isinstance(index, tuple) or (isinstance(index, Const) and isinstance(index.value, (slice, tuple))):
        raise TileSyntaxError("arrays are indexed by one integer; use tile.load for ranges")
    idx = b.convert(b.scalar(index, "an array index", "iu"), np.dtype(np.int64))
    out = b.temp(ScalarType(array.type.dtype))
    b.emit(ir.ArrayRead(out, array, idx), e)
    return out


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


def _kind_names(kinds: str) -> str:
    names = {"b": "bool", "i": "an integer", "u": "an unsigned integer", "f": "a float"}
    return " or ".join(names[k] for k in kinds if k in names and not (k == "u" and "i" in kinds))


# ----- entry point -----------------------------------------------------------------------------
def build_program(
    fn: Callable, param_types: dict[str, ArrayType | ScalarType], constexprs: dict[str, Any]
) -> ir.Program:
    """Type `fn` for one specialisation and return its IR."""
    parsed = parse_function(fn)
    var_types: dict[str, ValueType] = {}
    for _ in range(MAX_FIXPOINT_ROUNDS):
        b = Builder(parsed, dict(var_types))
        params: list[tuple[str, ArrayType | ScalarType]] = []
        for position, name in enumerate(parsed.params):
            if name in parsed.constexprs:
                b.scope[name] = Const(constexprs[name])
                continue
            t = param_types[name]
            var = ir.Var("a_" + name, t)
            b.emit(ir.Param(var, position))
            params.append((name, t))
            if name in parsed.assigned:
                b.assign(name, var, parsed.tree)
            else:
                b.scope[name] = var
        b.body(parsed.tree.body)
        if b.assigned_types == var_types or all(var_types.get(k) == v for k, v in b.assigned_types.items()):
            return ir.Program(parsed.tree.name, params, b.stmts, parsed.source_hash)
        var_types.update(b.assigned_types)
    raise TileTypeError(f"the types of the variables of {parsed.tree.name} do not settle", loc=parsed.loc(parsed.tree))
