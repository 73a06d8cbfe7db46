"""The typed side of the front end: abstract interpretation of a parsed tile program.

For one specialisation (argument types and constexpr values) it walks the AST once per
statement, dispatching on node type through small handlers, evaluating compile-time values
(constexprs, literals, globals) in Python and emitting typed IR for everything else.
Variable types are found by iterating to a fixed point, so a loop-carried ``acc = 0.0``
that accumulates float32 sums is typed float32 from the start.
"""

from __future__ import annotations

import ast
import builtins as py
import inspect
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..dtypes import as_dtype
from ..dtypes import kind as dtype_kind
from ..errors import DivergenceError, SourceLocation, TileError, TileSyntaxError, TileTypeError, TileValueError
from ..ops.base import BY_PUBLIC, build_call
from ..ops.elementwise import ELEMENTWISE
from . import ir
from .combine import CombineFunction
from .source import ParsedFunction, parse_function
from .suggest import did_you_mean, instead_of
from .types import (
    BOOL,
    INT64,
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
from .values import Const, Method, Shape, Undefined, describe, is_array, is_tile

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
MAX_FIXPOINT_ROUNDS = 8
MAX_INLINE_DEPTH = 16


class Builder:
    """Builds the IR of one function for one specialisation; `var_types` carries variable types
    between fixpoint rounds. `program` collects what the whole program shares (combines, ids)."""

    def __init__(self, parsed: ParsedFunction, var_types: dict[str, ValueType], program: ProgramState):
        self.var_types = var_types
        self.assigned_types: dict[str, ValueType] = {}
        self.stmts: list[ir.Stmt] = []
        self.root = self.stmts  # the program's top level (`stmts` is a nested body inside control flow)
        self.fn = parsed
        self.prefix = "v_"
        self.combining = False  # building a @ct.combine function's own body (not a helper it calls)
        self.scope: dict[str, Any] = {}
        self.program = program
        self.inline_depth = 0
        self.stack: list[SourceLocation] = []  # helper call sites, outermost first
        self.returned: Any = None
        self.returned_at: ast.AST | None = None  # the `return` that gave `returned`
        self.current: ast.AST | None = None  # the node being handled, for statement locations
        self.static_prints: list[str] = []  # lines of ct.static_print, printed once per specialisation

    # ----- bookkeeping -------------------------------------------------------------------
    def temp(self, t: ValueType) -> ir.Var:
        return ir.Var(f"t{self.program.next_id()}", t, ir.TEMP)

    def emit(self, stmt: ir.Stmt, node: ast.AST | None = None) -> None:
        node = node if node is not None else self.current
        if node is not None:
            stmt.loc = self.fn.loc(node)
        stmt.inlined = tuple(self.stack)
        stmt.sid = self.program.next_id()
        if isinstance(stmt, ir.Collective):
            stmt.cid = self.program.next_cid()
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
            if isinstance(v.value, int) and not isinstance(v.value, bool) and not -(2**63) <= v.value < 2**63:
                raise TileValueError(f"{v.value} does not fit in int64")
            if isinstance(v.value, (bool, int, float, np.bool_, np.number)):
                return ir.Lit(v.value, type_of_python_scalar(v.value))
            raise TileTypeError(f"{what} must be a number or a tile, got {v.value!r}")
        if isinstance(v, tuple):
            raise TileTypeError(f"{what} must be a single value, got a tuple of {len(v)}")
        raise TileTypeError(f"{what} must be a number or a tile, got {describe(v)}")

    def scalar(self, v: Any, what: str, kinds: str = "biuf") -> ir.Value:
        value = self.runtime(v, what)
        if not isinstance(value.type, ScalarType):
            raise TileTypeError(f"{what} must be a block-uniform scalar, got {value.type}")
        if dtype_kind(value.type.dtype) not in kinds:
            raise TileTypeError(f"{what} must be {_kind_names(kinds)}, got {value.type}")
        return value

    def tile(self, v: Any, what: str) -> ir.Var:
        if is_tile(v):
            return v
        raise TileTypeError(f"{what} must be a tile, got {describe(v)}")

    def array(self, v: Any, what: str) -> ir.Var:
        if is_array(v):
            return v
        raise TileTypeError(f"{what} must be an array argument, got {describe(v)}")

    def constant(self, v: Any, what: str, kind: type | tuple = object) -> Any:
        if not isinstance(v, Const):
            raise TileValueError(
                f"{what} must be a compile-time constant (a literal, a ct.constexpr parameter, "
                f"or an expression of them), got a runtime {v.type if hasattr(v, 'type') else describe(v)}"
            )
        value = v.value
        if kind is int and isinstance(value, np.integer):
            value = int(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise TileValueError(f"{what} must be of type {getattr(kind, '__name__', kind)}, got {value!r}")
        return value

    def tile_size(self, v: Any) -> int:
        size = self.constant(v, "tile size", int)
        if size < 1:
            raise TileValueError(f"tile size must be positive, got {size}")
        return size

    def optional(self, v: Any) -> Any:
        """None for an argument left at its None default, else `v`."""
        return None if isinstance(v, Const) and v.value is None else v

    def convert(self, v: ir.Value, dtype: np.dtype) -> ir.Value:
        """`v` converted to `dtype` (a literal is converted at compile time)."""
        if v.type.dtype == dtype and (isinstance(v, ir.Var) or not v.type.weak):
            return v
        if isinstance(v, ir.Lit):
            try:
                with np.errstate(all="ignore"):
                    return ir.Lit(dtype.type(v.value), ScalarType(dtype))
            except OverflowError:
                raise TileValueError(f"{v.value} does not fit in {dtype.name}") from None
        if isinstance(v.type, TileType):
            return self.map_op("cast", (v,), TileType(dtype, v.type.size), dtype)
        return self.map_op("cast", (v,), ScalarType(dtype), dtype)

    def map_op(self, op: str, args: tuple, out_type: ValueType, compute: np.dtype) -> ir.Var:
        out = self.temp(out_type)
        cls = ir.TileMap if isinstance(out_type, TileType) else ir.ScalarOp
        self.emit(cls(out, op, args, compute))
        return out

    def apply(self, name: str, args: tuple, compare: bool = False) -> Any:
        """An element-wise operation on scalars and tiles, typed by NumPy's rules."""
        fn = ELEMENTWISE[name].numpy
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
        if name == "invert" and types[0].dtype == np.bool_:
            name = "not"
        elif name == "invert" and dtype_kind(types[0].dtype) == "f":
            raise TileTypeError(f"operator ~ is not defined for {types[0]}")
        out_type = result_type(fn, *types)
        compute = common_type(*types).dtype if compare else out_type.dtype
        if name == "pow" and compute.kind in "iu" and isinstance(values[1], ir.Lit) and values[1].value < 0:
            raise TileValueError("integers to negative integer powers are not allowed")
        if name == "where":
            compute = out_type.dtype
        return self.map_op(name, values, out_type, compute)

    # ----- assignment ------------------------------------------------------------------------
    def assign(self, name: str, value: Any, node: ast.AST) -> None:
        if isinstance(value, Const) and isinstance(value.value, tuple) and name not in self.fn.single_top_level:
            value = tuple(Const(v) for v in value.value)  # a tuple variable: one runtime variable per element
        if isinstance(value, Const) and (
            name in self.fn.single_top_level or not isinstance(value.value, (int, float, np.number))
        ):
            self.scope[name] = value
            return
        if isinstance(value, tuple):
            self.scope[name] = self._assign_tuple(name, value, node)
            return
        if isinstance(value, (Method, Shape)):
            raise TileTypeError(f"can't assign {describe(value)} to a variable")
        value = self.runtime(value, f"value assigned to {name!r}")
        if isinstance(value.type, ArrayType):
            self.scope[name] = value
            return
        self.scope[name] = self._assign_var(self.prefix + name, name, value, node)

    def _assign_tuple(self, name: str, items: tuple, node: ast.AST, shown: str = "") -> tuple:
        """Assign a tuple's items to variables `name__i`, shown to the user as `shown[i]`."""
        shown = shown or name
        out = []
        for i, item in enumerate(items):
            if isinstance(item, tuple):
                out.append(self._assign_tuple(f"{name}__{i}", item, node, f"{shown}[{i}]"))
            elif isinstance(item, Const) and not isinstance(item.value, (bool, int, float, np.number)):
                out.append(item)
            else:
                value = self.runtime(item, f"element {i} of the tuple assigned to {shown!r}")
                out.append(
                    value
                    if isinstance(value.type, ArrayType)
                    else self._assign_var(f"{self.prefix}{name}__{i}", f"{shown}[{i}]", value, node)
                )
        return tuple(out)

    def _assign_var(self, key: str, name: str, value: ir.Value, node: ast.AST) -> ir.Var:
        declared = self.var_types.get(key, value.type)
        joined = join(self.assigned_types.get(key, declared), value.type, name)
        self.assigned_types[key] = joined
        target = ir.Var(key, declared, ir.USER, name)
        if isinstance(declared, TileType) and isinstance(value.type, TileType) and declared.size != value.type.size:
            raise TileTypeError(f"variable {name!r} is assigned tiles of sizes {declared.size} and {value.type.size}")
        if isinstance(declared, ScalarType) != isinstance(value.type, ScalarType):
            raise TileTypeError(f"variable {name!r} is assigned both a tile and a scalar")
        self.emit(ir.Copy(target, value), node)
        return target

    def assign_target(self, target: ast.AST, value: Any, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.assign(target.id, value, node)
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = value.value if isinstance(value, Const) and isinstance(value.value, tuple) else value
            if not isinstance(items, tuple):
                raise TileTypeError(f"can't unpack {describe(value)} into {len(target.elts)} names")
            if len(items) != len(target.elts):
                raise TileTypeError(f"can't unpack {len(items)} values into {len(target.elts)} names")
            for t, v in zip(target.elts, items):
                if isinstance(t, ast.Name) and t.id == "_":
                    continue  # a discarded item: `_` may take a tile in one place and a scalar in another
                self.assign_target(t, Const(v) if isinstance(value, Const) else v, node)
        elif isinstance(target, ast.Subscript):
            array = self.array(self.expr(target.value), "the target of an element write")
            indices = self.indices(array, self.expr(target.slice))
            if len(indices) != array.type.ndim:
                raise TileTypeError(
                    f"an element write needs {array.type.ndim} indices for a {array.type.ndim}-d array, "
                    f"got {len(indices)}"
                )
            stored = self.convert(self.scalar(value, "the value written to an array element"), array.type.dtype)
            self.emit(ir.ArrayWrite(array, indices, stored), node)
        else:
            raise TileSyntaxError(f"can't assign to {type(target).__name__}")

    def indices(self, array: ir.Var, index: Any) -> tuple[ir.Value, ...]:
        """The int64 indices of `array[index]` (one per leading axis)."""
        if isinstance(index, Const) and isinstance(index.value, tuple):
            items = tuple(Const(i) for i in index.value)
        else:
            items = index if isinstance(index, tuple) else (index,)
        if any(isinstance(i, Const) and isinstance(i.value, slice) for i in items):
            raise TileSyntaxError("arrays are indexed by integers; use tile.load for ranges")
        if len(items) > array.type.ndim:
            raise TileTypeError(f"too many indices ({len(items)}) for a {array.type.ndim}-d array")
        return tuple(self.convert(self.scalar(i, "an array index", "iu"), np.dtype(np.int64)) for i in items)

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
        if isinstance(node, ast.JoinedStr):
            raise TileSyntaxError("f-strings are not supported in tile programs", loc=self.fn.loc(node))
        if handler is None:
            raise TileSyntaxError(
                f"`{type(node).__name__}` expressions are not supported in tile programs", loc=self.fn.loc(node)
            )
        with self.located(node):
            return handler(self, node)

    def condition(self, node: ast.expr, what: str) -> Any:
        cond = self.expr(node)
        if is_tile(cond):
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

    def branch(self, stmts: list[ast.stmt], before: dict[str, Any]) -> tuple[list[ir.Stmt], dict[str, Any]]:
        """Build `stmts` starting from scope `before`; the IR and the scope after them."""
        self.scope = dict(before)
        out: list[ir.Stmt] = []
        with self.block(out):
            self.body(stmts)
        return out, self.scope

    def merge(self, before: dict[str, Any], paths: list[dict[str, Any]], why: str) -> None:
        """The scope after control flow whose possible exits left `paths`: a name bound differently
        on some path (or not at all) can't be read afterwards."""
        merged = dict(paths[0])
        for name in set().union(*paths):
            values = [p.get(name) for p in paths]
            first = values[0]
            if all(v is not None and _same_binding(v, first) for v in values):
                merged[name] = first
            else:
                merged[name] = Undefined(name, why)
        self.scope = merged

    def combine(self, fn: CombineFunction, dtypes: tuple[np.dtype, ...], compare: bool = False) -> ir.Combine:
        """The typed combine function `fn` over items of `dtypes` (what `op=fn` of a scan or reduce
        uses; with `compare`, a sort's comparison)."""
        return build_combine(self, fn, dtypes, compare)

    def inline(self, helper: Callable, args: tuple, kwargs: dict, node: ast.AST) -> Any:
        """Inline a plain Python helper function called from the tile program."""
        if self.inline_depth >= MAX_INLINE_DEPTH:
            raise TileSyntaxError(f"helpers nested deeper than {MAX_INLINE_DEPTH} calls (recursion?)")
        parsed = parse_function(helper)
        try:
            bound = inspect.signature(helper).bind(*args, **kwargs)
        except TypeError as e:
            raise TileTypeError(f"bad call of {helper.__name__}: {e}") from None
        bound.apply_defaults()
        saved = (self.fn, self.prefix, self.scope, self.returned, self.combining)
        self.stack.append(self.fn.loc(node))
        self.fn, self.prefix, self.returned, self.combining = parsed, f"h{self.program.next_id()}_", None, False
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
        except TileError as e:
            e.add_call_site(self.stack[-1])
            raise
        finally:
            self.fn, self.prefix, self.scope, self.returned, self.combining = saved
            self.inline_depth -= 1
            self.stack.pop()


def _same_binding(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_binding(x, y) for x, y in zip(a, b))
    if isinstance(a, ir.Var) and isinstance(b, ir.Var):
        return a.name == b.name
    return a is b or (type(a) is type(b) and a == b)


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
    name = BINOPS[type(s.op)]
    if isinstance(s.target, ast.Subscript):
        current = b.expr(s.target)
    elif isinstance(s.target, ast.Name):
        current = b.expr(ast.copy_location(ast.Name(s.target.id, ast.Load()), s.target))
    else:
        raise TileSyntaxError("augmented assignment needs a name or an array element")
    b.assign_target(s.target, b.apply(name, (current, b.expr(s.value))), s)


def _stmt_expr(b: Builder, s: ast.Expr) -> None:
    if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
        return  # docstring
    b.expr(s.value)


def _stmt_pass(b: Builder, s: ast.Pass) -> None:
    pass


def _stmt_return(b: Builder, s: ast.Return) -> None:
    if b.inline_depth:
        b.returned = b.expr(s.value) if s.value is not None else Const(None)
        b.returned_at = s
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
        if b.combining:
            raise TileSyntaxError(
                "a @ct.combine function's `return` must be its last statement, not inside an `if`; "
                "choose between values with ct.where"
            )
        raise TileSyntaxError("a helper's `return` must be its last statement, not inside an `if`")
    before = b.scope
    then, after_then = b.branch(s.body, before)
    orelse, after_else = b.branch(s.orelse, before)
    exits = [scope for body, scope in ((s.body, after_then), (s.orelse, after_else)) if not _returns(body)]
    b.merge(before, exits or [after_then], f"it is assigned in only one branch of the `if` at line {b.fn.loc(s).line}")
    b.emit(ir.If(cond, then, orelse), s)


def _returns(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], ast.Return)


def _has_return(s: ast.stmt) -> bool:
    return any(isinstance(n, ast.Return) for n in ast.walk(s))


def _loop_body(b: Builder, stmts: list[ast.stmt], line: int, skipped: dict[str, Any] | None = None) -> list[ir.Stmt]:
    """A loop body: names first bound inside it can't be read after the loop (it may not run);
    `skipped` is the scope after a loop that does not run (default: the scope before the body)."""
    before = b.scope
    body, after = b.branch(stmts, before)
    exits = [skipped if skipped is not None else before, after]
    b.merge(before, exits, f"it is first assigned inside the loop at line {line}, which may not run")
    return body


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
    var = ir.Var(b.prefix + s.target.id, ScalarType(np.dtype(np.int64), weak=True), ir.USER, s.target.id)
    b.var_types.setdefault(var.name, var.type)
    skipped = b.scope  # (an empty range binds no loop variable)
    b.scope = {**skipped, s.target.id: var}
    body = _loop_body(b, s.body, b.fn.loc(s).line, skipped)
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
    body = _loop_body(b, s.body, b.fn.loc(s).line)
    b.emit(ir.While(cond_body, cond, body), s)


def _stmt_assert(b: Builder, s: ast.Assert) -> None:
    raise TileSyntaxError(
        "`assert` is not supported in tile programs; check a condition with ct.device_assert(cond, msg)"
    )


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
    ast.Assert: _stmt_assert,
    ast.Break: _stmt_unsupported_jump,
    ast.Continue: _stmt_unsupported_jump,
}


# ----- expression handlers -----------------------------------------------------------------------
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
    if getattr(target, "__module__", "") and target.__module__.startswith(("numpy", "coop_tiles", "math")):
        name = getattr(target, "__qualname__", target)
        raise TileSyntaxError(f"{name!r} can't be called in a tile program{instead_of(target)}")
    if inspect.isfunction(target):
        return b.inline(target, args, kwargs, e)
    raise TileSyntaxError(f"{getattr(target, '__qualname__', target)!r} can't be called in a tile program")


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
    if is_tile(base):
        raise TileSyntaxError("tiles can't be indexed; use tile ops (tile.sum, ct.where, ...) on the whole tile")
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
class ProgramState:
    """What one build of a program shares across its functions: ids and typed combine functions."""

    def __init__(self) -> None:
        self.ids = 0
        self.cids = 0
        self.combines: dict[str, ir.Combine] = {}
        self.combine_names: dict[tuple, str] = {}

    def next_id(self) -> int:
        self.ids += 1
        return self.ids

    def next_cid(self) -> int:
        self.cids += 1
        return self.cids - 1


def _settle(parsed: ParsedFunction, start: Callable[[Builder], None], program: ProgramState | None = None) -> Builder:
    """Build `parsed` until its variables' types stop changing (a loop-carried `acc = 0.0` that
    accumulates float32 is typed float32 from the start); `start` binds the parameters."""
    var_types: dict[str, ValueType] = {}
    for _ in range(MAX_FIXPOINT_ROUNDS):
        b = Builder(parsed, dict(var_types), program or ProgramState())
        start(b)
        b.body(parsed.tree.body)
        if all(var_types.get(k) == v for k, v in b.assigned_types.items()):
            return b
        var_types.update(b.assigned_types)
    raise TileTypeError(f"the types of the variables of {parsed.tree.name} do not settle", loc=parsed.loc(parsed.tree))


def build_program(
    fn: Callable, param_types: dict[str, ArrayType | ScalarType], constexprs: dict[str, Any]
) -> ir.Program:
    """Type `fn` for one specialisation and return its IR."""
    parsed = parse_function(fn)
    params: list[ir.Var] = []

    def start(b: Builder) -> None:
        params.clear()
        for position, name in enumerate(parsed.params):
            if name in parsed.constexprs:
                b.scope[name] = Const(constexprs[name])
                continue
            t = param_types[name]
            var = ir.Var("a_" + name, t, ir.PARAM, name)
            b.emit(ir.Param(var, position))
            params.append(var)
            if name in parsed.assigned and not isinstance(t, ArrayType):
                b.assign(name, var, parsed.tree)
            else:
                b.scope[name] = var

    b = _settle(parsed, start)
    program = ir.Program(
        parsed.tree.name, list(params), b.stmts, parsed.source_hash, b.program.combines, tuple(b.static_prints)
    )
    ir.verify_if_asked(program, "build")
    return program


def build_combine(
    outer: Builder, combine: CombineFunction, dtypes: tuple[np.dtype, ...], compare: bool = False
) -> ir.Combine:
    """Type `combine` over items of `dtypes` (once per program and dtypes) and return it; with
    `compare`, as a sort's comparison returning one bool."""
    key = (combine, dtypes, compare)
    name = outer.program.combine_names.get(key)
    if name is not None:
        return outer.program.combines[name]
    parsed = parse_function(combine.fn)
    k = len(dtypes)
    if len(parsed.params) != 2 * k:
        raise TileTypeError(
            f"@ct.combine function {combine.__name__} must take {2 * k} scalars for {'a tuple of ' if k > 1 else ''}"
            f"{k} tile{'s' if k > 1 else ''} (the earlier element's {k}, then the later one's), "
            f"it takes {len(parsed.params)}"
        )
    name = f"combine{len(outer.program.combines)}_{parsed.tree.name}"
    params = tuple(ir.Var(f"{name}_{p}", ScalarType(dt), ir.PARAM, p) for p, dt in zip(parsed.params, dtypes + dtypes))
    call_site = outer.fn.loc(outer.current) if outer.current is not None else None

    def start(b: Builder) -> None:
        b.prefix, b.inline_depth, b.combining = f"{name}_v_", 1, True  # `return` gives the results
        b.stack = [*outer.stack, *([call_site] if call_site else [])]
        for p, var in zip(parsed.params, params):
            if p in parsed.assigned:
                b.assign(p, var, parsed.tree)
            else:
                b.scope[p] = var

    try:
        b = _settle(parsed, start, outer.program)
    except TileError as e:
        if call_site is not None:
            e.add_call_site(call_site)
        raise
    outer.static_prints += b.static_prints
    returned = b.returned if isinstance(b.returned, tuple) else (b.returned,)
    result_dtypes = (np.dtype(np.bool_),) if compare else dtypes
    at = b.returned_at or parsed.tree
    if b.returned is None or len(returned) != len(result_dtypes):
        got = "nothing" if b.returned is None else f"{len(returned)} value{'s' if len(returned) != 1 else ''}"
        want = "one bool (true when its first operand goes first)" if compare else f"{k} scalar(s)"
        raise TileTypeError(
            f"@ct.combine function {combine.__name__} must return {want}, it returns {got}", loc=parsed.loc(at)
        )
    with b.located(at):
        values = [b.scalar(r, "a combine function's result") for r in returned]
        if compare and values[0].type.dtype != np.bool_:
            raise TileTypeError(
                f"a sort's compare function must return a bool (a comparison such as a < b), "
                f"{combine.__name__} returns {values[0].type}"
            )
        results = tuple(b.convert(v, dt) for v, dt in zip(values, result_dtypes))
    for s in ir.walk(b.stmts):
        if isinstance(s, (ir.Collective, ir.If, ir.ForRange, ir.While, ir.ArrayRead, ir.ArrayWrite, ir.ProgramId)):
            what = "tile ops" if isinstance(s, ir.Collective) else "control flow on values, arrays or program ids"
            raise TileSyntaxError(
                f"@ct.combine functions compute on their scalar operands only; {what} can't be used in them "
                "(use ct.where for choices)",
                loc=s.loc,
            )
    fn = ir.Combine(name, params, b.stmts, results, dtypes, result_dtypes)
    outer.program.combines[name] = fn
    outer.program.combine_names[key] = name
    return fn
