"""The typed tile IR: what the front end produces, the interpreter evaluates, and the planner
and code generators consume.

A program is a list of statements; control flow nests lists (a statement's *regions*). Values
are named variables or literals, each with its type. This module holds the generic statements
(parameters, scalar and element-wise operations, copies, control flow); each tile op defines its
own statement class next to its semantics and lowering (`coop_tiles.ops`).

Every statement class declares the role of each of its fields, once, in its class header, and
the declaration is checked when the class is made (every field has one role, every role names a
field of the class):

    @dataclass
    class ScalarOp(Stmt, defs="out", uses="args", attrs="op compute"):
        out: Var
        op: str
        args: tuple[Value, ...]
        compute: np.dtype

- `defs`: variables the statement defines (a `Var`, a tuple of them, or None);
- `uses`: values it reads (variables or literals, tuples of them, or None);
- `refs`: variables it names without reading them, for their type or layout only;
- `regions`: nested statement lists (`list[Stmt]`), in the order they run;
- `attrs`: everything else (op names, dtypes, flags): no variable may hide in them.

Stages ask through `defs`, `uses`, `refs`, `regions` and `rewrite`, never by field names, and
`verify` checks a whole program against the declarations.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

import numpy as np

from ..errors import InternalError, SourceLocation
from .types import ScalarType, TileType, ValueType

#: a variable's kind: a kernel or combine-function argument, a variable the user's source assigns
#: (loop variables included), or a value the front end made
PARAM, USER, TEMP = "param", "user", "temp"
#: the environment variable that makes the compiler and interpreter `verify` the IR after each stage
VERIFY_ENV = "COOP_TILES_VERIFY_IR"


@dataclass(frozen=True)
class Var:
    """A named value. Its `name` identifies it in the program (and in generated code); `kind` and
    `source` (its name in the user's source, "x" or "pair[0]"; "" for a temporary) describe it."""

    name: str
    type: ValueType
    kind: str = field(default=TEMP, compare=False)
    source: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"%{self.name}"


@dataclass(frozen=True)
class Lit:
    value: object
    type: ScalarType

    def __str__(self) -> str:
        return repr(self.value)


Value = Var | Lit


def label(v: Var) -> str:
    """How tables and messages show `v`: a user variable by its source name, anything else as (name)."""
    return v.source if v.kind == USER and v.source else f"({v.name})"


# ----- statement declarations ----------------------------------------------------------------------
@dataclass(frozen=True)
class Roles:
    """The fields of a statement class by role (module docstring); `meta` is every statement's
    bookkeeping (location, ids)."""

    defs: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    refs: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    attrs: tuple[str, ...] = ()
    meta: tuple[str, ...] = ()

    def all(self) -> tuple[str, ...]:
        return (*self.defs, *self.uses, *self.refs, *self.regions, *self.attrs, *self.meta)


def _declare(cls: type, parent: Roles, spec: dict[str, str]) -> Roles:
    """`parent`'s roles plus `cls`'s own fields by `spec`'s space-separated names; a TypeError unless
    each own field has exactly one role and each name is an own field."""
    own = [
        name
        for name, annotation in cls.__dict__.get("__annotations__", {}).items()
        if not str(annotation).startswith(("ClassVar", "typing.ClassVar"))
    ]
    named = {role: tuple(names.split()) for role, names in spec.items()}
    listed = [n for names in named.values() for n in names]
    unknown = sorted(set(listed) - set(own))
    twice = sorted({n for n in listed if listed.count(n) > 1})
    missing = [n for n in own if n not in listed]
    if unknown or twice or missing:
        problems = [
            *([f"no field {', '.join(unknown)}"] if unknown else []),
            *([f"{', '.join(twice)} declared twice"] if twice else []),
            *([f"no role for {', '.join(missing)}"] if missing else []),
        ]
        raise TypeError(f"statement class {cls.__name__}: {'; '.join(problems)}")
    return Roles(**{role: (*getattr(parent, role), *named.get(role, ())) for role in Roles.__dataclass_fields__})


@dataclass
class Stmt:
    """An IR statement. `sid` is its stable id in the program (the plan refers to statements by
    it); `loc` is the user's line, `inlined` the helper call sites it was inlined through.
    Subclasses declare their fields' roles in their class header (module docstring)."""

    loc: SourceLocation | None = field(default=None, kw_only=True, compare=False, repr=False)
    inlined: tuple[SourceLocation, ...] = field(default=(), kw_only=True, compare=False, repr=False)
    sid: int = field(default=-1, kw_only=True, compare=False, repr=False)
    roles: ClassVar[Roles] = Roles(meta=("loc", "inlined", "sid"))

    def __init_subclass__(cls, **spec: str) -> None:
        roles = [r for r in spec if r not in Roles.__dataclass_fields__]
        if roles:
            raise TypeError(f"statement class {cls.__name__}: unknown role {', '.join(roles)}")
        super().__init_subclass__()
        cls.roles = _declare(cls, cls.roles, spec)


def _vars(value: object) -> Iterator[Var]:
    if isinstance(value, Var):
        yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from _vars(item)


def defs(s: Stmt) -> tuple[Var, ...]:
    """The variables `s` defines."""
    return tuple(v for name in s.roles.defs for v in _vars(getattr(s, name)))


def uses(s: Stmt) -> tuple[Var, ...]:
    """The variables `s` reads itself (its regions' statements read their own)."""
    return tuple(v for name in s.roles.uses for v in _vars(getattr(s, name)))


def refs(s: Stmt) -> tuple[Var, ...]:
    """The variables `s` names for their type or layout only, without reading them."""
    return tuple(v for name in s.roles.refs for v in _vars(getattr(s, name)))


def regions(s: Stmt) -> tuple[list[Stmt], ...]:
    """The statement lists nested in `s`, in the order they run."""
    return tuple(getattr(s, name) for name in s.roles.regions)


def rewrite(s: Stmt, fn: Callable[[Var], Value]) -> Stmt:
    """A copy of `s`, its regions' statements included, with every variable it defines, reads or
    names replaced by `fn(var)` (a definition must stay a variable)."""

    def mapped(value: object) -> object:
        if isinstance(value, Var):
            return fn(value)
        if isinstance(value, tuple):
            return tuple(mapped(item) for item in value)
        return value

    changes: dict[str, object] = {
        name: mapped(getattr(s, name)) for name in (*s.roles.defs, *s.roles.uses, *s.roles.refs)
    }
    changes.update({name: [rewrite(x, fn) for x in getattr(s, name)] for name in s.roles.regions})
    return dataclasses.replace(s, **changes)


# ----- the statements ----------------------------------------------------------------------------
@dataclass
class Param(Stmt, defs="out", attrs="position"):
    """A kernel argument; arrays arrive as their data pointer, shape and strides, scalars by value."""

    out: Var
    position: int


@dataclass
class ScalarOp(Stmt, defs="out", uses="args", attrs="op compute"):
    """`out = op(*args)`: operands are converted to `compute` first, the result to `out`'s dtype."""

    out: Var
    op: str
    args: tuple[Value, ...]
    compute: np.dtype


@dataclass
class Copy(Stmt, defs="out", uses="src"):
    """Assign a value to a user variable (tiles are copied element by element)."""

    out: Var
    src: Value


@dataclass
class TileMap(Stmt, defs="out", uses="args", attrs="op compute"):
    """Element-wise `out[i] = op(args[0][i] or scalar, ...)`, with ScalarOp's conversions."""

    out: Var
    op: str
    args: tuple[Value, ...]
    compute: np.dtype


@dataclass
class ProgramId(Stmt, defs="out", attrs="axis count"):
    out: Var
    axis: int
    count: bool = False  # num_programs instead of program_id


@dataclass
class ArrayView(Stmt, defs="out", uses="array indices"):
    """`out = array[indices]` with fewer indices than the rank: a view of the remaining axes
    (an index out of range gives an empty view: every access through it is masked)."""

    out: Var
    array: Var
    indices: tuple[Value, ...]


@dataclass
class ArrayShape(Stmt, defs="out", uses="array", attrs="axis"):
    """`out = array.shape[axis]`."""

    out: Var
    array: Var
    axis: int


@dataclass
class ArrayRead(Stmt, defs="out", uses="array indices"):
    """`out = array[indices]` with a full index (0 when out of range in compiled code)."""

    out: Var
    array: Var
    indices: tuple[Value, ...]


@dataclass
class ArrayWrite(Stmt, uses="array indices value"):
    """`array[indices] = value` with a full index, written once per block (skipped when out of range)."""

    array: Var
    indices: tuple[Value, ...]
    value: Value


@dataclass
class Collective(Stmt, meta="cid"):
    """A statement the whole block runs together (a CUB primitive); `cid` numbers them (uniquely;
    the front end densely, rewrites may leave gaps)."""

    cid: int = field(default=-1, kw_only=True)


#: `TileRemap.kind`: out element e is src element f(e), f being NumPy's broadcast_to, reshape (row-major),
#: transpose or flip (along `axis`) of the source's element indices, or the first columns of each row (the
#: first `out.shape[-1]` elements along the last axis: `src[..., :k]`)
BROADCAST, RESHAPE, TRANSPOSE, FLIP, HEAD = "broadcast", "reshape", "transpose", "flip", "head"


@dataclass
class TileRemap(Collective, defs="out", uses="src", attrs="kind axis"):
    """`out` (of its own shape) holds `src`'s elements moved as `kind` says: data movement made
    explicit, so that the planner sees it (in registers when each thread holds its sources, else
    through shared memory). The front end inserts broadcasts so element-wise operands share a shape."""

    out: Var
    src: Var
    kind: str
    axis: int | None = None


@dataclass
class If(Stmt, uses="cond", regions="then orelse"):
    """`if cond: then else: orelse` on a block-uniform condition."""

    cond: Value
    then: list[Stmt]
    orelse: list[Stmt]


@dataclass
class ForRange(Stmt, defs="var", uses="start stop step", regions="body"):
    """`for var in range(start, stop, step): body`; `var` is defined at the start of each iteration."""

    var: Var
    start: Value
    stop: Value
    step: Value
    body: list[Stmt]


@dataclass
class While(Stmt, regions="cond_body body", uses="cond"):
    """`while True: cond_body; if not cond: break; body`."""

    cond_body: list[Stmt]
    cond: Value
    body: list[Stmt]


@dataclass
class Return(Stmt):
    pass


@dataclass
class Program:
    """A typed tile program: its parameters (the variables its `Param` statements define, in
    order), body, and the source it came from."""

    name: str
    params: list[Var]
    body: list[Stmt]
    source_hash: str = ""
    #: the typed @ct.combine functions the program's scans and reductions use, by name.
    combines: dict[str, Combine] = field(default_factory=dict)
    #: the lines `ct.static_print` calls printed while the front end built it, in program order
    static_prints: tuple[str, ...] = ()
    #: what the GPU rewrites say of collectives, by cid, for the plan (why a K loop is not pipelined)
    notes: dict[int, str] = field(default_factory=dict)

    def walk(self) -> Iterator[Stmt]:
        """Every statement, depth first, in program order."""
        yield from walk(self.body)

    def __str__(self) -> str:
        lines = [f"program {self.name}({', '.join(f'{p.source}: {p.type}' for p in self.params)})"]
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


class Numbering:
    """Ids for the statements, and names for the temporaries, that a rewrite adds to `program`: past every id it
    has, each statement at the source line (and inlined calls) of the one it stands for."""

    def __init__(self, program: Program) -> None:
        stmts = list(program.walk())
        self.sid = max((s.sid for s in stmts), default=0)
        self.cid = max((s.cid for s in stmts if isinstance(s, Collective)), default=-1)

    def place(self, stmt: _S, like: Stmt) -> _S:
        """`stmt`, numbered and located where `like` is."""
        self.sid += 1
        stmt.sid, stmt.loc, stmt.inlined = self.sid, like.loc, like.inlined
        if isinstance(stmt, Collective):
            self.cid += 1
            stmt.cid = self.cid
        return stmt

    def temp(self, t: ValueType) -> Var:
        """A new temporary of type `t`."""
        self.sid += 1
        return Var(f"coop_c{self.sid}", t)


_S = TypeVar("_S", bound=Stmt)


def walk(body: list[Stmt]) -> Iterator[Stmt]:
    """Every statement of `body` and of the regions nested in it, depth first, in order."""
    for s in body:
        yield s
        for region in regions(s):
            yield from walk(region)


def tile_vars(program: Program) -> dict[str, TileType]:
    """Every tile-typed variable the program defines, by name."""
    out: dict[str, TileType] = {}
    for s in program.walk():
        for target in defs(s):
            if isinstance(target.type, TileType):
                out[target.name] = target.type
    return out


# ----- verification ------------------------------------------------------------------------------
def verify_if_asked(program: Program, stage: str) -> None:
    """`verify(program, stage)` when the environment variable COOP_TILES_VERIFY_IR is set (the test
    suite sets it, so every compile and interpreted launch in it checks its IR after each stage)."""
    if os.environ.get(VERIFY_ENV, "") not in ("", "0"):
        verify(program, stage)


def verify(program: Program, stage: str = "build") -> None:
    """Check that `program` is well formed after `stage`, or raise an InternalError naming the first
    statement that is not:

    - every statement's fields hold what its class declares: variables (or None) where it defines,
      values where it reads, statement lists in its regions, no variable among its attributes;
      each statement object appears once, with its own `sid` (and `cid` if a collective);
    - the `Param` statements are at the top level and define `program.params`, in order;
    - one type and one kind per variable name; a temporary is defined by exactly one statement;
    - every use comes after a definition on every path to it. Statements run in order; an `If`
      runs its condition, then one of its branches, and after it a name is defined if every branch
      that falls through defines it (a branch ending in `Return` does not fall through); a
      `ForRange` reads its bounds, defines its variable, and runs its body zero or more times; a
      `While` runs `cond_body`, reads `cond`, then its body, and repeats; any other statement
      reads its uses, runs its regions once in order, then defines its defs. A use inside a loop
      body sees only what is defined before the loop or earlier in the same iteration (never a
      definition later in the body, from an earlier iteration), and after a loop only what was
      defined before it (or, for a `While`, in its `cond_body`) is defined;
    - a name a statement only refers to (`refs`) is defined somewhere in the program;
    - each combine function's body reads only its parameters and what it defined before, and its
      results are defined.
    """
    _Verifier(program, stage).run()


class _Verifier:
    def __init__(self, program: Program, stage: str):
        self.program, self.stage = program, stage
        self.types: dict[str, tuple[ValueType, str]] = {}
        self.temp_defs: dict[str, int] = {}
        self.sids: set[int] = set()
        self.cids: set[int] = set()
        self.seen: set[int] = set()
        self.defined_anywhere: set[str] = set()

    def fail(self, s: Stmt | None, problem: str) -> None:
        where = f" in statement {s.sid} {type(s).__name__}" if s is not None else ""
        raise InternalError(
            f"the IR after stage {self.stage!r} of {self.program.name} is ill formed{where}: {problem} "
            "(this is a coop_tiles bug, please report it)",
            loc=s.loc if s is not None else None,
        )

    def run(self) -> None:
        bodies = [self.program.body, *(c.body for c in self.program.combines.values())]
        for body in bodies:
            for s in walk(body):
                self.shape(s)
        params = [s.out for s in self.program.body if isinstance(s, Param)]
        nested = [s for s in self.program.walk() if isinstance(s, Param) and s.out not in params]
        if nested:
            self.fail(nested[0], "a parameter defined inside a region")
        if [p.name for p in params] != [p.name for p in self.program.params]:
            self.fail(None, f"Param statements define {params}, not the program's parameters {self.program.params}")
        for p in self.program.params:
            self.typed(None, p)
        self.flow(self.program.body, set())
        for c in self.program.combines.values():
            for p in c.params:
                self.typed(None, p)
            defined, _ = self.flow(c.body, {p.name for p in c.params})
            for r in c.results:
                if isinstance(r, Var):
                    self.typed(None, r)
                    if r.name not in defined:
                        self.fail(None, f"combine {c.name} returns %{r.name}, which it does not define")

    def shape(self, s: Stmt) -> None:
        """The fields of `s` against its class's declaration, its ids, and the names' types."""
        if id(s) in self.seen:
            self.fail(s, "the same statement object appears twice")
        self.seen.add(id(s))
        if s.sid < 0 or s.sid in self.sids:
            self.fail(s, f"sid {s.sid} is unset or not unique")
        self.sids.add(s.sid)
        if isinstance(s, Collective):
            if s.cid < 0 or s.cid in self.cids:
                self.fail(s, f"cid {s.cid} is unset or not unique")
            self.cids.add(s.cid)
        r = s.roles
        for name in r.defs:
            value = getattr(s, name)
            items = value if isinstance(value, tuple) else (value,)
            if not all(v is None or isinstance(v, Var) for v in items):
                self.fail(s, f"field {name!r} defines {value!r}, not variables")
        for name in (*r.uses, *r.refs):
            value = getattr(s, name)
            items = value if isinstance(value, tuple) else (value,)
            if not all(v is None or isinstance(v, (Var, Lit, tuple)) for v in items):
                self.fail(s, f"field {name!r} holds {value!r}, not values")
        for name in r.regions:
            region = getattr(s, name)
            if not isinstance(region, list) or not all(isinstance(x, Stmt) for x in region):
                self.fail(s, f"region {name!r} is not a list of statements")
        for name in r.attrs:
            if any(True for _ in _vars(getattr(s, name))):
                self.fail(s, f"attribute {name!r} holds a variable (declare its role)")
        for v in defs(s):
            self.defined_anywhere.add(v.name)
            if v.kind == TEMP:
                self.temp_defs[v.name] = self.temp_defs.get(v.name, 0) + 1
                if self.temp_defs[v.name] > 1:
                    self.fail(s, f"temporary %{v.name} is defined twice")
            if v.kind == PARAM and not isinstance(s, Param):
                self.fail(s, f"parameter %{v.name} is defined by a statement other than its Param")
        for v in (*defs(s), *uses(s), *refs(s)):
            self.typed(s, v)

    def typed(self, s: Stmt | None, v: Var) -> None:
        known = self.types.setdefault(v.name, (v.type, v.kind))
        if known != (v.type, v.kind):
            self.fail(s, f"%{v.name} is a {v.kind} {v.type} here but a {known[1]} {known[0]} elsewhere")

    def flow(self, body: list[Stmt], defined: set[str]) -> tuple[set[str], bool]:
        """(the names defined on every path through `body` from `defined`, whether it falls through)."""
        falls = True
        for s in body:
            for v in refs(s):
                if v.name not in self.defined_anywhere:
                    self.fail(s, f"it refers to %{v.name}, which no statement defines")
            if isinstance(s, While):
                defined, _ = self.flow(s.cond_body, defined)
                self.read(s, defined)
                self.flow(s.body, defined)
                continue
            self.read(s, defined)
            if isinstance(s, If):
                exits = [d for d, f in (self.flow(s.then, defined), self.flow(s.orelse, defined)) if f]
                if not exits:
                    falls = False
                defined = set.intersection(*exits) if exits else defined
            elif isinstance(s, ForRange):
                self.flow(s.body, defined | {s.var.name})
            else:
                for region in regions(s):
                    defined, _ = self.flow(region, defined)
                defined = defined | {v.name for v in defs(s)}
                if isinstance(s, Return):
                    falls = False
        return defined, falls

    def read(self, s: Stmt, defined: set[str]) -> None:
        for v in uses(s):
            if v.name not in defined:
                self.fail(s, f"it reads %{v.name} before it is defined on every path")


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
