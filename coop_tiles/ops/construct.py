"""Tile constructors: `tile.full`, `tile.zeros`, `tile.arange` (no communication, no shim: the body
writes each item, `TileOp.item_value`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tile
from ..dtypes import as_dtype
from ..lang import ir
from ..lang.types import TileType
from ..lang.values import Const
from .base import TileOp, register
from .options import Option


@dataclass
class TileFull(ir.Stmt, defs="out", uses="value"):
    out: ir.Var
    value: ir.Value


@dataclass
class TileArange(ir.Stmt, defs="out"):
    out: ir.Var


@register
class Full(TileOp):
    striped_vectors = True
    publics = (tile.full, tile.zeros)
    stmt = TileFull
    options = (Option("dtype", (np.int32, np.float64, np.float16)),)

    def build(self, b, public, size, value=None, *, dtype):  # (tile.zeros has no value: 0)
        dt = as_dtype(b.constant(dtype, "the dtype"))
        out = b.temp(TileType(dt, 0, b.tile_shape(size)))
        fill = Const(0) if value is None else value
        b.emit(TileFull(out, b.convert(b.scalar(fill, "the fill value"), dt)))
        return out

    def interpret(self, s: TileFull, frame) -> None:
        frame.env[s.out.name] = np.full(s.out.type.shape, frame.get(s.value), dtype=s.out.type.dtype)

    def replicates(self, s: TileFull, var: ir.Var) -> bool:
        return True  # (each item's value is its own)

    def takes_fragments(self, s: TileFull, var: ir.Var) -> bool:
        return True  # (every item the same value)

    def item_value(self, s: TileFull, w) -> str:
        return w.operand(s.value, False)


@register
class Arange(TileOp):
    striped_vectors = True
    publics = (tile.arange,)
    stmt = TileArange
    options = (Option("dtype", (np.int32, np.int64, np.float32)),)

    def build(self, b, public, size, dtype):
        dt = as_dtype(b.constant(dtype, "the dtype"))
        out = b.temp(TileType(dt, b.tile_size(size)))
        b.emit(TileArange(out))
        return out

    def interpret(self, s: TileArange, frame) -> None:
        frame.env[s.out.name] = np.arange(s.out.type.size).astype(s.out.type.dtype)

    def replicates(self, s: TileArange, var: ir.Var) -> bool:
        return True  # (each item's value is its element index)

    def item_value(self, s: TileArange, w) -> str:
        return w.convert(w.item_index(s.out), np.dtype(np.int64), s.out.type.dtype)
