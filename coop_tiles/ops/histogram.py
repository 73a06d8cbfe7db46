"""`tile.histogram`: an int32 tile of `bins` counts of an integer tile (cub::BlockHistogram).

Values outside `[0, bins)` and elements `i >= valid` are not counted: each item becomes a bin
index, with every uncounted item sent to one extra bin, `bins`, that is never read. So CUB's
primitive runs on `bins + 1` counters, whose memory is part of the op's TempStorage, and
never writes outside them.

`algorithm="auto"` takes BLOCK_HISTO_SORT when there are at most 16 bins and at least 8 items
per thread (many items contend for few counters: sorting and counting runs avoids the
serialised shared-memory atomics), else BLOCK_HISTO_ATOMIC. Counts accumulated through a loop
(`h = h + tile.histogram(...)`, kept in shared memory) take *lane copies* where they pay
(`lanes_pay`): 32 copies of the `bins + 1` counters fit in a block's 48 KiB without opt-in, and
the blocks whose copies fit in a multiprocessor's shared memory hold at least half of its thread
slots (256 bins: 33 KB a block, 6 blocks an SM: 256 threads or more). Lane l of every warp adds
to copy l, stored interleaved (`counts[bin * 32 + l]`), so a warp's 32 atomics fall in 32
different banks whatever the values (one shared set puts random bins in the same bank: 3-4
passes per warp); the copies are summed once after the loop. The adds (lane copies or one set)
are branch-free, as a hand-written kernel's: an uncounted item goes to the spare bin (its lane's
copy of it; a conditional atomic costs a convergence region, BSSY/BRA/BSYNC, per item), and a
whole tile (the loop's common case) skips the per-item index test (the partial one compares
indices in 32 bits).
Measured on an H100 (uint8, 256 bins, 2^28 items, a hand-written probe, probe/hist_probe.py):
71-75% of the copy's read rate with one set; lane copies 81% at 256 threads x 4 blocks an SM,
93-95% at 512 x 4 and 1024 x 2 (full occupancy: 32 registers a thread).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tile
from ..dtypes import kind
from ..errors import TileTypeError, TileValueError
from ..lang import ir
from ..lang.types import TileType
from .base import ShimCall, TileArg, TileOp, one_d, register, valid_arg, valid_count, valid_value
from .options import COUNT, Forbidden, Option

ALGORITHMS = {"atomic": "BLOCK_HISTO_ATOMIC", "sort": "BLOCK_HISTO_SORT"}
SORT_MAX_BINS = 16
SORT_MIN_ITEMS = 8
LANES = "BLOCK_HISTO_ATOMIC, 32 lane copies"  # the plan's name for the lane copies (not a CUB algorithm)
LANE_COPIES = 32
LANES_MAX_BYTES = 48 * 1024  # a block's shared memory without opt-in (256 bins: 33 KB of copies)
SM_SHARED_BYTES = 228 * 1024  # an sm_90 multiprocessor's shared memory, of which each block takes
BLOCK_RESERVED_BYTES = 1024  # this much more than it asks for
SM_THREADS = 2048  # an sm_90 multiprocessor's thread slots


def unknown_algorithm(algorithm: object) -> str:
    return f"algorithm must be 'auto', 'atomic' or 'sort', got {algorithm!r}"


@dataclass
class TileHistogram(ir.Collective, defs="out", uses="src valid", attrs="bins algorithm"):
    out: ir.Var
    src: ir.Var
    bins: int
    valid: ir.Value | None
    algorithm: str  # "auto", "atomic" or "sort"


def resolve_algorithm(algorithm: str, bins: int, items_per_thread: int, threads: int | None = None) -> str:
    """The primitive "auto" stands for (see the module docstring): a CUB algorithm, or LANES for
    counts accumulated through a loop (`threads` given: the block's) where their copies pay."""
    if algorithm != "auto":
        return ALGORITHMS[algorithm]
    if bins <= SORT_MAX_BINS and items_per_thread >= SORT_MIN_ITEMS:
        return ALGORITHMS["sort"]
    if threads is not None and lanes_pay(bins, threads):
        return LANES
    return ALGORITHMS["atomic"]


def lanes_pay(bins: int, threads: int) -> bool:
    """Whether blocks of `threads` keeping LANE_COPIES copies of `bins + 1` counters fit in a block's
    shared memory without opt-in and, as many as fit on a multiprocessor, keep at least half of
    its thread slots busy (fewer resident warps hide too little of the loads' latency)."""
    copies = (bins + 1) * LANE_COPIES * 4
    resident = SM_SHARED_BYTES // (copies + BLOCK_RESERVED_BYTES) * threads
    return copies <= LANES_MAX_BYTES and resident >= SM_THREADS // 2


@register
class Histogram(TileOp):
    publics = (tile.histogram,)
    stmt = TileHistogram
    striped_vectors = True  # (counts of items in any order; bins and valid by element_index)
    options = (
        Option("bins", (5, 40)),
        Option("valid", (None, COUNT)),
        Option("algorithm", ("auto", *ALGORITHMS, "radix")),
    )
    forbids = (
        Forbidden(
            lambda c: c["algorithm"] not in ("auto", *ALGORITHMS),
            TileValueError,
            lambda public, c: unknown_algorithm(c["algorithm"]),
        ),
    )

    def build(self, b, public, t, bins, *, valid, algorithm):
        src = one_d(b.tile(t, "tile.histogram's argument"), "tile.histogram")
        if kind(src.type.dtype) not in "iu":
            raise TileTypeError(
                f"tile.histogram counts the values of an integer tile, got {src.type}; convert it first "
                "(t.astype(np.int32)): values outside [0, bins) are not counted"
            )
        bins = b.constant(bins, "bins", int)
        if bins < 1:
            raise TileValueError(f"bins must be a positive int, got {bins}")
        algorithm = b.constant(algorithm, "algorithm", str)
        if algorithm not in ("auto", *ALGORITHMS):
            raise TileValueError(unknown_algorithm(algorithm))
        out = b.temp(TileType(np.dtype(np.int32), bins))
        b.emit(TileHistogram(out, src, bins, valid_value(b, valid), algorithm))
        return out

    def interpret(self, s: TileHistogram, frame) -> None:
        frame.env[s.out.name] = counts(frame, s.src, s.valid, s.bins)

    def rewrite(self, program: ir.Program, debug: bool, arch: str) -> None:
        accumulate_in_shared_memory(program)

    def choose(self, s: TileHistogram, ctx):
        algorithm = resolve_algorithm(s.algorithm, s.bins, ctx.tiles[s.src.name].items_per_thread)
        return ctx.choice(s, f"histogram[{s.bins}]", "BlockHistogram", algorithm)

    def lower(self, s: TileHistogram, w) -> ShimCall:
        args = (TileArg(s.src, "in0"), TileArg(s.out, "acc"), valid_arg(s.valid, s.src.type.size))
        call = ShimCall(f"coop_histogram_{s.cid}", args)
        w.include("cub/block/block_histogram.cuh")
        cub_type = _cub_histogram(w, s.src, s.bins, s.cid)
        code = w.storage(s.cid, cub_type, f"unsigned int counts[{s.bins + 1}]; ")
        body = w.storage_ref(s.cid) + _bins(w, s.src, s.bins)
        body += f"  {cub_type}(s.temp).Histogram(bin, s.counts);\n  __syncthreads();\n"
        body += _counts_to_tile(w, s.out, s.bins, to_tile=True)
        w.define(call, code, body)
        return call


def counts(frame, src: ir.Var, valid: ir.Value | None, bins: int) -> np.ndarray:
    """The interpreter's counts: int32 occurrences of 0..bins-1 among the first `valid` elements."""
    x = frame.get(src)
    x = x[: valid_count(frame, valid, x.size)]
    wide = x.astype(np.uint64) if x.dtype.kind == "u" else x.astype(np.int64)
    return np.bincount(wide[(wide >= 0) & (wide < bins)].astype(np.int64), minlength=bins).astype(np.int32)


#: whether an integer is a histogram bin in [0, bins), whatever its signedness and width
IN_BINS = """\
template <class T> __device__ __forceinline__ bool coop_in_bins(T x, long long bins) {
  if constexpr (cuda::std::is_signed<T>::value) return x >= 0 && static_cast<long long>(x) < bins;
  else return static_cast<unsigned long long>(x) < static_cast<unsigned long long>(bins);
}
"""


def _bins(w, src: ir.Var, bins: int) -> str:
    """Each item's bin, or the spare bin `bins` for items not counted (out of range, or i >= valid)."""
    items, bin_t = w.layout(src).items_per_thread, _bin_type(bins)
    return (
        _valid_items(w, src)
        + f"  {bin_t} bin[{items}];\n"
        + f"  for (int i = 0; i < {items}; ++i)\n"
        + f"    bin[i] = {_bin_of(w, src, bins, 'vi')} ? {bin_t}(x[i]) : {bin_t}({bins});\n"
    )


def _valid_items(w, src: ir.Var) -> str:
    """`x`, the thread's items, and `vi`, the count of valid elements as an int (it is at most the
    tile's size: item indices compare with it in 32 bits, not 64)."""
    items = w.layout(src).items_per_thread
    w.helper(IN_BINS)
    return w.items_ref("x", "in0", src, items) + w.clamp_valid(src.type.size) + "  const int vi = int(v);\n"


def _bin_of(w, src: ir.Var, bins: int, limit: str | None) -> str:
    """Whether item `x[i]` is counted: in [0, bins) and, unless `limit` is None, its index below it."""
    in_bins = f"coop_in_bins(x[i], {bins})"
    return in_bins if limit is None else f"({w.element_index(src)} < {limit} && {in_bins})"


# ----- counts kept in shared memory through a loop -------------------------------------------------
@dataclass
class HistogramBegin(ir.Collective, uses="acc", refs="src", attrs="bins algorithm"):
    """Before a loop of `acc = acc + tile.histogram(src, ...)`: write `acc` into the shared counts."""

    acc: ir.Var
    src: ir.Var  # the tile the loop counts (its layout sets the primitive's items per thread)
    bins: int
    algorithm: str


@dataclass
class HistogramComposite(ir.Collective, uses="src valid", attrs="bins algorithm begin"):
    """In the loop: composite `src`'s counts into the shared counts of `begin` (its collective id)."""

    src: ir.Var
    bins: int
    valid: ir.Value | None
    algorithm: str
    begin: int


@dataclass
class HistogramEnd(ir.Collective, defs="acc", attrs="bins begin"):
    """After the loop: read the shared counts back into `acc`."""

    acc: ir.Var
    bins: int
    begin: int


def _references(stmts: list[ir.Stmt]) -> dict[str, int]:
    """How often each variable appears (defined, read or named) in `stmts`, nested bodies included."""
    counts: dict[str, int] = {}
    for s in ir.walk(stmts):
        for v in (*ir.defs(s), *ir.uses(s), *ir.refs(s)):
            counts[v.name] = counts.get(v.name, 0) + 1
    return counts


def _accumulation(body: list[ir.Stmt], loop: ir.Stmt, program_refs: dict[str, int]) -> tuple[int, ir.Var] | None:
    """(index in `body`, accumulator) of `h = h + tile.histogram(...)` that can stay in shared memory:
    the histogram and the sum are used only there, and `h` nowhere else in the loop."""
    loop_refs = _references([loop])
    for j in range(len(body) - 2):
        hist, add, copy = body[j : j + 3]
        if not (isinstance(hist, TileHistogram) and isinstance(add, ir.TileMap) and isinstance(copy, ir.Copy)):
            continue
        others = [a for a in add.args if not (isinstance(a, ir.Var) and a.name == hist.out.name)]
        if add.op != "add" or len(others) != 1 or not isinstance(others[0], ir.Var):
            continue
        acc = others[0]
        if (
            copy.out.name == acc.name
            and isinstance(copy.src, ir.Var)
            and copy.src.name == add.out.name
            and acc.type == hist.out.type
            and program_refs.get(hist.out.name) == 2
            and program_refs.get(add.out.name) == 2
            and loop_refs.get(acc.name) == 2
        ):
            return j, acc
    return None


def accumulate_in_shared_memory(program: ir.Program) -> None:
    """Rewrite each loop of `h = h + tile.histogram(t, ...)` so that the counts stay in one shared
    region through the loop: written there once before it, composited into by every iteration
    (no re-zeroing, no copy to registers), read back once after it."""
    refs = _references(program.body)
    new = ir.Numbering(program).place

    def visit(body: list[ir.Stmt]) -> None:
        i = 0
        while i < len(body):
            s = body[i]
            for nested in ir.regions(s):
                visit(nested)
            found = _accumulation(s.body, s, refs) if isinstance(s, (ir.ForRange, ir.While)) else None
            if found is not None:
                j, acc = found
                hist = s.body[j]
                begin = new(HistogramBegin(acc, hist.src, hist.bins, hist.algorithm), hist)
                s.body[j : j + 3] = [
                    new(HistogramComposite(hist.src, hist.bins, hist.valid, hist.algorithm, begin.cid), hist)
                ]
                body[i : i + 1] = [begin, s, new(HistogramEnd(acc, hist.bins, begin.cid), hist)]
                i += 2
            i += 1

    visit(program.body)


def _cub_histogram(w, src: ir.Var, bins: int, algorithm_cid: int) -> str:
    algorithm = w.choice(algorithm_cid).algorithm
    cub_algorithm = ALGORITHMS["atomic"] if algorithm == LANES else algorithm
    return (
        f"cub::BlockHistogram<{_bin_type(bins)}, {w.threads}, {w.layout(src).items_per_thread}, {bins + 1}, "
        f"cub::{cub_algorithm}>"
    )


def _copies(w, begin: int) -> int:
    """How many copies of the counters collective `begin` keeps (LANE_COPIES for LANES, else 1)."""
    return LANE_COPIES if w.choice(begin).algorithm == LANES else 1


def _atomic_adds(w, src: ir.Var, bins: int, copies: int) -> str:
    """Each item added to its bin's counter (its lane's copy, with lane copies), without a branch: an item not
    counted goes to the spare bin. A whole tile (every element valid, none padding) skips the per-item index
    test; it is the loop's common case."""
    items, size = w.layout(src).items_per_thread, src.type.size
    padded = items * w.threads > size
    lane, stride = ("s.counts", "") if copies == 1 else (f"s.counts + (threadIdx.x % {copies})", f"{copies} * ")
    add = (
        f"    #pragma unroll\n    for (int i = 0; i < {items}; ++i)\n"
        f"      atomicAdd(counters + {stride}({{counted}} ? (unsigned int)x[i] : {bins}u), 1u);\n"
    )
    return (
        _valid_items(w, src)
        + f"  unsigned int* counters = {lane};\n"
        + f"  if (vi == {size}) {{\n"
        + add.format(counted=_bin_of(w, src, bins, str(size) if padded else None))
        + "  } else {\n"
        + add.format(counted=_bin_of(w, src, bins, "vi"))
        + "  }\n"
    )


def _bin_type(bins: int) -> str:
    return "cuda::std::uint16_t" if bins < 65535 else "cuda::std::uint32_t"


def _counts_to_tile(w, acc: ir.Var, bins: int, to_tile: bool, copies: int = 1) -> str:
    """Copy the shared counts into the tile `acc` (or back), each thread its own items. With lane
    copies, a bin's count is the sum of its copies (read from a rotated start: no bank conflicts)
    and is written back into copy 0 (the others cleared before)."""
    items = w.layout(acc).items_per_thread
    if copies == 1:
        move = "y[i] = cuda::std::int32_t(s.counts[k]);" if to_tile else "s.counts[k] = (unsigned int)y[i];"
    elif to_tile:
        move = (
            f"unsigned int c = 0; for (int l = 0; l < {copies}; ++l) "
            f"c += s.counts[k * {copies} + ((l + k) % {copies})]; y[i] = cuda::std::int32_t(c);"
        )
    else:
        move = f"s.counts[k * {copies}] = (unsigned int)y[i];"
    return (
        w.items_ref("y", "acc", acc, items)
        + f"  for (int i = 0; i < {items}; ++i) {{\n"
        + f"    const int k = {w.element_index(acc)};\n    if (k < {bins}) {{ {move} }}\n  }}\n"
    )


@register
class HistogramBeginOp(TileOp):
    stmt = HistogramBegin
    striped_vectors = True  # (counts of items in any order; bins and valid by element_index)

    def interpret(self, s: HistogramBegin, frame) -> None:
        frame.env[f"counts{s.cid}"] = frame.get(s.acc).copy()

    def choose(self, s: HistogramBegin, ctx):
        algorithm = resolve_algorithm(s.algorithm, s.bins, ctx.tiles[s.src.name].items_per_thread, ctx.threads)
        return ctx.choice(s, f"histogram[{s.bins}] counts", "BlockHistogram", algorithm)

    def lower(self, s: HistogramBegin, w) -> ShimCall:
        call = ShimCall(f"coop_histogram_begin_{s.cid}", (TileArg(s.acc, "acc"),))
        w.include("cub/block/block_histogram.cuh")
        cub_type, copies = _cub_histogram(w, s.src, s.bins, s.cid), _copies(w, s.cid)
        code = w.storage(s.cid, cub_type, f"unsigned int counts[{(s.bins + 1) * copies}]; ")
        code += f"using coop_histogram_{s.cid}_t = {cub_type};\n"
        body = w.storage_ref(s.cid)
        if copies == 1:
            body += f"  if (threadIdx.x == 0) s.counts[{s.bins}] = 0;\n"
        else:
            body += f"  for (int k = threadIdx.x; k < {(s.bins + 1) * copies}; k += {w.threads}) s.counts[k] = 0;\n"
            body += "  __syncthreads();\n"
        body += _counts_to_tile(w, s.acc, s.bins, to_tile=False, copies=copies) + "  __syncthreads();\n"
        w.define(call, code, body)
        return call


@register
class HistogramCompositeOp(TileOp):
    stmt = HistogramComposite
    striped_vectors = True  # (counts of items in any order; bins and valid by element_index)

    def interpret(self, s: HistogramComposite, frame) -> None:
        frame.env[f"counts{s.begin}"] += counts(frame, s.src, s.valid, s.bins)

    def storage_owner(self, s: HistogramComposite) -> int:
        return s.begin

    def choose(self, s: HistogramComposite, ctx):
        return ctx.choice(s, f"histogram[{s.bins}] +=", "BlockHistogram", "Composite", storage=False)

    def lower(self, s: HistogramComposite, w) -> ShimCall:
        args = (TileArg(s.src, "in0"), valid_arg(s.valid, s.src.type.size))
        call = ShimCall(f"coop_histogram_add_{s.cid}", args)
        sort = w.choice(s.begin).algorithm == ALGORITHMS["sort"]  # its TempStorage is reused: a barrier
        if sort:
            body = "  __syncthreads();\n" + w.storage_ref(s.begin) + _bins(w, s.src, s.bins)
            body += f"  coop_histogram_{s.begin}_t(s.temp).Composite(bin, s.counts);\n"
        else:  # (what BLOCK_HISTO_ATOMIC's Composite does, with a whole tile's index test skipped)
            body = w.storage_ref(s.begin) + _atomic_adds(w, s.src, s.bins, _copies(w, s.begin))
        w.define(call, "", body)
        return call


@register
class HistogramEndOp(TileOp):
    stmt = HistogramEnd
    striped_vectors = True  # (counts of items in any order; bins and valid by element_index)

    def interpret(self, s: HistogramEnd, frame) -> None:
        frame.env[s.acc.name] = frame.env.pop(f"counts{s.begin}")

    def storage_owner(self, s: HistogramEnd) -> int:
        return s.begin

    def choose(self, s: HistogramEnd, ctx):
        return ctx.choice(s, f"histogram[{s.bins}] end", "BlockHistogram", "read counts", storage=False)

    def lower(self, s: HistogramEnd, w) -> ShimCall:
        call = ShimCall(f"coop_histogram_end_{s.cid}", (TileArg(s.acc, "acc"),))
        body = "  __syncthreads();\n" + w.storage_ref(s.begin)
        body += _counts_to_tile(w, s.acc, s.bins, to_tile=True, copies=_copies(w, s.begin))
        w.define(call, "", body)
        return call
