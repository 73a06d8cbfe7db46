"""`tile.load` and `tile.store`: a tile from/to a 1-D array or view, with a valid count and a mask
(2-D blocks: `ops/memory2d.py`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import tile
from ..dtypes import is_half
from ..errors import TileTypeError, TileValueError
from ..lang import ir
from ..lang.types import TileType
from ..lang.values import Const
from .base import (
    ArrayArg,
    ShimCall,
    TileArg,
    TileOp,
    ValueArg,
    mask_value,
    register,
    valid_arg,
    valid_count,
    valid_value,
)
from .memory2d import build_load_2d, build_store_2d, is_2d, load_masked, offset_value, store_masked
from .options import COUNT, SCALAR, Option
from .transfer import choose_transfer, lower_transfer, prefer_vectorized


@dataclass
class TileLoad(ir.Collective, defs="out", uses="array offset valid other mask"):
    out: ir.Var
    array: ir.Var
    offset: ir.Value
    valid: ir.Value | None
    other: ir.Value
    mask: ir.Var | None = None


@dataclass
class TileStore(ir.Collective, uses="array offset tile valid mask"):
    array: ir.Var
    offset: ir.Value
    tile: ir.Var
    valid: ir.Value | None
    mask: ir.Var | None = None


def one_d_array(b: Any, v: Any, what: str) -> ir.Var:
    array = b.array(v, what)
    if array.type.ndim != 1:
        raise TileTypeError(
            f"{what} must be a 1-D array or view, got a {array.type.ndim}-d array; index it down to one "
            f"axis first (a[i] is the row i of a 2-d array)"
        )
    return array


def touched_span(frame: Any, array: np.ndarray, offset: ir.Value, valid: ir.Value | None, size: int, what: str):
    """(offset, count) of the elements an op touches; TileValueError when they leave the array."""
    start = int(frame.get(offset))
    count = valid_count(frame, valid, size)
    if count and (start < 0 or start + count > array.shape[0]):
        raise TileValueError(
            f"{what} touches elements [{start}, {start + count}) of an array of {array.shape[0]} elements"
        )
    return start, count


@register
class Load(TileOp):
    striped_vectors = True
    publics = (tile.load,)
    stmt = TileLoad
    options = (Option("valid", (None, COUNT)), Option("other", (0, -7, SCALAR)))

    def build(self, b, public, a, offset, size, *, valid, other, mask):
        if is_2d(b, offset, size):
            return build_load_2d(b, a, offset, size, valid, other, mask)
        array = one_d_array(b, a, "tile.load's first argument")
        dt = array.type.dtype
        size = b.tile_size(size)
        other = b.convert(b.scalar(other, "other"), dt)
        out = b.temp(TileType(dt, size))
        mask = mask_value(b, mask, (size,))
        b.emit(TileLoad(out, array, offset_value(b, offset, "the offset"), valid_value(b, valid), other, mask))
        return out

    def interpret(self, s: TileLoad, frame) -> None:
        array = frame.get(s.array)
        size = s.out.type.size
        if s.mask is not None:
            data = load_masked(frame, array, (s.offset,), (s.valid,), s.mask, (size,), frame.get(s.other), "tile.load")
        else:
            start, count = touched_span(frame, array, s.offset, s.valid, size, "tile.load")
            data = np.full(size, frame.get(s.other), dtype=array.dtype)
            data[:count] = array[start : start + count]
        frame.env[s.out.name] = data.astype(s.out.type.dtype, copy=False)  # converted when fused with a cast

    def rewrite(self, program: ir.Program, debug: bool, arch: str) -> None:
        load_converted(program)

    def global_access(self, s: TileLoad):
        return s.array, False

    def layout(self, s: TileLoad, ctx) -> None:
        if s.mask is not None:
            ctx.join([s.out, s.mask])
        prefer_vectorized(ctx, s.out, s.array)

    def replicates(self, s: TileLoad, var: ir.Var) -> bool:
        return True  # (item by item: each thread loads its own items)

    def choose(self, s: TileLoad, ctx):
        return choose_transfer(ctx, s, s.out, s.array, load=True, mask=s.mask)

    def lower(self, s: TileLoad, w) -> ShimCall:
        a = ArrayArg(s.array, "a")
        call = ShimCall(
            f"coop_load_{s.cid}",
            (
                TileArg(s.out, "items"),
                a,
                ValueArg(s.offset, "offset"),
                valid_arg(s.valid, s.out.type.size),
                ValueArg(s.other, "other"),
                *([TileArg(s.mask, "mk")] if s.mask is not None else []),
            ),
        )
        lower_transfer(w, call, s.cid, "load", s.out, a, ", other", s.mask)
        return call


def load_converted(program: ir.Program) -> None:
    """Fuse `tile.load(a, ...).astype(np.float32)` of a 16-bit float array into one load that
    converts each item as it arrives (what the cast would do, without a 16-bit tile in between):
    a load whose tile only that cast, right after it, reads."""
    reads = Counter(v.name for s in program.walk() for v in ir.uses(s))
    defs = Counter(out.name for s in program.walk() for out in ir.defs(s))

    def fusable(load: ir.Stmt, cast: ir.Stmt) -> bool:
        return (
            isinstance(load, TileLoad)
            and is_half(load.out.type.dtype)
            and isinstance(cast, ir.TileMap)
            and cast.op == "cast"
            and cast.args == (load.out,)
            and cast.out.type.dtype == np.float32
            and reads[load.out.name] == 1
            and defs[load.out.name] == 1
        )

    def visit(body: list[ir.Stmt]) -> None:
        i = 0
        while i < len(body):
            for nested in ir.regions(body[i]):
                visit(nested)
            if i + 1 < len(body) and fusable(body[i], body[i + 1]):
                body[i].out = body[i + 1].out
                del body[i + 1]
            i += 1

    visit(program.body)


@register
class Store(TileOp):
    striped_vectors = True
    publics = (tile.store,)
    stmt = TileStore
    options = (Option("valid", (None, COUNT)),)

    def build(self, b, public, a, offset, t, *, valid, mask):
        t = b.tile(t, "the stored value")
        if is_2d(b, offset, Const(t.type.shape if t.type.ndim == 2 else t.type.size)):
            build_store_2d(b, a, offset, t, valid, mask)
            return Const(None)
        array = one_d_array(b, a, "tile.store's first argument")
        t = b.convert(t, array.type.dtype)  # stored in the array's dtype
        mask = mask_value(b, mask, t.type.shape)
        b.emit(TileStore(array, offset_value(b, offset, "the offset"), t, valid_value(b, valid), mask))
        return Const(None)

    def interpret(self, s: TileStore, frame) -> None:
        array = frame.get(s.array)
        if s.mask is not None:
            store_masked(frame, array, (s.offset,), (s.valid,), s.mask, np.asarray(frame.get(s.tile)), "tile.store")
            return
        start, count = touched_span(frame, array, s.offset, s.valid, s.tile.type.size, "tile.store")
        array[start : start + count] = frame.get(s.tile)[:count]

    def global_access(self, s: TileStore):
        return s.array, True

    def layout(self, s: TileStore, ctx) -> None:
        if s.mask is not None:
            ctx.join([s.tile, s.mask])
        prefer_vectorized(ctx, s.tile, s.array)

    def replicates(self, s: TileStore, var: ir.Var) -> bool:
        return True  # (item by item: threads holding one element write the same value)

    def choose(self, s: TileStore, ctx):
        return choose_transfer(ctx, s, s.tile, s.array, load=False, mask=s.mask)

    def lower(self, s: TileStore, w) -> ShimCall:
        a = ArrayArg(s.array, "a")
        call = ShimCall(
            f"coop_store_{s.cid}",
            (
                a,
                ValueArg(s.offset, "offset"),
                valid_arg(s.valid, s.tile.type.size),
                TileArg(s.tile, "items"),
                *([TileArg(s.mask, "mk")] if s.mask is not None else []),
            ),
        )
        lower_transfer(w, call, s.cid, "store", s.tile, a, "", s.mask)
        return call
