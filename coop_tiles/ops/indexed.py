"""`tile.gather` and `tile.scatter`: element `i` of a tile read from, or written to, `a[index[i]]`.

An index is one integer tile into a 1-D array or view, or a tuple of them, one per axis of an N-D
array or view, broadcast together (NumPy's rules: `(rows[:, None], cols[None, :])` indexes a block);
the mask and the gathered or scattered tile have the index's size, and the result has the (broadcast)
index's shape with the array's dtype. On the GPU each item is one unsigned comparison
per axis (a negative index wraps past any extent) and one load or store: no shared memory, no
barrier of its own (the planner orders conflicting accesses of one array, `global_access`).
The helpers here (`index_tiles`, `positions`, `address`) are shared with the index-tile atomics
(`ops/atomic.py`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import tile
from ..errors import TileIndexError, TileTypeError
from ..lang import ir
from ..lang.types import ArrayType, TileType, broadcast_shape
from ..lang.values import Const
from .base import (
    ArrayArg,
    ShimCall,
    TileArg,
    TileOp,
    ValueArg,
    mask_arg,
    mask_array,
    mask_ref,
    mask_test,
    mask_value,
    register,
)
from .options import SCALAR, TILE, TUPLE, Option


@dataclass
class TileGather(ir.Collective, defs="out", uses="array index mask other"):
    out: ir.Var
    array: ir.Var
    index: tuple[ir.Var, ...]
    mask: ir.Var | None
    other: ir.Value


@dataclass
class TileScatter(ir.Collective, uses="array index value mask"):
    array: ir.Var
    index: tuple[ir.Var, ...]
    value: ir.Value  # a tile of the index's size, or a scalar written at every index
    mask: ir.Var | None


def index_tiles(b: Any, a: Any, index: Any, what: str) -> tuple[ir.Var, tuple[ir.Var, ...]]:
    """(the array, its index tiles): one integer tile for a 1-D array or view, or a tuple of them,
    one per axis, broadcast to their common shape."""
    array = b.array(a, f"{what}'s first argument")
    tiles = index if isinstance(index, tuple) else (index,)
    if len(tiles) != array.type.ndim:
        if isinstance(index, tuple):
            got = f"a tuple of {len(tiles)} index tiles"
        else:
            got = "one index tile (a tuple of index tiles takes one per axis)"
        raise TileTypeError(f"{what} into a {array.type.ndim}-d array needs {array.type.ndim} index tiles, got {got}")
    tiles = tuple(b.tile(t, "the index") for t in tiles)
    for t in tiles:
        if t.type.dtype.kind not in "iu":
            raise TileTypeError(f"the index of {what} must be an integer tile, got {t.type}; convert it with astype")
    shapes = [t.type.shape for t in tiles]
    shape = broadcast_shape(*shapes)
    if shape is None:
        raise TileTypeError(
            f"the index tiles of {what} have shapes {' and '.join(map(str, shapes))}, which do not broadcast together"
        )
    return array, tuple(b.broadcast(t, shape) for t in tiles)


def value_of(b: Any, v: Any, index: ir.Var | None, dtype: np.dtype, what: str) -> ir.Value:
    """A tile (of `index`'s size, when given), or a scalar (every element gets it), converted to `dtype`."""
    value = b.runtime(v, what)
    if isinstance(value.type, ArrayType):
        raise TileTypeError(f"{what} must be a tile or a scalar, got {value.type}")
    if index is not None and is_tile_value(value) and value.type.size != index.type.size:
        raise TileTypeError(f"{what} has {value.type.size} elements and the index {index.type.size}")
    return b.convert(value, dtype)


def is_tile_value(v: ir.Value) -> bool:
    return isinstance(v.type, TileType)


def positions(
    frame: Any, array: np.ndarray, index: tuple[ir.Var, ...], keep: np.ndarray, what: str | None
) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """(NumPy index arrays of the kept elements inside the array, which elements those are). An
    element is kept where `keep` holds; one outside the array raises `TileIndexError` naming it
    (`what`: the op) or, with `what` None, is dropped. (A uint64 index past int64's range wraps to a
    negative one: outside too.)"""
    given = [np.asarray(frame.get(t)).ravel() for t in index]  # (element by element, whatever the shape)
    idx = [i.astype(np.int64) for i in given]
    inside = np.ones(len(keep), bool)
    for i, n in zip(idx, array.shape):
        inside &= (i >= 0) & (i < n)
    if what is not None and not inside[keep].all():
        e = int(np.flatnonzero(keep & ~inside)[0])
        at = int(given[0][e]) if len(given) == 1 else tuple(int(i[e]) for i in given)
        shape = f"{array.shape[0]} elements" if array.ndim == 1 else f"shape {array.shape}"
        raise TileIndexError(f"{what} reads index {at} (element {e} of the index) of an array of {shape}")
    kept = keep & inside
    return tuple(i[kept] for i in idx), kept


def index_args(index: tuple[ir.Var, ...]) -> tuple[TileArg, ...]:
    """The index tiles as shim arguments (`T* idx0_items`, ...), which `index_refs` names `idx0`, ..."""
    return tuple(TileArg(t, f"idx{k}_items") for k, t in enumerate(index))


def index_refs(w: Any, index: tuple[ir.Var, ...], items: int) -> str:
    return "".join(w.items_ref(f"idx{k}", f"idx{k}_items", t, items) for k, t in enumerate(index))


def address(a: ArrayArg, index: tuple[ir.Var, ...]) -> tuple[str, str, str]:
    """(the shim's reads of item `i`'s indices, its in-bounds test, its element's pointer) for the
    array `a` and the index tiles `idx0`, `idx1`, ...: one unsigned comparison per axis, no division; in 32 bits
    for an index whose values fit in an int32 (the extent clamped to 2**31 once: an index past it is negative)."""
    p, js = a.parts, [f"j{k}" for k in range(len(index))]
    reads = "".join(f"    const long long {j} = static_cast<long long>(idx{k}[i]);\n" for k, j in enumerate(js))
    tests = []
    for k, (t, j, n) in enumerate(zip(index, js, p.shapes)):
        dt = t.type.dtype
        if dt.itemsize < 4 or dt == np.int32:
            limit = f"({n} < 0x80000000ll ? static_cast<unsigned>({n}) : 0x80000000u)"
            tests.append(f"static_cast<unsigned>(static_cast<int>(idx{k}[i])) < {limit}")
        else:
            tests.append(f"static_cast<unsigned long long>({j}) < static_cast<unsigned long long>({n})")
    return reads, " && ".join(tests), f"{p.ptr} + ({p.offset(js)})"


def padding_skip(w: Any, tile: ir.Var, items: int) -> str:
    """Skip item `i` when it is padding of the block (the tile's size is not threads x items)."""
    if w.threads * items == tile.type.size:
        return ""
    return f"    if ({w.element_index(tile)} >= {tile.type.size}) continue;\n"


def join_items(ctx: Any, tiles: list[Any]) -> None:
    """One arrangement for the tiles whose items `i` go together (index tiles, mask, value, result)."""
    ctx.join([t for t in tiles if isinstance(t, ir.Var) and isinstance(t.type, TileType)])


@register
class Gather(TileOp):
    publics = (tile.gather,)
    stmt = TileGather
    options = (Option("index", (TILE, TUPLE)), Option("mask", (None, TILE)), Option("other", (0, -7, SCALAR)))

    def build(self, b, public, a, index, *, mask, other):
        array, index = index_tiles(b, a, index, "tile.gather")
        dt = array.type.dtype
        out = b.temp(dataclasses.replace(index[0].type, dtype=dt))  # the index's type, the array's dtype
        other = b.convert(b.scalar(other, "other"), dt)
        b.emit(TileGather(out, array, index, mask_value(b, mask, index[0].type.shape), other))
        return out

    def interpret(self, s: TileGather, frame) -> None:
        array = frame.get(s.array)
        keep = mask_array(frame, s.mask, s.out.type.size)
        at, kept = positions(frame, array, s.index, keep, "tile.gather")
        out = np.full(s.out.type.size, frame.get(s.other), dtype=s.out.type.dtype)
        out[kept] = array[at]
        frame.env[s.out.name] = out.reshape(np.shape(frame.get(s.index[0])))  # the index's shape

    def global_access(self, s: TileGather):
        return s.array, False

    def layout(self, s: TileGather, ctx) -> None:
        join_items(ctx, [s.out, *s.index, s.mask])

    def choose(self, s: TileGather, ctx):
        return ctx.choice(s, "gather", "gather", "DIRECT", storage=False)

    def lower(self, s: TileGather, w) -> ShimCall:
        a = ArrayArg(s.array, "a")
        args = (TileArg(s.out, "out_items"), a, *index_args(s.index), *mask_arg(s.mask))
        call = ShimCall(f"coop_gather_{s.cid}", (*args, ValueArg(s.other, "other")))
        items = w.layout(s.out).items_per_thread
        reads, inside, where = address(a, s.index)
        body = (
            w.items_ref("out", "out_items", s.out, items) + index_refs(w, s.index, items) + mask_ref(w, s.mask, items)
        )
        body += (
            f"  for (int i = 0; i < {items}; ++i) {{\n{padding_skip(w, s.out, items)}{reads}"
            f"    out[i] = ({inside}{mask_test(s.mask)}) ? *({where}) : other;\n  }}\n"
        )
        w.define(call, "", body)
        return call


@register
class Scatter(TileOp):
    publics = (tile.scatter,)
    stmt = TileScatter
    options = (Option("index", (TILE, TUPLE)), Option("t", (TILE, SCALAR)), Option("mask", (None, TILE)))

    def build(self, b, public, a, index, t, *, mask):
        array, index = index_tiles(b, a, index, "tile.scatter")
        value = value_of(b, t, index[0], array.type.dtype, "the scattered value")
        b.emit(TileScatter(array, index, value, mask_value(b, mask, index[0].type.shape)))
        return Const(None)

    def interpret(self, s: TileScatter, frame) -> None:
        array = frame.get(s.array)
        keep = mask_array(frame, s.mask, s.index[0].type.size)
        at, kept = positions(frame, array, s.index, keep, None)
        value = frame.get(s.value)
        array[at] = np.ravel(value)[kept] if is_tile_value(s.value) else value

    def global_access(self, s: TileScatter):
        return s.array, True

    def layout(self, s: TileScatter, ctx) -> None:
        join_items(ctx, [*s.index, s.mask, s.value])

    def choose(self, s: TileScatter, ctx):
        return ctx.choice(s, "scatter", "scatter", "DIRECT", storage=False)

    def lower(self, s: TileScatter, w) -> ShimCall:
        value = TileArg(s.value, "x_items") if is_tile_value(s.value) else ValueArg(s.value, "x")
        a = ArrayArg(s.array, "a")
        args = (a, *index_args(s.index), *mask_arg(s.mask), value)
        call = ShimCall(f"coop_scatter_{s.cid}", args)
        items = w.layout(s.index[0]).items_per_thread
        reads, inside, where = address(a, s.index)
        body = index_refs(w, s.index, items) + mask_ref(w, s.mask, items)
        body += w.items_ref("x", "x_items", s.value, items) if is_tile_value(s.value) else ""
        body += (
            f"  for (int i = 0; i < {items}; ++i) {{\n{padding_skip(w, s.index[0], items)}{reads}"
            f"    if ({inside}{mask_test(s.mask)}) *({where}) = {'x[i]' if is_tile_value(s.value) else 'x'};\n  }}\n"
        )
        w.define(call, "", body)
        return call
