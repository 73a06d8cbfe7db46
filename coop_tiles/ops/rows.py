"""What the axis ops of 2-D tiles share (reductions, scans and argmax along an axis): their per-row
operands (`initial` seeds), and how each lowers over the planner's row layouts."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import TileTypeError
from ..lang import ir
from ..lang.values import Const, is_tile


def seeds(b: Any, value: Any, dtypes: tuple[np.dtype, ...], length: int, what: str) -> tuple[ir.Value, ...]:
    """`initial` of an axis scan: per item dtype a block-uniform scalar, or a tile of one seed per row
    (`length` of them: a 1-D tile, or a keepdims-shaped one), converted to the dtype."""
    if isinstance(value, Const) and isinstance(value.value, tuple):
        value = tuple(Const(v) for v in value.value)
    values = value if isinstance(value, tuple) else (value,)
    if len(values) != len(dtypes):
        raise TileTypeError(f"{what} must have {len(dtypes)} value{'s' if len(dtypes) > 1 else ''}, one per tile")
    out = []
    for v, dt in zip(values, dtypes):
        if not is_tile(v):
            out.append(b.convert(b.scalar(v, what), dt))
            continue
        if v.type.size != length or max(v.type.shape) != length:
            raise TileTypeError(
                f"{what} must be a scalar or a tile of {length} seeds (one per row scanned), got {v.type}"
            )
        if v.type.shape != (length,):
            v = b.remap(v, ir.RESHAPE, (length,))
        out.append(b.convert(v, dt))
    return tuple(out)
