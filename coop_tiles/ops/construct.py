"""Tile constructors: `tile.full`, `tile.zeros`, `tile.arange` (no communication, no shim)."""

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
class TileFull(ir.Stmt):
    out: ir.Var
    value: ir.Value


@dataclass
class TileArange(ir.Stmt):
    out: ir.Var


@register
class Full(TileOp):
    publics = (tile.full, tile.zeros)
    stmt = TileFull
    options = (Option("dtype", (np.int32, np.float64, np.float16)),)

    def build(self, b, a, public):
        dt = as_dtype(b.constant(a["dtype"], "the dtype"))
        out = b.temp(TileType(dt, b.tile_size(a["size"])))
        value = a["value"] if public is tile.full else Const(0)
        b.emit(TileFull(out, b.convert(b.scalar(value, "the fill value"), dt)))
        return out

    def interpret(self, s: TileFull, frame) -> None:
        frame.env[s.out.name] = np.full(s.out.type.size, frame.get(s.value), dtype=s.out.type.dtype)


@register
class Arange(TileOp):
    publics = (tile.arange,)
    stmt = TileArange
    options = (Option("dtype", (np.int32, np.int64, np.float32)),)

    def build(self, b, a, public):
        dt = as_dtype(b.constant(a["dtype"], "the dtype"))
        out = b.temp(TileType(dt, b.tile_size(a["size"])))
        b.emit(TileArange(out))
        return out

    def interpret(self, s: TileArange, frame) -> None:
        frame.env[s.out.name] = np.arange(s.out.type.size).astype(s.out.type.dtype)
