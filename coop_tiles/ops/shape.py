"""Shape operations: `tile.broadcast_to`, `tile.reshape`, `tile.transpose` (`t.T`), `tile.flip`, the
broadcasts the front end inserts in element-wise operations (`t[:, None]` is a reshape), and the first columns
of a sorted tile that `tile.topk` keeps (`ir.HEAD`). Each is an
`ir.TileRemap`: out element e is src element f(e), with f given once, by `source_elements`.

On the GPU a remap is a copy in registers when every thread holds the sources of its own result items
(`register_table`, computed from the two layouts at plan time: a row maximum broadcast along its rows, a
vector with an axis of 1 added), else an exchange through shared memory: each thread writes its items at
their element index, a barrier, each reads its result items' sources."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .. import tile
from ..dtypes import cxx_name
from ..errors import TileValueError
from ..lang import ir
from ..lang.types import broadcast_shape
from ..planner.layout import PER_COL, PER_ROW, SYNCS
from .base import ShimCall, TileArg, TileOp, register, tile_axis


@functools.lru_cache(maxsize=1024)
def source_elements(kind: str, axis: int | None, src_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> np.ndarray:
    """For each element of the result (row-major), the index of the source element it holds: the one
    definition of a remap's meaning (the interpreter moves data by it, the planner plans by it)."""
    index = np.arange(int(np.prod(src_shape))).reshape(src_shape)
    if kind == ir.BROADCAST:
        moved = np.broadcast_to(index, out_shape)
    elif kind == ir.RESHAPE:
        moved = index.reshape(out_shape)
    elif kind == ir.TRANSPOSE:
        moved = index.T
    elif kind == ir.HEAD:
        moved = index[..., : out_shape[-1]]
    else:
        moved = np.flip(index, axis)
    out = np.ascontiguousarray(moved).reshape(-1)
    out.setflags(write=False)
    return out


@register
class Remap(TileOp):
    publics = (tile.broadcast_to, tile.reshape, tile.transpose, tile.flip)
    stmt = ir.TileRemap

    def build(self, b, public, t, shape=None, axis=-1):  # (transpose and flip have no shape, only flip an axis)
        t = b.tile(t, f"the operand of tile.{public.__name__}")
        if public is tile.transpose:
            return t if t.type.ndim == 1 else b.remap(t, ir.TRANSPOSE, t.type.shape[::-1])
        if public is tile.flip:
            return b.remap(t, ir.FLIP, t.type.shape, tile_axis(b, axis, t, "tile.flip"))
        target = b.tile_shape(shape, "shape")
        if public is tile.reshape:
            if int(np.prod(target)) != t.type.size:
                raise TileValueError(
                    f"tile.reshape of a tile of shape {t.type.shape} ({t.type.size} elements) to the shape "
                    f"{target} ({int(np.prod(target))} elements): the sizes differ"
                )
            return t if target == t.type.shape else b.remap(t, ir.RESHAPE, target)
        if broadcast_shape(t.type.shape, target) != target:
            raise TileValueError(f"tile.broadcast_to: a tile of shape {t.type.shape} does not broadcast to {target}")
        return b.broadcast(t, target)

    def interpret(self, s: ir.TileRemap, frame) -> None:
        src = np.asarray(frame.get(s.src)).reshape(-1)
        index = source_elements(s.kind, s.axis, s.src.type.shape, s.out.type.shape)
        frame.env[s.out.name] = src[index].reshape(s.out.type.shape)

    def layout(self, s: ir.TileRemap, ctx) -> None:
        src, out = s.src.type.shape, s.out.type.shape
        if s.kind == ir.RESHAPE and max(src) == s.src.type.size and max(out) == s.out.type.size:
            ctx.join([s.src, s.out])  # a vector with an axis of 1 added or removed: the same elements in order
        elif s.kind == ir.BROADCAST and len(out) == 2 and min(out) > 1:
            if src == (out[0], 1):
                ctx.claim(s.src, s.out, PER_ROW)
            elif src[-1] == out[1] and s.src.type.size == out[1]:
                ctx.claim(s.src, s.out, PER_COL)

    def replicates(self, s: ir.TileRemap, var: ir.Var) -> bool:
        return True  # (an exchange may write one element from several threads: the same value)

    def choose(self, s: ir.TileRemap, ctx):
        table = register_table(ctx.tiles[s.src.name], ctx.tiles[s.out.name], s, ctx.threads)
        if table is not None:
            return ctx.choice(s, f"{s.kind}, each thread's own items", "registers", "copy", storage=False)
        return ctx.choice(s, f"{s.kind} through shared memory", "exchange", "STORE_SYNC_LOAD", sync=SYNCS)

    def lower(self, s: ir.TileRemap, w) -> ShimCall:
        call = ShimCall(f"coop_remap_{s.cid}", (TileArg(s.src, "in0"), TileArg(s.out, "out0")))
        src, out = w.layout(s.src), w.layout(s.out)
        body = w.items_ref("x", "in0", s.src, src.items_per_thread) + w.items_ref(
            "o", "out0", s.out, out.items_per_thread
        )
        if w.choice(s.cid).primitive == "registers":
            table = register_table(src, out, s, w.threads)
            body += "".join(f"  o[{i}] = x[{k}];\n" for i, k in enumerate(table) if k is not None)
            w.define(call, "", body)
            return call
        t = cxx_name(s.src.type.dtype)
        code = f"struct coop_remap_{s.cid}_t {{ using TempStorage = {t}[{s.src.type.size}]; }};\n"
        code += w.storage(s.cid, f"coop_remap_{s.cid}_t")
        body = w.storage_ref(s.cid) + body
        body += (
            f"  for (int i = 0; i < {src.items_per_thread}; ++i) {{ const int e = {w.element_index(s.src)}; "
            f"if (e < {s.src.type.size}) s.temp[e] = x[i]; }}\n"
            "  __syncthreads();\n"
            f"  for (int i = 0; i < {out.items_per_thread}; ++i) {{ const int e = {w.element_index(s.out)}; "
            f"if (e < {s.out.type.size}) o[i] = s.temp[{source_expr(s, 'e')}]; }}\n"
        )
        w.define(call, code, body)
        return call


