"""The typed side of the front end: abstract interpretation of a parsed tile program (the entry
points; the builder's state is in `builder.py`, its handlers in `statements.py` and `expressions.py`).

For one specialisation (argument types and constexpr values) it walks the AST once per
statement, dispatching on node type through small handlers, evaluating compile-time values
(constexprs, literals, globals) in Python and emitting typed IR for everything else.
Variable types are found by iterating to a fixed point, so a loop-carried ``acc = 0.0``
that accumulates float32 sums is typed float32 from the start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import TileError, TileSyntaxError, TileTypeError
from . import ir
from .builder import MAX_FIXPOINT_ROUNDS, Builder, Grammar, ProgramState
from .combine import CombineFunction
from .expressions import EXPR_HANDLERS
from .source import ParsedFunction, parse_function
from .statements import STMT_HANDLERS
from .types import (
    ArrayType,
    ScalarType,
    ValueType,
)
from .values import Const


def _settle(parsed: ParsedFunction, start: Callable[[Builder], None], program: ProgramState | None = None) -> Builder:
    """Build `parsed` until its variables' types stop changing (a loop-carried `acc = 0.0` that
    accumulates float32 is typed float32 from the start); `start` binds the parameters."""
    var_types: dict[str, ValueType] = {}
    for _ in range(MAX_FIXPOINT_ROUNDS):
        b = Builder(parsed, dict(var_types), program or ProgramState(GRAMMAR))
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


#: the handlers every builder of a program dispatches to
GRAMMAR = Grammar(STMT_HANDLERS, EXPR_HANDLERS, build_combine)
