"""What defines a tile op, in one place: `TileOp`, the registry, and the shim-call description.

A tile op (`tile.load`, `tile.scan`, ...) is one `TileOp` subclass in one module of this
package. It owns the op's IR statement class and every rule about it:

- `build`: argument checks and typing; emits the statement (front end, both modes);
- `interpret`: its NumPy semantics (the interpreter);
- `layout`: what it needs of its tiles' ThreadData layouts (planner);
- `choose`: the CUB primitive and algorithm it runs as (planner);
- `launch_check`: what it needs of the grid, checked at each launch (interpreter and launcher);
- `options`, `forbids`: its options and the combinations the contract forbids (`ops/options.py`),
  which the option matrix tries (tests);
- `lower`: its C++ shim, written into the kernel's translation unit, and the `ShimCall` that
  the generated body makes (codegen renders the call; no op writes body code itself);
- `item_value`: for a tile made without a collective (a constructor), each item's value, as an
  expression the body writer spells;
- `lower_after`, `body_start`, `max_default_threads`, `descending_programs`: what an op with
  grid-wide state (a chained scan) adds to the kernel: shims that need the whole program, the body's
  first steps, a smaller default block size, and the order the interpreter runs programs in;
- `rewrite`: an IR rewrite for the GPU that the op owns (run by the compiler's rewrite stage).

The stages know ops only through this module: the hooks receive the stages' objects, typed here
by protocols (`Building`, `Running`, `Planning`, `Lowering`, `BodyWriting`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from ..codegen.params import ArrayParts  # (the parameter ABI the stages and the launchers share, not a stage)
from ..errors import TileTypeError, TileValueError
from ..lang import ir
from ..lang.types import broadcast_shape
from .elementwise import ELEMENTWISE, ElementOp
from .options import Forbidden, Option


# ----- shim calls: what the body passes to a shim, described as data ----------------------------
@dataclass(frozen=True)
class TileArg:
    """A tile, passed as a pointer to this thread's items (`T* name`)."""

    var: ir.Var
    name: str


@dataclass(frozen=True)
class ValueArg:
    """A block-uniform scalar, passed by value (`T name`), already of the shim's dtype."""

    value: ir.Value
    name: str


@dataclass(frozen=True)
class ArrayArg:
    """An array or view of any rank: `T* name, long long name_off`, then each axis's length
    `long long name_shape0` ... and stride `long long name_stride0` ... (in elements), the last stride
    only without unit stride, so a contiguous 1-D array is `(pointer, offset, length)`. The shim spells
    them, and its elements' offsets, through `parts` (`codegen/params.py::ArrayParts`)."""

    var: ir.Var
    name: str

    @property
    def parts(self) -> ArrayParts:
        return ArrayParts.named(self.name, self.var.type)


@dataclass(frozen=True)
class OutArg:
    """A block-uniform scalar result, written through a pointer (`T* name`)."""

    var: ir.Var
    name: str


@dataclass(frozen=True)
class StateArg:
    """A per-thread int the shim keeps from one run to the next (`int* name`, 0 before the first
    run), such as which of two TempStorage the next run uses."""

    name: str


#: the state of a collective whose runs alternate between two TempStorage (`ShimWriter.alternate`)
PARITY = StateArg("parity")


@dataclass(frozen=True)
class LaunchArg:
    """The launch's own device memory (`unsigned char* name`), which the kernel entry takes after the arguments
    (and a chained scan's grid-wide state): filled before the program by the module's prepare kernel from the
    same arguments (`Lowering.launch_state`, `Lowering.prepare`; `runtime/launch_state.py`)."""

    name: str


#: the launch state of the kernel: cuBLASDx's device pipelines (TMA descriptors) of pipelined K loops
LAUNCH_STATE = LaunchArg("coop_launch_state")


@dataclass(frozen=True)
class ShimCall:
    """One call from the body to shim `name`; its result, if any, goes to `ret`. Every shim also
    receives the TempStorage buffer and its byte offset (`smem`, `soff`)."""

    name: str
    args: tuple[TileArg | ValueArg | ArrayArg | OutArg | StateArg | LaunchArg, ...]
    ret: ir.Var | None = None


