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
  the generated body makes (codegen renders the call; no op writes body code itself).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..lang import ir
from .options import Forbidden, Option

if TYPE_CHECKING:
    from ..codegen.shims import ShimWriter
    from ..lang.frontend import Builder
    from ..lang.interpreter import Frame
    from ..planner.layout import CollectiveChoice, LayoutContext


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
    """A 1-D array or view: `T* name, long long name_off, long long name_len` and, unless the
    view has unit stride, `long long name_stride` (all in elements)."""

    var: ir.Var
    name: str


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
class ShimCall:
    """One call from the body to shim `name`; its result, if any, goes to `ret`. Every shim also
    receives the TempStorage buffer and its byte offset (`smem`, `soff`)."""

    name: str
    args: tuple[TileArg | ValueArg | ArrayArg | OutArg | StateArg, ...]
    ret: ir.Var | None = None


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

    def build(self, b: Builder, args: dict[str, Any], public: Callable) -> Any:
        raise NotImplementedError

    def interpret(self, s: Any, frame: Frame) -> None:
        raise NotImplementedError

    def layout(self, s: Any, ctx: LayoutContext) -> None:
        """Join or constrain tile layouts (default: none)."""

    def thread0_reads(self, s: Any, threads: int) -> set[str]:
        """Names of the variables the shim reads in thread 0 only, at `threads` per block (default: none)."""
        return set()

    def global_access(self, s: Any) -> tuple[ir.Var, bool] | None:
        """(the array, whether it writes) when the op touches global memory: the planner puts
        barriers between threads' conflicting accesses."""
        return None

    def choose(self, s: Any, ctx: LayoutContext) -> CollectiveChoice | None:
        return None

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

    def lower(self, s: Any, w: ShimWriter) -> ShimCall | None:
        raise NotImplementedError


#: public function -> the op that builds its calls
BY_PUBLIC: dict[Callable, TileOp] = {}
#: IR statement class -> the op that defines it
BY_STMT: dict[type, TileOp] = {}


def register(op_class: type[TileOp]) -> type[TileOp]:
    """Class decorator: make `op_class` the definition of its public functions and statement."""
    op = op_class()
    for public in op_class.publics:
        BY_PUBLIC[public] = op
    if op_class.stmt is not None:
        BY_STMT[op_class.stmt] = op
    return op_class


def op_of(s: ir.Stmt) -> TileOp | None:
    return BY_STMT.get(type(s))


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


def seq(values: Any) -> tuple:
    """A value or tuple of values as a tuple."""
    return values if isinstance(values, tuple) else (values,)


def errstate() -> Any:
    return np.errstate(all="ignore")
