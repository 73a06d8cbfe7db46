"""Tutorial 03: reductions to block-uniform scalars.

`tile.sum`, `tile.max`, `tile.min` and `tile.reduce(t, op)` fold a tile to a scalar that
every thread of the block holds (CUB BlockReduce plus a broadcast; in a loop, an all-reduce). Scalars can be used in
arithmetic, in conditions, and written to an array element. Here: per-row softmax
statistics (row max and sum of exponentials) and a row normalisation in one program.

    python tutorials/03_reductions.py
"""

import numpy as np
from _runner import kernel, to_device, to_host, where

import coop_tiles as ct
from coop_tiles import tile


@ct.jit
def row_softmax(x, y, stats, n_cols, TILE: ct.constexpr):
    row = ct.program_id(0)
    start = row * n_cols
    t = tile.load(x, start, TILE, valid=n_cols, other=-np.inf)
    m = tile.max(t)
    e = ct.exp(t - m)  # padding is -inf, so exp gives 0 and does not change the sum
    total = tile.sum(e)
    tile.store(y, start, e / total, valid=n_cols)
    stats[2 * row] = m
    stats[2 * row + 1] = total


def main() -> None:
    rows, cols = 64, 1000
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    xd, yd, statsd = to_device(x.reshape(-1), np.zeros(rows * cols, np.float32), np.zeros(2 * rows, np.float32))
    kernel(row_softmax)[rows](xd, yd, statsd, cols, TILE=1024)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(to_host(yd).reshape(rows, cols), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    stats = to_host(statsd).reshape(rows, 2)
    np.testing.assert_allclose(stats[:, 0], x.max(axis=1))
    np.testing.assert_allclose(stats[:, 1], e.sum(axis=1), rtol=1e-5)
    print(f"row softmax of a {rows}x{cols} float32 matrix ran {where()}: matches NumPy")


if __name__ == "__main__":
    main()