@dataclass(frozen=True)
class BodyStart:
    """What the body does before its statements for an op with grid-wide state (a chained scan,
    whose program ids are tickets taken from that state): run `stmts` again on renamed variables,
    with program id 0 read as the block index (a guess; counted from the last block when `descending`),
    make the shim call `call(s)` of each statement `s` of `calls_for` with those variables (shims its op
    defined in `TileOp.lower_after`), then call shim `begin` with the state; from then on program id 0
    is what shim `program_id` returns."""

    stmts: tuple[ir.Stmt, ...]
    calls_for: tuple[ir.Stmt, ...]
    call: Callable[[Any], ShimCall]
    begin: str
    program_id: str
    #: program ids are handed out from the last program to the first (a reverse chained scan)
    descending: bool = False


# ----- what an op sees of each stage ---------------------------------------------------------------
# The stages pass their own objects to the hooks (lang/builder.py's Builder, lang/interpreter.py's
# Frame, planner/layout.py's LayoutContext, codegen/shims.py's ShimWriter); ops know them only by
# these protocols, so that no op module, and not this one, imports a stage (codegen/numba_body.py's
# writer is `BodyWriting`).
class Building(Protocol):
    """The front end while it builds one call (`TileOp.build`); errors raised get the call's line."""

    root: list[ir.Stmt]  # the program's top-level statements
    stmts: list[ir.Stmt]  # the statements being built (`root`, or a nested body)
    static_prints: list[str]
    current: Any  # the AST node being built
    fn: Any  # the ParsedFunction being built

    def temp(self, t: Any) -> ir.Var: ...
    def emit(self, stmt: ir.Stmt) -> None: ...
    def runtime(self, v: Any, what: str = "value") -> ir.Value: ...
    def scalar(self, v: Any, what: str, kinds: str = "biuf") -> ir.Value: ...
    def tile(self, v: Any, what: str) -> ir.Var: ...
    def array(self, v: Any, what: str) -> ir.Var: ...
    def constant(self, v: Any, what: str, kind: type | tuple = object) -> Any: ...
    def tile_size(self, v: Any) -> int: ...
    def optional(self, v: Any) -> Any: ...
    def convert(self, v: ir.Value, dtype: np.dtype) -> ir.Value: ...
    def truth(self, value: ir.Value) -> ir.Value: ...
    def apply(self, name: str, args: tuple, compare: bool = False) -> Any: ...
    def combine(self, fn: Any, dtypes: tuple[np.dtype, ...], compare: bool = False) -> ir.Combine: ...


class Running(Protocol):
    """One program instance in the interpreter (`TileOp.interpret`)."""

    program: ir.Program
    pid: tuple[int, int, int]
    env: dict[str, Any]  # every variable's value, by name
    launch: dict  # shared by the programs of one launch, run in program-id order

    def get(self, v: ir.Value) -> Any: ...
    def set(self, var: ir.Var, value: Any) -> None: ...
    def evaluate_combine(self, combine: ir.Combine, left: tuple, right: tuple) -> tuple: ...


class Layout(Protocol):
    """A tile's planned layout (planner/layout.py's TileLayout)."""

    name: str
    size: int
    items_per_thread: int
    arrangement: str  # planner/layout.py's BLOCKED, STRIPED or ROWS
    vector: int  # STRIPED in vectors of this many items (1: plain); see codegen/shims.py::element_index
    storage: str  # registers, shared or local memory
    shape: tuple[int, ...]
    rows: Any  # planner/layout.py's RowShape for ROWS
    fragment: Any  # planner/layout.py's Fragment for FRAGMENT (a library GEMM's accumulator)

    def element(self, tid: int, i: int, threads: int) -> int | None: ...


class Choice(Protocol):
    """A collective's planned CUB primitive and algorithm (planner/layout.py's CollectiveChoice)."""

    cid: int
    primitive: str
    algorithm: str
    needs_storage: bool


