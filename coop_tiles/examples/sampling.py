"""Top-k over rows longer than a tile (a vocabulary), and a top-p sampler on it: `topk(x, k)` and
`top_p_sample(x, k, top_p, uniform)` (tutorials/14_topk_sampling.py explains them).

A radix select, as FlashInfer's and vLLM's samplers do it, with several programs per row (64 rows do not fill
132 SMs): each row is cut into chunks of `tiles` tiles, one program per chunk, on a (chunks, rows) grid. The
keys are `tile.sort_key`'s (unsigned, a larger key for a larger element, NaNs largest), read a digit at a time
from the top (`DIGITS`: 11, 11 and 10 bits of a 32-bit key, 8 and 8 of a 16-bit one), one launch per digit:

- `digit_pass` (PASS j): every program first finds digit j-1 of the row's k-th largest key from the row's
  merged histogram of pass j-1 (`resolve`), so it knows the key's top j digits, the *prefix*; then it counts
  the keys of its chunk that start with that prefix by their digit j, and those above the prefix in one more
  bin after the digits' (the *above* bin), with `tile.histogram`, and adds its counts into the row's
  histogram of pass j (`tile.atomic_add`). The last pass also keeps each program's own counts from each bin
  up (a `tile.scan` of its histogram), bin by bin, so that a bin's counts of a row's programs are adjacent.
- `compact_pass`: with the last digit resolved, the prefix is the k-th largest key itself, the *threshold*;
  the keys above it are all taken, and of those equal to it the first `k - above` in row order. Each program
  sums the kept counts of the programs before it in its row (where its keys go: two loads), ranks its keys with one
  carried `tile.scan` (the counts of both kinds packed in one int32), and scatters values and indices.
- `sort_pass` (or `sample_pass`): one program per row sorts the k survivors (`tile.topk`: stable, so ties keep
  row order); the sampler then takes a softmax, its `tile.scan` (the cumulative distribution), keeps the
  smallest prefix of the sorted tokens whose mass reaches `top_p` and picks the token where the row's
  `uniform` number falls in that prefix's renormalised distribution.

For k = 1 (`topk` only) there is no select: `argmax_pass` keeps each chunk's largest key and its first index
(`tile.max`, then `tile.min` of the indices where it is), and `argmax_merge` takes the row's first largest of
those: 2 launches, one read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import coop_tiles as ct
from coop_tiles import tile

from ._arrays import empty_like, zeros_like

#: elements per tile (each program loads `tiles` of them)
TILE = 4096
#: the bits of each digit pass, from the top, by the keys' width: fewer passes (launches and reads of the row)
#: with wider digits, as long as a histogram's counters fit a few KB of shared memory
#: (a pass's histogram has one more bin, after its digits': the keys above the prefix)
DIGITS = {8: (8,), 16: (8, 8), 32: (11, 11, 10)}
#: about how many programs the digit passes launch (a few per SM), however few the rows
PROGRAMS = 1024
#: the packed ranks of `compact_pass` count up to this many elements per program
MAX_CHUNK = 1 << 16


def resolve(hist, k, BINS: ct.constexpr):
    """`(digit, above)` of the row's k-th largest key at one pass, from that pass's merged histogram (`BINS` digits,
    then the keys above the prefix): the largest digit whose keys, with those above the prefix, number at least
    k; and how many keys are above that digit."""
    h = tile.load(hist, 0, BINS)
    before, total = tile.scan(h, exclusive=True, return_total=True)
    at_least = hist[BINS] + total - before  # (keys >= prefix·d, for each digit d)
    digit = tile.sum((at_least >= k).astype(np.int32)) - 1
    bins = tile.arange(BINS, np.int32)
    return digit, hist[BINS] + tile.sum(ct.where(bins > digit, h, 0))


@ct.jit
def digit_pass(
    x,
    hist,
    mine,
    prefix,
    n,
    k,
    tiles,
    PASS: ct.constexpr,
    SHIFT: ct.constexpr,
    DIGIT: ct.constexpr,
    PREVIOUS: ct.constexpr,
    LAST: ct.constexpr,
    TILE: ct.constexpr,
):
    """Program (c, r): the histogram of chunk c of row r by the pass's digit (the key's `DIGIT` bits from `SHIFT`)
    of the keys that start with the row's prefix, and of those above it (one more bin), added to the row's
    `hist[PASS]` (the `LAST` pass: also, from each bin up, kept in `mine[r]`); `PREVIOUS`: the bits of the pass
    before's digit."""
    c, r = ct.program_id(0), ct.program_id(1)
    BINS = 1 << DIGIT
    top = 0
    if PASS > 0:
        digit, _ = resolve(hist[PASS - 1, r], k, 1 << PREVIOUS)
        top = prefix[PASS - 1, r] * (1 << PREVIOUS) + digit
    if c == 0:
        prefix[PASS, r] = top
    row = x[r]
    h = tile.zeros(BINS + 1, np.int32)
    for t in range(c * tiles, (c + 1) * tiles):
        base = t * TILE
        key = tile.sort_key(tile.load(row, base, TILE, valid=n - base))
        d = ((key >> SHIFT) & (BINS - 1)).astype(np.int32)
        if PASS > 0:
            high = key >> (SHIFT + DIGIT)
            d = ct.where(high == top, d, (high > top).astype(np.int32) * (BINS + 1) - 1)  # (BINS above, -1 below)
        h = h + tile.histogram(d, BINS + 1, valid=n - base)
    tile.atomic_add(hist[PASS, r], 0, h, mask=h > 0)
    if LAST:  # (bin b's keys and those above it, at mine[r, b * chunks + c]: what compact_pass sums by program)
        before, total = tile.scan(h, exclusive=True, return_total=True)
        tile.scatter(mine[r], tile.arange(BINS + 1, np.int32) * ct.num_programs(0) + c, total - before)


