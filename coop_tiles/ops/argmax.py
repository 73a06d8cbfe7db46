"""`tile.argmax` and `tile.argmin`: the index of the first extreme element (NumPy's rule, a NaN being
the extreme), built as an in-order reduction of (value, index) pairs with a combine function written
here in the tile language, so that it interprets and lowers as every `tile.reduce` of a combine does."""

from __future__ import annotations

import numpy as np

from .. import tile
from ..dtypes import is_half
from ..lang import ir
from ..lang.builtins import where
from ..lang.combine import combine
from ..lang.types import ScalarType, TileType
from .base import TileOp, register, tile_axis
from .construct import TileArange
from .reduce import TileReduce

INDEX = np.dtype(np.int32)


@combine
def first_max(v_l, i_l, v_r, i_r):
    """The right pair where its value is larger, or is the first NaN; ties keep the left (earlier) one."""
    right = (v_r > v_l) | ((v_r != v_r) & (v_l == v_l))
    return where(right, v_r, v_l), where(right, i_r, i_l)


@combine
def first_min(v_l, i_l, v_r, i_r):
    """`first_max` for the smallest value."""
    right = (v_r < v_l) | ((v_r != v_r) & (v_l == v_l))
    return where(right, v_r, v_l), where(right, i_r, i_l)


@register
class ArgExtreme(TileOp):
    publics = (tile.argmax, tile.argmin)

    def build(self, b, public, t, axis):
        what = f"tile.{public.__name__}"
        t = b.tile(t, f"the operand of {what}")
        if t.type.dtype == np.bool_ or is_half(t.type.dtype):  # compared as numbers, in the same order
            t = b.convert(t, np.dtype(np.uint8) if t.type.dtype == np.bool_ else np.dtype(np.float32))
        axis = b.optional(axis)
        shape = t.type.shape
        k = None if axis is None or len(shape) == 1 else tile_axis(b, axis, t, what)
        if axis is not None and len(shape) == 1:
            tile_axis(b, axis, t, what)
        index = b.temp(TileType(INDEX, shape[k] if k is not None else t.type.size))
        b.emit(TileArange(index))
        if k is None:  # the flat index: an in-order fold of the row-major elements
            t = b.remap(t, ir.RESHAPE, (t.type.size,)) if len(shape) > 1 else t
            outs = (b.temp(ScalarType(t.type.dtype)), b.temp(ScalarType(INDEX)))
        else:
            index = b.remap(index, ir.RESHAPE, (shape[0], 1) if k == 0 else (1, shape[1]))
            index = b.broadcast(index, shape)
            outs = (b.temp(TileType(t.type.dtype, shape[1 - k])), b.temp(TileType(INDEX, shape[1 - k])))
        fn = b.combine(first_max if public is tile.argmax else first_min, (t.type.dtype, INDEX))
        b.emit(TileReduce(outs, (t, index), fn.name, True, k))
        return outs[1]