class Planning(Protocol):
    """The layout planner (`TileOp.layout`, `TileOp.choose`); `tiles` is filled once layouts are known."""

    threads: int
    arch: str  # the target ("sm_90")
    block_values: frozenset[str]  # the variables threads other than thread 0 need
    depths: dict[int, int]  # collective id -> how many loops it is nested in
    tiles: dict[str, Any]  # tile name -> Layout

    def join(self, tiles: list[ir.Var]) -> None: ...
    def join_blocked(self, tiles: list[ir.Var]) -> None: ...
    def claim(self, vector: ir.Var, family: ir.Var, holds: str) -> None: ...
    def prefer_blocked(self, tile: ir.Var) -> None: ...
    def offer_vector(self, tile: ir.Var, items: int) -> None: ...
    def offer_fragment(self, tile: ir.Var, key: Any, make: Any, operands: Any) -> None: ...
    def choice(
        self, s: ir.Collective, op: str, primitive: str, algorithm: str, storage: bool = True, sync: str = ""
    ) -> Choice: ...


class Lowering(Protocol):
    """The shim writer (`TileOp.lower`): the plan's layouts and choices, and the shim's pieces."""

    threads: int
    arch: str  # the target ("sm_90")
    block_values: frozenset[str]
    #: bytes per program of grid-wide state the kernel entry takes last (None: none)
    chain_bytes: int | None

    def include(self, *headers: str) -> None: ...
    def helper(self, code: str) -> None: ...
    def layout(self, var: ir.Var) -> Layout: ...
    def choice(self, cid: int) -> Choice: ...
    def element_index(self, var: ir.Var) -> str: ...
    def clamp(self, size: int, a: ArrayArg) -> str: ...
    def clamp_valid(self, size: int) -> str: ...
    def identity(self, op: str, dt: np.dtype) -> str: ...
    def combine_symbol(self, name: str) -> str: ...
    def gemm(self, spec: Any, registers: bool = False) -> Any: ...
    def pipeline(self, spec: Any) -> Any: ...
    def launch_state(self, nbytes: int, align: int) -> int: ...
    def prepare(self, code: str) -> None: ...
    def storage(
        self, cid: int, temp_type: str, extra: str = "", prelude: str = "", copies: int | None = None
    ) -> str: ...
    def alternate(self) -> str: ...
    def storage_ref(self, cid: int) -> str: ...
    def items_ref(self, var: str, ptr: str, tile: ir.Var, items: int) -> str: ...
    def define(self, call: ShimCall, code: str, body: str) -> None: ...


class BodyWriting(Protocol):
    """The body writer (`TileOp.item_value`): expressions of the body's language (Numba Python)."""

    def operand(self, v: ir.Value, element: bool) -> str: ...
    def item_index(self, tile: ir.Var) -> str: ...
    def convert(self, expr: str, src: np.dtype, dst: np.dtype) -> str: ...