@ct.jit
def compact_pass(
    x,
    hist,
    mine,
    prefix,
    vals,
    idx,
    n,
    k,
    tiles,
    LAST: ct.constexpr,
    DIGIT: ct.constexpr,
    CHUNKS: ct.constexpr,
    TILE: ct.constexpr,
):
    """Program (c, r): the keys of chunk c of row r above the threshold, and the first of those equal to it, to
    their places in `vals[r]`, `idx[r]` (above first, each kind in row order); `LAST`: the last digit pass,
    `DIGIT`: its digit's bits, `CHUNKS`: a power of two, at least the programs of a row."""
    c, r = ct.program_id(0), ct.program_id(1)
    BINS = 1 << DIGIT
    digit, above = resolve(hist[LAST, r], k, BINS)
    threshold = prefix[LAST, r] * BINS + digit
    chunks = ct.num_programs(0)  # (the programs before this one: their keys of the digit and above, then above)
    above_before = tile.sum(tile.load(mine[r], (digit + 1) * chunks, CHUNKS, valid=c))
    equal_before = tile.sum(tile.load(mine[r], digit * chunks, CHUNKS, valid=c)) - above_before
    row = x[r]
    ranks = 0
    for t in range(c * tiles, (c + 1) * tiles):
        base = t * TILE
        v = tile.load(row, base, TILE, valid=n - base)
        key = tile.sort_key(v)
        inside = tile.arange(TILE, np.int32) < n - base
        over = inside & (key > threshold)
        equal = inside & (key == threshold)
        packed = over.astype(np.int32) + equal.astype(np.int32) * MAX_CHUNK
        rank, ranks = tile.scan(packed, exclusive=True, initial=ranks, return_total=True)
        equal_rank = equal_before + rank // MAX_CHUNK
        at = ct.where(over, above_before + rank % MAX_CHUNK, above + equal_rank)
        keep = over | (equal & (equal_rank < k - above))
        tile.scatter(vals[r], at, v, mask=keep)
        tile.scatter(idx[r], at, tile.arange(TILE, np.int64) + base, mask=keep)


