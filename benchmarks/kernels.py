"""The tile programs that several sections time (load -> scan -> store, load -> sum: the bandwidth, blocks, 16-bit and
chained sections, and the compile profile), and the tutorials' programs that sections import."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import coop_tiles as ct
from coop_tiles import tile

TILE = 4096
CHECK_TILES = 4  # correctness is checked on the first tiles of each output


@ct.jit
def tile_cumsum(x, y, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, tile.scan(t), valid=n - base)


@ct.jit
def tile_sum(x, partial, n, TILE: ct.constexpr):
    pid = ct.program_id(0)
    base = pid * TILE
    partial[pid] = tile.sum(tile.load(x, base, TILE, valid=n - base, other=0))


TUTORIALS = Path(__file__).resolve().parent.parent / "tutorials"


def tutorial(name: str) -> ModuleType:
    """A tutorial's module (`tutorials/<name>.py`): the benchmarks time what the tutorials show."""
    if str(TUTORIALS) not in sys.path:
        sys.path.insert(2, str(TUTORIALS))
    return importlib.import_module(name)


_PINNED: dict[tuple[Any, int, int | None], Any] = {}


def with_threads(kernel: Any, threads: int | None, registers: int | None = None) -> Any:
    """`kernel`, or one copy of it per thread count (and register cap) with them pinned (so each compiles once), for
    its arch."""
    if threads is None:
        return kernel
    if (kernel, threads, registers) not in _PINNED:
        pinned = ct.jit(kernel.fn, block_threads=threads, max_registers=registers, arch=kernel.arch)
        _PINNED[kernel, threads, registers] = pinned
    return _PINNED[kernel, threads, registers]
