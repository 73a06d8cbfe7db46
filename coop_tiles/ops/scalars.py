"""Scalar and element-wise functions of `ct`: `ct.program_id`, `ct.num_programs`, `ct.cdiv`,
and the element-wise math (`ct.exp`, `ct.where`, ...), which emit generic IR statements."""

from __future__ import annotations

from ..errors import TileValueError
from ..lang import builtins as ct
from ..lang import ir
from ..lang.types import WEAK_INT
from .base import TileOp, register


@register
class ProgramId(TileOp):
    publics = (ct.program_id, ct.num_programs)

    def build(self, b, public, axis):
        axis = b.constant(axis, "the grid axis", int)
        if axis not in (0, 1, 2):
            raise TileValueError(f"grid axis must be 0, 1 or 2, got {axis}")
        out = b.temp(WEAK_INT)
        b.emit(ir.ProgramId(out, axis, public is ct.num_programs))
        return out


@register
class Cdiv(TileOp):
    publics = (ct.cdiv,)

    def build(self, front, public, /, a, b):
        neg = front.apply("neg", (a,))
        return front.apply("neg", (front.apply("floordiv", (neg, b)),))


@register
class Elementwise(TileOp):
    publics = tuple(ct.ELEMENTWISE_FUNCTIONS.values())

    def build(self, b, public, *operands):
        return b.apply(public.__name__, operands)
