"""Mixture-of-experts routing: `moe_align_block_size(topk_ids, block_size, num_experts)`, vLLM's outputs from one
launch, or two for very many routes (tutorials/15_moe_routing.py explains them).

Each of a token's top-k choices is a *route*, numbered `0 .. numel-1` in `topk_ids`' row-major order. The routes
are grouped by expert, in route order within each expert, and each expert's group is padded with the sentinel
`numel` to a multiple of `block_size`, so that a grouped GEMM can give each block of `block_size` rows to one
expert:

- `sorted_token_ids` (int32, `numel + num_experts * (block_size - 1)` long, or `numel * block_size` when there are
  fewer routes than experts): the routes of expert 0, padding, the routes of expert 1, padding, ...; the
  sentinel `numel` everywhere else;
- `expert_ids` (int32, one per block of `sorted_token_ids`): the expert of each block, -1 past the last;
- `num_tokens_post_padded` (int32, one element): the padded length, a multiple of `block_size`.

Expert ids outside `[0, num_experts)` are skipped. Each program sorts a chunk of up to `CHUNK` routes by expert (a
stable radix sort over the expert id's bits, a skipped id sorting as the last expert with the route -1) and ranks
each route among the placed routes of its expert's run (an exclusive sum of the placed flags, less its value at
the run's head, carried by a max-scan). Every group starts at a multiple of `block_size`, so a route lands at the
start of a block exactly when its position is one: the routes write `expert_ids` of every block they fill (a
block's first row is always a route), and the blocks past the padded total get -1. In one launch every element of
the outputs is written by one program only: no sentinel fill that the routes overwrite, which would need the
fill's programs to finish first.

- Up to `CHUNK` routes (256 tokens of top-8), one launch of `align_routes`, whose programs share no results:
  program 0 sorts all the routes and places each from scans alone: the blocks its expert's group and the groups
  before it have started up to it (an inclusive sum of the routes whose rank is a multiple of `block_size`) and
  its rank give its position. Each other program counts the routes per expert itself (`tile.histogram` of the
  ids, an 8 KB read) and writes the padding (`pad`): the padded counts' exclusive scan gives the groups' starts,
  and the program writes its `COLUMNS` columns of an (experts, block_size) tile of the positions after each
  group's routes, its share of the sentinels past the padded total and of the -1s past the last used block.
- Up to `RECOUNT_CHUNKS` chunks (1024 tokens of top-8), one launch of `recount_routes`: each program counts all
  the routes by expert itself, those before its chunk apart (`RECOUNT_TILE` ids at a time, into one histogram
  in shared memory per loop), so it knows where each expert's group starts and how many of the expert's routes
  come before its own; it stores their sum, sorts its chunk, gathers each route's base by expert, adds the rank
  and scatters, then writes its part of the padding as `align_routes`' other programs do (the grid has at least
  enough programs for the padding's columns).
- More chunks, where recounting costs more than a launch, two launches: `count_routes` (each program's histogram
  of its chunk into its column of an (experts, programs) table, and its share of `sorted_token_ids` filled with
  the sentinel), then `place_routes` (each program sums the table's columns, `COLUMNS` at a time as a 2-D tile
  whose rows, one per expert, each thread sums alone: all of them give the groups' starts, those of the programs
  before it where its own routes go; then as `recount_routes` places them, and writes its share of the -1s).

The host allocates the outputs and the scratch (the starts each program gathers from, the counts table) as one
int32 buffer and returns views of it: one allocation per call, where each costs microseconds of host time. The
three outputs share that buffer's storage (it lives while any of them does).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import coop_tiles as ct
from coop_tiles import tile

from ._arrays import empty_like, split

#: routes per program
CHUNK = 2048
#: items per store of a `fill` (a range longer than that takes several)
FILL = 4096
#: programs' counts per step of `place_routes`' sums (a power of two up to this many: the programs)
COLUMNS = 64
#: the most chunks `recount_routes` takes in one launch (each of its programs reads all the ids): on an H200 at 16
#: chunks (4096 tokens of top-8) two launches took 15.5 us against one launch's 18.0 (do_bench; kernels 2.4 + 8.4 us
#: against 14.2: reading 128 KB of ids per program costs more than a launch); at 4 chunks a program reads 32 KB
#: (not measured: benchmarks/moe_probe.py times both paths at its sizes)
RECOUNT_CHUNKS = 4
#: ids per step of `recount_routes`' counting loops
RECOUNT_TILE = 8192
#: elements of the (experts, COLUMNS) tile of padding positions a program of `pad` writes at most (COLUMNS: a power
#: of two up to the block size, `pad_columns`)
PAD_TILE = 4096


def fill(a, start, end, value, SIZE):
    """`value` into `a[start:end]`, SIZE at a time."""
    for at in range(start, end, SIZE):
        tile.store(a, at, tile.full(SIZE, value, np.int32), valid=end - at)


def share(start, end, part, parts, a, value, SIZE):
    """Part `part` of `parts` of the range `a[start:end]` filled with `value`."""
    step = ct.cdiv(end - start, parts)
    fill(a, start + step * part, ct.minimum(start + step * (part + 1), end), value, SIZE)


def place(keys, routes, at, placed, sorted_ids, expert_ids, block_size):
    """Routes to `sorted_ids[at]` where `placed`, and the expert of each block whose first row is one of them."""
    tile.scatter(sorted_ids, at, routes, mask=placed)
    tile.scatter(expert_ids, at // block_size, keys, mask=placed & (at % block_size == 0))


def sorted_chunk(ids, base, numel, CHUNK, EXPERTS, BITS):
    """The chunk of routes at `base` sorted by expert: `(keys, routes, rank, placed)`, whether each is placed (a
    route of an expert in range) and its rank among the placed routes of its expert's run. A skipped id sorts as
    the last expert, whose run it joins, with the route -1: so the keys need only the experts' bits."""
    e = tile.load(ids, base, CHUNK, valid=numel - base, other=-1)
    kept = (e >= 0) & (e < EXPERTS)
    route = ct.where(kept, tile.arange(CHUNK, np.int32) + base, -1)
    keys, routes = tile.sort(ct.where(kept, e, EXPERTS - 1).astype(np.int32), route, valid=numel - base, end_bit=BITS)
    placed = routes >= 0  # (also false past `numel`: those were loaded as -1, not kept)
    before = tile.scan(placed.astype(np.int32), exclusive=True)  # placed routes before each
    rank = before - tile.scan(ct.where(tile.flag_heads(keys), before, 0), "max")
    return keys, routes, rank, placed


