"""Tutorial 02: cumulative sums, per tile and over a whole array with a carry.

Per tile: `tile.scan` is a block-wide inclusive scan (CUB BlockScan). Whole array: three
small programs, the classic reduce-then-scan:
  1. every program sums its tile (`tile.sum`);
  2. one program scans those tile sums in chunks, carrying the running total across its
     loop with `initial=` and `return_total=True` (CUB's block prefix callback);
  3. every program scans its tile again, seeded with the sum of all tiles before it.

    python tutorials/02_cumsum.py
"""

import numpy as np
from _runner import kernel, to_device, to_host, where

import coop_tiles as ct
from coop_tiles import tile


@ct.jit
def tile_cumsum(x, y, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, tile.scan(t, op="add"), valid=n - base)


@ct.jit
def tile_sums(x, sums, n, TILE: ct.constexpr):
    pid = ct.program_id(0)
    base = pid * TILE
    sums[pid] = tile.sum(tile.load(x, base, TILE, valid=n - base, other=0))


@ct.jit
def exclusive_scan_one_program(sums, offsets, m, CHUNK: ct.constexpr):
    carry = sums[0] * 0  # zero, in the dtype of `sums`
    for base in range(0, m, CHUNK):
        t = tile.load(sums, base, CHUNK, valid=m - base, other=0)
        s, carry = tile.scan(t, exclusive=True, initial=carry, return_total=True)
        tile.store(offsets, base, s, valid=m - base)


@ct.jit
def seeded_cumsum(x, offsets, y, n, TILE: ct.constexpr):
    pid = ct.program_id(0)
    base = pid * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, tile.scan(t, initial=offsets[pid]), valid=n - base)


def whole_array_cumsum(x, y, n: int, tile_size: int = 4096) -> None:
    programs = ct.cdiv(n, tile_size)
    sums, offsets = to_device(np.zeros(programs, x.dtype), np.zeros(programs, x.dtype))
    kernel(tile_sums)[programs](x, sums, n, TILE=tile_size)
    kernel(exclusive_scan_one_program)[1](sums, offsets, programs, CHUNK=1024)
    kernel(seeded_cumsum)[programs](x, offsets, y, n, TILE=tile_size)


def main() -> None:
    n = 1_000_000
    x = np.random.default_rng(0).integers(0, 10, n).astype(np.int64)
    xd, yd = to_device(x, np.zeros(n, np.int64))

    kernel(tile_cumsum)[ct.cdiv(n, 4096)](xd, yd, n, TILE=4096)
    expected = np.concatenate([np.cumsum(x[i : i + 4096]) for i in range(0, n, 4096)])
    np.testing.assert_array_equal(to_host(yd), expected)
    print(f"per-tile cumsum ran {where()}: matches NumPy")

    whole_array_cumsum(xd, yd, n)
    np.testing.assert_array_equal(to_host(yd), np.cumsum(x))
    print(f"whole-array cumsum of {n} int64 ran {where()}: matches numpy.cumsum")


if __name__ == "__main__":
    main()
