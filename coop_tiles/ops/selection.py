"""Selection: `tile.select`, `tile.partition`, `tile.unique`, `tile.run_length_encode`, one op over one
core, and `tile.select(..., chained=True)`, which also gives the number selected by the programs before.

The core is CUB's select, in a block: each thread flags its items (blocked) as bits of a word per 32
items, a `cub::BlockScan` exclusive sum of each thread's count of flags gives the thread its first
rank and the block the count, each thread writes its selected items at consecutive ranks into shared
memory, and after one barrier each thread reads the items of its result tile (in whatever
arrangement the planner gave it) from there. (Scanning a rank per item instead, as CUB's agents do,
keeps two more arrays of the thread's items live: 96 registers a thread against 56 for the chained
select of 32 int32 items at 128 threads, and the occupancy a memory-bound kernel needs.) The shared
arrays have a padding element every 32 (`PAD`), so that threads writing runs of consecutive ranks,
and warps reading consecutive elements, hit distinct banks (what cub::BlockExchange's padding does).

- `select`: the flags are the user's, and false for elements `i >= valid`; items past the count are
  written as zeros (the interpreter does the same; the contract leaves them unspecified).
- `partition`: a false element goes to `count + (i - its rank)` (the falses before it), so both parts
  keep their order; elements `i >= valid` are false.
- `unique`: the flags are the run heads (`cub::BlockDiscontinuity::FlagHeads`, `a != b` as
  `tile.flag_heads` says, so each NaN is a run of its own) among the first `valid` elements.
- `run_length_encode`: `unique`, and each head's element index selected beside its value; a run's
  length is the next head's index (or `valid`) minus its own.

With `chained=True` (select only), the count is also the block's aggregate of a chained exclusive scan
over the grid (`ops/chained.py`: tickets as program ids, the decoupled look-back): the first warp looks
back while the block scatters, and the barrier before the read-back shares the offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from .. import tile
from ..dtypes import bool_, cxx_name
from ..errors import InternalError, TileTypeError
from ..lang import ir
from ..lang.types import INT64, ScalarType, TileType
from ..lang.values import describe, is_tile
from ..planner.layout import BLOCKED, SYNCS
from . import chained as chain
from .base import OutArg, ShimCall, TileArg, TileOp, one_d, register, seq, valid_arg, valid_count, valid_value
from .neighbors import heads, heads_functor
from .options import COUNT, TILE, TUPLE, Forbidden, Option

INT32 = ScalarType(np.dtype(np.int32))
SELECT, PARTITION, UNIQUE, RUNS = "select", "partition", "unique", "run_length_encode"
CHAINED = "tile.select(..., chained=True)"
#: the padded index of element `e` in the shims' shared arrays (a padding element every 32)
PAD = "coop_select_pad"
PAD_HELPER = f"__device__ __forceinline__ int {PAD}(int e) {{ return e + (e >> 5); }}\n"
#: the chained select's operator: counts add up
SUM = (
    "struct coop_select_sum { __device__ __forceinline__ long long operator()(long long a, long long b) const "
    "{ return a + b; } };\n"
)


@dataclass
class TileSelect(ir.Collective, defs="outs lengths count offset", uses="srcs flags valid", attrs="kind chained"):
    """`kind` (SELECT, PARTITION, UNIQUE, RUNS) of `srcs` by `flags` (None: by runs) into `outs`."""

    outs: tuple[ir.Var, ...]
    lengths: ir.Var | None  # a run-length encoding's lengths
    count: ir.Var
    offset: ir.Var | None  # a chained select's: the number selected by the programs before
    srcs: tuple[ir.Var, ...]
    flags: ir.Var | None
    valid: ir.Value | None
    kind: str
    chained: bool = False


@register
class Select(TileOp):
    publics = (tile.select, tile.partition, tile.unique, tile.run_length_encode)
    stmt = TileSelect
    options = (
        Option("t", (TILE, TUPLE)),
        Option("flags", (TILE,)),  # (select and partition only: what tells them from unique and run_length_encode)
        Option("valid", (None, COUNT)),
        Option("chained", (False, True), once=(True,)),
    )
    forbids = (
        Forbidden(
            lambda c: c["t"] is TUPLE and "flags" not in c,
            TileTypeError,
            lambda public, c: f"{public} takes a tile, got a tuple of 2",
        ),
    )

    def build(self, b, public, t, flags=None, *, valid, chained=False):
        kind = {tile.select: SELECT, tile.partition: PARTITION, tile.unique: UNIQUE}.get(public, RUNS)
        what = f"tile.{public.__name__}"
        srcs = seq(t)
        if not srcs or not all(is_tile(x) for x in srcs) or (kind in (UNIQUE, RUNS) and not is_tile(t)):
            many = " (or a tuple of tiles)" if kind in (SELECT, PARTITION) else ""
            raise TileTypeError(f"{what} takes a tile{many}, got {describe(t)}")
        for x in srcs:
            one_d(x, what)
        size = srcs[0].type.size
        if any(x.type.size != size for x in srcs):
            raise TileTypeError(f"{what} of tiles of different sizes: " + ", ".join(str(x.type) for x in srcs))
        if kind in (SELECT, PARTITION):
            flags = one_d(b.tile(flags, "the flags"), what)
            if flags.type.dtype != bool_:
                raise TileTypeError(f"the flags must be a bool tile, got {flags.type}; compare it (t > 0)")
            if flags.type.size != size:
                raise TileTypeError(f"the flags have {flags.type.size} elements and the tile {size}")
        chained = kind == SELECT and b.constant(chained, "chained", bool)
        if chained:
            chain.check_placement(b, CHAINED)
        outs = tuple(b.temp(x.type) for x in srcs)
        lengths = b.temp(TileType(np.dtype(np.int32), size)) if kind == RUNS else None
        count = b.temp(INT32)
        offset = b.temp(INT64) if chained else None
        b.emit(TileSelect(outs, lengths, count, offset, srcs, flags, valid_value(b, valid), kind, chained))
        result = outs if isinstance(t, tuple) else outs[0]
        return (result, *([lengths] if lengths is not None else []), count, *([offset] if chained else []))

    def interpret(self, s: TileSelect, frame) -> None:
        xs = [frame.get(x) for x in s.srcs]
        size = xs[0].size
        v = valid_count(frame, s.valid, size)
        chosen = np.zeros(size, bool)
        chosen[:v] = np.asarray(frame.get(s.flags), bool)[:v] if s.flags is not None else heads(xs[0][:v])
        first = np.flatnonzero(chosen)
        count = first.size
        if s.kind == PARTITION:
            order = np.concatenate([first, np.flatnonzero(~chosen)])
            outs = [x[order] for x in xs]
        else:
            outs = [np.concatenate([x[first], np.zeros(size - count, x.dtype)]) for x in xs]
        for var, value in zip(s.outs, outs):
            frame.env[var.name] = value
        if s.lengths is not None:
            lengths = np.zeros(size, np.int32)
            lengths[:count] = np.diff(np.append(first, v))
            frame.env[s.lengths.name] = lengths
        frame.set(s.count, count)
        if s.chained:  # programs run in program-id order: the count of those before
            before = frame.launch.get(s.sid, 0)
            frame.set(s.offset, before)
            frame.launch[s.sid] = before + count

    def layout(self, s: TileSelect, ctx) -> None:
        ctx.join_blocked([*s.srcs, *([s.flags] if s.flags is not None else [])])
        ctx.join([*s.outs, *([s.lengths] if s.lengths is not None else [])])

    def choose(self, s: TileSelect, ctx):
        label = f"{s.kind}{', chained' if s.chained else ''}"
        algorithm = "BLOCK_SCAN_WARP_SCANS, scatter to shared"
        if s.kind in (UNIQUE, RUNS):
            algorithm = "FlagHeads, " + algorithm
        # a chained select's shim waits on other blocks: the carve does not count on its barriers
        return ctx.choice(s, label, "BlockScan", algorithm, sync="" if s.chained else SYNCS)

    def launch_check(self, s: TileSelect):
        return partial(chain.check_grid, what=CHAINED) if s.chained else None

    def max_default_threads(self, s: TileSelect, largest: int) -> int | None:
        return chain.max_default_threads(largest) if s.chained else None

    def lower_after(self, s: TileSelect, program: ir.Program, w) -> None:
        if s.chained:
            chain.define_prefetches(program, w)

    def body_start(self, s: TileSelect, program: ir.Program):
        return chain.body_start(program, False) if s.chained else None

    def lower(self, s: TileSelect, w) -> ShimCall:
        size = s.srcs[0].type.size
        args = [TileArg(x, f"in{i}") for i, x in enumerate(s.srcs)]
        args += [TileArg(y, f"out{i}") for i, y in enumerate(s.outs)]
        args += [TileArg(s.flags, "flag_items")] if s.flags is not None else []
        args += [TileArg(s.lengths, "len_items")] if s.lengths is not None else []
        args += [valid_arg(s.valid, size), OutArg(s.count, "count_out")]
        args += [OutArg(s.offset, "offset_out")] if s.chained else []
        call = ShimCall(f"coop_{s.kind}_{s.cid}", tuple(args))
        items, out_items = w.layout(s.srcs[0]).items_per_thread, w.layout(s.outs[0]).items_per_thread
        threads = w.threads
        w.include("cub/block/block_scan.cuh")
        w.helper(PAD_HELPER)
        padded = size + size // 32 + 1
        types = [cxx_name(x.type.dtype) for x in s.srcs]
        scan_type = f"cub::BlockScan<int, {threads}>"
        extra = "".join(f"{t} items{i}[{padded}]; " for i, t in enumerate(types))
        prelude = ""
        if s.flags is None:
            w.include("cub/block/block_discontinuity.cuh")
            extra += f"typename cub::BlockDiscontinuity<{types[0]}, {threads}>::TempStorage heads; "
            prelude = heads_functor(f"coop_runs_op_{s.cid}", s.srcs[0].type.dtype)
        extra += f"int pos[{padded + 1}]; " if s.lengths is not None else ""
        extra += "cuda::std::int64_t offset; cuda::std::int64_t total; " if s.chained else ""
        code = w.storage(s.cid, scan_type, extra, prelude=prelude)
        body = w.storage_ref(s.cid) + w.clamp_valid(size)
        body += "".join(w.items_ref(f"x{i}", f"in{i}", x, items) for i, x in enumerate(s.srcs))
        body += "".join(w.items_ref(f"y{i}", f"out{i}", y, out_items) for i, y in enumerate(s.outs))
        body += w.items_ref("n", "len_items", s.lengths, out_items) if s.lengths is not None else ""
        index, out_index = w.element_index(s.srcs[0]), w.element_index(s.outs[0])
        if s.flags is not None:
            body += w.items_ref("f", "flag_items", s.flags, items)
            flag = "f[i]"
        else:
            body += (
                f"  bool head[{items}];\n"
                f"  cub::BlockDiscontinuity<{types[0]}, {threads}>(s.heads)"
                f".FlagHeads(head, x0, coop_runs_op_{s.cid}{{}});\n"
            )
            flag = "head[i]"
        if w.layout(s.srcs[0]).arrangement != BLOCKED:
            raise InternalError(f"{s.kind}'s tiles must be blocked: the flags of a thread's items are a run of bits")
        # the thread's items are elements [tid * items, tid * items + items): `mine` of them are below `valid`
        words = -(-items // 32)
        body += (
            f"  const int mine = int(cuda::std::min(cuda::std::max(v - (long long)threadIdx.x * {items}, 0ll), "
            f"{items}ll));\n  unsigned bits[{words}] = {{}};\n  #pragma unroll\n"
            f"  for (int i = 0; i < {items}; ++i) if ({flag}) bits[i / 32] |= 1u << (i % 32);\n"
            f"  int own = 0, first, count;\n  #pragma unroll\n  for (int j = 0; j < {words}; ++j) {{\n"
            "    const int n = mine - 32 * j;\n"
            "    bits[j] &= n >= 32 ? ~0u : (n <= 0 ? 0u : (1u << n) - 1u);\n    own += __popc(bits[j]);\n  }\n"
            f"  {scan_type}(s.temp).ExclusiveSum(own, first, count);\n"
            "  int r = first;  // the rank of the thread's next selected item\n"
        )
        selected = "(bits[i / 32] >> (i % 32) & 1u)"
        if s.chained:
            w.chain_bytes = chain.descriptor_bytes([np.dtype(np.int64)])
            code = chain.LIBRARY + SUM + code
            body += chain.callback("cuda::std::int64_t", "coop_select_sum", None, "s.total")
        k = len(s.srcs)
        if s.kind == PARTITION:
            body += (
                f"  #pragma unroll\n  for (int i = 0; i < {items}; ++i) {{\n    const int e = {index};\n"
                f"    if (e >= {size}) continue;\n    const bool on = {selected};\n"
                f"    const int d = {PAD}(on ? r : count + e - r);\n    "
                + " ".join(f"s.items{j}[d] = x{j}[i];" for j in range(k))
                + " r += on;\n  }\n"
            )
        else:
            position = f" s.pos[{PAD}(r)] = {index};" if s.lengths is not None else ""
            body += (
                f"  #pragma unroll\n  for (int i = 0; i < {items}; ++i) if {selected} {{ const int d = {PAD}(r); "
                + " ".join(f"s.items{j}[d] = x{j}[i];" for j in range(k))
                + position
                + " ++r; }\n"
            )
            if s.lengths is not None:
                body += f"  if (threadIdx.x == 0) s.pos[{PAD}(count)] = int(v);\n"
        if s.chained:  # the first warp looks back once its items are scattered: none of them live across the wait
            body += (
                "  if (threadIdx.x < 32) {\n    const cuda::std::int64_t p = cb((cuda::std::int64_t)count);\n"
                "    if (threadIdx.x == 0) s.offset = p;\n  }\n"
            )
        body += "  __syncthreads();\n"
        body += f"  for (int i = 0; i < {out_items}; ++i) {{\n    const int e = {out_index};\n"
        if s.kind == PARTITION:
            body += "    if (e >= " + str(size) + ") continue;\n    "
            body += " ".join(f"y{j}[i] = s.items{j}[{PAD}(e)];" for j in range(k)) + "\n"
        else:
            body += (
                "    "
                + " ".join(f"y{j}[i] = e < count ? s.items{j}[{PAD}(e)] : {t}{{}};" for j, t in enumerate(types))
                + "\n"
            )
            if s.lengths is not None:
                body += f"    n[i] = e < count ? s.pos[{PAD}(e + 1)] - s.pos[{PAD}(e)] : 0;\n"
        body += "  }\n  *count_out = count;\n"
        body += "  *offset_out = s.offset;\n" if s.chained else ""
        w.define(call, code, body)
        return call
