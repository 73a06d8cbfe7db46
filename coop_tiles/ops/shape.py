"""Shape operations: `tile.broadcast_to`, `tile.reshape`, `tile.transpose` (`t.T`), `tile.flip`, and the
broadcasts the front end inserts in element-wise operations (`t[:, None]` is a reshape). Each is an
`ir.TileRemap`: out element e is src element f(e), with f given once, by `source_elements`."""

from __future__ import annotations

import functools

import numpy as np

from .. import tile
from ..errors import TileValueError
from ..lang import ir
from ..lang.types import broadcast_shape
from .base import TileOp, register, tile_axis


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
