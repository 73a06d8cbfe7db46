"""Top-k over rows longer than a tile (a vocabulary), and a top-p sampler on it: `topk(x, k)` and
`top_p_sample(x, k, top_p, uniform)` (tutorials/14_topk_sampling.py explains them).

A radix select, as FlashInfer's and vLLM's samplers do it, with several programs per row (64 rows do not fill
132 SMs): each row is cut into chunks of `tiles` tiles, one program per chunk, on a (chunks, rows) grid. The
keys are `tile.sort_key`'s (unsigned, a larger key for a larger element, NaNs largest). The row is read twice,
then only the few keys that can be among the k largest (*candidates*), in one program per row:

- `count_pass`: each program counts the keys of its chunk by their top `FIRST` bits (the first digit) with
  `tile.histogram` and stores its counts from each bin up (a `tile.scan`) in the row's part of `work`, one
  int32 array (plain stores: nothing to zero before the launch, no atomics).
- `gather_pass`: every program sums its row's counts (`first_digit`: the row's keys from each digit up) and
  finds the first digit of the row's k-th largest key (the largest digit with at least k keys from it up), and
  copies the indices of the keys of its chunk with that first digit or a larger one, the candidates, in row
  order, to the row's candidates in `work` (`tile.scan` ranks them, `tile.scatter` writes them; where its own
  go, it learns from the counts of the programs before it: one `tile.gather`). Indices only: the values are
  read again from `x` where needed, so a candidate costs one scatter, not two (measured on an H200: storing
  each candidate's key beside its index made the per-row pass 8 us faster but this pass 3-4 us slower, and the
  whole call slower; the per-row pass's gathers mostly hit L2, where this pass has just left the rows).
- `finish` (in `select_pass` and `sample_pass`, one program per row): the rest of the key's digits, one pass
  over the candidates each (their keys gathered from `x` by index), then the candidates above the k-th key (the
  *threshold*) and the first of those equal to it, in row order, to `vals[r]`, `idx[r]` (a carried `tile.scan`
  of both counts, `tile.scatter`).
  Then `tile.topk` sorts the k survivors (stable: ties keep row order); the sampler takes a softmax, its
  `tile.scan` (the cumulative distribution), keeps the smallest prefix of the sorted tokens whose mass reaches
  `top_p` and picks the token where the row's `uniform` number falls in that prefix's renormalised
  distribution.

So 3 launches, 2 reads of the rows and 3 allocations (`work` and the results). How many candidates a row has
depends on its values: for normal logits a first digit of 10 bits (sign, exponent and one bit of a float's
mantissa) leaves a few thousand at most; rows of equal values leave the whole row, to one program.

For k = 1 (`topk` only) there is no select: `argmax_pass` keeps each chunk's largest key and its first index
(`tile.max`, then `tile.min` of the indices where it is), and `argmax_merge` takes the row's first largest of
those: 2 launches, one read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import coop_tiles as ct
from coop_tiles import tile

from ._arrays import empty_like

#: elements per tile of the passes over whole rows (each program loads `tiles` of them)
TILE = 4096
#: candidates per tile of the per-row passes (`finish`) for k up to MANY_CANDIDATES, twice as many above: a row of
#: normal logits has a few hundred (k = 50) to a few thousand (k = 1024), so a smaller tile than TILE does less work
#: per pass over them. Measured on an H200 (64 rows of 128256 bfloat16 normal logits, the per-row pass alone): k = 50
#: 9.4-10.0 us at 1024 against 17.3 at 2048; k = 1024 21.9-22.2 us at 1024 against 17.9-18.5 at 2048
CANDIDATE_TILE = 1024
#: the k past which the per-row passes take tiles of 2 * CANDIDATE_TILE (`candidate_tile`); in whole calls at
#: k = 1024 the gain was within run-to-run noise on the H200
MANY_CANDIDATES = 256
#: by the keys' width: `(FIRST, DIGIT, PASSES)`, the bits of the first digit (counted over whole rows, in
#: 2**FIRST shared-memory counters), then those of each of the other digits and how many (over the candidates).
#: Measured on an H200 (64 rows of 128256 normal logits, whole calls, k = 50 / 1024): bfloat16 (10, 6, 1) 40.6 /
#: 51.6 us against (11, 5, 1) 43.2 / 52.9, (9, 7, 1) 49.7 / 53.1, (8, 4, 2) 54.2 / 56.7; float32 (10, 11, 2) 45.8 /
#: 56.7 against (11, 7, 3) 49.2 / 61.0, (8, 8, 3) 59.4 / 60.7 (a smaller first digit counts faster, with fewer
#: shared-memory counters, but leaves more candidates; fewer passes over them save more than a wider digit costs)
DIGITS = {8: (8, 1, 0), 16: (10, 6, 1), 32: (10, 11, 2)}
#: about how many programs the passes over whole rows launch (a few per SM), however few the rows: on an H200, 64
#: rows of 128256 float32, the count pass took 11.1 us at 512 (13.0 at 1024, 10.8 at 256, 17.6 at 2048) and the
#: gather pass 25.6 (27.7, 26.4, 31.2)
PROGRAMS = 512


def resolve(h, above, k, BINS: ct.constexpr):
    """`(digit, above)` of the row's k-th largest key at one digit, from the counts `h` (`BINS` of them) of the
    keys with the prefix found so far by their next digit, and `above`, how many keys are above that prefix: the
    largest digit whose keys, with those above, number at least k; and how many keys are above that digit."""
    before, total = tile.scan(h, exclusive=True, return_total=True)
    digit = tile.sum((above + total - before >= k).astype(np.int32)) - 1
    return digit, above + tile.sum(ct.where(tile.arange(BINS, np.int32) > digit, h, 0))


def first_digit(counts, k, chunks, BINS: ct.constexpr):
    """`(digit, above, m)` of the row's k-th largest key at its first digit, from its programs' counts from each
    bin up (`chunks` of them, `BINS` each, at the start of `counts`; summed here, so that no histogram needs
    zeroing before the counts): the largest digit with at least k keys from it up, the keys above that digit, and
    those from it up (the candidates)."""
    total = tile.zeros(BINS, np.int32)
    for j in range(chunks):
        total = total + tile.load(counts, j * BINS, BINS)
    digit = ct.int32(tile.sum((total >= k).astype(np.int32)) - 1)  # (int32: the gather pass compares it per key)
    bins = tile.arange(BINS, np.int32)
    return digit, tile.sum(ct.where(bins == digit + 1, total, 0)), tile.sum(ct.where(bins == digit, total, 0))


@ct.jit
def count_pass(x, work, n, tiles, BITS: ct.constexpr, FIRST: ct.constexpr, TILE: ct.constexpr):
    """Program (c, r): the histogram of chunk c of row r by the keys' top `FIRST` bits, from each bin up, at
    `work[r, c * 2**FIRST:]`."""
    c, r = ct.program_id(0), ct.program_id(1)
    BINS = 1 << FIRST
    row = x[r]
    h = tile.zeros(BINS, np.int32)
    for t in range(c * tiles, (c + 1) * tiles):
        base = t * TILE
        key = tile.sort_key(tile.load(row, base, TILE, valid=n - base))
        h = h + tile.histogram((key >> (BITS - FIRST)).astype(np.int32), BINS, valid=n - base)
    before, total = tile.scan(h, exclusive=True, return_total=True)
    tile.store(work[r], c * BINS, total - before)


@ct.jit
def gather_pass(
    x,
    work,
    n,
    k,
    tiles,
    BITS: ct.constexpr,
    FIRST: ct.constexpr,
    CHUNKS: ct.constexpr,
    TILE: ct.constexpr,
):
    """Program (c, r): the indices of the keys of chunk c of row r whose first digit is the k-th largest key's or
    larger (the candidates), in row order, to their places in the row's candidates (`work[r]` after the counts of
    the row's programs; after them, program 0 leaves the first digit's `(digit, above, m)` for `finish`);
    `CHUNKS`: a power of two, at least the programs of a row."""
    c, r, chunks = ct.program_id(0), ct.program_id(1), ct.num_programs(0)
    BINS = 1 << FIRST
    counts = work[r]
    digit, above, m = first_digit(counts, k, chunks, BINS)
    if c == 0:
        found = chunks * BINS + n
        counts[found] = digit
        counts[found + 1] = above
        counts[found + 2] = m
    before = tile.arange(CHUNKS, np.int32)  # (the programs before this one: their keys from the digit up)
    ranks = ct.int32(tile.sum(tile.gather(counts, before * BINS + digit, mask=before < c)))
    row = x[r]
    first = ct.int32(chunks * BINS)  # (where the row's candidates start in `counts`)
    lowest = ct.uint32(digit) << (BITS - FIRST)  # (the smallest key with that first digit: no shift per key)
    # the per-key work in 32 bits (a key's digit, its index, its rank): 64-bit compares and adds cost two or more
    # instructions each, and this pass is bound by its instructions
    for t in range(c * tiles, (c + 1) * tiles):
        base = ct.int32(t * TILE)
        keep = (tile.arange(TILE, np.int32) < ct.int32(n) - base) & (
            tile.sort_key(tile.load(row, base, TILE, valid=n - base)) >= lowest
        )
        at, ranks = tile.scan(keep.astype(np.int32), exclusive=True, initial=ranks, return_total=True)
        tile.scatter(counts, at + first, tile.arange(TILE, np.int32) + base, mask=keep)


def finish(
    x,
    work,
    vals,
    idx,
    r,
    k,
    chunks,
    BITS: ct.constexpr,
    FIRST: ct.constexpr,
    DIGIT: ct.constexpr,
    PASSES: ct.constexpr,
    TILE: ct.constexpr,
):
    """Row r's k largest from its candidates, unsorted, above the threshold first, each kind in row order, to
    `vals[r]` and `idx[r]`: the key's other `PASSES` digits of `DIGIT` bits, one pass over the candidates each,
    then their compaction. `chunks`: the programs per row of the passes before."""
    BINS = 1 << FIRST
    counts, row = work[r], x[r]
    first = chunks * BINS  # (where the candidates are in `counts`; after them, what `gather_pass` found)
    found = first + x.shape[1]
    digit, above, m = counts[found], counts[found + 1], counts[found + 2]
    prefix = np.int64(digit)  # (the threshold takes every bit of a 32-bit key)
    for j in range(PASSES):
        shift = BITS - FIRST - DIGIT * (j + 1)
        h = tile.zeros(1 << DIGIT, np.int32)
        for t in range(ct.cdiv(m, TILE)):
            base = t * TILE
            inside = tile.arange(TILE, np.int32) < m - base
            key = tile.sort_key(tile.gather(row, tile.load(counts, first + base, TILE, valid=m - base), mask=inside))
            d = ((key >> shift) & ((1 << DIGIT) - 1)).astype(np.int32)
            counted = ct.where((key >> (shift + DIGIT)) == prefix, d, -1)
            # (few candidates over few bins: one set of counters, not the per-lane copies a long loop gets)
            h = h + tile.histogram(counted, 1 << DIGIT, valid=m - base, algorithm="atomic")
        digit, above = resolve(h, above, k, 1 << DIGIT)
        prefix = prefix * (1 << DIGIT) + digit
    ranks = 0
    for t in range(ct.cdiv(m, TILE)):
        base = t * TILE
        inside = tile.arange(TILE, np.int32) < m - base
        v = tile.gather(row, tile.load(counts, first + base, TILE, valid=m - base), mask=inside)
        key = tile.sort_key(v)
        over = inside & (key > prefix)
        equal = inside & (key == prefix)
        packed = over.astype(np.int64) + equal.astype(np.int64) * (1 << 32)  # (both ranks in one scan)
        rank, ranks = tile.scan(packed, exclusive=True, initial=ranks, return_total=True)
        equal_rank = (rank >> 32).astype(np.int32)
        at = ct.where(over, (rank & 0xFFFFFFFF).astype(np.int32), above + equal_rank)
        keep = over | (equal & (equal_rank < k - above))
        tile.scatter(vals[r], at, v, mask=keep)
        tile.scatter(idx[r], at, tile.load(counts, first + base, TILE, valid=m - base), mask=keep)


def sorted_survivors(vals, idx, k, K: ct.constexpr):
    """The row's k survivors, largest first, ties in row order (their order in `vals`), with their indices."""
    return tile.topk(tile.load(vals, 0, K, valid=k), K, tile.load(idx, 0, K, valid=k), valid=k)


