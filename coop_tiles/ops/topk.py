"""`tile.topk`: the k largest (or smallest) elements of a 1-D tile or of each row of a 2-D tile, with a payload.

Built on `tile.sort`'s statement (`ops/sort.py`), so that it has one definition and both lowerings (the block
radix sort of 1-D tiles, the row-wise sorts of 2-D ones): a stable radix sort of the keys, descending for the
largest with NaNs made the NaN above +inf (`TileSort.nan_largest`: first, as `torch.topk` counts them), ascending
for the smallest (NaNs last), then the first k columns (`ir.HEAD`, a remap: in registers or through shared
memory). `axis=0` of a 2-D tile is the same between transposes.

`tile.sort_key` exposes the keys that sort compares (`ops/sortkeys.py`: NumPy for the interpreter, C++ for the
shim), so that a top-k over rows longer than a tile can select by radix digits (tutorials/14_topk_sampling.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tile
from ..dtypes import bool_, cxx_name
from ..errors import TileTypeError, TileValueError
from ..lang import ir
from ..lang.types import TileType
from .base import ShimCall, TileArg, TileOp, register, tile_axis
from .options import COUNT, TILE, Option
from .sort import TileSort, sort_valid
from .sortkeys import order_bits, ordered_code

BOOL_KEYS = "{} of a bool tile is not supported; convert it with t.astype(np.uint8)"


@register
class TopK(TileOp):
    publics = (tile.topk,)
    options = (
        Option("values", (None, TILE)),
        Option("largest", (True, False)),
        Option("valid", (None, COUNT)),
    )

    def build(self, b, public, t, k, values, *, largest, axis, valid):
        t = b.tile(t, "the operand of tile.topk")
        if t.type.dtype == bool_:
            raise TileTypeError(BOOL_KEYS.format("tile.topk"))
        values = b.optional(values)
        if values is not None:
            if isinstance(values, tuple):
                raise TileTypeError(
                    "tile.topk carries one payload tile; to carry several, select their indices "
                    "(values=tile.arange(n)) and gather each"
                )
            values = b.tile(values, "the payload (values)")
            if values.type.shape != t.type.shape:
                raise TileTypeError(f"the payload has shape {values.type.shape} and the keys {t.type.shape}")
        largest = b.constant(largest, "largest", bool)
        along = tile_axis(b, axis, t, "tile.topk")
        n = t.type.shape[along]
        k = b.constant(k, "k", int)
        if not 1 <= k <= n:
            raise TileValueError(f"k must be a compile-time int between 1 and {n} (the length of the axis), got {k}")
        columns = along == 0 and t.type.ndim == 2
        if columns:  # the columns as rows, and the result back
            t = b.remap(t, ir.TRANSPOSE, t.type.shape[::-1])
            values = b.remap(values, ir.TRANSPOSE, values.type.shape[::-1]) if values is not None else None
        valid = sort_valid(b, valid, t.type.shape)
        keys = b.temp(t.type)
        payload = b.temp(values.type) if values is not None else None
        bits = t.type.dtype.itemsize * 8
        b.emit(TileSort((keys,), payload, (t,), values, valid, largest, 0, bits, None, nan_largest=True))
        outs = [keys] + ([payload] if payload is not None else [])
        shape = (*t.type.shape[:-1], k)
        if k < n:
            outs = [b.remap(v, ir.HEAD, shape) for v in outs]
        if columns:
            outs = [b.remap(v, ir.TRANSPOSE, shape[::-1]) for v in outs]
        return tuple(outs) if values is not None else outs[0]


@dataclass
class TileSortKey(ir.Collective, defs="out", uses="src"):
    out: ir.Var
    src: ir.Var


@register
class SortKey(TileOp):
    publics = (tile.sort_key,)
    stmt = TileSortKey
    striped_vectors = True  # (each item on its own)

    def build(self, b, public, t):
        src = b.tile(t, "tile.sort_key's argument")
        if src.type.dtype == bool_:
            raise TileTypeError(BOOL_KEYS.format("tile.sort_key"))
        out = b.temp(TileType(np.dtype(f"uint{src.type.dtype.itemsize * 8}"), *src.type.shape))
        b.emit(TileSortKey(out, src))
        return out

    def interpret(self, s: TileSortKey, frame) -> None:
        x = np.asarray(frame.get(s.src))
        frame.env[s.out.name] = order_bits(x.reshape(-1), False).astype(s.out.type.dtype).reshape(x.shape)

    def layout(self, s: TileSortKey, ctx) -> None:
        ctx.join([s.src, s.out])

    def choose(self, s: TileSortKey, ctx):
        return ctx.choice(s, "sort_key, each thread's own items", "registers", "ordered bits", storage=False)

    def lower(self, s: TileSortKey, w) -> ShimCall:
        call = ShimCall(f"coop_sort_key_{s.cid}", (TileArg(s.src, "in0"), TileArg(s.out, "out0")))
        items = w.layout(s.src).items_per_thread
        body = w.items_ref("x", "in0", s.src, items) + w.items_ref("y", "out0", s.out, items)
        body += f"  for (int i = 0; i < {items}; ++i) {{\n"
        body += ordered_code(s.src.type.dtype, False, "x[i]")
        body += f"    y[i] = {cxx_name(s.out.type.dtype)}(r);\n  }}\n"
        w.define(call, "", body)
        return call