# ----- the op definition ------------------------------------------------------------------------
class TileOp:
    """Base of every tile op; see the module docstring for what each hook does."""

    #: the documented public function(s) this op implements (their signatures bind the arguments).
    publics: ClassVar[tuple[Callable, ...]] = ()
    #: the IR statement class the op emits (None: it only emits generic statements).
    stmt: ClassVar[type | None] = None
    #: the options of its public functions and the values the option matrix tries (`ops/options.py`)
    options: ClassVar[tuple[Option, ...]] = ()
    #: the combinations of them the contract forbids, in the order `build` checks them
    forbids: ClassVar[tuple[Forbidden, ...]] = ()

    def build(self, b: Building, public: Callable, /, *args: Any, **kwargs: Any) -> Any:
        """Check and type a call of `public`, emit its statement and return its result. An op
        declares its parameters by name, those of its public stub in the same order (checked by
        `register`; see `build_call`): `def build(self, b, public, a, offset, size, *, valid, other)`."""
        raise NotImplementedError

    def interpret(self, s: Any, frame: Running) -> None:
        raise NotImplementedError

    def layout(self, s: Any, ctx: Planning) -> None:
        """Join or constrain tile layouts (default: none)."""

    def replicates(self, s: Any, var: ir.Var) -> bool:
        """Whether `s` can take tile `var` with replicated items, one element held by several threads (a
        vector arranged per row or per column of a 2-D tile's rows, `planner/layout.py`). Default: no."""
        return False

    def takes_fragments(self, s: Any, var: ir.Var) -> bool:
        """Whether `s` can take tile `var` arranged as a library GEMM's accumulator (FRAGMENT,
        `planner/layout.py`: items reached only through `element_index` in C++). Default: no."""
        return False

    def thread0_reads(self, s: Any, threads: int) -> set[str]:
        """Names of the variables the shim reads in thread 0 only, at `threads` per block (default: none)."""
        return set()

    def global_access(self, s: Any) -> tuple[ir.Var, bool] | None:
        """(the array, whether it writes) when the op touches global memory: the planner puts
        barriers between threads' conflicting accesses."""
        return None

    def choose(self, s: Any, ctx: Planning) -> Choice | None:
        return None

    #: whether the op's tiles may be striped in vectors (`planner/layout.py`): it reaches their items only
    #: through `element_index` / `item_index` (or needs them BLOCKED), and any arrangement of them does
    striped_vectors: ClassVar[bool] = False

    #: whether the op may write its tile results over its tile operands' items (each thread
    #: reads all of its own items before writing any, as CUB's scans do)
    in_place: ClassVar[bool] = False

    def storage_owner(self, s: Any) -> int:
        """The collective whose TempStorage region `s` works in: its own, or an earlier one's
        (a region shared by several collectives lives from the first of them to the last)."""
        return s.cid

    def launch_check(self, s: Any) -> Callable[[tuple[int, int, int]], None] | None:
        """What `s` needs of the grid: a function raising a LaunchError for a grid it can't run on,
        called at every launch in both modes; None (the default) when any grid will do."""
        return None

    def lower(self, s: Any, w: Lowering) -> ShimCall | None:
        raise NotImplementedError

    def lower_after(self, s: Any, program: ir.Program, w: Lowering) -> None:
        """Write the shims that need the whole program, after every statement's own (a chained scan:
        the prefetches of the loads before it). Default: none."""

    def body_start(self, s: Any, program: ir.Program) -> BodyStart | None:
        """What the body does before its statements for `s` (a chained scan: prefetches and its
        ticket, see `BodyStart`); None, the default, for nothing."""
        return None

    def descending_programs(self, s: Any) -> bool:
        """Whether the interpreter runs the programs of a launch from the last program id to the first
        for `s` (a reverse chained scan: each program continues from the fold of those after it, and the
        GPU hands out their ids in that order). Default: no, in program-id order."""
        return False

    def max_default_threads(self, s: Any, largest: int) -> int | None:
        """The most threads per block the default block size gives a program with `s`, whose largest
        tile has `largest` elements (None, the default: no limit of its own)."""
        return None

    def power_of_two_threads(self, s: Any) -> bool:
        """Whether `s` needs a power-of-two block (`cub::BlockMergeSort`): the default block size is then
        rounded up to one, and a pinned one that is not is a TileValueError. Default: no."""
        return False

    def item_value(self, s: Any, w: BodyWriting) -> str:
        """The value of item `i` of the tile `s.out`, for a statement with no collective (a tile
        constructor), as an expression written through `w`."""
        raise NotImplementedError

    # ----- IR rewrites (`rewriting_ops`, run by the compiler's rewrite stage) -----
    def rewrite(self, program: ir.Program, debug: bool, arch: str) -> None:
        """Change `program` in place for the GPU without changing what it computes (the interpreter
        runs the IR as built), typically replacing this op's statements; `debug`: the kernel checks
        `ct.device_assert`; `arch`: the target ("sm_90", "sm_90a": a rewrite may use what only one arch
        has). Default: no rewrite."""


def rewriting_ops() -> list[TileOp]:
    """The registered ops that rewrite the IR (override `TileOp.rewrite`), in registration order
    (`ops/__init__.py`'s imports). Each rewrite keeps the program's meaning on its own, so their
    order may change what gets optimised, never a result."""
    return [
        op for op in dict.fromkeys([*BY_STMT.values(), *BY_PUBLIC.values()]) if type(op).rewrite is not TileOp.rewrite
    ]


