"""The NumPy interpreter: runs a tile program's Python function once per program instance.

Tiles are `Tile` objects holding a NumPy array; scalars are Python or NumPy scalars. The
documented ops in `coop_tiles.tile` and `coop_tiles.lang.builtins` implement their
semantics on these values, so the interpreter is the reference the GPU is tested against.
"""

from __future__ import annotations

import contextvars
import itertools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import as_dtype
from ..errors import LaunchError, TileTypeError


@dataclass(frozen=True)
class ProgramState:
    program_id: tuple[int, int, int]
    num_programs: tuple[int, int, int]


_state: contextvars.ContextVar[ProgramState | None] = contextvars.ContextVar("coop_tiles_program", default=None)


def current_program() -> ProgramState:
    state = _state.get()
    if state is None:
        raise TileTypeError(
            "program_id/num_programs can only be called inside a tile program "
            "(run it with kernel[grid](...), or interpret=True to run it with NumPy)"
        )
    return state


class Tile:
    """A tile in the interpreter: a 1-D NumPy array of one supported dtype."""

    __slots__ = ("data",)

    def __init__(self, data: np.ndarray):
        as_dtype(data.dtype)
        self.data = data

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def size(self) -> int:
        return int(self.data.size)

    def astype(self, dtype: Any) -> Tile:
        return Tile(self.data.astype(as_dtype(dtype)))

    def __bool__(self) -> bool:
        raise TileTypeError(
            "a tile was used as a condition; conditions must be block-uniform scalars "
            "(use ct.where for per-element choices, or tile.reduce to get a scalar)"
        )

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"Tile({self.data!r})"

    def __array__(self, dtype=None, copy=None):
        return self.data if dtype is None else self.data.astype(dtype)


def unwrap(x: Any) -> Any:
    return x.data if isinstance(x, Tile) else x


def wrap(result: Any) -> Any:
    """A NumPy result as a Tile (arrays) or a NumPy/Python scalar (0-d results)."""
    if isinstance(result, np.ndarray):
        return Tile(result) if result.ndim else result[()]
    return result


def elementwise(fn: Callable, *args: Any) -> Any:
    """Apply a NumPy function element-wise to tiles and scalars, checking tile sizes agree."""
    sizes = {a.size for a in args if isinstance(a, Tile)}
    if len(sizes) > 1:
        raise TileTypeError(f"tiles of different sizes in one element-wise operation: {sorted(sizes)}")
    with np.errstate(all="ignore"):
        return wrap(fn(*(unwrap(a) for a in args)))


def _binary(fn: Callable, reflected: bool = False) -> Callable:
    if reflected:
        return lambda self, other: elementwise(fn, other, self)
    return lambda self, other: elementwise(fn, self, other)


_BINARY = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
    "and": operator.and_,
    "or": operator.or_,
    "xor": operator.xor,
    "lshift": operator.lshift,
    "rshift": operator.rshift,
}
for _name, _fn in _BINARY.items():
    setattr(Tile, f"__{_name}__", _binary(_fn))
    setattr(Tile, f"__r{_name}__", _binary(_fn, reflected=True))
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    setattr(Tile, f"__{_name}__", _binary(getattr(operator, _name)))
for _name, _fn in {"neg": operator.neg, "pos": operator.pos, "invert": operator.invert, "abs": np.abs}.items():
    setattr(Tile, f"__{_name}__", lambda self, _fn=_fn: elementwise(_fn, self))
Tile.__hash__ = None  # type: ignore[assignment]


class CheckedArray(np.ndarray):
    """An array argument in the interpreter: `x[i]` outside the array raises instead of wrapping
    (compiled kernels mask such accesses; the interpreter reports them)."""

    def _check(self, index: Any) -> None:
        if isinstance(index, (int, np.integer)) and not 0 <= index < self.size:
            from ..errors import TileValueError

            raise TileValueError(f"index {int(index)} is outside an array of {self.size} elements")

    def __getitem__(self, index: Any) -> Any:
        self._check(index)
        return super().__getitem__(index)

    def __setitem__(self, index: Any, value: Any) -> None:
        self._check(index)
        super().__setitem__(index, value)


def _grid3(grid: tuple[int, ...]) -> tuple[int, int, int]:
    return tuple(grid) + (1,) * (3 - len(grid))  # type: ignore[return-value]


def run(fn: Callable, grid: tuple[int, ...], args: tuple, constexprs: dict[str, Any]) -> None:
    """Run `fn` once per program instance of `grid`, in order, on NumPy arrays."""
    for a in args:
        if hasattr(a, "__cuda_array_interface__") and not isinstance(a, np.ndarray):
            raise LaunchError("the interpreter runs on the CPU and takes NumPy arrays, got a device array")
    args = tuple(a.view(CheckedArray) if type(a) is np.ndarray else a for a in args)
    dims = _grid3(grid)
    for pid in itertools.product(*(range(d) for d in reversed(dims))):
        token = _state.set(ProgramState(tuple(reversed(pid)), dims))  # type: ignore[arg-type]
        try:
            fn(*args, **constexprs)
        finally:
            _state.reset(token)
