"""Tutorial 07: sorting segments, by radix and by a user comparison.

`tile.sort(keys, values)` sorts a tile of keys, with an optional payload tile moved along with
them, across the whole block (CUB BlockRadixSort); the sort is stable. Here every program
sorts one segment of the array:

  (a) int32 keys with their original index as the payload: the sorted payload is the
      segment's stable argsort. The last segment is partial: `valid=n - base` sorts only its
      first elements, the rest go after them (and are not stored).
  (b) float32 keys in descending order, with NaNs, -0.0 and +0.0: keys sort by their bits in
      an order-preserving form, so +0.0 comes before -0.0 (descending), and NaNs go last in
      either direction, as numpy.sort puts them last (each comes out as one canonical NaN).
  (c) a merge sort with a user comparison (CUB BlockMergeSort): `compare=` takes a
      `@ct.combine` function that returns a bool, true when its first operand goes first.
      Over a tuple of key tiles it takes both tuples, `(a_key, a_tag, b_key, b_tag)`; here
      it orders by absolute value, then by tag, larger tags first.

    python tutorials/07_sort.py
"""

import numpy as np
from _runner import ON_GPU, kernel, report_speed, to_device, to_host, where

import coop_tiles as ct
from coop_tiles import tile


@ct.jit
def segment_argsort(keys, sorted_keys, index, n, TILE: ct.constexpr, DESCENDING: ct.constexpr):
    base = ct.program_id(0) * TILE
    k = tile.load(keys, base, TILE, valid=n - base, other=0)
    i = (base + tile.arange(TILE)).astype(np.int32)  # the original index, as the payload
    k, i = tile.sort(k, i, valid=n - base, descending=DESCENDING)
    tile.store(sorted_keys, base, k, valid=n - base)
    tile.store(index, base, i, valid=n - base)


@ct.combine
def by_abs_then_tag_descending(a_key, a_tag, b_key, b_tag):
    # a strict order (like <, not <=): equal elements keep their order, the sort being stable
    return (ct.abs(a_key) < ct.abs(b_key)) | ((ct.abs(a_key) == ct.abs(b_key)) & (a_tag > b_tag))


@ct.jit
def segment_merge_sort(keys, tags, sorted_keys, sorted_tags, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    k = tile.load(keys, base, TILE, valid=n - base, other=0)
    g = tile.load(tags, base, TILE, valid=n - base, other=0)
    k, g = tile.sort((k, g), valid=n - base, compare=by_abs_then_tag_descending)
    tile.store(sorted_keys, base, k, valid=n - base)
    tile.store(sorted_tags, base, g, valid=n - base)


def argsort(keys: np.ndarray, tile_size: int, descending: bool = False):
    """Launch `segment_argsort`: the keys sorted per segment of `tile_size`, and their indices."""
    n = keys.size
    kd, outd, indexd = to_device(keys, np.zeros_like(keys), np.zeros(n, np.int32))
    kernel(segment_argsort)[ct.cdiv(n, tile_size)](kd, outd, indexd, n, TILE=tile_size, DESCENDING=descending)
    return to_host(outd), to_host(indexd)


def main() -> None:
    rng = np.random.default_rng(0)
    n, tile_size = (1 << 24, 4096) if ON_GPU else (1_000_003, 2048)
    segment = np.arange(n) // tile_size  # the segment of each element

    # (a) many equal keys, so stability shows: np.lexsort is stable, and its last key is the
    # primary one, so this is a stable argsort of each segment
    keys = rng.integers(0, 1000, n, dtype=np.int32)
    sorted_keys, index = argsort(keys, tile_size)
    expected = np.lexsort((keys, segment))
    np.testing.assert_array_equal(index, expected)
    np.testing.assert_array_equal(sorted_keys, keys[expected])
    print(f"segmented sort of {n} int32 keys with their index ran {where()}: matches a stable numpy argsort")

    # (b) descending float32 with NaNs and zeros of both signs: NaNs last, then larger first,
    # +0.0 before -0.0, equal keys in their original order
    x = rng.standard_normal(n).astype(np.float32)
    x[rng.random(n) < 0.01] = np.nan
    x[rng.random(n) < 0.01] = 0.0
    x[rng.random(n) < 0.01] = -0.0
    sorted_x, index = argsort(x, tile_size, descending=True)
    nan = np.isnan(x)
    expected = np.lexsort((np.signbit(x), -np.where(nan, 0, x), nan, segment))
    np.testing.assert_array_equal(index, expected)
    np.testing.assert_array_equal(sorted_x, x[expected])  # NaNs compare equal here
    print(f"descending sort of {n} float32 with {nan.sum()} NaNs ran {where()}: matches NumPy (NaNs last)")

    # (c) the interpreter calls the comparison in Python, once or twice per comparison of
    # the merge sort: small segments keep it quick
    m, tile_size = (1 << 20, 1024) if ON_GPU else (600, 256)
    keys = rng.integers(-50, 51, m, dtype=np.int32)
    tags = rng.integers(0, 4, m, dtype=np.int32)
    kd, gd, outkd, outgd = to_device(keys, tags, np.zeros(m, np.int32), np.zeros(m, np.int32))
    kernel(segment_merge_sort)[ct.cdiv(m, tile_size)](kd, gd, outkd, outgd, m, TILE=tile_size)
    got = list(zip(to_host(outkd).tolist(), to_host(outgd).tolist()))
    expected = []
    for start in range(0, m, tile_size):
        pairs = zip(keys[start : start + tile_size].tolist(), tags[start : start + tile_size].tolist())
        expected += sorted(pairs, key=lambda p: (abs(p[0]), -p[1]))  # Python's sort is stable too
    assert got == expected
    print(f"merge sort of {m} (key, tag) pairs by |key|, then tag descending, ran {where()}: matches Python's sorted")


# ----- how fast: sorted keys (with their index) per second against the segment's length, 2^24 int32 keys ------------
@ct.testing.perf_report(
    ct.testing.Benchmark(
        x_names=["tile_size"],
        x_vals=[256, 512, 1024, 2048, 4096],
        line_arg="provider",
        line_vals=["coop_tiles", "cupy"],
        line_names=["segment_argsort", "cupy.argsort + take_along_axis"],
        plot_name="07_sort",
        xlabel="segment length",
        ylabel="G keys/s",
        x_log=True,
    )
)
def speed(tile_size: int, provider: str) -> float:
    import cupy as cp

    n = 1 << 24
    keys = cp.random.randint(-(1 << 20), 1 << 20, n, dtype=cp.int32)
    out, index, segments = cp.empty_like(keys), cp.empty(n, cp.int32), keys.reshape(-1, tile_size)
    run = {
        "coop_tiles": lambda: segment_argsort[n // tile_size](keys, out, index, n, TILE=tile_size, DESCENDING=False),
        "cupy": lambda: cp.take_along_axis(segments, cp.argsort(segments, axis=1), axis=1),
    }[provider]
    return n / ct.testing.do_bench(run) / 1e6


if __name__ == "__main__":
    main()
    report_speed(speed)
