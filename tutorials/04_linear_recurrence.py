"""Tutorial 04: a first-order linear recurrence, h_t = a_t * h_{t-1} + b_t, as a scan.

Written as a loop the recurrence is sequential, but each step is an affine map
h -> a*h + b, and two steps compose into one: (a_l, b_l) then (a_r, b_r) is
(a_r * a_l, a_r * b_l + b_r). That composition is associative (though not commutative),
so a block can scan the pairs (a_t, b_t) with it: a `@ct.combine` function over a tuple of
two tiles, the earlier element always on the left. The second component of the inclusive
scan at t is h_t, for a start of h = 0 (or of the seed given with `initial=`).

  * `tile_recurrence`: one program per tile, each tile an independent sequence from h = 0.
  * `recurrence`: ONE program walks the whole array in chunks. Each chunk's scan is seeded
    with `initial=carry`, and `return_total=True` also returns the fold of the seed and the
    whole chunk, which is the next carry.

Why the chunked loop is the same recurrence: the scan at element i of a chunk seeded with
(A, H) is (A, H) composed with the chunk's maps up to i, and its second component is
a_i * (... (a_0 * H + b_0) ...) + b_i: the recurrence continued from h = H. The carry's
second component is the h of the chunk's last element, so each chunk continues exactly
where the previous one stopped; associativity only regroups the same compositions (the
float32 result differs from a sequential loop in rounding only). The first component, the
running product of the a's, never reaches h; starting it at 1.0 makes the first seed
(1.0, h0) the map "h = h0".

    python tutorials/04_linear_recurrence.py
"""

import numpy as np
from _runner import kernel, to_device, to_host, where

import coop_tiles as ct
from coop_tiles import tile


@ct.combine
def affine(a_l, b_l, a_r, b_r):  # the earlier step (l), then the later one (r)
    return a_r * a_l, a_r * b_l + b_r


@ct.jit
def tile_recurrence(a, b, h, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    at = tile.load(a, base, TILE, valid=n - base, other=1)
    bt = tile.load(b, base, TILE, valid=n - base, other=0)
    _, hs = tile.scan((at, bt), op=affine)
    tile.store(h, base, hs, valid=n - base)


@ct.jit
def recurrence(a, b, h, n, h0, CHUNK: ct.constexpr):
    carry = (1.0, h0)
    for base in range(0, n, CHUNK):
        at = tile.load(a, base, CHUNK, valid=n - base, other=1)
        bt = tile.load(b, base, CHUNK, valid=n - base, other=0)
        (_, hs), carry = tile.scan((at, bt), op=affine, initial=carry, return_total=True)
        tile.store(h, base, hs, valid=n - base)


def sequential(a: np.ndarray, b: np.ndarray, h0: float = 0.0, restart: int = 0) -> np.ndarray:
    """The recurrence as a plain loop in float64 (starting again from 0 every `restart` steps)."""
    a, b = a.astype(np.float64).tolist(), b.astype(np.float64).tolist()
    out, h = [], h0
    for t in range(len(a)):
        if restart and t % restart == 0:
            h = 0.0
        h = a[t] * h + b[t]
        out.append(h)
    return np.array(out)


def main() -> None:
    n, tile_size, h0 = 1_000_003, 4096, 0.5
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 1.0, n).astype(np.float32)  # |a| < 1: the recurrence forgets slowly
    b = rng.standard_normal(n).astype(np.float32)
    ad, bd, hd = to_device(a, b, np.zeros(n, np.float32))

    kernel(tile_recurrence)[ct.cdiv(n, tile_size)](ad, bd, hd, n, TILE=tile_size)
    np.testing.assert_allclose(to_host(hd), sequential(a, b, restart=tile_size), rtol=0, atol=1e-4)
    print(f"per-tile recurrence ran {where()}: matches a sequential float64 loop")

    kernel(recurrence)[1](ad, bd, hd, n, h0, CHUNK=tile_size)
    expected = sequential(a, b, h0)
    err = np.abs(to_host(hd) - expected).max()
    np.testing.assert_allclose(to_host(hd), expected, rtol=0, atol=1e-4)
    print(f"recurrence over {n} float32 in one program ran {where()}: matches a sequential float64 loop")
    print(f"(largest difference {err:.1e}, values up to {np.abs(expected).max():.1f})")


if __name__ == "__main__":
    main()
