"""`tile.atomic_add`: element-wise global atomic add of a tile into a 1-D array or view."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tile
from ..errors import TileTypeError
from ..lang import ir
from ..lang.values import Const
from .base import ArrayArg, ShimCall, TileArg, TileOp, ValueArg, one_d, register, valid_arg, valid_value
from .memory import offset_value, one_d_array, touched_span
from .options import COUNT, Option

#: array dtype -> the type CUDA's atomicAdd takes it as
ATOMIC_TYPES = {
    np.dtype(np.int32): "int",
    np.dtype(np.uint32): "unsigned int",
    np.dtype(np.int64): "unsigned long long",  # two's complement: the same bits as a signed add
    np.dtype(np.uint64): "unsigned long long",
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
}


@dataclass
class TileAtomicAdd(ir.Collective, uses="array offset tile valid"):
    array: ir.Var
    offset: ir.Value
    tile: ir.Var
    valid: ir.Value | None


@register
class AtomicAdd(TileOp):
    publics = (tile.atomic_add,)
    stmt = TileAtomicAdd
    options = (Option("valid", (None, COUNT)),)

    def build(self, b, public, a, offset, t, *, valid):
        array = one_d_array(b, a, "tile.atomic_add's first argument")
        dt = array.type.dtype
        if dt not in ATOMIC_TYPES:
            names = ", ".join(d.name for d in ATOMIC_TYPES)
            raise TileTypeError(f"tile.atomic_add into an array of {dt.name} is not supported; use one of {names}")
        t = b.convert(one_d(b.tile(t, "the added value"), "tile.atomic_add"), dt)
        b.emit(TileAtomicAdd(array, offset_value(b, offset, "the offset"), t, valid_value(b, valid)))
        return Const(None)

    def interpret(self, s: TileAtomicAdd, frame) -> None:
        array = frame.get(s.array)
        start, count = touched_span(frame, array, s.offset, s.valid, s.tile.type.size, "tile.atomic_add")
        with np.errstate(all="ignore"):
            array[start : start + count] += frame.get(s.tile)[:count]

    def global_access(self, s: TileAtomicAdd):
        return s.array, True

    def choose(self, s: TileAtomicAdd, ctx):
        return ctx.choice(s, "atomic_add", "atomicAdd", "DIRECT", storage=False)

    def lower(self, s: TileAtomicAdd, w) -> ShimCall:
        size = s.tile.type.size
        call = ShimCall(
            f"coop_atomic_add_{s.cid}",
            (
                ArrayArg(s.array, "a"),
                ValueArg(s.offset, "offset"),
                valid_arg(s.valid, size),
                TileArg(s.tile, "items"),
            ),
        )
        lay = w.layout(s.tile)
        t = ATOMIC_TYPES[s.array.type.dtype]
        stride = "" if s.array.type.unit_stride else " * a_stride"
        body = w.items_ref("x", "items", s.tile, lay.items_per_thread) + w.clamp(size)
        body += (
            f"  for (int i = 0; i < {lay.items_per_thread}; ++i) {{\n"
            f"    const long long e = {w.element_index(s.tile)};\n"
            f"    if (e < v) atomicAdd(reinterpret_cast<{t}*>(a + a_off + (offset + e){stride}), ({t})x[i]);\n"
            "  }\n"
        )
        w.define(call, "", body)
        return call
