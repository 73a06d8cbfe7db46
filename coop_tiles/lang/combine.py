"""`@ct.combine`: a user's binary operator for `tile.scan` and `tile.reduce` (`op=fn`)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from ..errors import TileTypeError


class CombineFunction:
    """A combine function: for tiles of k dtypes it takes 2k scalars (the earlier element's k, then
    the later one's) and returns k. It need not be commutative; the earlier element is always
    the left operand. The front end types it per item dtypes and inlines it into the scan."""

    def __init__(self, fn: Callable):
        functools.update_wrapper(self, fn)
        self.fn = fn

    def __call__(self, *args):
        raise TileTypeError(
            f"@ct.combine function {self.fn.__name__} is an operator for tile.scan/tile.reduce (op=...), "
            "not a function to call"
        )

    def __repr__(self) -> str:
        return f"<coop_tiles combine {self.fn.__qualname__}>"


def combine(fn: Callable) -> CombineFunction:
    """Make `fn` a combine function for ``tile.scan(..., op=fn)`` and ``tile.reduce(..., op=fn)``.

    Example (a first-order linear recurrence ``h_t = a_t * h_{t-1} + b_t``)::

        @ct.combine
        def ssm(a_l, b_l, a_r, b_r):
            return a_r * a_l, a_r * b_l + b_r
    """
    return CombineFunction(fn)
