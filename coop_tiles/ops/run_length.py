"""`tile.run_length_decode`: values repeated by their lengths into a tile of a fixed size, and the
full decoded count (cub::BlockRunLengthDecode, one window from offset 0).

Runs and decoded items are blocked. A partial tile's padding runs get length 0; negative
lengths count as 0; decoded offsets are 64-bit, so `total` is exact however long the runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tile
from ..dtypes import cxx_name, kind
from ..errors import TileTypeError
from ..lang import ir
from ..lang.types import INT64, TileType
from .base import OutArg, ShimCall, TileArg, TileOp, register


@dataclass
class TileRunLengthDecode(ir.Collective):
    out: ir.Var
    total: ir.Var
    values: ir.Var
    lengths: ir.Var

    @property
    def outs(self) -> tuple[ir.Var, ...]:
        return (self.out, self.total)


@register
class RunLengthDecode(TileOp):
    publics = (tile.run_length_decode,)
    stmt = TileRunLengthDecode

    def build(self, b, a, public):
        values = b.tile(a["values"], "the run values")
        lengths = b.tile(a["lengths"], "the run lengths")
        if kind(lengths.type.dtype) not in "iu":
            raise TileTypeError(f"the run lengths must be an integer tile, got {lengths.type}")
        if lengths.type.size != values.type.size:
            raise TileTypeError(f"{values.type.size} run values but {lengths.type.size} run lengths")
        out = b.temp(TileType(values.type.dtype, b.tile_size(a["size"])))
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
        return ctx.choice(s, "run_length_decode", "BlockRunLengthDecode", "RunLengthDecode")

    def lower(self, s: TileRunLengthDecode, w) -> ShimCall:
        call = ShimCall(
            f"coop_run_length_decode_{s.cid}",
            (TileArg(s.values, "in0"), TileArg(s.lengths, "in1"), TileArg(s.out, "out0"), OutArg(s.total, "total")),
        )
        w.include("cub/block/block_run_length_decode.cuh")
        runs, decoded = w.layout(s.values).items_per_thread, w.layout(s.out).items_per_thread
        t = cxx_name(s.values.type.dtype)
        cub_type = f"cub::BlockRunLengthDecode<{t}, {w.threads}, {runs}, {decoded}, unsigned long long>"
        code = w.storage(s.cid, cub_type)
        body = w.storage_ref(s.cid) + w.items_ref("x", "in0", s.values, runs) + w.items_ref("n", "in1", s.lengths, runs)
        body += w.items_ref("y", "out0", s.out, decoded)
        body += f"  {t} v[{runs}];\n  unsigned long long len[{runs}];\n"
        body += (
            f"  for (int i = 0; i < {runs}; ++i) {{ v[i] = x[i]; "
            f"len[i] = ({w.element_index(s.values)} < {s.values.type.size} && n[i] > 0) ? "
            "(unsigned long long)n[i] : 0ull; }\n"
        )
        body += "  unsigned long long decoded_size;\n"
        body += f"  {cub_type} rld(s.temp, v, len, decoded_size);\n"
        body += f"  {t} d[{decoded}];\n  rld.RunLengthDecode(d, 0ull);\n"
        body += f"  for (int i = 0; i < {decoded}; ++i) y[i] = d[i];\n"
        body += "  *total = (cuda::std::int64_t)decoded_size;\n"
        w.define(call, code, body)
        return call
