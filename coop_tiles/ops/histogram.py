"""`tile.histogram`: an int32 tile of `bins` counts of an integer tile (cub::BlockHistogram).

Values outside `[0, bins)` and elements `i >= valid` are not counted: each item becomes a bin
index, with every uncounted item sent to one extra bin, `bins`, that is never read. So CUB's
primitive runs on `bins + 1` counters, whose memory is part of the op's TempStorage, and
never writes outside them.

`algorithm="auto"` takes BLOCK_HISTO_SORT when there are at most 16 bins and at least 8 items
per thread (many items contend for few counters: sorting and counting runs avoids the
serialised shared-memory atomics), else BLOCK_HISTO_ATOMIC.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tile
from ..dtypes import kind
from ..errors import TileTypeError, TileValueError
from ..lang import ir
from ..lang.types import INT64, TileType
from .base import ShimCall, TileArg, TileOp, ValueArg, register
from .memory import _valid

ALGORITHMS = {"atomic": "BLOCK_HISTO_ATOMIC", "sort": "BLOCK_HISTO_SORT"}
SORT_MAX_BINS = 16
SORT_MIN_ITEMS = 8


@dataclass
class TileHistogram(ir.Collective):
    out: ir.Var
    src: ir.Var
    bins: int
    valid: ir.Value | None
    algorithm: str  # "auto", "atomic" or "sort"


def resolve_algorithm(algorithm: str, bins: int, items_per_thread: int) -> str:
    """The algorithm "auto" stands for (see the module docstring)."""
    if algorithm != "auto":
        return algorithm
    return "sort" if bins <= SORT_MAX_BINS and items_per_thread >= SORT_MIN_ITEMS else "atomic"


@register
class Histogram(TileOp):
    publics = (tile.histogram,)
    stmt = TileHistogram

    def build(self, b, a, public):
        src = b.tile(a["t"], "tile.histogram's argument")
        if kind(src.type.dtype) not in "iu":
            raise TileTypeError(
                f"tile.histogram counts the values of an integer tile, got {src.type}; convert it first "
                "(t.astype(np.int32)): values outside [0, bins) are not counted"
            )
        bins = b.constant(a["bins"], "bins", int)
        if bins < 1:
            raise TileValueError(f"bins must be a positive int, got {bins}")
        algorithm = b.constant(a["algorithm"], "algorithm", str)
        if algorithm not in ("auto", *ALGORITHMS):
            raise TileValueError(f"algorithm must be 'auto', 'atomic' or 'sort', got {algorithm!r}")
        out = b.temp(TileType(np.dtype(np.int32), bins))
        b.emit(TileHistogram(out, src, bins, _valid(b, a["valid"]), algorithm))
        return out

    def interpret(self, s: TileHistogram, frame) -> None:
        x = frame.get(s.src)
        count = x.size if s.valid is None else int(np.clip(int(frame.get(s.valid)), 0, x.size))
        x = x[:count]
        wide = x.astype(np.uint64) if x.dtype.kind == "u" else x.astype(np.int64)
        counted = wide[(wide >= 0) & (wide < s.bins)].astype(np.int64)
        frame.env[s.out.name] = np.bincount(counted, minlength=s.bins).astype(np.int32)

    def choose(self, s: TileHistogram, ctx):
        algorithm = resolve_algorithm(s.algorithm, s.bins, ctx.tiles[s.src.name].items_per_thread)
        return ctx.choice(s, f"histogram[{s.bins}]", "BlockHistogram", ALGORITHMS[algorithm])

    def lower(self, s: TileHistogram, w) -> ShimCall:
        size = s.src.type.size
        valid = s.valid if s.valid is not None else ir.Lit(size, INT64)
        call = ShimCall(
            f"coop_histogram_{s.cid}", (TileArg(s.src, "in0"), TileArg(s.out, "out0"), ValueArg(valid, "valid"))
        )
        w.include("cub/block/block_histogram.cuh")
        src, out = w.layout(s.src), w.layout(s.out)
        bin_t = "cuda::std::uint16_t" if s.bins < 65535 else "cuda::std::uint32_t"
        cub_type = (
            f"cub::BlockHistogram<{bin_t}, {w.threads}, {src.items_per_thread}, {s.bins + 1}, "
            f"cub::{w.choice(s.cid).algorithm}>"
        )
        code = w.storage(s.cid, cub_type, f"unsigned int counts[{s.bins + 1}]; ")
        body = w.storage_ref(s.cid) + w.items_ref("x", "in0", s.src, src.items_per_thread)
        body += w.items_ref("y", "out0", s.out, out.items_per_thread)
        body += f"  const long long v = valid < 0 ? 0 : (valid > {size} ? {size} : valid);\n"
        body += f"  {bin_t} bin[{src.items_per_thread}];\n"
        body += (
            f"  for (int i = 0; i < {src.items_per_thread}; ++i)\n"
            f"    bin[i] = ({w.element_index(s.src)} < v && coop::in_bins(x[i], {s.bins})) ? {bin_t}(x[i]) : "
            f"{bin_t}({s.bins});\n"
        )
        body += f"  {cub_type}(s.temp).Histogram(bin, s.counts);\n  __syncthreads();\n"
        body += (
            f"  for (int i = 0; i < {out.items_per_thread}; ++i) {{\n"
            f"    const int k = {w.element_index(s.out)};\n"
            f"    y[i] = k < {s.bins} ? cuda::std::int32_t(s.counts[k]) : 0;\n  }}\n"
        )
        w.define(call, code, body)
        return call
