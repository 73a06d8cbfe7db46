"""What each tile op declares about its options, so that one test matrix tries them all.

An op lists its public functions' options (`TileOp.options`): each parameter and a few values of
it (`Option.samples`, the default first), and the combinations the contract forbids
(`TileOp.forbids`) with the error `build` raises for them. `combinations(op, public)` is every
combination of the samples of the options `public` takes; `tests/option_matrix.py` builds a
program for each, runs it in the interpreter against NumPy, compiles it, and checks that each
forbidden one raises its error at the call's line in both modes. A new option, or a new value,
joins the matrix by being declared here, beside the op.

Samples are constants (`True`, `"sort"`, `np.int64`) or one of the `Sample` markers below, which
the matrix makes into something that is not a constant: a tile, a runtime scalar, a combine function.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import TileError


@dataclass(frozen=True)
class Sample:
    """A sample that the matrix makes for each call, fit for the call's other arguments."""

    name: str
    meaning: str

    def __repr__(self) -> str:
        return self.name


TILE = Sample("tile", "a tile of the operand's dtype")
TUPLE = Sample("tuple", "a tuple of two tiles")
COMBINE = Sample("combine", "a @ct.combine function fit for the call (operator or comparison)")
SCALAR = Sample("scalar", "a block-uniform runtime scalar (one per tile of a tuple)")
COUNT = Sample("count", "a block-uniform count of valid elements, past the tile's end in all programs but the last")


@dataclass(frozen=True)
class Option:
    """A parameter of an op's public function(s) and the values the matrix tries for it.

    `once` lists the samples with which a program may make the call only once (a chained scan)."""

    name: str
    samples: tuple[Any, ...]
    once: tuple[Any, ...] = ()


Choice = Mapping[str, Any]


@dataclass(frozen=True)
class Forbidden:
    """Combinations the contract forbids (`when`), and the located error `build` raises for them:
    its class and its message, given the public function's name and the combination."""

    when: Callable[[Choice], bool]
    error: type[TileError]
    message: Callable[[str, Choice], str]


def combinations(options: tuple[Option, ...], public: Callable) -> list[dict[str, Any]]:
    """Every combination of the samples of the `options` that `public` takes, in declaration order."""
    params = inspect.signature(public).parameters
    options = [o for o in options if o.name in params]
    return [dict(zip((o.name for o in options), values)) for values in itertools.product(*(o.samples for o in options))]


def forbidden(forbids: tuple[Forbidden, ...], choice: Choice) -> Forbidden | None:
    """The first of the rules `forbids` that applies to `choice` (an op declares them in the order its
    `build` checks them, so this is the error `build` raises), or None when the contract allows it."""
    return next((rule for rule in forbids if rule.when(choice)), None)
