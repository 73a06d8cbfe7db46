"""Statement handlers of the front end: one function per Python statement type a tile program
may use (assignments, `if`, `for`, `while`, `assert`, `return`), each emitting IR through the builder.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import TileSyntaxError, TileValueError
from . import ir
from .builder import Builder
from .expressions import BINOPS
from .types import (
    WEAK_INT,
    ScalarType,
)
from .values import Const


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
