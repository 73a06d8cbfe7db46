"""`tile.run_length_decode`: values repeated by their lengths into a tile of a fixed size, and the
full decoded count.

Runs and decoded items are blocked. A partial tile's padding runs get length 0; negative
lengths count as 0; decoded offsets are 64-bit, so `total` is exact however long the runs.
The run ends are a `cub::BlockScan` inclusive sum; each thread then finds the run of its first
item by binary search and walks forward. (`cub::BlockRunLengthDecode` steps one run per decoded
item, so a run of length 0 would put its value into the output.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tile
from ..dtypes import cxx_name, kind
from ..errors import TileTypeError
from ..lang import ir
from ..lang.types import INT64, TileType
from .base import OutArg, ShimCall, TileArg, TileOp, one_d, register


@dataclass
class TileRunLengthDecode(ir.Collective, defs="out total", uses="values lengths"):
    out: ir.Var
    total: ir.Var
    values: ir.Var
    lengths: ir.Var


@register
class RunLengthDecode(TileOp):
    publics = (tile.run_length_decode,)
    stmt = TileRunLengthDecode

    def build(self, b, public, values, lengths, size):
        values = one_d(b.tile(values, "the run values"), "tile.run_length_decode")
        lengths = one_d(b.tile(lengths, "the run lengths"), "tile.run_length_decode")
        if kind(lengths.type.dtype) not in "iu":
            raise TileTypeError(f"the run lengths must be an integer tile, got {lengths.type}")
        if lengths.type.size != values.type.size:
            raise TileTypeError(f"{values.type.size} run values but {lengths.type.size} run lengths")
        out = b.temp(TileType(values.type.dtype, b.tile_size(size)))
        total = b.temp(INT64)
        b.emit(TileRunLengthDecode(out, total, values, lengths))
        return out, total

    def interpret(self, s: TileRunLengthDecode, frame) -> None:
        values, lengths = frame.get(s.values), np.maximum(frame.get(s.lengths).astype(np.int64), 0)
        total = int(lengths.sum())
        size = s.out.type.size
        decoded = np.repeat(values, np.minimum(lengths, size))[:size]  # no run needs more than `size` copies
        out = np.zeros(size, dtype=values.dtype)
        out[: decoded.size] = decoded
        frame.env[s.out.name] = out
        frame.set(s.total, total)

    def layout(self, s: TileRunLengthDecode, ctx) -> None:
        ctx.join_blocked([s.values, s.lengths])
        ctx.join_blocked([s.out])

    def choose(self, s: TileRunLengthDecode, ctx):
        return ctx.choice(s, "run_length_decode", "BlockScan", "BLOCK_SCAN_WARP_SCANS, search")

    def lower(self, s: TileRunLengthDecode, w) -> ShimCall:
        call = ShimCall(
            f"coop_run_length_decode_{s.cid}",
            (TileArg(s.values, "in0"), TileArg(s.lengths, "in1"), TileArg(s.out, "out0"), OutArg(s.total, "total")),
        )
        w.include("cub/block/block_scan.cuh")
        runs, decoded = w.layout(s.values).items_per_thread, w.layout(s.out).items_per_thread
        block_runs = runs * w.threads
        t = cxx_name(s.values.type.dtype)
        cub_type = f"cub::BlockScan<unsigned long long, {w.threads}>"
        code = w.storage(s.cid, cub_type, f"{t} values[{block_runs}]; unsigned long long ends[{block_runs}]; ")
        body = w.storage_ref(s.cid) + w.items_ref("x", "in0", s.values, runs) + w.items_ref("n", "in1", s.lengths, runs)
        body += w.items_ref("y", "out0", s.out, decoded)
        body += (
            f"  unsigned long long len[{runs}];\n"
            f"  for (int i = 0; i < {runs}; ++i) len[i] = ({w.element_index(s.values)} < {s.values.type.size} "
            "&& n[i] > 0) ? (unsigned long long)n[i] : 0ull;\n"
            "  unsigned long long all;\n"
            f"  {cub_type}(s.temp).InclusiveSum(len, len, all);\n"
            f"  for (int i = 0; i < {runs}; ++i) {{ const int r = {w.element_index(s.values)}; "
            "s.values[r] = x[i]; s.ends[r] = len[i]; }\n"
            "  __syncthreads();\n"
            f"  unsigned long long j = (unsigned long long)threadIdx.x * {decoded};\n"
            f"  int lo = 0, hi = {block_runs};  // the first run ending after item j\n"
            "  while (lo < hi) { const int mid = (lo + hi) / 2; if (s.ends[mid] > j) hi = mid; else lo = mid + 1; }\n"
            f"  int r = lo < {block_runs} ? lo : {block_runs - 1};\n"
            f"  for (int i = 0; i < {decoded}; ++i, ++j) {{\n"
            f"    while (r < {block_runs - 1} && s.ends[r] <= j) ++r;  // skips runs of length 0\n"
            "    y[i] = s.values[r];\n  }\n"
            "  *total = (cuda::std::int64_t)all;\n"
        )
        w.define(call, code, body)
        return call