#: public function -> the op that builds its calls
BY_PUBLIC: dict[Callable, TileOp] = {}
#: IR statement class -> the op that defines it
BY_STMT: dict[type, TileOp] = {}


def register(op_class: type[TileOp]) -> type[TileOp]:
    """Class decorator: make `op_class` the definition of its public functions and statement,
    once its builder's parameters are checked against each public stub (`check_builder`)."""
    for public in op_class.publics:
        check_builder(op_class, public)
    op = op_class()
    for public in op_class.publics:
        BY_PUBLIC[public] = op
    if op_class.stmt is not None:
        BY_STMT[op_class.stmt] = op
    return op_class


@functools.cache
def _builder_params(op_class: type[TileOp]) -> tuple[inspect.Parameter, ...]:
    """The parameters of `op_class.build` after `self`, the front end and the public function
    (cached: the front end asks at every op call)."""
    return tuple(inspect.signature(op_class.build).parameters.values())[3:]


def _takes_operands(op_class: type[TileOp]) -> bool:
    """Whether the builder takes its arguments in order, as `*operands` (and nothing else): the
    element-wise functions, whose parameters are named as in NumPy (`where(cond, a, b)`)."""
    params = _builder_params(op_class)
    return len(params) == 1 and params[0].kind is inspect.Parameter.VAR_POSITIONAL


def check_builder(op_class: type[TileOp], public: Callable) -> None:
    """Raise TypeError unless `op_class.build` can take every call of `public` by name: the stub's
    parameters, in its order, among the builder's (each `*args` at the same place), and every other
    parameter of the builder with a default (an op of several publics: `tile.sum` has no `op`). A
    builder whose only parameter is variadic (`*operands`) takes a stub's positional parameters in order."""
    stub = list(inspect.signature(public).parameters.values())
    where = f"{op_class.__name__}.build and {public.__module__}.{public.__name__}{inspect.signature(public)}"
    if _takes_operands(op_class):
        if any(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in stub):
            raise TypeError(f"{where}: a builder of *operands takes positional parameters only")
        return
    params = _builder_params(op_class)
    names = [p.name for p in params]
    missing = [p.name for p in stub if p.name not in names]
    if missing:
        raise TypeError(f"{where}: the builder has no parameter {', '.join(missing)}")
    if [n for n in names if n in {p.name for p in stub}] != [p.name for p in stub]:
        raise TypeError(f"{where}: the builder's parameters are not in the stub's order ({', '.join(names)})")
    for p in stub:
        if (p.kind is p.VAR_POSITIONAL) != (params[names.index(p.name)].kind is p.VAR_POSITIONAL):
            raise TypeError(f"{where}: *{p.name} must be variadic in both")
    extra = [p.name for p in params if p.name not in {q.name for q in stub} and p.default is p.empty]
    if extra:
        raise TypeError(f"{where}: the builder's {', '.join(extra)} not in the stub need a default")


def build_call(op: TileOp, b: Building, public: Callable, bound: inspect.BoundArguments) -> Any:
    """`op.build` for a call of `public` already bound to its stub (defaults applied): by name, or in
    order for a builder with a variadic parameter (`*operands`, `ct.static_print`'s `*values`)."""
    params = _builder_params(type(op))
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return op.build(b, public, *bound.args, **bound.kwargs)
    return op.build(b, public, **bound.arguments)


def op_of(s: ir.Stmt) -> TileOp | None:
    return BY_STMT.get(type(s))


def element_op(name: str) -> ElementOp:
    """The element-wise op `name` (`ops/elementwise.py`), for the stages, which import only this module."""
    return ELEMENTWISE[name]


def descending(program: ir.Program) -> bool:
    """Whether the interpreter runs `program`'s launches from the last program id to the first
    (`TileOp.descending_programs`)."""
    return any((op := op_of(s)) is not None and op.descending_programs(s) for s in program.walk())