def groups(counts, block_size):
    """The routes' counts per expert padded to the block (`padded`), their exclusive scan (where each expert's group
    starts) and their total: `(padded, starts, total)`."""
    padded = (counts + block_size - 1) // block_size * block_size
    starts, total = tile.scan(padded, exclusive=True, return_total=True)
    return padded, starts, total


def pad(counts, sorted_ids, expert_ids, numel, block_size, padded_len, n_blocks, part, parts, COLUMNS):
    """Part `part` of `parts` of the padding, from the routes' `counts` per expert: the sentinel in columns
    `part*COLUMNS ..` of each group's padding (an (experts, COLUMNS) tile of positions after its routes) and in
    a share of the tail past the padded total, and -1 in a share of the blocks past the last used one."""
    padded, starts, total = groups(counts, block_size)
    column = tile.arange(COLUMNS, np.int32)[None, :] + part * COLUMNS
    padding = column < (padded - counts)[:, None]
    tile.scatter(sorted_ids, (starts + counts)[:, None] + column, numel, mask=padding)
    share(total, padded_len, part, parts, sorted_ids, numel, FILL)
    share(total // block_size, n_blocks, part, parts, expert_ids, -1, FILL)


@ct.jit
def align_routes(
    ids,
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
    COLUMNS: ct.constexpr,
):
    """All the routes (at most CHUNK): program 0 places the routes, the others write the padding (the module
    docstring). No program reads what another writes."""
    p = ct.program_id(0)
    if p == 0:
        keys, routes, rank, placed = sorted_chunk(ids, 0, numel, CHUNK, EXPERTS, BITS)
        first = placed & (rank % block_size == 0)  # a route that starts a block
        blocks, used = tile.scan(first.astype(np.int32), return_total=True)  # blocks started up to each route
        at = (blocks - 1) * block_size + rank % block_size
        place(keys, routes, at, placed, sorted_ids, expert_ids, block_size)
        post_padded[0] = used * block_size
    else:
        counts = tile.histogram(tile.load(ids, 0, CHUNK, valid=numel, other=-1), EXPERTS, valid=numel)
        helpers = ct.num_programs(0) - 1
        pad(counts, sorted_ids, expert_ids, numel, block_size, padded_len, n_blocks, p - 1, helpers, COLUMNS)


@ct.jit
def recount_routes(
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
    COLUMNS: ct.constexpr,
    TILE: ct.constexpr,
):
    """Program p: counts all the routes by expert itself, those before its chunk apart (TILE at a time), places
    its chunk's routes (if it has one) and writes its part of the padding (the module docstring)."""
    p = ct.program_id(0)
    base = p * CHUNK
    upto = ct.minimum(base, numel)
    before = tile.zeros(EXPERTS, np.int32)
    for start in range(0, upto, TILE):
        experts = tile.load(ids, start, TILE, valid=upto - start, other=-1)
        before = before + tile.histogram(experts, EXPERTS, valid=upto - start)
    after = tile.zeros(EXPERTS, np.int32)
    for start in range(upto, numel, TILE):
        experts = tile.load(ids, start, TILE, valid=numel - start, other=-1)
        after = after + tile.histogram(experts, EXPERTS, valid=numel - start)
    counts = before + after
    if base < numel:
        _, starts, total = groups(counts, block_size)
        tile.store(offsets, p * EXPERTS, starts + before)  # (gathered from below, by expert)
        keys, routes, rank, placed = sorted_chunk(ids, base, numel, CHUNK, EXPERTS, BITS)
        at = tile.gather(offsets, keys + p * EXPERTS, mask=placed) + rank
        place(keys, routes, at, placed, sorted_ids, expert_ids, block_size)
        if p == 0:
            post_padded[0] = total
    pad(counts, sorted_ids, expert_ids, numel, block_size, padded_len, n_blocks, p, ct.num_programs(0), COLUMNS)


@ct.jit
def count_routes(ids, counts, sorted_ids, numel, padded_len, CHUNK: ct.constexpr, EXPERTS: ct.constexpr):
    """Program p: the histogram of routes `p*CHUNK ..` by expert into `counts[p]`, and the sentinel into its share
    of `sorted_ids`."""
    p = ct.program_id(0)
    base = p * CHUNK
    experts = tile.load(ids, base, CHUNK, valid=numel - base, other=-1)
    tile.store(counts, (0, p), tile.histogram(experts, EXPERTS, valid=numel - base)[:, None])
    share(0, padded_len, p, ct.num_programs(0), sorted_ids, numel, FILL)


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
    _, starts, padded_total = groups(total, block_size)
    tile.store(offsets, p * EXPERTS, starts + before)  # (gathered from below, by expert)
    keys, routes, rank, placed = sorted_chunk(ids, p * CHUNK, numel, CHUNK, EXPERTS, BITS)
    at = tile.gather(offsets, keys + p * EXPERTS, mask=placed) + rank
    place(keys, routes, at, placed, sorted_ids, expert_ids, block_size)
    share(padded_total // block_size, n_blocks, p, ct.num_programs(0), expert_ids, -1, FILL)
    if p == 0:
        post_padded[0] = padded_total


_COMPILED = {k: k for k in (align_routes, recount_routes, count_routes, place_routes)}
_INTERPRETING = {k: ct.jit(k.fn, interpret=True) for k in _COMPILED}


def padded_length(numel: int, block_size: int, num_experts: int) -> int:
    """The length of `sorted_token_ids` (vLLM's bound: every expert's group padded by at most `block_size - 1`)."""
    return numel * block_size if numel < num_experts else numel + num_experts * (block_size - 1)


def pad_columns(block_size: int, num_experts: int) -> int:
    """`pad`'s COLUMNS: a power of two, at most `PAD_TILE // num_experts` (at least 1) and no more than
    the block size needs."""
    return min(1 << (block_size - 1).bit_length(), 1 << (max(PAD_TILE // num_experts, 1).bit_length() - 1))


def moe_align_block_size(topk_ids: Any, block_size: int, num_experts: int) -> tuple[Any, Any, Any]:
    """`(sorted_token_ids, expert_ids, num_tokens_post_padded)` of vLLM's `moe_align_block_size` for the integer
    array `topk_ids` (any shape, read row-major; CuPy, PyTorch, or NumPy in the interpreter), in one launch up to
    RECOUNT_CHUNKS chunks of routes, else two (the module docstring). The three are views of one new int32
    buffer."""
    numel = math.prod(topk_ids.shape)  # (not np.prod: microseconds per call where launches take a few)
    flat = topk_ids.reshape(-1)
    length = padded_length(numel, block_size, num_experts)
    n_blocks = ct.cdiv(length, block_size)
    grid = max(ct.cdiv(numel, CHUNK), 1)
    kernels = _INTERPRETING if isinstance(flat, np.ndarray) else _COMPILED
    bits = max(int(num_experts - 1).bit_length(), 1)  # (the sort's key bits: expert ids)
    constexprs = {"CHUNK": CHUNK, "EXPERTS": num_experts, "BITS": bits}
    if grid == 1:
        work = empty_like(flat, (length + n_blocks + 1,), "int32")
        sorted_ids, expert_ids, post_padded = split(work, length, n_blocks)
        columns = pad_columns(block_size, num_experts)
        args = (flat, sorted_ids, expert_ids, post_padded, numel, block_size, length, n_blocks)
        kernels[align_routes][1 + ct.cdiv(block_size, columns)](*args, COLUMNS=columns, **constexprs)
        return sorted_ids, expert_ids, post_padded
    table = num_experts * grid
    if grid <= RECOUNT_CHUNKS:
        work = empty_like(flat, (length + n_blocks + 1 + table,), "int32")
        sorted_ids, expert_ids, post_padded, offsets = split(work, length, n_blocks, 1)
        columns = pad_columns(block_size, num_experts)
        args = (flat, offsets, sorted_ids, expert_ids, post_padded, numel, block_size, length, n_blocks)
        programs = max(grid, ct.cdiv(block_size, columns))
        kernels[recount_routes][programs](*args, COLUMNS=columns, TILE=RECOUNT_TILE, **constexprs)
        return sorted_ids, expert_ids, post_padded
    work = empty_like(flat, (length + n_blocks + 1 + 2 * table,), "int32")
    sorted_ids, expert_ids, post_padded, counts, offsets = split(work, length, n_blocks, 1, table)
    counts = counts.reshape(num_experts, grid)
    kernels[count_routes][grid](flat, counts, sorted_ids, numel, length, CHUNK=CHUNK, EXPERTS=num_experts)
    args = (flat, counts, offsets, sorted_ids, expert_ids, post_padded, numel, block_size, n_blocks)
    columns = min(1 << (grid - 1).bit_length(), COLUMNS)
    kernels[place_routes][grid](*args, COLUMNS=columns, **constexprs)
    return sorted_ids, expert_ids, post_padded
