"""Tutorial 14: top-k and top-p (nucleus) sampling over a vocabulary, rows far longer than a tile.

`tile.topk` sorts one tile. A language model's logits have a row of 128256 per sequence, and a batch of
64 rows does not fill 132 SMs with one program per row. So `coop_tiles.examples.topk(x, k)` is a *radix
select* with several programs per row (read `coop_tiles/examples/sampling.py` beside this):

  1. Keys. `tile.sort_key(t)` gives each element's order-preserving unsigned bits, the ones `tile.sort`
     compares: a larger key is a larger element (NaNs largest, as `torch.topk` counts them). The k-th
     largest key is found a few bits (a *digit*) at a time, from the top.
  2. Counting, on a (chunks, rows) grid. Each program counts the keys of its chunk by their top 10 bits
     (sign, exponent and one bit of mantissa of a float) with `tile.histogram` and stores its counts from
     each bin up (a `tile.scan`) in its row's part of one int32 work array: plain stores, so nothing has to
     be zeroed before the launch (a memset is a host call and a kernel more).
  3. Gathering the candidates, on the same grid. Each program sums its row's counts (a loop over the
     row's programs) and finds the bin where the count of keys from the top reaches k (one `tile.sum` of
     the bins that reach it): the k-th key's first digit. Only keys with that digit or a larger one can be
     among the k largest (for normal logits, a few thousand of 128256): the program copies their indices, in
     row order, to its row's candidates (`tile.scan` ranks them, `tile.scatter` writes them; where they go,
     from the counts of the programs before it, with one `tile.gather`). Indices only: the values are
     gathered from the row again when needed, so each candidate costs one scatter, not two.
  4. One program per row finishes over the candidates alone: the other digits (11 bits at a time for
     float32, the 6 left of a bfloat16), each one a histogram pass; then the *threshold* (the k-th key
     itself) is known: the keys above it are all kept, and of those equal to it, the first ones in row
     order, so that exactly k are kept (one carried `tile.scan` ranks both kinds, `tile.scatter` writes
     them). Then it sorts its k survivors (`tile.topk` with the indices as payload: stable, so ties keep row
     order). `top_p_sample(x, k, top_p, uniform)` does the softmax there instead, its cumulative sum
     (`tile.scan`), keeps the smallest prefix of sorted tokens whose probability reaches `top_p`, and picks
     the token where `uniform[r]` falls in that prefix's renormalised distribution.

Three launches, the rows read twice, three allocations (the work array and the results). For k = 1 there is
nothing to select: each program keeps its chunk's largest key (`tile.max`) and its first index (`tile.min` of
the indices holding it), and one program per row takes the first chunk with the largest.

The checks compare with NumPy's stable argsort (values equal `torch.topk`'s; indices too where values are
distinct) and with a NumPy sampler.

    python tutorials/14_topk_sampling.py
"""

import numpy as np
from _runner import ON_GPU, report_speed, to_device, to_host, where

import coop_tiles as ct
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


# ----- how fast: the rows' bytes read per second against the vocabulary, beside torch.topk ---------------------------
@ct.testing.perf_report(
    ct.testing.Benchmark(
        x_names=["vocab"],
        x_vals=[8192, 32768, 128256, 262144],
        line_arg="provider",
        line_vals=["coop_tiles", "torch"],
        line_names=["examples.topk", "torch.topk"],
        plot_name="14_topk_sampling",
        xlabel="vocabulary (64 float32 rows, k = 50)",
        ylabel="GB/s of logits read",
        x_log=True,
    )
)
def speed(vocab: int, provider: str) -> float:
    import torch

    x = torch.randn(64, vocab, device="cuda")
    run = {"coop_tiles": lambda: topk(x, 50), "torch": lambda: torch.topk(x, 50)}[provider]
    return x.numel() * 4 / ct.testing.do_bench(run) / 1e6


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
    report_speed(speed)
