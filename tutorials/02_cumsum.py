"""Tutorial 02: cumulative sums, per tile and over a whole array.

Per tile: `tile.scan` is a block-wide inclusive scan (CUB BlockScan).

Whole array, one kernel: `tile.scan(t, chained=True)` continues each program's scan from the
previous program's last element, as if the tiles of all programs were one array. It is a single
pass: each program publishes its tile's total, looks back at its predecessors' totals until it
finds one that already holds everything before it (the decoupled look-back of CUB's device scan),
and scans its tile seeded with that. No memory from you, and it works for every op, including
`@ct.combine` functions over tuples: `whole_array_recurrence` runs h_i = a_i * h_(i-1) + b_i over
the whole array.

Whole array, the way it was done before: three small programs, the classic reduce-then-scan
(it reads the input twice):
  1. every program sums its tile (`tile.sum`);
  2. one program scans those tile sums in chunks, carrying the running total across its
     loop with `initial=` and `return_total=True` (one barrier per chunk);
  3. every program scans its tile again, seeded with the sum of all tiles before it.

    python tutorials/02_cumsum.py
"""

import numpy as np
from _runner import kernel, report_speed, to_device, to_host, where

import coop_tiles as ct
from coop_tiles import tile


@ct.jit
def tile_cumsum(x, y, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, tile.scan(t, op="add"), valid=n - base)


# ----- the whole array in one kernel ----------------------------------------------------------------
@ct.jit
def chained_cumsum(x, y, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)  # other=0: the tail adds nothing
    tile.store(y, base, tile.scan(t, chained=True), valid=n - base)


@ct.combine
def linrec(a_l, b_l, a_r, b_r):
    """(a, b) pairs compose as affine maps h -> a * h + b, the earlier one on the left."""
    return a_r * a_l, a_r * b_l + b_r


@ct.jit
def whole_array_recurrence(a, b, h, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    ta = tile.load(a, base, TILE, valid=n - base, other=1)  # (1, 0) leaves h as it is
    tb = tile.load(b, base, TILE, valid=n - base, other=0)
    _, th = tile.scan((ta, tb), op=linrec, chained=True)
    tile.store(h, base, th, valid=n - base)


# ----- the whole array in three kernels ---------------------------------------------------------------
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


def three_kernel_cumsum(x, y, n: int, tile_size: int = 4096) -> None:
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

    kernel(chained_cumsum)[ct.cdiv(n, 4096)](xd, yd, n, TILE=4096)
    np.testing.assert_array_equal(to_host(yd), np.cumsum(x))
    print(f"one-kernel whole-array cumsum of {n} int64 ran {where()}: matches numpy.cumsum")

    yd = to_device(np.zeros(n, np.int64))[0]
    three_kernel_cumsum(xd, yd, n)
    np.testing.assert_array_equal(to_host(yd), np.cumsum(x))
    print(f"three-kernel whole-array cumsum of {n} int64 ran {where()}: matches numpy.cumsum")

    m = 200_000
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0.5, 1.0, m).astype(np.float32), rng.uniform(-1, 1, m).astype(np.float32)
    ad, bd, hd = to_device(a, b, np.zeros(m, np.float32))
    kernel(whole_array_recurrence)[ct.cdiv(m, 4096)](ad, bd, hd, m, TILE=4096)
    h, state = np.empty(m), 0.0
    for i in range(m):  # the recurrence one element after the other, in float64
        state = float(a[i]) * state + float(b[i])
        h[i] = state
    np.testing.assert_allclose(to_host(hd), h, rtol=1e-4, atol=1e-5)
    print(f"whole-array linear recurrence of {m} float32 pairs ran {where()}: matches the sequential recurrence")


# ----- how fast: GB/s (bytes read and written) against the array's length, as Triton's tutorials plot it -----------
@ct.testing.perf_report(
    ct.testing.Benchmark(
        x_names=["n"],
        x_vals=[2**k for k in range(16, 29, 2)],
        line_arg="provider",
        line_vals=["chained", "cupy", "copy"],
        line_names=["chained_cumsum", "cupy.cumsum", "copy (the limit)"],
        plot_name="02_cumsum",
        xlabel="int32 elements",
        ylabel="GB/s",
        x_log=True,
    )
)
def speed(n: int, provider: str) -> float:
    import cupy as cp

    x, y = cp.ones(n, cp.int32), cp.empty(n, cp.int32)
    run = {
        "chained": lambda: chained_cumsum[ct.cdiv(n, 4096)](x, y, n, TILE=4096),
        "cupy": lambda: cp.cumsum(x, out=y),
        "copy": lambda: cp.copyto(y, x),
    }[provider]
    return 2 * x.nbytes / ct.testing.do_bench(run) / 1e6


if __name__ == "__main__":
    main()
    report_speed(speed)
