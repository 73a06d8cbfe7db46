"""The typed tile IR: what the front end produces, the interpreter evaluates, and the planner
and code generators consume.

A program is a list of statements; control flow nests lists. Values are named variables or
literals, each with its type. This module holds the generic statements (parameters, scalar
and element-wise operations, copies, control flow); each tile op defines its own statement
class next to its semantics and lowering (`coop_tiles.ops`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..errors import SourceLocation
from .types import ArrayType, ScalarType, TileType, ValueType


@dataclass(frozen=True)
class Var:
    name: str
    type: ValueType

    def __str__(self) -> str:
        return f"%{self.name}"


@dataclass(frozen=True)
class Lit:
    value: object
    type: ScalarType

    def __str__(self) -> str:
        return repr(self.value)


Value = Var | Lit


@dataclass
class Stmt:
    """An IR statement. `sid` is its stable id in the program (the plan refers to statements by
    it); `loc` is the user's line, `inlined` the helper call sites it was inlined through."""

    loc: SourceLocation | None = field(default=None, kw_only=True, compare=False, repr=False)
    inlined: tuple[SourceLocation, ...] = field(default=(), kw_only=True, compare=False, repr=False)
    sid: int = field(default=-1, kw_only=True, compare=False, repr=False)
    #: the fields holding what the statement defines (every other variable in it is read)
    results: ClassVar[tuple[str, ...]] = ("out", "outs")


@dataclass
class Param(Stmt):
    """A kernel argument; arrays arrive as their data pointer, shape and strides, scalars by value."""

    out: Var
    position: int


@dataclass
class ScalarOp(Stmt):
    """`out = op(*args)`: operands are converted to `compute` first, the result to `out`'s dtype."""

    out: Var
    op: str
    args: tuple[Value, ...]
    compute: np.dtype


@dataclass
class Copy(Stmt):
    """Assign a value to a user variable (tiles are copied element by element)."""

    out: Var
    src: Value


@dataclass
class TileMap(Stmt):
    """Element-wise `out[i] = op(args[0][i] or scalar, ...)`, with ScalarOp's conversions."""

    out: Var
    op: str
    args: tuple[Value, ...]
    compute: np.dtype


@dataclass
class ProgramId(Stmt):
    out: Var
    axis: int
    count: bool = False  # num_programs instead of program_id


@dataclass
class ArrayView(Stmt):
    """`out = array[indices]` with fewer indices than the rank: a view of the remaining axes
    (an index out of range gives an empty view: every access through it is masked)."""

    out: Var
    array: Var
    indices: tuple[Value, ...]


@dataclass
class ArrayShape(Stmt):
    """`out = array.shape[axis]`."""

    out: Var
    array: Var
    axis: int


@dataclass
class ArrayRead(Stmt):
    """`out = array[indices]` with a full index (0 when out of range in compiled code)."""

    out: Var
    array: Var
    indices: tuple[Value, ...]


@dataclass
class ArrayWrite(Stmt):
    """`array[indices] = value` with a full index, written once per block (skipped when out of range)."""

    array: Var
    indices: tuple[Value, ...]
    value: Value


@dataclass
class Collective(Stmt):
    """A statement the whole block runs together (a CUB primitive); `cid` numbers them densely."""

    cid: int = field(default=-1, kw_only=True)


@dataclass
class If(Stmt):
    cond: Value
    then: list[Stmt]
    orelse: list[Stmt]


@dataclass
class ForRange(Stmt):
    var: Var
    start: Value
    stop: Value
    step: Value
    body: list[Stmt]


@dataclass
class While(Stmt):
    """`while True: cond_body; if not cond: break; body`."""

    cond_body: list[Stmt]
    cond: Value
    body: list[Stmt]


@dataclass
class Return(Stmt):
    pass


@dataclass
class Program:
    """A typed tile program: its parameters, body, and the source it came from."""

    name: str
    params: list[tuple[str, ArrayType | ScalarType]]
    body: list[Stmt]
    source_hash: str = ""
    #: the typed @ct.combine functions the program's scans and reductions use, by name.
    combines: dict[str, Combine] = field(default_factory=dict)
    #: the lines `ct.static_print` calls printed while the front end built it, in program order
    static_prints: tuple[str, ...] = ()

    def walk(self):
        """Every statement, depth first, in program order."""
        yield from walk(self.body)

    def __str__(self) -> str:
        lines = [f"program {self.name}({', '.join(f'{n}: {t}' for n, t in self.params)})"]
        _format(self.body, lines, 1)
        return "\n".join([*(str(c) for c in self.combines.values()), *lines])


