"""Public functions of the language are stubs: their signature and docstring are the contract,
and calling them outside a tile program is a clear error."""

from __future__ import annotations

import functools
from collections.abc import Callable

from ..errors import TileTypeError, caller_location

_PUBLIC_PREFIX = {"coop_tiles.tile": "tile"}


def public_name(fn: Callable) -> str:
    """How users spell a public function: `tile.scan`, `ct.device_print`."""
    return f"{_PUBLIC_PREFIX.get(fn.__module__, 'ct')}.{fn.__name__}"


def stub(fn: Callable) -> Callable:
    """Keep `fn`'s signature and docstring; calling it outside a `@ct.jit` program raises, at the
    caller's line (a tile made at import time, as a helper's default argument, shows where)."""

    @functools.wraps(fn)
    def outside(*args, **kwargs):
        raise TileTypeError(
            f"{public_name(fn)}() can only be used inside a @ct.jit tile "
            "program (run it with kernel[grid](...), or interpret=True to run it with NumPy)",
            loc=caller_location(),
        )

    return outside
