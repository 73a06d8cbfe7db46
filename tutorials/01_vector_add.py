"""Tutorial 01: vector addition, the smallest tile program.

One program instance (a thread block) adds one tile of TILE elements. The last tile is
partial: `valid=n - base` masks the elements past the end, which are never read or written.
Tile sizes are compile-time constants (`ct.constexpr`) and need not be powers of two.

    python tutorials/01_vector_add.py
"""

import numpy as np
from _runner import kernel, to_device, to_host, where

import coop_tiles as ct
from coop_tiles import tile


@ct.jit
def vector_add(x, y, out, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    a = tile.load(x, base, TILE, valid=n - base)
    b = tile.load(y, base, TILE, valid=n - base)
    tile.store(out, base, a + b, valid=n - base)


def main() -> None:
    n, tile_size = 100_000, 1000
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    xd, yd, outd = to_device(x, y, np.zeros(n, np.float32))
    kernel(vector_add)[ct.cdiv(n, tile_size)](xd, yd, outd, n, TILE=tile_size)
    np.testing.assert_allclose(to_host(outd), x + y)
    print(f"vector_add of {n} float32 ran {where()}: matches NumPy")
    # What the planner chose: element-wise only, so tiles are striped and go straight to
    # global memory (no shared memory, no barriers).
    print(vector_add.compile(x, y, x, n, TILE=tile_size, arch="sm_90").plan)


if __name__ == "__main__":
    main()