def launch_checks(program: ir.Program) -> list[Callable[[tuple[int, int, int]], None]]:
    """The grid checks `program`'s statements need at every launch (`TileOp.launch_check`)."""
    return [check for s in program.walk() if (op := op_of(s)) is not None and (check := op.launch_check(s))]


# ----- `valid=`: how many leading elements of a tile an op takes (shared by every op with one) -----
def valid_value(b: Any, v: Any) -> ir.Value | None:
    """The front end's `valid` argument as an int64 scalar, or None when left out."""
    v = b.optional(v)
    return None if v is None else b.convert(b.scalar(v, "valid", "iu"), np.dtype(np.int64))


def valid_count(frame: Any, valid: ir.Value | None, size: int) -> int:
    """The interpreter's count of valid elements: `valid` clamped to [0, size]."""
    return size if valid is None else int(np.clip(int(frame.get(valid)), 0, size))


def valid_arg(valid: ir.Value | None, size: int) -> ValueArg:
    """The `valid` shim argument (`size` when left out); the shim clamps it (`ShimWriter.clamp_valid`)."""
    from ..lang.types import INT64

    return ValueArg(valid if valid is not None else ir.Lit(size, INT64), "valid")


# ----- `mask=`: which elements of a tile an op takes (shared by every op with one) -----------------
def mask_value(b: Any, v: Any, shape: tuple[int, ...]) -> ir.Var | None:
    """The front end's `mask` argument: None when left out, else a bool tile broadcast to `shape` (that of the
    tile whose elements it selects: loaded, stored, gathered, scattered or added)."""
    v = b.optional(v)
    if v is None:
        return None
    mask = b.tile(v, "the mask")
    if mask.type.dtype != np.bool_:
        raise TileTypeError(f"the mask must be a bool tile (a comparison), got {mask.type}")
    if broadcast_shape(mask.type.shape, shape) != shape:
        raise TileTypeError(f"the mask of shape {mask.type.shape} does not broadcast to the tile's shape {shape}")
    return b.broadcast(mask, shape)


def mask_array(frame: Any, mask: ir.Var | None, size: int) -> np.ndarray:
    """The interpreter's mask: which of `size` elements are selected, element by element in row-major
    order (all when there is no mask)."""
    return np.ones(size, bool) if mask is None else np.asarray(frame.get(mask), bool).ravel()


def mask_arg(mask: ir.Var | None) -> tuple[TileArg, ...]:
    """The mask as a shim argument (`bool* mask_items`), none without a mask."""
    return () if mask is None else (TileArg(mask, "mask_items"),)


def mask_ref(w: Any, mask: ir.Var | None, items: int) -> str:
    """The shim's reference `mask` to this thread's `items` items of the mask (nothing without one)."""
    return "" if mask is None else w.items_ref("mask", "mask_items", mask, items)


def mask_test(mask: ir.Var | None) -> str:
    """` && mask[i]`: the shim's test of item `i`'s mask, empty without a mask."""
    return "" if mask is None else " && mask[i]"


def seq(values: Any) -> tuple:
    """A value or tuple of values as a tuple."""
    return values if isinstance(values, tuple) else (values,)


def errstate() -> Any:
    return np.errstate(all="ignore")


# ----- axes of 2-D tiles (shared by every op with `axis=`) -----------------------------------------
def tile_axis(b: Any, axis: Any, t: ir.Var, what: str) -> int:
    """`axis=` of `what` on tile `t` as an axis in [0, ndim) (negative counts from the end)."""
    k = b.constant(axis, f"the axis of {what}", int)
    ndim = t.type.ndim
    if not -ndim <= k < ndim:
        raise TileValueError(f"axis {k} is out of range for {what} of a tile of shape {t.type.shape}")
    return k % ndim


def one_d(t: ir.Var, what: str) -> ir.Var:
    """`t`, or a TileTypeError if it is not 1-D: `what` (an op of 1-D tiles only) names itself."""
    if t.type.ndim != 1:
        raise TileTypeError(
            f"{what} takes a 1-D tile, got a tile of shape {t.type.shape}; "
            f"reshape it first (tile.reshape(t, {t.type.size}))"
        )
    return t