@ct.jit
def select_pass(
    x,
    work,
    vals,
    idx,
    k,
    chunks,
    BITS: ct.constexpr,
    FIRST: ct.constexpr,
    DIGIT: ct.constexpr,
    PASSES: ct.constexpr,
    K: ct.constexpr,
    TILE: ct.constexpr,
):
    """Program r: row r's k largest from its candidates, sorted, largest first, to `vals[r]`, `idx[r]`."""
    r = ct.program_id(0)
    finish(x, work, vals, idx, r, k, chunks, BITS, FIRST, DIGIT, PASSES, TILE)
    v, i = sorted_survivors(vals[r], idx[r], k, K)
    tile.store(vals[r], 0, v, valid=k)
    tile.store(idx[r], 0, i, valid=k)


@ct.jit
def sample_pass(
    x,
    work,
    vals,
    idx,
    uniform,
    tokens,
    k,
    chunks,
    top_p,
    BITS: ct.constexpr,
    FIRST: ct.constexpr,
    DIGIT: ct.constexpr,
    PASSES: ct.constexpr,
    K: ct.constexpr,
    TILE: ct.constexpr,
):
    """Program r: a token of row r's nucleus (the fewest of its k largest, sorted, whose softmax mass reaches
    top_p), drawn with `uniform[r]` from the nucleus' renormalised distribution."""
    r = ct.program_id(0)
    finish(x, work, vals, idx, r, k, chunks, BITS, FIRST, DIGIT, PASSES, TILE)
    v, i = sorted_survivors(vals[r], idx[r], k, K)
    inside = tile.arange(K, np.int32) < k
    logits = v.astype(np.float32)
    p = ct.where(inside, ct.exp(logits - tile.max(ct.where(inside, logits, -np.inf))), 0.0)
    cdf, mass = tile.scan(p, return_total=True)
    kept = ct.maximum(tile.sum(((cdf - p < top_p * mass) & inside).astype(np.int32)), 1)
    nucleus = tile.sum(ct.where(tile.arange(K, np.int32) == kept - 1, cdf, 0.0))
    chosen = ct.minimum(tile.sum(((cdf <= uniform[r] * nucleus) & inside).astype(np.int32)), kept - 1)
    tokens[r] = tile.sum(ct.where(tile.arange(K, np.int32) == chosen, i, 0))


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