def register_table(src: Any, out: Any, s: ir.TileRemap, threads: int) -> tuple[int | None, ...] | None:
    """For each item of the result, the item of the source that holds its element in the same thread, the
    same for every thread (so the remap is a copy in registers); None when some thread's elements come from
    other threads. Computed from the layouts' maps (`TileLayout.element`), thread by thread."""
    index = source_elements(s.kind, s.axis, s.src.type.shape, s.out.type.shape)
    table: list[int | None] = [None] * out.items_per_thread
    for tid in range(threads):
        holds: dict[int, int] = {}
        for k in range(src.items_per_thread):
            e = src.element(tid, k, threads)
            if e is not None:
                holds.setdefault(e, k)
        for i in range(out.items_per_thread):
            e = out.element(tid, i, threads)
            if e is None:
                continue
            k = holds.get(int(index[e]))
            if k is None or table[i] not in (None, k):
                return None
            table[i] = k
    return tuple(table)


def source_expr(s: ir.TileRemap, e: str) -> str:
    """`source_elements` of element `e` as a C++ expression (e >= 0)."""
    src, out = s.src.type.shape, s.out.type.shape
    if s.kind == ir.RESHAPE or (s.kind == ir.HEAD and len(out) == 1):
        return e
    if s.kind == ir.HEAD:
        return f"(({e} / {out[1]}) * {src[1]} + {e} % {out[1]})"
    if len(out) == 1:
        if s.kind == ir.BROADCAST:
            return "0" if s.src.type.size == 1 else e
        return f"({out[0] - 1} - {e})"  # a flip
    m, n = out
    row, col = f"({e} / {n})", f"({e} % {n})"
    if s.kind == ir.BROADCAST:
        a, b = (1, *src) if len(src) == 1 else src
        return f"({'0' if a == 1 else row} * {b} + {'0' if b == 1 else col})"
    if s.kind == ir.TRANSPOSE:  # out (m, n) of src (n, m): out (r, c) is src (c, r)
        return f"({col} * {m} + {row})"
    if s.axis == 0:
        return f"(({m - 1} - {row}) * {n} + {col})"
    return f"({row} * {n} + ({n - 1} - {col}))"
