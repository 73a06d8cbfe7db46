"""What a user probably meant by a name that does not exist in a tile program: a misspelt op
(`tile.laod`), or a habit from NumPy, PyTorch or Triton (`tile.cumsum`, `np.exp(t)`)."""

from __future__ import annotations

import difflib
import functools

from .. import tile
from . import builtins

#: names NumPy, PyTorch and Triton users reach for, as coop_tiles spells them
HABITS = {
    "cumsum": "tile.scan",
    "cumprod": 'tile.scan(t, op="mul")',
    "associative_scan": "tile.scan(t, op=fn) with a @ct.combine fn",
    "prod": 'tile.reduce(t, op="mul")',
    "amax": "tile.max",
    "amin": "tile.min",
    "absolute": "ct.abs",
    "fabs": "ct.abs",
    "clip": "ct.minimum(ct.maximum(t, low), high)",
    "diff": "tile.adjacent_difference",
    "bincount": "tile.histogram",
    "expm1": "ct.exp(t) - 1",
    "logistic": "ct.sigmoid",
}


@functools.cache
def public_names() -> dict[str, str]:
    """Every name of `tile` and `ct` a program may use, spelt with its namespace ("tile.load")."""
    names = {name: f"ct.{name}" for name in builtins.__all__}
    names.update({name: f"tile.{name}" for name in tile.__all__})
    return names


def replacement(name: str) -> str | None:
    """The coop_tiles spelling of a NumPy, math or Triton function `name` ("exp" -> "ct.exp"), if any."""
    return HABITS.get(name) or public_names().get(name)


def did_you_mean(name: str) -> str:
    """Text to append for a name missing from `tile` or `ct` ("laod"): "; did you mean tile.load?", or ""."""
    found = replacement(name)
    if found is None:
        close = difflib.get_close_matches(name, list(public_names()), n=1, cutoff=0.75)
        found = public_names()[close[0]] if close else None
    return f"; did you mean {found}?" if found else ""


def instead_of(function: object) -> str:
    """Text to append for a NumPy or math function with a coop_tiles counterpart: "; use ct.exp", or ""."""
    module = getattr(function, "__module__", None) or ""
    found = replacement(getattr(function, "__name__", "")) if module.split(".")[0] in ("numpy", "math") else None
    return f"; use {found}" if found else ""


def did_you_mean_among(name: str, candidates: list[str]) -> str:
    """Text to append when `name` looks like a misspelling of one of `candidates`: " (did you mean 'TILE'?)"."""
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""