@dataclass
class Combine:
    """A typed @ct.combine function: 2k scalar parameters (the earlier element's k, then the later
    one's), a body of scalar statements, and its results: k in the item dtypes for a scan or
    reduction, one bool for a sort's comparison."""

    name: str
    params: tuple[Var, ...]
    body: list[Stmt]
    results: tuple[Value, ...]
    dtypes: tuple[np.dtype, ...]  # of each element's k operands
    result_dtypes: tuple[np.dtype, ...] = ()  # of the results: `dtypes` unless a comparison (bool)

    def __post_init__(self) -> None:
        if not self.result_dtypes:
            self.result_dtypes = self.dtypes

    def __str__(self) -> str:
        lines = [f"combine {self.name}({', '.join(str(p) for p in self.params)}):"]
        _format(self.body, lines, 1)
        lines.append(f"  return {', '.join(_fmt(r) for r in self.results)}")
        return "\n".join(lines)


def walk(body: list[Stmt]):
    for s in body:
        yield s
        if isinstance(s, If):
            yield from walk(s.then)
            yield from walk(s.orelse)
        elif isinstance(s, ForRange):
            yield from walk(s.body)
        elif isinstance(s, While):
            yield from walk(s.cond_body)
            yield from walk(s.body)


def tile_vars(program: Program) -> dict[str, TileType]:
    """Every tile-typed variable the program defines, by name."""
    out: dict[str, TileType] = {}
    for s in program.walk():
        for target in outputs(s):
            if isinstance(target.type, TileType):
                out[target.name] = target.type
    return out


def outputs(s: Stmt) -> tuple[Var, ...]:
    """The variables statement `s` assigns (`out`, or `outs` for multi-result statements)."""
    if hasattr(s, "outs"):
        return tuple(v for v in s.outs if v is not None)
    out = getattr(s, "out", None)
    return (out,) if isinstance(out, Var) else ()


def inputs(s: Stmt) -> tuple[Var, ...]:
    """The variables statement `s` reads itself: all in its fields but its `results` (its nested
    bodies' statements read their own)."""
    written = {id(v) for v in _vars([getattr(s, name, None) for name in s.results])}
    if isinstance(s, ForRange):
        written.add(id(s.var))
    return tuple(v for v in _vars(list(vars(s).values())) if id(v) not in written)


def _vars(values: list[object]) -> list[Var]:
    found: list[Var] = []
    for value in values:
        if isinstance(value, Var):
            found.append(value)
        elif isinstance(value, tuple):
            found.extend(_vars(list(value)))
    return found


def _format(body: list[Stmt], lines: list[str], depth: int) -> None:
    pad = "  " * depth
    for s in body:
        if isinstance(s, If):
            lines.append(f"{pad}if {s.cond}:")
            _format(s.then, lines, depth + 1)
            if s.orelse:
                lines.append(f"{pad}else:")
                _format(s.orelse, lines, depth + 1)
        elif isinstance(s, ForRange):
            lines.append(f"{pad}for {s.var} in range({s.start}, {s.stop}, {s.step}):")
            _format(s.body, lines, depth + 1)
        elif isinstance(s, While):
            lines.append(f"{pad}while:")
            _format(s.cond_body, lines, depth + 1)
            lines.append(f"{pad}  test {s.cond}")
            _format(s.body, lines, depth + 1)
        else:
            fields = {k: v for k, v in vars(s).items() if k not in ("loc", "inlined", "sid")}
            text = ", ".join(f"{k}={_fmt(v)}" for k, v in fields.items())
            lines.append(f"{pad}{type(s).__name__}({text})")


def _fmt(v: object) -> str:
    if isinstance(v, Var):
        return f"%{v.name}:{v.type}"
    if isinstance(v, tuple):
        return "(" + ", ".join(_fmt(x) for x in v) + ")"
    return str(v)
