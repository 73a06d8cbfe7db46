"""`tile.reduce` (and `tile.sum`/`max`/`min`): a tile, or a tuple of tiles with a `@ct.combine`
function, folded to block-uniform scalars.

Built-in ops fold by warp reductions over any arrangement (they commute; padding takes the
identity). In a loop, each warp's total (`cub::WarpReduce`) goes to shared memory, and after
one barrier every thread folds the totals itself (an all-reduce, no broadcast); elsewhere
`cub::BlockReduce` folds them in thread 0, which shares the result unless only it uses it. A
combine function need not commute: its tiles are kept blocked, each thread folds its own items
in order, and BLOCK_REDUCE_RAKING (which keeps the threads' order) folds the threads that hold
valid items; thread 0 shares the result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tile
from ..errors import TileValueError
from ..lang import ir
from ..lang.types import ScalarType, TileType
from ..lang.values import Const
from ..planner.layout import PER_ROW, REENTRANT
from . import rows
from .base import PARITY, OutArg, ShimCall, TileArg, TileOp, errstate, register, tile_axis
from .combining import FORBIDS, OPTIONS, UFUNCS, combine_fold, item_code, typed_op

_NAMED = {tile.sum: "add", tile.max: "max", tile.min: "min"}


@dataclass
class TileReduce(ir.Collective, defs="outs", uses="srcs", attrs="op combine axis"):
    """The fold of `srcs` to scalars `outs`, or with `axis` along that axis to tiles `outs` (of the
    other axis's extent, or keeping the folded axis as 1 where the outs' rank is the sources')."""

    outs: tuple[ir.Var, ...]
    srcs: tuple[ir.Var, ...]
    op: str
    combine: bool
    axis: int | None = None


@register
class Reduce(TileOp):
    striped_vectors = True
    publics = (tile.reduce, tile.sum, tile.max, tile.min)
    stmt = TileReduce
    options = OPTIONS
    forbids = FORBIDS

    def build(self, b, public, t, op=None, axis=None, keepdims=None, *, dtype):  # (sum/max/min: no op)
        what = f"tile.{public.__name__}"
        op = Const(_NAMED[public]) if op is None else op
        op, srcs, dtypes = typed_op(b, op, t, what, dtype)
        keep = b.constant(keepdims, "keepdims", bool)
        axis = b.optional(axis)
        shape = srcs[0].type.shape
        k = None if axis is None else tile_axis(b, axis, srcs[0], what)
        if k is None and keep:
            raise TileValueError(f"{what}(..., keepdims=True) needs axis=k: with axis=None the result is a scalar")
        if k is None and len(shape) > 1 and not isinstance(op, str):  # an in-order fold: of the row-major order
            srcs = tuple(b.remap(v, ir.RESHAPE, (v.type.size,)) for v in srcs)
        if k is not None and keep and len(shape) == 1:  # a 1-D tile kept 1-D: its one row folded, as (1,)
            srcs, k = tuple(b.remap(v, ir.RESHAPE, (1, v.type.size)) for v in srcs), 1
            rows = tuple(b.temp(TileType(dt, 0, (1, 1))) for dt in dtypes)
            b.emit(TileReduce(rows, srcs, op if isinstance(op, str) else op.name, not isinstance(op, str), k))
            outs = tuple(b.remap(v, ir.RESHAPE, (1,)) for v in rows)
            return outs if len(outs) > 1 or not isinstance(t, ir.Var) else outs[0]
        if k is not None and len(shape) > 1:
            out_shape = shape[:k] + (1,) * keep + shape[k + 1 :]
            outs = tuple(b.temp(TileType(dt, 0, out_shape)) for dt in dtypes)
        else:  # every element folded: a block-uniform scalar
            k, outs = None, tuple(b.temp(ScalarType(dt)) for dt in dtypes)
        b.emit(TileReduce(outs, srcs, op if isinstance(op, str) else op.name, not isinstance(op, str), k))
        return outs if len(outs) > 1 or not isinstance(t, ir.Var) else outs[0]

    def interpret(self, s: TileReduce, frame) -> None:
        xs = tuple(frame.get(v) for v in s.srcs)
        if s.axis is not None:
            xs = tuple(np.moveaxis(x, s.axis, -1) for x in xs)
        elif xs[0].ndim > 1:
            xs = tuple(x.reshape(-1) for x in xs)
        if s.combine:
            values = combine_fold(frame, frame.program.combines[s.op], xs)
        else:
            with errstate():
                values = (UFUNCS[s.op].reduce(xs[0], axis=-1, dtype=xs[0].dtype),)
        for var, value in zip(s.outs, values):
            if isinstance(var.type, TileType):
                frame.env[var.name] = np.asarray(value, var.type.dtype).reshape(var.type.shape)
            else:
                frame.set(var, value)

    def layout(self, s: TileReduce, ctx) -> None:
        if s.axis is not None:  # along rows: the sources share their arrangement, the results follow it
            (ctx.join_blocked if s.combine else ctx.join)(list(s.srcs))  # (a combine folds each row in order)
            for v in s.outs:
                ctx.claim(v, s.srcs[0], PER_ROW)
        elif s.combine:  # in-order fold: blocked items, one arrangement for the whole tuple
            ctx.join_blocked(list(s.srcs))

    def replicates(self, s: TileReduce, var: ir.Var) -> bool:
        return var in s.outs  # (every lane of a row gets the row's value)

    def rewrite(self, program: ir.Program, debug: bool, arch: str) -> None:
        rows.columns_as_rows(program, TileReduce)

    def choose(self, s: TileReduce, ctx):
        if s.axis is not None:
            return rows.row_choice(s, ctx, f"reduce[{s.op}]", s.srcs[0], list(s.outs))
        if _all_reduce(s, ctx.block_values, ctx.threads, ctx.depths.get(s.cid, 0)):
            # its own barrier, and two sets of warp totals used in turn: it may run again without one before it
            label = f"reduce[{s.op}], all-reduce"
            return ctx.choice(s, label, "WarpReduce", "BLOCK_REDUCE_WARP_REDUCTIONS", sync=REENTRANT)
        algorithm = "BLOCK_REDUCE_RAKING" if s.combine else "BLOCK_REDUCE_WARP_REDUCTIONS"
        thread0 = ", result in thread 0" if _thread0_result(s, ctx.block_values) else ""
        return ctx.choice(s, f"reduce[{s.op}]{thread0}", "BlockReduce", algorithm)

    def lower(self, s: TileReduce, w) -> ShimCall:
        if s.axis is not None:
            return rows.lower_reduce(s, w)
        k = len(s.srcs)
        lay = w.layout(s.srcs[0])
        items, threads, size = lay.items_per_thread, w.threads, lay.size
        every = w.choice(s.cid).primitive == "WarpReduce"
        args = [TileArg(v, f"in{i}") for i, v in enumerate(s.srcs)]
        args += [OutArg(v, f"result{i}") for i, v in enumerate(s.outs)] + ([PARITY] if every else [])
        call = ShimCall(f"coop_reduce_{s.cid}", tuple(args))
        item, op, code, pack, unpack = item_code(w, s.cid, s.op, s.combine, [v.type.dtype for v in s.srcs])
        full = threads * items == size
        index = w.element_index(s.srcs[0])
        if s.combine:
            valid_threads = -(-size // items)
            fold = f"  {item} acc;\n  {pack('acc', 'x{}[0]')}\n"
            fold += f"  for (int i = 1; i < {items}; ++i) {{\n"
            fold += f"    {item} v; {pack('v', 'x{}[i]')}\n"
            fold += "    " + ("" if full else f"if ({index} < {size}) ") + f"acc = {op}{{}}(acc, v);\n  }}\n"
            reduce_call = f"Reduce(acc, {op}{{}}, {valid_threads})" if not full else f"Reduce(acc, {op}{{}})"
        else:
            fold = f"  {item} acc = {w.identity(s.op, s.srcs[0].type.dtype)};\n"
            guard = "" if full else f"if ({index} < {size}) "
            fold += f"  for (int i = 0; i < {items}; ++i) {guard}acc = {op}{{}}(acc, x0[i]);\n"
            reduce_call = "Sum(acc)" if s.op == "add" else f"Reduce(acc, {op}{{}})"
        items_refs = "".join(w.items_ref(f"x{i}", f"in{i}", v, items) for i, v in enumerate(s.srcs))
        if every:
            # each warp folds its threads' values, and after one barrier every thread folds the warps' totals
            # (in warp order, as BLOCK_REDUCE_WARP_REDUCTIONS does in thread 0); consecutive runs alternate
            # between two sets of totals (`w.alternate`), so that none waits for the last one's readers
            warps = threads // 32
            w.include("cub/warp/warp_reduce.cuh")
            warp_type = f"cub::WarpReduce<{item}>"
            extra = f"alignas(16) {item} totals[2][{warps}]; "
            code = w.storage(s.cid, warp_type, extra, prelude=code, copies=warps)
            body = w.storage_ref(s.cid) + items_refs + fold
            body += w.alternate() + (
                f"  const {item} warp_total = {warp_type}(s.temp[threadIdx.x / 32]).{reduce_call};\n"
                "  if (threadIdx.x % 32 == 0) s.totals[run][threadIdx.x / 32] = warp_total;\n"
                "  __syncthreads();\n"
                f"  {item} t[{warps}];  // the totals, in 16-byte words where they fill whole ones\n"
                "  if constexpr (sizeof(t) % 16 == 0) {\n"
                "    for (int j = 0; j < int(sizeof(t) / 16); ++j) "
                "reinterpret_cast<uint4*>(t)[j] = reinterpret_cast<const uint4*>(s.totals[run])[j];\n"
                f"  }} else {{\n    for (int i = 0; i < {warps}; ++i) t[i] = s.totals[run][i];\n  }}\n"
                f"  {item} r = t[0];\n  for (int i = 1; i < {warps}; ++i) r = {op}{{}}(r, t[i]);\n"
            )
            body += "".join(f"  *result{i} = {unpack('r', i)};\n" for i in range(k))
            w.define(call, code, body)
            return call
        w.include("cub/block/block_reduce.cuh")
        algorithm = w.choice(s.cid).algorithm
        alias = f"coop_reduce_{s.cid}_t"
        cub_type = f"cub::BlockReduce<{item}, {threads}, cub::{algorithm}>"
        thread0 = _thread0_result(s, w.block_values)
        extra = "" if thread0 else f"{item} result; "
        code = w.storage(s.cid, cub_type, extra, prelude=code) + f"using {alias} = {cub_type};\n"
        body = w.storage_ref(s.cid) + items_refs + fold + f"  {item} r = {alias}(s.temp).{reduce_call};\n"
        if thread0:  # CUB's result is thread 0's, and only thread 0 uses it
            body += "".join(f"  *result{i} = {unpack('r', i)};\n" for i in range(k))
        else:
            body += "  if (threadIdx.x == 0) s.result = r;\n  __syncthreads();\n"
            body += "".join(f"  *result{i} = {unpack('s.result', i)};\n" for i in range(k))
        w.define(call, code, body)
        return call


def _thread0_result(s: TileReduce, block_values: frozenset[str]) -> bool:
    """Whether only thread 0 uses the result (an element write's value: see `planner.layout.block_values`),
    so that it needs no broadcast."""
    return not any(v.name in block_values for v in s.outs)


def _all_reduce(s: TileReduce, block_values: frozenset[str], threads: int, loops: int) -> bool:
    """Whether every thread folds the warps' totals itself (one barrier, no broadcast): a built-in op, whose
    result threads other than thread 0 use, in a block of whole warps, inside `loops` > 0 loops, where the
    barrier it saves is on the loop's critical path and runs need no barrier between them; alone, the
    broadcast costs less than every warp folding the totals (measured on an H100: a row softmax)."""
    return loops > 0 and not s.combine and not _thread0_result(s, block_values) and threads % 32 == 0
