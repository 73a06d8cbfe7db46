"""Tutorial 05: histograms with a persistent grid, merged with global atomics.

A fixed number of programs (a few per multiprocessor on a GPU) stride over the whole array,
CHUNK elements at a time. Each program keeps its own counts as a tile of BINS int32s in
registers, adds `tile.histogram` of every chunk to it, and merges it into the global counts
once at the end with `tile.atomic_add`: one atomic per bin per program instead of one per
element.

`tile.histogram(t, BINS, valid=...)` counts the values of an integer tile: element k of the
result counts the elements equal to k. Values outside [0, BINS) are not counted, and neither
are elements i >= valid, so the padding of the last chunk (loaded as `other=0`) does not land
in bin 0. With `algorithm="auto"` (the default) these histograms use CUB's
BLOCK_HISTO_ATOMIC (shared-memory atomics); BLOCK_HISTO_SORT is chosen for at most 16 bins
with at least 8 items per thread.

  (a) 256 bins of a uint8 array (every value is counted);
  (b) 1000 bins of int32 values uniform in [-100, 1100): about a sixth of them are out of
      range and not counted.

Both are checked against `numpy.bincount` of the in-range values.

    python tutorials/05_histogram.py
"""

import time

import numpy as np
from _runner import ON_GPU, kernel, report_speed, to_device, to_host, where

import coop_tiles as ct
from coop_tiles import tile


@ct.jit
def histogram(x, counts, n, BINS: ct.constexpr, CHUNK: ct.constexpr):
    h = tile.zeros(BINS, np.int32)
    # program p takes chunks p, p + P, p + 2P, ... (P programs)
    for base in range(ct.program_id(0) * CHUNK, n, ct.num_programs(0) * CHUNK):
        t = tile.load(x, base, CHUNK, valid=n - base, other=0)
        h = h + tile.histogram(t, BINS, valid=n - base)
    tile.atomic_add(counts, 0, h)


def programs() -> int:
    """The persistent grid: 4 programs per multiprocessor on a GPU, 64 in the interpreter."""
    if not ON_GPU:
        return 64
    import cupy as cp

    return 4 * cp.cuda.Device().attributes["MultiProcessorCount"]


def run(x: np.ndarray, bins: int, chunk: int = 8192) -> tuple[np.ndarray, float]:
    """The histogram of `x` by the tile program, and the seconds it took (a warm run on a GPU)."""
    k, grid = kernel(histogram), programs()
    (xd,) = to_device(x)
    if ON_GPU:  # the first launch compiles (or loads from the disk cache): time a second one
        k[grid](xd, *to_device(np.zeros(bins, np.int32)), x.size, BINS=bins, CHUNK=chunk)
    (countsd,) = to_device(np.zeros(bins, np.int32))  # a synchronous copy: the GPU is idle now
    start = time.perf_counter()
    k[grid](xd, countsd, x.size, BINS=bins, CHUNK=chunk)
    counts = to_host(countsd)  # waits for the GPU
    return counts, time.perf_counter() - start


def bincount(x: np.ndarray, bins: int) -> np.ndarray:
    """numpy.bincount of the values of `x` in [0, bins)."""
    w = x.astype(np.int64)
    return np.bincount(w[(w >= 0) & (w < bins)], minlength=bins)


def main() -> None:
    rng = np.random.default_rng(0)
    n = (1 << 26) + 37 if ON_GPU else 4_000_037  # not a multiple of CHUNK: the last chunk is partial

    x = rng.integers(0, 256, n, dtype=np.uint8)
    counts, seconds = run(x, 256)
    np.testing.assert_array_equal(counts, bincount(x, 256))
    print(
        f"256-bin histogram of {n} uint8 by {programs()} programs ran {where()} in {seconds * 1e3:.3g} ms: "
        "matches numpy.bincount"
    )

    n //= 2
    x = rng.integers(-100, 1100, n, dtype=np.int32)
    counts, seconds = run(x, 1000)
    np.testing.assert_array_equal(counts, bincount(x, 1000))
    print(
        f"1000-bin histogram of {n} int32 in [-100, 1100) ran {where()} in {seconds * 1e3:.3g} ms: "
        f"matches numpy.bincount ({n - counts.sum()} out-of-range values not counted)"
    )


# ----- how fast: GB/s read against the array's length, 256 bins of uint8 ---------------------------------------------
@ct.testing.perf_report(
    ct.testing.Benchmark(
        x_names=["n"],
        x_vals=[2**k for k in range(18, 31, 2)],
        line_arg="provider",
        line_vals=["coop_tiles", "cupy"],
        line_names=["histogram (tile program)", "cupy.bincount"],
        plot_name="05_histogram",
        xlabel="uint8 elements",
        ylabel="GB/s",
        x_log=True,
    )
)
def speed(n: int, provider: str) -> float:
    import cupy as cp

    x, counts = cp.random.randint(0, 256, n, dtype=cp.uint8), cp.zeros(256, cp.int32)
    if provider == "cupy":
        ms = ct.testing.do_bench(lambda: cp.bincount(x, minlength=256))
    else:  # counts accumulates: zeroed before each call, outside the time
        grid = programs()
        ms = ct.testing.do_bench(
            lambda: histogram[grid](x, counts, n, BINS=256, CHUNK=8192), setup=lambda: counts.fill(0)
        )
    return x.nbytes / ms / 1e6


if __name__ == "__main__":
    main()
    report_speed(speed)
