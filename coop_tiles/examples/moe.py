"""Mixture-of-experts routing: `moe_align_block_size(topk_ids, block_size, num_experts)`, vLLM's outputs from one
tile program, or two for many routes (tutorials/15_moe_routing.py explains them).

Each of a token's top-k choices is a *route*, numbered `0 .. numel-1` in `topk_ids`' row-major order. The routes
are grouped by expert, in route order within each expert, and each expert's group is padded with the sentinel
`numel` to a multiple of `block_size`, so that a grouped GEMM can give each block of `block_size` rows to one
expert:

- `sorted_token_ids` (int32, `numel + num_experts * (block_size - 1)` long, or `numel * block_size` when there are
  fewer routes than experts): the routes of expert 0, padding, the routes of expert 1, padding, ...; the
  sentinel `numel` everywhere else;
- `expert_ids` (int32, one per block of `sorted_token_ids`): the expert of each block, -1 past the last;
- `num_tokens_post_padded` (int32, one element): the padded length, a multiple of `block_size`.

Expert ids outside `[0, num_experts)` are skipped. Up to `CHUNK` routes (256 tokens of top-8), one launch of one
program, `align_routes`, where launching dominates the time: the histogram of all the routes, the groups' starts
(their exclusive scan), the sentinel, then the routes placed as below, and `expert_ids`. More routes, two launches,
`CHUNK` routes per program:

1. `count_routes`: each program's histogram of its chunk's expert ids (`tile.histogram`) into its column of an
   (experts, programs) table; each program also fills its share of `sorted_token_ids` with the sentinel.
2. `place_routes`: each program sums the table's columns, `COLUMNS` at a time as a 2-D tile whose rows (one per
   expert) each thread sums alone (all of them: the counts, whose padded exclusive scan is where each expert's
   group starts; those of the programs before it: where its own routes of each expert go within the group),
   sorts its chunk's routes by expert (a stable radix sort over the expert id's bits), ranks each route within
   its expert's run (a max-scan of the run heads' positions) and scatters it to its place. Program 0 also writes
   `num_tokens_post_padded` and `expert_ids` (each group's expert scattered at its first block, then a running
   max over the blocks).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import coop_tiles as ct
from coop_tiles import tile

from ._arrays import empty_like

#: routes per program
CHUNK = 2048
#: expert-id blocks per step of program 0's running max
BLOCKS = 1024
#: sentinels per store of `align_routes` (the whole `sorted_token_ids` of 2048 routes, 256 experts and blocks of
#: 64 is 18176 long)
FILL = 8192
#: programs' counts per step of `place_routes`' sums (a power of two up to this many: the programs)
COLUMNS = 64


def fill(sorted_ids, start, end, numel, SIZE):
    """The sentinel `numel` into `sorted_ids[start:end]`, SIZE at a time (the planner puts a barrier before each
    store, not knowing that they write apart: fewer, larger stores where the range is long)."""
    for at in range(start, end, SIZE):
        tile.store(sorted_ids, at, tile.full(SIZE, numel, np.int32), valid=end - at)


def place(ids, offsets, sorted_ids, base, row, numel, CHUNK, EXPERTS, BITS):
    """Each route of the chunk at `base` to `sorted_ids[offsets[row + its expert] + its rank in its expert]`."""
    e = tile.load(ids, base, CHUNK, valid=numel - base, other=EXPERTS)
    e = ct.where((e >= 0) & (e < EXPERTS), e, EXPERTS).astype(np.int32)  # (skipped: sorted last, never placed)
    keys, routes = tile.sort(e, tile.arange(CHUNK, np.int32) + base, valid=numel - base, end_bit=BITS)
    position = tile.arange(CHUNK, np.int32)
    rank = position - tile.scan(ct.where(tile.flag_heads(keys), position, 0), "max")
    placed = (position < numel - base) & (keys < EXPERTS)
    at = tile.gather(offsets, keys + row, mask=placed) + rank
    tile.scatter(sorted_ids, at, routes, mask=placed)


def expert_blocks(expert_ids, post_padded, padded, starts, block_size, n_blocks, EXPERTS):
    """`num_tokens_post_padded` and `expert_ids` from the padded counts and their exclusive scan: each group's expert
    scattered at its first block, then a running max over the blocks; -1 past the last."""
    post_padded[0] = tile.sum(padded)
    for start in range(0, n_blocks, BLOCKS):
        tile.store(expert_ids, start, tile.full(BLOCKS, -1, np.int32), valid=n_blocks - start)
    experts = tile.arange(EXPERTS, np.int32)
    tile.scatter(expert_ids, starts // block_size, experts, mask=padded > 0)
    used = tile.sum(padded) // block_size
    carry = -1
    for start in range(0, used, BLOCKS):
        blocks = tile.load(expert_ids, start, BLOCKS, valid=used - start, other=-1)
        filled, carry = tile.scan(blocks, "max", initial=carry, return_total=True)
        tile.store(expert_ids, start, filled, valid=used - start)


@ct.jit
def align_routes(
    ids,
    offsets,
    sorted_ids,
    expert_ids,
    post_padded,
    numel,
    block_size,
    padded_len,
    n_blocks,
    CHUNK: ct.constexpr,
    EXPERTS: ct.constexpr,
    BITS: ct.constexpr,
):
    """One program, all the routes (at most CHUNK): the histogram, the groups' starts (into `offsets`), the sentinel,
    the routes placed, the expert of each block. (The planner puts a barrier between the sentinel's stores and the
    routes' scatter into the same `sorted_ids`, and between the starts' store and their gather.)"""
    experts = tile.load(ids, 0, CHUNK, valid=numel, other=-1)
    padded = (tile.histogram(experts, EXPERTS, valid=numel) + block_size - 1) // block_size * block_size
    starts = tile.scan(padded, exclusive=True)
    tile.store(offsets, 0, starts)
    fill(sorted_ids, 0, padded_len, numel, FILL)
    place(ids, offsets, sorted_ids, 0, 0, numel, CHUNK, EXPERTS, BITS)
    expert_blocks(expert_ids, post_padded, padded, starts, block_size, n_blocks, EXPERTS)


@ct.jit
def count_routes(ids, counts, sorted_ids, numel, padded_len, CHUNK: ct.constexpr, EXPERTS: ct.constexpr):
    """Program p: the histogram of routes `p*CHUNK ..` by expert into `counts[p]`, and the sentinel into its share
    of `sorted_ids`."""
    p = ct.program_id(0)
    base = p * CHUNK
    experts = tile.load(ids, base, CHUNK, valid=numel - base, other=-1)
    tile.store(counts, (0, p), tile.histogram(experts, EXPERTS, valid=numel - base)[:, None])
    share = ct.cdiv(padded_len, ct.num_programs(0))
    fill(sorted_ids, share * p, ct.minimum(share * (p + 1), padded_len), numel, CHUNK)


@ct.jit
def place_routes(
    ids,
    counts,
    offsets,
    sorted_ids,
    expert_ids,
    post_padded,
    numel,
    block_size,
    n_blocks,
    CHUNK: ct.constexpr,
    EXPERTS: ct.constexpr,
    BITS: ct.constexpr,
    COLUMNS: ct.constexpr,
):
    """Program p: each route of its chunk to `sorted_ids[group start + routes of its expert before it]`."""
    p = ct.program_id(0)
    total = tile.zeros(EXPERTS, np.int32)
    before = tile.zeros(EXPERTS, np.int32)
    for c in range(0, ct.num_programs(0), COLUMNS):
        table = tile.load(counts, (0, c), (EXPERTS, COLUMNS), valid=(None, ct.num_programs(0) - c))
        total = total + tile.sum(table, axis=1)
        program = tile.arange(COLUMNS, np.int32)[None, :] + c
        before = before + tile.sum(ct.where(program < p, table, 0), axis=1)
    padded = (total + block_size - 1) // block_size * block_size
    starts = tile.scan(padded, exclusive=True)
    tile.store(offsets, p * EXPERTS, starts + before)  # (gathered from below, by expert)
    place(ids, offsets, sorted_ids, p * CHUNK, p * EXPERTS, numel, CHUNK, EXPERTS, BITS)
    if p == 0:
        expert_blocks(expert_ids, post_padded, padded, starts, block_size, n_blocks, EXPERTS)


_COMPILED = {k: k for k in (align_routes, count_routes, place_routes)}
_INTERPRETING = {k: ct.jit(k.fn, interpret=True) for k in _COMPILED}


def padded_length(numel: int, block_size: int, num_experts: int) -> int:
    """The length of `sorted_token_ids` (vLLM's bound: every expert's group padded by at most `block_size - 1`)."""
    return numel * block_size if numel < num_experts else numel + num_experts * (block_size - 1)


def moe_align_block_size(topk_ids: Any, block_size: int, num_experts: int) -> tuple[Any, Any, Any]:
    """`(sorted_token_ids, expert_ids, num_tokens_post_padded)` of vLLM's `moe_align_block_size` for the integer
    array `topk_ids` (any shape, read row-major; CuPy, PyTorch, or NumPy in the interpreter), in one launch when the
    routes fit one chunk, else two (the module docstring)."""
    numel = math.prod(topk_ids.shape)  # (not np.prod: microseconds per call where launches take a few)
    flat = topk_ids.reshape(-1)
    length = padded_length(numel, block_size, num_experts)
    n_blocks = ct.cdiv(length, block_size)
    grid = max(ct.cdiv(numel, CHUNK), 1)
    sorted_ids = empty_like(flat, (length,), "int32")
    expert_ids = empty_like(flat, (n_blocks,), "int32")
    post_padded = empty_like(flat, (1,), "int32")
    offsets = empty_like(flat, (grid * num_experts,), "int32")
    kernels = _INTERPRETING if isinstance(flat, np.ndarray) else _COMPILED
    bits = int(num_experts).bit_length()  # (expert ids and the skipped ones' `num_experts`)
    constexprs = {"CHUNK": CHUNK, "EXPERTS": num_experts}
    if grid == 1:
        args = (flat, offsets, sorted_ids, expert_ids, post_padded, numel, block_size, length, n_blocks)
        kernels[align_routes][1](*args, BITS=bits, **constexprs)
        return sorted_ids, expert_ids, post_padded
    counts = empty_like(flat, (num_experts, grid), "int32")
    kernels[count_routes][grid](flat, counts, sorted_ids, numel, length, **constexprs)
    args = (flat, counts, offsets, sorted_ids, expert_ids, post_padded, numel, block_size, n_blocks)
    columns = min(1 << (grid - 1).bit_length(), COLUMNS)
    kernels[place_routes][grid](*args, BITS=bits, COLUMNS=columns, **constexprs)
    return sorted_ids, expert_ids, post_padded
