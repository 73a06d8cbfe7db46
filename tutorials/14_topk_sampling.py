"""Tutorial 14: top-k and top-p (nucleus) sampling over a vocabulary, rows far longer than a tile.

`tile.topk` sorts one tile. A language model's logits have a row of 128256 per sequence, and a batch of
64 rows does not fill 132 SMs with one program per row. So `coop_tiles.examples.topk(x, k)` is a *radix
select* with several programs per row (read `coop_tiles/examples/sampling.py` beside this):

  1. Keys. `tile.sort_key(t)` gives each element's order-preserving unsigned bits, the ones `tile.sort`
     compares: a larger key is a larger element (NaNs largest, as `torch.topk` counts them). The k-th
     largest key is found a few bits (a *digit*) at a time, from the top: 11, 11 and 10 bits of a float32
     key, 8 and 8 of a bfloat16 one (each pass reads the whole row: wider digits, fewer reads).
  2. Digit passes, one launch each (3 for float32, 2 for bfloat16), on a (chunks, rows) grid. Program
     (c, r) first reads row r's histogram of the pass before, merged from all its programs, and finds
     the digit where the count of keys from the top reaches k: an exclusive `tile.scan` of the bins and
     one `tile.sum`. With it, the top digits of the k-th key (the *prefix*) are known. Then it counts the
     keys of its chunk that start with the prefix by their next digit, and those above the prefix in an
     extra bin, with `tile.histogram`, and adds its counts to the row's histogram with `tile.atomic_add`.
  3. Compaction. After the last digit the prefix is the k-th key itself (the *threshold*). The keys
     above it are all kept; of those equal to it, the first ones in row order, so that exactly k are kept.
     Each program learns where its keys go from the last pass's per-program counts of the programs
     before it in its row (kept from each bin up, bin by bin: two loads), ranks its keys with one carried
     `tile.scan` (both counts packed in an int32) and scatters values and indices (`tile.scatter`).
  4. One program per row sorts its k survivors (`tile.topk` with the indices as payload: stable, so ties
     keep row order). `top_p_sample(x, k, top_p, uniform)` does the softmax there instead, its
     cumulative sum (`tile.scan`), keeps the smallest prefix of sorted tokens whose probability reaches
     `top_p`, and picks the token where `uniform[r]` falls in that prefix's renormalised distribution.

For k = 1 there is nothing to select: each program keeps its chunk's largest key (`tile.max`) and its first
index (`tile.min` of the indices holding it), and one program per row takes the first chunk with the largest.

The checks compare with NumPy's stable argsort (values equal `torch.topk`'s; indices too where values are
distinct) and with a NumPy sampler.

    python tutorials/14_topk_sampling.py
"""

import numpy as np
from _runner import ON_GPU, to_device, to_host, where

from coop_tiles.examples import top_p_sample, topk


def reference_topk(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k largest (NaNs first), ties in row order, and their indices."""
    f = x.astype(np.float32)
    order = np.argsort(-np.where(np.isnan(f), np.inf, f), axis=1, kind="stable")[:, :k]
    return np.take_along_axis(x, order, 1), order


def reference_sample(x: np.ndarray, k: int, top_p: float, uniform: np.ndarray) -> np.ndarray:
    """The sampler's token per row, in float64."""
    values, order = reference_topk(x, k)
    tokens = []
    for v, o, u in zip(values.astype(np.float64), order, uniform):
        p = np.exp(v - v.max())
        cdf = np.cumsum(p)
        kept = max(int(np.sum(cdf - p < top_p * cdf[-1])), 1)
        tokens.append(o[min(int(np.sum(cdf <= u * cdf[kept - 1])), kept - 1)])
    return np.array(tokens)


def check(x: np.ndarray, k: int, tile_size: int) -> None:
    (dx,) = to_device(x)
    values, indices = (to_host(a) for a in topk(dx, k, tile_size=tile_size))
    want_values, want_indices = reference_topk(x, k)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)


if __name__ == "__main__":
    rng = np.random.default_rng(14)
    rows, vocab, tile_size = (64, 128256, 4096) if ON_GPU else (3, 2000, 256)
    logits = rng.standard_normal((rows, vocab)).astype(np.float32)
    logits[1, :: vocab // 7] = logits[1, 5]  # (ties: kept in row order)
    for k in (1, 50) if not ON_GPU else (1, 50, 1024):
        check(logits, k, tile_size)
    uniform = rng.random(rows).astype(np.float32)
    dx, du = to_device(logits, uniform)
    tokens = to_host(top_p_sample(dx, 50, 0.9, du, tile_size=tile_size))
    # (float32 against float64 sums: a token at the edge of a step of the distribution could differ)
    agree = np.mean(tokens == reference_sample(logits, 50, 0.9, uniform))
    assert agree >= 0.9, agree
    print(f"top-k of {rows} rows of {vocab} matches NumPy, the top-p sampler {agree:.0%} of tokens {where()}")
