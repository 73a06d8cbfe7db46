"""`tile.scan`: block-wide inclusive/exclusive scan of a tile, or of a tuple of tiles with a
`@ct.combine` function, optionally seeded (`initial`) and returning the carry (`return_total`).

Built-in ops on 16-bit floats scan in float32 (the contract's accumulation rule). Lowered to
`cub::BlockScan` over blocked items: over the tile's dtype for built-in ops, over a generated
struct of the k dtypes for combine functions. With `chained=True` the scan continues across the
programs of the grid in program-id order (`ops/chained.py`: placement rules, look-back, state).

With `reverse=True` the scan runs from the last element to the first: one definition, the forward
scan of the flipped tile, flipped back (the interpreter runs exactly that). On the GPU it is
`REVERSE_LIBRARY`'s `coop::reverse_block_scan`: each thread folds its items last first, and each warp
reverses its lanes with one shuffle around `cub::WarpScan` (`coop::reverse_lanes`), so the block
needs one barrier, as CUB's forward `BLOCK_SCAN_WARP_SCANS` does; nothing is reversed in memory and
the planner sees an ordinary blocked tile. The same building block scans logical warps of fewer
lanes (`reverse_warp_scan`). A chained reverse scan takes its program ids from the last program
down (`ops/chained.py`), so its tickets, look-back and descriptors are the forward scan's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tile
from ..dtypes import identity
from ..errors import TileValueError
from ..lang import ir
from ..lang.types import ScalarType, TileType
from ..planner.layout import PER_ROW, REENTRANT, SYNCS
from . import chained as chain
from . import rows
from .base import PARITY, OutArg, ShimCall, TileArg, TileOp, ValueArg, errstate, one_d, register, tile_axis
from .combining import FORBIDS, OPTIONS, UFUNCS, combine_operands, combine_scan, item_code, typed_op
from .options import COMBINE, SCALAR, Forbidden, Option

EXCLUSIVE_NEEDS_INITIAL = "an exclusive scan with a @ct.combine function needs initial= (there is no identity)"


#: the device code of reverse scans (`coop::reverse_block_scan`), and of logical warps' (`reverse_warp_scan`)
REVERSE_LIBRARY = r"""
namespace coop {
// Lane i of each logical warp of LANES lanes (a power of two, at most 32) gets lane (pivot - i) mod LANES's `v`:
// lanes pivot..0 in that order, then lanes LANES-1..pivot+1 (pivot LANES-1: the lanes reversed). A permutation
// that is its own inverse: the same call takes values back. Every lane of `mask` calls it.
template <int LANES, class T>
__device__ __forceinline__ T reverse_lanes(const T& v, int pivot, unsigned mask = 0xffffffffu) {
  const int lane = int(threadIdx.x) & (LANES - 1);  // (blocks are 1-D)
  return cub::ShuffleIndex<LANES>(v, (pivot - lane) & (LANES - 1), mask);
}

// Reverse scan of one value per lane over logical warps of LANES lanes, from the last lane to the first (the
// later lane is the left operand of `op`): `inclusive` folds lanes LANES-1 down to this one, `exclusive` lanes
// LANES-1 down to the next one (undefined in lane LANES-1). cub::WarpScan's forward scan between two reversals.
template <class T, int LANES, class Op>
__device__ __forceinline__ void reverse_warp_scan(typename cub::WarpScan<T, LANES>::TempStorage& temp, const T& v,
                                                  T& inclusive, T& exclusive, Op op) {
  T in, ex;
  cub::WarpScan<T, LANES>(temp).Scan(reverse_lanes<LANES>(v, LANES - 1), in, ex, op);
  inclusive = reverse_lanes<LANES>(in, LANES - 1);
  exclusive = reverse_lanes<LANES>(ex, LANES - 1);
}

// Reverse scan of a tile of SIZE elements held blocked, ITEMS per thread, by a block of THREADS threads: element
// SIZE-1 first, element 0 last, the earlier in scan order on the left of Op. Items past SIZE are padding and never
// folded into an element's result (thread LAST holds element SIZE-1 in its item TOP; threads past it hold padding
// only). Each thread folds its items, last first. Each warp reverses its lanes and scans them with cub::WarpScan
// (the warp holding element SIZE-1 pivots on its lane, so that its padding lanes come after every real one); the
// warps' folds meet in shared memory after one barrier, and each thread folds those of the warps after its own
// (the warps before it in scan order), after the seed. Then each thread applies its prefix to its items.
template <class T, class Op, int THREADS, int ITEMS, int SIZE, bool EXCLUSIVE> struct reverse_block_scan {
  static constexpr int WARPS = THREADS / 32, LAST = (SIZE - 1) / ITEMS, TOP = (SIZE - 1) % ITEMS;
  static constexpr int LAST_WARP = LAST / 32, PIVOT = LAST % 32;
  static_assert(THREADS % 32 == 0 && SIZE <= THREADS * ITEMS, "a whole number of warps holds the tile");
  using warp_scan = cub::WarpScan<T>;
  struct TempStorage { typename warp_scan::TempStorage warp[WARPS]; T folds[WARPS]; T seed, prefix, total; };
  TempStorage& s;
  __device__ __forceinline__ explicit reverse_block_scan(TempStorage& temp) : s(temp) {}

  // Scans `y` in place after `seed` (thread 0's) when `seeded`; returns the fold of the seed and every element, in
  // every thread. An exclusive scan must be seeded.
  __device__ __forceinline__ T scan(T (&y)[ITEMS], bool seeded, const T& seed) {
    if (seeded && threadIdx.x == 0) s.seed = seed;  // (read after the barrier)
    return run(y, [&](const T&, bool& on, T& v) { on = seeded; v = s.seed; });
  }
  // The same within a chained scan: `cb` (coop::chain_prefix) gets the block's fold and returns its prefix.
  template <class Callback> __device__ __forceinline__ T chained(T (&y)[ITEMS], Callback& cb) {
    return run(y, [&](const T& block, bool& on, T& v) {
      if (threadIdx.x < 32) { const T p = cb(block); if (threadIdx.x == 0) s.prefix = p; }
      __syncthreads();
      on = cb.tile > 0 || cb.seeded;
      v = s.prefix;
    });
  }

 private:
  template <class Seed> __device__ __forceinline__ T run(T (&y)[ITEMS], Seed&& seed_of) {
    const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
    const int top = tid == LAST ? TOP : ITEMS - 1;  // this thread's item that comes first
    T fold = y[ITEMS - 1];
#pragma unroll
    for (int i = ITEMS - 2; i >= 0; --i) fold = i >= top ? y[i] : Op{}(fold, y[i]);
    const int pivot = warp == LAST_WARP ? PIVOT : 31;
    T in, ex;
    warp_scan(s.warp[warp]).Scan(reverse_lanes<32>(fold, pivot), in, ex, Op{});
    if (lane == pivot) s.folds[warp] = in;
    __syncthreads();
    T block = s.folds[LAST_WARP], before = block;  // the fold of every warp; of those after this one
#pragma unroll
    for (int k = LAST_WARP - 1; k >= 0; --k) {
      if (k == warp) before = block;
      block = Op{}(block, s.folds[k]);
    }
    bool has = warp < LAST_WARP, seeded;
    T seed;
    seed_of(block, seeded, seed);
    if (seeded) {
      before = has ? Op{}(seed, before) : seed;
      block = Op{}(seed, block);
      has = true;
    }
    // lane 0 runs the warp's first lane (in scan order): its prefix is the warps' before it
    T p = lane == 0 ? before : has ? Op{}(before, ex) : ex;
    p = reverse_lanes<32>(p, pivot);  // to the thread whose items it prefixes
    has = has || lane != pivot;
#pragma unroll
    for (int i = ITEMS - 1; i >= 0; --i) {
      if (i > top) continue;
      const T e = y[i];
      if (EXCLUSIVE) y[i] = p;
      p = has ? Op{}(p, e) : e;
      has = true;
      if (!EXCLUSIVE) y[i] = p;
    }
    return block;
  }
};
}  // namespace coop
"""


def reverse_warp_scan(item: str, lanes: int, op: str, temp: str, value: str, inclusive: str, exclusive: str) -> str:
    """C++ statement: the reverse scan of `value` (of C++ type `item`, one per lane) over logical warps of
    `lanes` lanes (a power of two up to 32) with functor `op`, into `inclusive` and `exclusive` (declared
    by the caller; `exclusive` is undefined in each logical warp's last lane, which comes first). `temp` is
    a `cub::WarpScan<item, lanes>::TempStorage` (empty on sm_80 and later for these widths); every lane of
    the warp runs it. Needs `REVERSE_LIBRARY` (`w.helper`) and `cub/warp/warp_scan.cuh`."""
    if lanes & (lanes - 1) or not 1 <= lanes <= 32:
        raise ValueError(f"a logical warp has a power of two of lanes up to 32, not {lanes}")
    return f"coop::reverse_warp_scan<{item}, {lanes}>({temp}, {value}, {inclusive}, {exclusive}, {op}{{}});"


@dataclass
class TileScan(
    ir.Collective, defs="outs totals", uses="srcs initial", attrs="op combine exclusive chained reverse axis"
):
    """A scan of `srcs` into `outs`; of a 2-D tile along `axis`, each row (or column) on its own, with
    `initial` and `totals` then scalars or tiles of one value per row (column)."""

    outs: tuple[ir.Var, ...]
    srcs: tuple[ir.Var, ...]
    op: str  # a built-in op, or the name of a combine function in `Program.combines`
    combine: bool
    exclusive: bool
    initial: tuple[ir.Value, ...] | None
    totals: tuple[ir.Var, ...] | None
    chained: bool = False  # continues from the previous program's last element
    reverse: bool = False  # from the last element to the first (and the last program to the first)
    axis: int | None = None  # the scanned axis of a 2-D tile (None: a 1-D tile)


@register
class Scan(TileOp):
    publics = (tile.scan,)
    stmt = TileScan
    in_place = True
    options = (
        *OPTIONS,
        Option("reverse", (False, True)),
        Option("exclusive", (False, True)),
        Option("initial", (None, SCALAR)),
        Option("return_total", (False, True)),
        Option("chained", (False, True), once=(True,)),
    )
    forbids = (
        *FORBIDS,
        Forbidden(
            lambda c: c["exclusive"] and c["op"] is COMBINE and c["initial"] is None,
            TileValueError,
            lambda public, c: EXCLUSIVE_NEEDS_INITIAL,
        ),
    )

    def build(self, b, public, t, op, *, axis, reverse, exclusive, initial, return_total, chained, dtype):
        op, srcs, dtypes = typed_op(b, op, t, "tile.scan", dtype)
        reverse = b.constant(reverse, "reverse", bool)
        exclusive = b.constant(exclusive, "exclusive", bool)
        return_total = b.constant(return_total, "return_total", bool)
        chained = b.constant(chained, "chained", bool)
        shape = srcs[0].type.shape
        k = tile_axis(b, axis, srcs[0], "tile.scan")
        if chained:
            if len(shape) > 1:
                one_d(srcs[0], "tile.scan(..., chained=True)")
            chain.check_placement(b)
        initial = b.optional(initial)
        if initial is not None:
            initial = (
                combine_operands(b, initial, dtypes, "initial")
                if len(shape) == 1
                else rows.seeds(b, initial, dtypes, shape[1 - k], "initial")
            )
        elif exclusive and not isinstance(op, str):
            raise TileValueError(EXCLUSIVE_NEEDS_INITIAL)
        outs = tuple(b.temp(TileType(dt, 0, shape)) for dt in dtypes)
        total_type = (lambda dt: ScalarType(dt)) if len(shape) == 1 else (lambda dt: TileType(dt, shape[1 - k]))
        totals = tuple(b.temp(total_type(dt)) for dt in dtypes) if return_total else None
        name = op if isinstance(op, str) else op.name
        axis = None if len(shape) == 1 else k
        # (a 2-D reverse scan is lowered along its rows, from each row's last column: `rows.lower_scan`)
        b.emit(TileScan(outs, srcs, name, not isinstance(op, str), exclusive, initial, totals, chained, reverse, axis))
        result = outs if len(outs) > 1 or not isinstance(t, ir.Var) else outs[0]
        if not return_total:
            return result
        return result, (totals if len(totals) > 1 or not isinstance(t, ir.Var) else totals[0])

    def interpret(self, s: TileScan, frame) -> None:
        # along the last axis: a 2-D tile's scanned axis is moved there, each row scanned on its own
        axis = -1 if s.axis is None else s.axis
        xs = tuple(np.moveaxis(frame.get(v), axis, -1) for v in s.srcs)
        if s.reverse:  # the forward scan of the flipped rows: x[n-1] first, the later element on the left
            xs = tuple(x[..., ::-1] for x in xs)
        seed = None if s.initial is None else tuple(frame.get(v) for v in s.initial)
        if s.chained and s.sid in frame.launch:  # programs run in scan order: the previous one's fold
            seed = frame.launch[s.sid]
        if s.combine:
            fn = frame.program.combines[s.op]
            if seed is not None:
                xs = tuple(_prepend(v, x) for v, x in zip(seed, xs))
            acc = combine_scan(frame, fn, xs)
            if seed is not None:
                out = tuple(a[..., :-1] if s.exclusive else a[..., 1:] for a in acc)
            else:
                out = acc
            total = tuple(a[..., -1] for a in acc)
        else:
            (x,) = xs
            dt = x.dtype
            ufunc = UFUNCS[s.op]
            start = identity(s.op, dt) if seed is None else seed[0]
            with errstate():
                acc = ufunc.accumulate(_prepend(start, x), axis=-1, dtype=dt)
                inclusive = ufunc.accumulate(x, axis=-1, dtype=dt) if seed is None else acc[..., 1:]
            out = (acc[..., :-1] if s.exclusive else inclusive,)
            total = (acc[..., -1],)
        for var, value in zip(s.outs, out):
            value = value[..., ::-1] if s.reverse else value
            frame.env[var.name] = np.ascontiguousarray(np.moveaxis(value, -1, axis))
        for var, value in zip(s.totals or (), total):
            if isinstance(var.type, TileType):
                frame.env[var.name] = np.asarray(value, var.type.dtype)
            else:
                frame.set(var, value)
        if s.chained:
            frame.launch[s.sid] = total

    def launch_check(self, s: TileScan):
        return chain.check_grid if s.chained else None

    def max_default_threads(self, s: TileScan, largest: int) -> int | None:
        return chain.max_default_threads(largest) if s.chained else None

    def lower_after(self, s: TileScan, program: ir.Program, w) -> None:
        if s.chained:  # (the body calls these before it takes its ticket)
            chain.define_prefetches(program, w)

    def body_start(self, s: TileScan, program: ir.Program):
        return chain.body_start(program, s.reverse) if s.chained else None

    def descending_programs(self, s: TileScan) -> bool:
        return s.chained and s.reverse

    def thread0_reads(self, s: TileScan, threads: int) -> set[str]:
        if s.axis is not None:  # (every row's lanes read its seed)
            return set()
        # a carried or reverse scan's seed is thread 0's: it shares it with the block through the scan's own barrier
        solo = _carried(s, s.srcs[0].type.size, threads) or (s.reverse and not s.chained)
        return {v.name for v in s.initial or () if isinstance(v, ir.Var)} if solo else set()

    def layout(self, s: TileScan, ctx) -> None:
        if s.axis is not None:  # along rows (columns: rewritten as rows): per-row seeds and totals follow them
            ctx.join([*s.srcs, *s.outs])
            for v in (*(s.initial or ()), *(s.totals or ())):
                if isinstance(v, ir.Var) and isinstance(v.type, TileType):
                    ctx.claim(v, s.srcs[0], PER_ROW)
            return
        ctx.join_blocked([*s.srcs, *s.outs])

    def replicates(self, s: TileScan, var: ir.Var) -> bool:
        return s.axis is not None and (var in (s.initial or ()) or var in (s.totals or ()))

    def rewrite(self, program: ir.Program, debug: bool, arch: str) -> None:
        rows.columns_as_rows(program, TileScan)

    def choose(self, s: TileScan, ctx):
        if s.axis is not None:
            per_row = [v for v in (*(s.initial or ()), *(s.totals or ())) if isinstance(v.type, TileType)]
            return rows.row_choice(s, ctx, f"scan[{s.op}{', reverse' if s.reverse else ''}]", s.srcs[0], per_row)
        carried = _carried(s, s.srcs[0].type.size, ctx.threads)
        label = f"scan[{s.op}{', reverse' if s.reverse else ''}{', chained' if s.chained else ''}]"
        label += ", carried" if carried else ""
        if s.reverse:
            # one barrier after its first writes (the warps' folds and the seed); runs alternate between
            # two TempStorage, as a carried scan's do. A chained one waits on other blocks (as above).
            return ctx.choice(s, label, "WarpScan", "reverse lanes, warp folds", sync="" if s.chained else REENTRANT)
        # BLOCK_SCAN_WARP_SCANS always has a __syncthreads; a carried scan alternates between two
        # TempStorage, so what one run reads after its barrier is apart from what the next run writes.
        # A chained scan's shim waits on other blocks: the carve does not count on its barriers.
        sync = "" if s.chained else REENTRANT if carried else SYNCS
        return ctx.choice(s, label, "BlockScan", "BLOCK_SCAN_WARP_SCANS", sync=sync)

    def lower(self, s: TileScan, w) -> ShimCall:
        if s.axis is not None:
            return rows.lower_scan(s, w)
        k = len(s.srcs)
        args = [TileArg(v, f"in{i}") for i, v in enumerate(s.srcs)] + [
            TileArg(v, f"out{i}") for i, v in enumerate(s.outs)
        ]
        args += [ValueArg(v, f"initial{i}") for i, v in enumerate(s.initial or ())]
        args += [OutArg(v, f"total{i}") for i, v in enumerate(s.totals or ())]
        lay = w.layout(s.srcs[0])
        items, threads, size = lay.items_per_thread, w.threads, lay.size
        carried = _carried(s, size, threads)
        alternates = carried or (s.reverse and not s.chained)
        args += [PARITY] if alternates else []
        call = ShimCall(f"coop_scan_{s.cid}", tuple(args))
        dtypes = [v.type.dtype for v in s.srcs]
        item, op, code, pack, unpack = item_code(w, s.cid, s.op, s.combine, dtypes)
        alias = f"coop_scan_{s.cid}_t"
        if s.reverse:
            w.include("cub/warp/warp_scan.cuh")
            w.helper(REVERSE_LIBRARY)
            scan_type = (
                f"coop::reverse_block_scan<{item}, {op}, {threads}, {items}, {size}, {str(s.exclusive).lower()}>"
            )
            extra = ""
        else:
            w.include("cub/block/block_scan.cuh")
            scan_type = f"cub::BlockScan<{item}, {threads}, cub::BLOCK_SCAN_WARP_SCANS>"
            extra = f"{item} seed[2]; " if carried else f"{item} total; "
            extra += f"{item} agg; {item} prefix; " if s.chained else ""
        code = w.storage(s.cid, scan_type, extra, prelude=code, copies=2 if alternates else None)
        code += f"using {alias} = {scan_type};\n"
        body = w.storage_ref(s.cid)
        body += "".join(w.items_ref(f"x{i}", f"in{i}", v, items) for i, v in enumerate(s.srcs))
        body += "".join(w.items_ref(f"o{i}", f"out{i}", v, items) for i, v in enumerate(s.outs))
        body += f"  {item} y[{items}];\n  for (int i = 0; i < {items}; ++i) {{ {pack('y[i]', 'x{}[i]')} }}\n"
        kind = "Exclusive" if s.exclusive else "Inclusive"
        init = None
        if s.initial is not None:
            init = "init"
            body += f"  {item} init;\n  {pack('init', 'initial{}')}\n"
        elif not s.combine and (s.exclusive or (s.totals and not s.chained and not s.reverse)):
            init = w.identity(s.op, s.srcs[0].type.dtype)
        if s.reverse:
            # every thread gets the total from the scan itself (no broadcast)
            if s.chained:
                w.chain_bytes = chain.descriptor_bytes(dtypes)
                code = chain.LIBRARY + code
                body += f'  static_assert(sizeof({item}) == {chain.item_bytes(dtypes)}, "item size");\n'
                body += chain.callback(item, op, init, "s.temp.total")
                body += f"  const {item} total = {alias}(s.temp).chained(y, cb);\n"
            else:
                seed = f"true, {init}" if init is not None else f"false, {item}{{}}"
                body += w.alternate() + f"  const {item} total = {alias}(s.temp[run]).scan(y, {seed});\n"
            body += "".join(f"  *total{i} = {unpack('total', i)};\n" for i in range(k) if s.totals is not None)
        elif s.chained:
            w.chain_bytes = chain.descriptor_bytes(dtypes)
            code = chain.LIBRARY + code
            body += f'  static_assert(sizeof({item}) == {chain.item_bytes(dtypes)}, "item size");\n'
            body += chain.lower(s, w, item, op, pack, init, s.exclusive)
        elif carried:
            # each thread folds its items and the block scans the folds, with one barrier, which also shares
            # thread 0's seed (`init`) and gives every thread the block's fold (so the total needs no
            # broadcast); each thread then applies its prefix to its items. Consecutive runs alternate
            # between two TempStorage and seeds (`w.alternate`), so that none waits for the last one's readers.
            body += w.alternate() + (
                f"  if (threadIdx.x == 0) s.seed[run] = {init};\n"
                f"  {item} fold = y[0];\n  for (int i = 1; i < {items}; ++i) fold = {op}{{}}(fold, y[i]);\n"
                f"  {item} prefix, block;\n"
                f"  {alias}(s.temp[run]).ExclusiveScan(fold, prefix, {op}{{}}, block);\n"
                f"  const {item} seed = s.seed[run];\n"
                f"  prefix = threadIdx.x == 0 ? seed : {op}{{}}(seed, prefix);\n"
            )
            step = (
                f"const {item} e = y[i]; y[i] = prefix; prefix = {op}{{}}(prefix, e);"
                if s.exclusive
                else f"y[i] = prefix = {op}{{}}(prefix, y[i]);"
            )
            body += f"  for (int i = 0; i < {items}; ++i) {{ {step} }}\n"
            body += f"  const {item} total = {op}{{}}(seed, block);\n"
            body += "".join(f"  *total{i} = {unpack('total', i)};\n" for i in range(k))
        else:
            if init is not None:
                body += f"  {alias}(s.temp).{kind}Scan(y, y, {init}, {op}{{}});\n"
            elif not s.combine and s.op == "add":
                body += f"  {alias}(s.temp).InclusiveSum(y, y);\n"
            else:
                body += f"  {alias}(s.temp).InclusiveScan(y, y, {op}{{}});\n"
            if s.totals is not None:
                # the fold through the last valid element, from the thread that holds it
                thread, slot = (size - 1) // items, (size - 1) % items
                value = f"{op}{{}}(y[{slot}], x_item)" if s.exclusive else f"y[{slot}]"
                body += (
                    f"  if (int(threadIdx.x) == {thread}) {{ {item} x_item; "
                    f"{pack('x_item', f'x{{}}[{slot}]')} s.total = {value}; }}\n"
                )
        if s.totals is not None and not carried and not s.reverse:
            body += "" if s.chained else "  __syncthreads();\n"  # (a chained scan's ends with one)
            body += "".join(f"  *total{i} = {unpack('s.total', i)};\n" for i in range(k))
        body += (
            f"  for (int i = 0; i < {items}; ++i) {{ "
            + " ".join(f"o{i}[i] = {unpack('y[i]', i)};" for i in range(k))
            + " }\n"
        )
        w.define(call, code, body)
        return call


def _prepend(seed, x: np.ndarray) -> np.ndarray:
    """`x` with `seed` (a scalar, or one value per row) put before the first element of its last axis."""
    column = np.broadcast_to(np.asarray(seed), x.shape[:-1])[..., None]
    return np.concatenate([column, x], axis=-1).astype(x.dtype)


def _carried(s: TileScan, size: int, threads: int) -> bool:
    """Whether the forward scan is a carried one (one barrier, the total in every thread, two TempStorage
    used in turn): it returns a total, has a seed (`initial`, or a built-in op's identity), and its
    tile of `size` fills the block."""
    return (
        not s.chained
        and not s.reverse
        and s.totals is not None
        and (s.initial is not None or not s.combine)
        and size % threads == 0
    )
