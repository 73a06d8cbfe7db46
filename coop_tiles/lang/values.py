"""The values the front end works with besides typed IR values (`ir.Var`, `ir.Lit`).

Tuples of values are plain Python tuples; everything else known at compile time is a `Const`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ir
from .types import ArrayType, TileType


@dataclass(frozen=True)
class Const:
    """A value known at compile time: a literal, constexpr, global, dtype or function."""

    value: Any


@dataclass(frozen=True)
class Method:
    """A bound method of a tile (`t.astype`)."""

    name: str
    obj: ir.Var


@dataclass(frozen=True)
class Shape:
    """`a.shape` of an array or view: indexed with a constant axis."""

    array: ir.Var


@dataclass(frozen=True)
class Undefined:
    """A variable that is not assigned on every path to here; reading it is an error."""

    name: str
    why: str


def is_tile(v: Any) -> bool:
    return isinstance(v, ir.Var) and isinstance(v.type, TileType)


def is_array(v: Any) -> bool:
    return isinstance(v, ir.Var) and isinstance(v.type, ArrayType)


def describe(v: Any) -> str:
    """How an error message names the kind of `v`."""
    if isinstance(v, (ir.Var, ir.Lit)):
        return str(v.type)
    if isinstance(v, tuple):
        return f"a tuple of {len(v)}"
    if isinstance(v, Const):
        return repr(v.value)
    return type(v).__name__