_KERNELS = (count_pass, gather_pass, select_pass, sample_pass, argmax_pass, argmax_merge)
_INTERPRETING = {kernel: ct.jit(kernel.fn, interpret=True) for kernel in _KERNELS}


def _kernel(kernel: ct.JITFunction, x: Any) -> ct.JITFunction:
    """`kernel`, or its interpreting copy for NumPy arrays."""
    return _INTERPRETING[kernel] if isinstance(x, np.ndarray) else kernel


def survivors_tile(k: int) -> int:
    """The tile that holds a row's k survivors: the next power of two, at least a warp."""
    return max(32, 1 << (k - 1).bit_length())


def _gather(x: Any, k: int, tile_size: int) -> tuple[tuple[Any, ...], int, dict[str, int]]:
    """The two passes over whole rows (`count_pass`, `gather_pass`): the arguments of the per-row programs
    (`x, work, vals, idx`), the programs per row of the passes (their `chunks`) and their constants. `work`, one
    int32 allocation, holds per row its histogram, each program's counts from each bin up, then its candidates'
    indices."""
    rows, n = x.shape
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and the row length {n}, got {k}")
    bits = (x.element_size() if hasattr(x, "element_size") else x.dtype.itemsize) * 8
    if bits > 32:
        raise ValueError(f"keys of up to 32 bits are selected, got {x.dtype}")
    first, digit, passes = DIGITS[bits]
    tiles, grid = _chunks(rows, n, tile_size)
    width = (grid[0] << first) + n + 3
    if width >= 1 << 31:
        raise ValueError(f"rows of under 2**31 - {width - n} elements are selected (int32 offsets), got {n}")
    work = empty_like(x, (rows, width), "int32")
    wide = {"BITS": bits, "FIRST": first, "TILE": tile_size}
    _kernel(count_pass, x)[grid](x, work, n, tiles, **wide)
    _kernel(gather_pass, x)[grid](x, work, n, k, tiles, CHUNKS=survivors_tile(grid[0]), **wide)
    vals, idx = empty_like(x, (rows, k), x.dtype), empty_like(x, (rows, k), "int64")
    per_row = {"DIGIT": digit, "PASSES": passes, "K": survivors_tile(k), "BITS": bits, "FIRST": first}
    return (x, work, vals, idx), grid[0], {**per_row, "TILE": candidate_tile(k)}