@ct.jit
def argmax_pass(x, best, at, n, tiles, TILE: ct.constexpr):
    """Program (c, r): the largest key of chunk c of row r and its first index, to `best[r, c]`, `at[r, c]` (the
    elements past the row's end count as key 0, the smallest, after every element of the row)."""
    c, r = ct.program_id(0), ct.program_id(1)
    row = x[r]
    top = 0
    first = c * tiles * TILE
    for t in range(c * tiles, (c + 1) * tiles):
        base = t * TILE
        key = tile.sort_key(tile.load(row, base, TILE, valid=n - base))
        key = ct.where(tile.arange(TILE, np.int32) < n - base, key, 0)
        m = tile.max(key)
        if m > top:  # (its first index: a min, which any arrangement of the keys does, not tile.argmax's fold)
            top = m
            first = base + tile.min(ct.where(key == m, tile.arange(TILE, np.int32), TILE))
    best[r, c] = top
    at[r, c] = first


@ct.jit
def argmax_merge(x, best, at, vals, idx, chunks, C: ct.constexpr):
    """Program r: the first of row r's chunks with the largest key, and so the row's first largest element."""
    r = ct.program_id(0)
    j = tile.argmax(tile.load(best[r], 0, C, valid=chunks))
    i = at[r, j]
    vals[r, 0] = x[r, i]
    idx[r, 0] = i


def sorted_survivors(vals, idx, k, K: ct.constexpr):
    """The row's k survivors, largest first, ties in row order (their order in `vals`), with their indices."""
    return tile.topk(tile.load(vals, 0, K, valid=k), K, tile.load(idx, 0, K, valid=k), valid=k)


@ct.jit
def sort_pass(vals, idx, k, K: ct.constexpr):
    """Program r: row r's survivors sorted in place, largest first."""
    r = ct.program_id(0)
    v, i = sorted_survivors(vals[r], idx[r], k, K)
    tile.store(vals[r], 0, v, valid=k)
    tile.store(idx[r], 0, i, valid=k)


@ct.jit
def sample_pass(vals, idx, uniform, tokens, k, top_p, K: ct.constexpr):
    """Program r: a token of row r's nucleus (the fewest sorted survivors whose softmax mass reaches top_p), drawn
    with `uniform[r]` from the nucleus' renormalised distribution."""
    r = ct.program_id(0)
    v, i = sorted_survivors(vals[r], idx[r], k, K)
    inside = tile.arange(K, np.int32) < k
    logits = v.astype(np.float32)
    p = ct.where(inside, ct.exp(logits - tile.max(ct.where(inside, logits, -np.inf))), 0.0)
    cdf, mass = tile.scan(p, return_total=True)
    kept = ct.maximum(tile.sum(((cdf - p < top_p * mass) & inside).astype(np.int32)), 1)
    nucleus = tile.sum(ct.where(tile.arange(K, np.int32) == kept - 1, cdf, 0.0))
    chosen = ct.minimum(tile.sum(((cdf <= uniform[r] * nucleus) & inside).astype(np.int32)), kept - 1)
    tokens[r] = tile.sum(ct.where(tile.arange(K, np.int32) == chosen, i, 0))


_KERNELS = (digit_pass, compact_pass, sort_pass, sample_pass, argmax_pass, argmax_merge)
_INTERPRETING = {kernel: ct.jit(kernel.fn, interpret=True) for kernel in _KERNELS}


def _kernel(kernel: ct.JITFunction, x: Any) -> ct.JITFunction:
    """`kernel`, or its interpreting copy for NumPy arrays."""
    return _INTERPRETING[kernel] if isinstance(x, np.ndarray) else kernel


def survivors_tile(k: int) -> int:
    """The tile that holds a row's k survivors: the next power of two, at least a warp."""
    return max(32, 1 << (k - 1).bit_length())


