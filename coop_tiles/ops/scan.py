"""`tile.scan`: block-wide inclusive/exclusive scan of a tile, or of a tuple of tiles with a
`@ct.combine` function, optionally seeded (`initial`) and returning the carry (`return_total`).

Built-in ops on 16-bit floats scan in float32 (the contract's accumulation rule). Lowered to
`cub::BlockScan` over blocked items: over the tile's dtype for built-in ops, over a generated
struct of the k dtypes for combine functions. With `chained=True` the scan continues across the
programs of the grid in program-id order (`ops/chained.py`: placement rules, look-back, state).
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


@dataclass
class TileScan(ir.Collective, defs="outs totals", uses="srcs initial", attrs="op combine exclusive chained axis"):
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
    axis: int | None = None  # the scanned axis of a 2-D tile (None: a 1-D tile)


@register
class Scan(TileOp):
    publics = (tile.scan,)
    stmt = TileScan
    in_place = True
    options = (
        *OPTIONS,
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

    def build(self, b, public, t, op, *, axis, exclusive, initial, return_total, chained, dtype):
        op, srcs, dtypes = typed_op(b, op, t, "tile.scan", dtype)
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
        b.emit(TileScan(outs, srcs, name, not isinstance(op, str), exclusive, initial, totals, chained, axis))
        result = outs if len(outs) > 1 or not isinstance(t, ir.Var) else outs[0]
        if not return_total:
            return result
        return result, (totals if len(totals) > 1 or not isinstance(t, ir.Var) else totals[0])

    def interpret(self, s: TileScan, frame) -> None:
        # along the last axis: a 2-D tile's scanned axis is moved there, each row scanned on its own
        axis = -1 if s.axis is None else s.axis
        xs = tuple(np.moveaxis(frame.get(v), axis, -1) for v in s.srcs)
        seed = None if s.initial is None else tuple(frame.get(v) for v in s.initial)
        if s.chained and s.sid in frame.launch:  # programs run in program-id order: the previous one's fold
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
        return chain.body_start(program) if s.chained else None

    def thread0_reads(self, s: TileScan, threads: int) -> set[str]:
        if s.axis is not None:  # (every row's lanes read its seed)
            return set()
        # a carried scan's seed is thread 0's: it shares it with the block through the scan's own barrier
        carried = _carried(s, s.srcs[0].type.size, threads)
        return {v.name for v in s.initial or () if isinstance(v, ir.Var)} if carried else set()

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

    def rewrite(self, program: ir.Program, debug: bool) -> None:
        rows.columns_as_rows(program, TileScan)

    def choose(self, s: TileScan, ctx):
        if s.axis is not None:
            per_row = [v for v in (*(s.initial or ()), *(s.totals or ())) if isinstance(v.type, TileType)]
            return rows.row_choice(s, ctx, f"scan[{s.op}]", s.srcs[0], per_row)
        carried = _carried(s, s.srcs[0].type.size, ctx.threads)
        label = f"scan[{s.op}{', chained' if s.chained else ''}]{', carried' if carried else ''}"
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
        args += [PARITY] if carried else []
        call = ShimCall(f"coop_scan_{s.cid}", tuple(args))
        w.include("cub/block/block_scan.cuh")
        dtypes = [v.type.dtype for v in s.srcs]
        item, op, code, pack, unpack = item_code(w, s.cid, s.op, s.combine, dtypes)
        alias = f"coop_scan_{s.cid}_t"
        cub_type = f"cub::BlockScan<{item}, {threads}, cub::BLOCK_SCAN_WARP_SCANS>"
        extra = f"{item} seed[2]; " if carried else f"{item} total; "
        extra += f"{item} agg; {item} prefix; " if s.chained else ""
        code = w.storage(s.cid, cub_type, extra, prelude=code, copies=2 if carried else None)
        code += f"using {alias} = {cub_type};\n"
        body = w.storage_ref(s.cid)
        body += "".join(w.items_ref(f"x{i}", f"in{i}", v, items) for i, v in enumerate(s.srcs))
        body += "".join(w.items_ref(f"o{i}", f"out{i}", v, items) for i, v in enumerate(s.outs))
        body += f"  {item} y[{items}];\n  for (int i = 0; i < {items}; ++i) {{ {pack('y[i]', 'x{}[i]')} }}\n"
        kind = "Exclusive" if s.exclusive else "Inclusive"
        init = None
        if s.initial is not None:
            init = "init"
            body += f"  {item} init;\n  {pack('init', 'initial{}')}\n"
        elif not s.combine and (s.exclusive or (s.totals and not s.chained)):
            init = w.identity(s.op, s.srcs[0].type.dtype)
        if s.chained:
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
        if s.totals is not None and not carried:
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
    """Whether the scan is a carried one (one barrier, the total in every thread, two TempStorage
    used in turn): it returns a total, has a seed (`initial`, or a built-in op's identity), and its
    tile of `size` fills the block."""
    return not s.chained and s.totals is not None and (s.initial is not None or not s.combine) and size % threads == 0