def candidate_tile(k: int) -> int:
    """The per-row passes' tile for k (`CANDIDATE_TILE`, doubled past `MANY_CANDIDATES`)."""
    return CANDIDATE_TILE * (2 if k > MANY_CANDIDATES else 1)


def _chunks(rows: int, n: int, tile_size: int) -> tuple[int, tuple[int, int]]:
    """`(tiles, grid)`: the tiles of a program's chunk, so that the (chunks, rows) grid has about PROGRAMS
    programs."""
    n_tiles = ct.cdiv(n, tile_size)
    tiles = ct.cdiv(n_tiles, min(n_tiles, max(1, ct.cdiv(PROGRAMS, rows))))
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
    arrays on the GPU, NumPy arrays in the interpreter. `x` must be contiguous; 3 launches (2 for k = 1)."""
    if k == 1 and x.shape[1] >= 1:
        return _argmax(x, tile_size)
    arrays, chunks, constants = _gather(x, k, tile_size)
    _kernel(select_pass, x)[x.shape[0]](*arrays, k, chunks, **constants)
    return arrays[-2:]


def top_p_sample(x: Any, k: int, top_p: float, uniform: Any, *, tile_size: int = TILE) -> Any:
    """One token per row of the logits `x` (int64): among the row's k largest, the fewest whose softmax mass reaches
    `top_p` (the nucleus), sampled from their renormalised softmax with the row's number in `uniform` (float32, in
    [0, 1), one per row): the token whose cumulative probability first exceeds it."""
    arrays, chunks, constants = _gather(x, k, tile_size)
    tokens = empty_like(x, (x.shape[0],), "int64")
    _kernel(sample_pass, x)[x.shape[0]](*arrays, uniform, tokens, k, chunks, float(top_p), **constants)
    return tokens