def _select(x: Any, k: int, tile_size: int) -> tuple[Any, Any]:
    """`(vals, idx)`: each row's k largest elements and their int64 indices, unsorted (the digit passes and the
    compaction)."""
    rows, n = x.shape
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and the row length {n}, got {k}")
    bits = (x.element_size() if hasattr(x, "element_size") else x.dtype.itemsize) * 8
    if bits > 32:
        raise ValueError(f"keys of up to 32 bits are selected, got {x.dtype}")
    digits = DIGITS[bits]
    tiles, grid = _chunks(rows, n, tile_size)
    hist = zeros_like(x, (len(digits), rows, (1 << max(digits)) + 1), "int32")
    mine = empty_like(x, (rows, ((1 << digits[-1]) + 1) * grid[0]), "int32")
    prefix = empty_like(x, (len(digits), rows), "int64")
    vals, idx = empty_like(x, (rows, k), x.dtype), empty_like(x, (rows, k), "int64")
    for j, digit in enumerate(digits):
        shift = bits - sum(digits[: j + 1])
        last = j == len(digits) - 1
        previous = digits[j - 1] if j else 0
        constants = {"PASS": j, "SHIFT": shift, "DIGIT": digit, "PREVIOUS": previous, "LAST": last, "TILE": tile_size}
        _kernel(digit_pass, x)[grid](x, hist, mine, prefix, n, k, tiles, **constants)
    constants = {"LAST": len(digits) - 1, "DIGIT": digits[-1], "CHUNKS": survivors_tile(grid[0]), "TILE": tile_size}
    _kernel(compact_pass, x)[grid](x, hist, mine, prefix, vals, idx, n, k, tiles, **constants)
    return vals, idx


def _chunks(rows: int, n: int, tile_size: int) -> tuple[int, tuple[int, int]]:
    """`(tiles, grid)`: the tiles of a program's chunk, so that the (chunks, rows) grid has about PROGRAMS
    programs."""
    n_tiles = ct.cdiv(n, tile_size)
    tiles = ct.cdiv(n_tiles, min(n_tiles, max(1, ct.cdiv(PROGRAMS, rows))))
    if tiles * tile_size > MAX_CHUNK:
        raise ValueError(f"a program's chunk must be under {MAX_CHUNK} elements: use a smaller tile")
    return tiles, (ct.cdiv(n_tiles, tiles), rows)


def _argmax(x: Any, tile_size: int) -> tuple[Any, Any]:
    """`(vals, idx)`: each row's largest element and its first index (`topk` with k = 1), in 2 launches."""
    rows, n = x.shape
    tiles, grid = _chunks(rows, n, tile_size)
    best, at = empty_like(x, (rows, grid[0]), "int64"), empty_like(x, (rows, grid[0]), "int64")  # (keys as int64)
    vals, idx = empty_like(x, (rows, 1), x.dtype), empty_like(x, (rows, 1), "int64")
    _kernel(argmax_pass, x)[grid](x, best, at, n, tiles, TILE=tile_size)
    _kernel(argmax_merge, x)[rows](x, best, at, vals, idx, grid[0], C=survivors_tile(grid[0]))
    return vals, idx


def topk(x: Any, k: int, *, tile_size: int = TILE) -> tuple[Any, Any]:
    """`(values, indices)` of the k largest elements of each row of the 2-D array `x`, largest first (as
    `torch.topk(x, k)`: NaNs largest, int64 indices; ties in row order), for rows of any length: CuPy or PyTorch
    arrays on the GPU, NumPy arrays in the interpreter. `x` must be contiguous; 2 + len(DIGITS[bits]) launches
    (2 for k = 1)."""
    if k == 1 and x.shape[1] >= 1:
        return _argmax(x, tile_size)
    vals, idx = _select(x, k, tile_size)
    _kernel(sort_pass, x)[x.shape[0]](vals, idx, k, K=survivors_tile(k))
    return vals, idx


def top_p_sample(x: Any, k: int, top_p: float, uniform: Any, *, tile_size: int = TILE) -> Any:
    """One token per row of the logits `x` (int64): among the row's k largest, the fewest whose softmax mass reaches
    `top_p` (the nucleus), sampled from their renormalised softmax with the row's number in `uniform` (float32, in
    [0, 1), one per row): the token whose cumulative probability first exceeds it."""
    vals, idx = _select(x, k, tile_size)
    tokens = empty_like(x, (x.shape[0],), "int64")
    _kernel(sample_pass, x)[x.shape[0]](vals, idx, uniform, tokens, k, float(top_p), K=survivors_tile(k))
    return tokens
