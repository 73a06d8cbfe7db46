"""The front end's builder: the state of typing one function for one specialisation (scope,
emitted statements, variable types, helper call sites) and the conversions that statement and
expression handlers and the ops' builders share (`b.scalar`, `b.tile`, `b.convert`, `b.apply`).
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import kind as dtype_kind
from ..errors import DivergenceError, SourceLocation, TileError, TileSyntaxError, TileTypeError, TileValueError
from ..ops.elementwise import ELEMENTWISE
from . import ir
from .combine import CombineFunction
from .source import ParsedFunction, parse_function
from .types import (
    BOOL,
    MAX_TILE_NDIM,
    WEAK_INT,
    ArrayType,
    ScalarType,
    TileType,
    ValueType,
    broadcast_shape,
    common_type,
    join,
    result_type,
    type_of_python_scalar,
)
from .values import Const, Method, Shape, Undefined, describe, is_array, is_tile

MAX_FIXPOINT_ROUNDS = 8
MAX_INLINE_DEPTH = 16


@dataclass(frozen=True)
class Grammar:
    """What the builder dispatches to: a handler per Python statement and expression node type
    (`lang/statements.py`, `lang/expressions.py`), and how a @ct.combine function is typed
    (`lang/frontend.py`). Passed in, so the builder imports none of them."""

    statements: Mapping[type, Callable]
    expressions: Mapping[type, Callable]
    combine: Callable


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

    def tile_shape(self, v: Any, what: str = "tile shape") -> tuple[int, ...]:
        """A tile's shape: a constant int (1-D) or a tuple of one or two constant ints > 0."""
        if isinstance(v, Const) and isinstance(v.value, tuple):
            items = v.value
        elif isinstance(v, tuple):
            items = tuple(self.constant(x, f"each extent of the {what}", int) for x in v)
        else:
            return (self.tile_size(v),)
        if not 1 <= len(items) <= MAX_TILE_NDIM:
            raise TileValueError(f"a tile has one or two axes; the {what} {items} has {len(items)}")
        shape = tuple(self.constant(Const(x), f"each extent of the {what}", int) for x in items)
        if any(n < 1 for n in shape):
            raise TileValueError(f"the extents of a tile must be positive, got the {what} {shape}")
        return shape

    def remap(self, v: ir.Var, kind: str, shape: tuple[int, ...], axis: int | None = None) -> ir.Var:
        """`v`'s elements moved into a tile of `shape` as `kind` says (`ir.TileRemap`)."""
        out = self.temp(TileType(v.type.dtype, 0, shape))
        self.emit(ir.TileRemap(out, v, kind, axis))
        return out

    def broadcast(self, v: ir.Value, shape: tuple[int, ...]) -> ir.Value:
        """A tile operand broadcast to `shape` (NumPy's rules; unchanged if it has that shape already)."""
        if isinstance(v, ir.Var) and isinstance(v.type, TileType) and v.type.shape != shape:
            if broadcast_shape(v.type.shape, shape) != shape:
                raise TileTypeError(f"a tile of shape {v.type.shape} does not broadcast to the shape {shape}")
            return self.remap(v, ir.BROADCAST, shape)
        return v

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
            return self.map_op("cast", (v,), v.type.with_dtype(dtype), dtype)
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
        if isinstance(out_type, TileType):  # operands broadcast explicitly: every tile has the result's shape
            values = tuple(self.broadcast(v, out_type.shape) for v in values)
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
        if isinstance(declared, TileType) and isinstance(value.type, TileType) and declared.shape != value.type.shape:
            raise TileTypeError(
                f"variable {name!r} is assigned tiles of sizes {_extent(declared)} and {_extent(value.type)}"
            )
        if isinstance(declared, ScalarType) != isinstance(value.type, ScalarType):
            raise TileTypeError(f"variable {name!r} is assigned both a tile and a scalar")
        if _casts(node) and declared.dtype != value.type.dtype:
            raise TileTypeError(
                f"variable {name!r} is {declared.dtype} (the promotion of every value assigned to it), so this "
                f"astype({value.type.dtype}) would be undone: give the {value.type.dtype} value a name of its own, "
                f"or assign {name!r} only {value.type.dtype} values"
            )
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
            handler = self.program.grammar.statements.get(type(s))
            if handler is None:
                raise TileSyntaxError(
                    f"`{type(s).__name__}` statements are not supported in tile programs", loc=self.fn.loc(s)
                )
            with self.located(s):
                handler(self, s)

    def expr(self, node: ast.expr) -> Any:
        handler = self.program.grammar.expressions.get(type(node))
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
        return self.program.grammar.combine(self, fn, dtypes, compare)

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


def _extent(t: TileType) -> str:
    """A tile's size as messages show it: its element count (1-D) or its shape."""
    return str(t.size) if t.ndim == 1 else str(t.shape)


def _kind_names(kinds: str) -> str:
    names = {"b": "bool", "i": "an integer", "u": "an unsigned integer", "f": "a float"}
    return " or ".join(names[k] for k in kinds if k in names and not (k == "u" and "i" in kinds))


class ProgramState:
    """What one build of a program shares across its functions: ids and typed combine functions."""

    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar
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


def _casts(node: ast.AST) -> bool:
    """Whether `node` assigns the result of an explicit `.astype(...)` (`x = t.astype(np.float16)`)."""
    value = getattr(node, "value", None) if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "astype"
