"""The NumPy interpreter: evaluates a program's typed tile IR, one program instance at a time in
program-id order (from the last for a reverse chained scan). It runs after the same front end as
the compiler, so both accept the same programs, raise the same errors and give every value the same
dtype; each tile op's NumPy semantics come from its definition in `coop_tiles.ops`.

Scalars are NumPy scalars of their variable's dtype, tiles NumPy arrays of their shape, arrays the
caller's NumPy arrays (views of them for `u[b, d]`, so writes land in the caller's memory).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..dtypes import cast, compute_dtype
from ..errors import TileError, TileValueError
from ..ops.base import descending, launch_checks, op_of
from ..ops.elementwise import ELEMENTWISE
from . import ir
from .types import ArrayType, TileType


class _Return(Exception):
    pass


def elementwise(op: str, values: list[Any], compute: np.dtype, out: np.dtype) -> Any:
    """One ScalarOp/TileMap: operands converted to `compute` (float32 arithmetic for 16-bit floats)."""
    if op == "cast":
        return cast(values[0], out)
    calc = compute_dtype(compute)
    if op == "where":
        xs = [cast(values[0], np.dtype(np.bool_)), *(cast(cast(v, compute), calc) for v in values[1:])]
    else:
        xs = [cast(cast(v, compute), calc) for v in values]
    try:
        with np.errstate(all="ignore"):
            result = ELEMENTWISE[op].numpy(*xs)
    except (ValueError, ArithmeticError) as e:  # e.g. an integer to a negative power at run time
        raise TileValueError(str(e).rstrip(".")) from None
    return cast(result, out)


class Frame:
    """One program instance: its program id, grid, and the value of every variable. `launch` is shared
    by the programs of one launch, in the order they run (a chained scan's carry, by statement id)."""

    def __init__(
        self, program: ir.Program, pid: tuple[int, int, int], grid: tuple[int, int, int], launch: dict | None = None
    ):
        self.program = program
        self.pid = pid
        self.grid = grid
        self.env: dict[str, Any] = {}
        self.launch = launch if launch is not None else {}

    def get(self, v: ir.Value) -> Any:
        if isinstance(v, ir.Lit):
            return cast(np.asarray(v.value), v.type.dtype)
        return self.env[v.name]

    def set(self, var: ir.Var, value: Any) -> None:
        if isinstance(var.type, ArrayType):
            self.env[var.name] = value
        else:
            self.env[var.name] = cast(value, var.type.dtype)

    @staticmethod
    def evaluate_combine(combine: ir.Combine, left: tuple, right: tuple) -> tuple:
        return evaluate_combine(combine, left, right)

    def run(self, body: list[ir.Stmt]) -> None:
        for s in body:
            try:
                _HANDLERS.get(type(s), _op)(self, s)
            except TileError as e:
                if s.loc is not None:
                    e.locate(s.loc)
                for site in reversed(s.inlined):
                    e.add_call_site(site)
                raise


def check_index(array: np.ndarray, indices: tuple[int, ...]) -> tuple[int, ...]:
    """The indices as ints, or a TileValueError when one is outside its axis."""
    out = []
    for axis, (i, n) in enumerate(zip(indices, array.shape)):
        i = int(i)
        if not 0 <= i < n:
            where = f"axis {axis} of " if array.ndim > 1 else ""
            raise TileValueError(f"index {i} is outside {where}an array of {n} elements")
        out.append(i)
    return tuple(out)


def _param(f: Frame, s: ir.Param) -> None:
    pass  # bound before the body runs


def _scalar_op(f: Frame, s: ir.ScalarOp | ir.TileMap) -> None:
    f.set(s.out, elementwise(s.op, [f.get(a) for a in s.args], s.compute, s.out.type.dtype))


def _tile_map(f: Frame, s: ir.TileMap) -> None:
    values = [f.get(a) for a in s.args]
    result = elementwise(s.op, values, s.compute, s.out.type.dtype)
    f.env[s.out.name] = np.broadcast_to(result, s.out.type.shape).copy()


def _copy(f: Frame, s: ir.Copy) -> None:
    value = f.get(s.src)
    if isinstance(s.out.type, TileType):
        f.env[s.out.name] = cast(np.array(value), s.out.type.dtype)
    else:
        f.set(s.out, value)


def _program_id(f: Frame, s: ir.ProgramId) -> None:
    f.set(s.out, (f.grid if s.count else f.pid)[s.axis])


def _array_view(f: Frame, s: ir.ArrayView) -> None:
    array = f.get(s.array)
    f.env[s.out.name] = array[check_index(array, tuple(f.get(i) for i in s.indices))]


def _array_shape(f: Frame, s: ir.ArrayShape) -> None:
    f.set(s.out, f.get(s.array).shape[s.axis])


def _array_read(f: Frame, s: ir.ArrayRead) -> None:
    array = f.get(s.array)
    f.set(s.out, array[check_index(array, tuple(f.get(i) for i in s.indices))])


def _array_write(f: Frame, s: ir.ArrayWrite) -> None:
    array = f.get(s.array)
    array[check_index(array, tuple(f.get(i) for i in s.indices))] = f.get(s.value)


def _if(f: Frame, s: ir.If) -> None:
    f.run(s.then if f.get(s.cond) else s.orelse)


def _for(f: Frame, s: ir.ForRange) -> None:
    start, stop, step = (int(f.get(v)) for v in (s.start, s.stop, s.step))
    for i in range(start, stop, step):
        f.set(s.var, i)
        f.run(s.body)


def _while(f: Frame, s: ir.While) -> None:
    while True:
        f.run(s.cond_body)
        if not f.get(s.cond):
            return
        f.run(s.body)


def _return(f: Frame, s: ir.Return) -> None:
    raise _Return


def _op(f: Frame, s: ir.Stmt) -> None:
    op = op_of(s)
    if op is None:
        raise AssertionError(f"the interpreter has no rule for {type(s).__name__}")
    op.interpret(s, f)


_HANDLERS = {
    ir.Param: _param,
    ir.ScalarOp: _scalar_op,
    ir.TileMap: _tile_map,
    ir.Copy: _copy,
    ir.ProgramId: _program_id,
    ir.ArrayView: _array_view,
    ir.ArrayShape: _array_shape,
    ir.ArrayRead: _array_read,
    ir.ArrayWrite: _array_write,
    ir.If: _if,
    ir.ForRange: _for,
    ir.While: _while,
    ir.Return: _return,
}


def evaluate_combine(combine: ir.Combine, left: tuple, right: tuple) -> tuple:
    """`combine(*left, *right)` element-wise over NumPy arrays (or scalars) of the item dtypes."""
    f = Frame(ir.Program(combine.name, [], []), (0, 0, 0), (1, 1, 1))
    for p, v in zip(combine.params, (*left, *right)):
        f.env[p.name] = cast(v, p.type.dtype)
    f.run(combine.body)
    shape = np.shape(left[0])  # a constant result stands for every element
    results = zip(combine.results, combine.result_dtypes)
    return tuple(np.broadcast_to(cast(f.get(r), dt), shape).copy() for r, dt in results)


def run(program: ir.Program, grid: tuple[int, int, int], args: list[Any]) -> None:
    """Run `program` once per program instance of `grid`, in program-id order (from the last for a
    reverse chained scan, `TileOp.descending_programs`), on NumPy arrays and scalars (`args` in the
    order of `program.params`)."""
    for check in launch_checks(program) if all(grid) else ():
        check(grid)
    params = [s for s in program.body if isinstance(s, ir.Param)]
    launch: dict = {}
    pids = list(itertools.product(*(range(d) for d in reversed(grid))))
    for pid in reversed(pids) if descending(program) else pids:
        f = Frame(program, tuple(reversed(pid)), grid, launch)  # type: ignore[arg-type]
        for s, value in zip(params, args):
            f.set(s.out, value)
        try:
            f.run(program.body)
        except _Return:
            pass
