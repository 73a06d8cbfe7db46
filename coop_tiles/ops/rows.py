"""What the axis ops of 2-D tiles share (reductions, scans and argmax along an axis): their per-row
operands (`initial` seeds), and how each lowers over the planner's row layouts."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import cxx_name
from ..errors import TileTypeError
from ..lang import ir
from ..lang.types import TileType
from ..lang.values import Const, is_tile
from ..planner.layout import PER_ROW, SYNCS, RowShape
from .base import ShimCall, TileArg, ValueArg
from .combining import item_code


def seeds(b: Any, value: Any, dtypes: tuple[np.dtype, ...], length: int, what: str) -> tuple[ir.Value, ...]:
    """`initial` of an axis scan: per item dtype a block-uniform scalar, or a tile of one seed per row
    (`length` of them: a 1-D tile, or a keepdims-shaped one), converted to the dtype."""
    if isinstance(value, Const) and isinstance(value.value, tuple):
        value = tuple(Const(v) for v in value.value)
    values = value if isinstance(value, tuple) else (value,)
    if len(values) != len(dtypes):
        raise TileTypeError(f"{what} must have {len(dtypes)} value{'s' if len(dtypes) > 1 else ''}, one per tile")
    out = []
    for v, dt in zip(values, dtypes):
        if not is_tile(v):
            out.append(b.convert(b.scalar(v, what), dt))
            continue
        if v.type.size != length or max(v.type.shape) != length:
            raise TileTypeError(
                f"{what} must be a scalar or a tile of {length} seeds (one per row scanned), got {v.type}"
            )
        if v.type.shape != (length,):
            v = b.remap(v, ir.RESHAPE, (length,))
        out.append(b.convert(v, dt))
    return tuple(out)


# ----- lowering over the row arrangement (planner/layout.py's RowShape) -----------------------------------
WARP = 32

#: a shuffle of any trivially copyable value, word by word, within the full warp (every lane calls it)
SHUFFLE = """\
template <class T> __device__ __forceinline__ T coop_shfl(const T& v, int src) {
  constexpr int W = (sizeof(T) + 3) / 4;
  unsigned in[W] = {};
  memcpy(in, &v, sizeof(T));
  unsigned out[W];
  for (int q = 0; q < W; ++q) out[q] = __shfl_sync(0xffffffffu, in[q], src & 31);
  T r;
  memcpy(&r, out, sizeof(T));
  return r;
}
"""


def natural(w: Any, v: ir.Var, rows: RowShape) -> bool:
    """Whether vector `v` holds one value per row of `rows` in the same arrangement (replicated over lanes)."""
    return w.layout(v).rows == rows.holding(PER_ROW)


def exchanged(s: Any, w_or_ctx: Any, rows: RowShape, vectors: list[ir.Var]) -> list[ir.Var]:
    """The per-row vectors of an axis op that are not in their natural arrangement (they go through shared
    memory: written or read by row index)."""
    tiles = w_or_ctx.tiles if hasattr(w_or_ctx, "tiles") else w_or_ctx.layouts.tiles
    return [v for v in vectors if tiles[v.name].rows != rows.holding(PER_ROW)]


def row_choice(s: Any, ctx: Any, what: str, src: ir.Var, vectors: list[ir.Var]) -> Any:
    """The plan's choice for an axis op over the rows of `src`: the steps it takes, and whether it needs
    TempStorage (rows across warps, vectors exchanged) and so a barrier."""
    rs = ctx.tiles[src.name].rows
    steps = [f"thread-sequential over {rs.row_items} items"]
    if rs.lanes > 1:
        steps.append(f"warp shuffles over {min(rs.lanes, WARP)} lanes")
    if rs.lanes > WARP:
        steps.append(f"shared memory across {rs.lanes // WARP} warps")
    moved = exchanged(s, ctx, rs, vectors)
    if moved:
        steps.append("per-row values through shared memory")
    storage = rs.lanes > WARP or bool(moved)
    algorithm = "WARP_SHUFFLE" if rs.lanes > 1 else "SEQUENTIAL"
    return ctx.choice(
        s, f"{what} axis=1: {' + '.join(steps)}", "rows", algorithm, storage=storage, sync=SYNCS * storage
    )


def lower_reduce(s: Any, w: Any) -> ShimCall:
    """`tile.reduce(t, axis=1)` over the rows arrangement: each thread folds its items of each of its rows, the
    row's lanes fold their values with shuffles in lane order (butterfly: every lane gets the row's value),
    rows wider than a warp fold the warps' values through shared memory; the results are the row's values
    in every lane (PER_ROW), or go through shared memory into another arrangement."""
    src = s.srcs[0]
    rs = w.layout(src).rows
    dtypes = [v.type.dtype for v in s.srcs]
    item, op, code, pack, unpack = item_code(w, s.cid, s.op, s.combine, dtypes)
    w.helper(SHUFFLE)
    args = [TileArg(v, f"in{i}") for i, v in enumerate(s.srcs)] + [TileArg(v, f"out{i}") for i, v in enumerate(s.outs)]
    call = ShimCall(f"coop_rowreduce_{s.cid}", tuple(args))
    G, ipr, R, T = rs.lanes, rs.row_items, rs.rows, w.threads
    gw, warps = min(G, WARP), T // WARP
    body = "".join(w.items_ref(f"x{i}", f"in{i}", v, R * ipr) for i, v in enumerate(s.srcs))
    body += "".join(w.items_ref(f"o{i}", f"out{i}", v, w.layout(v).items_per_thread) for i, v in enumerate(s.outs))
    body += _ids(rs)
    moved = exchanged(s, w, rs, list(s.outs))
    fields = ""
    if G > WARP:
        fields += f"{item} part[{R}][{warps}]; bool has[{R}][{warps}]; "
    fields += "".join(f"{cxx_name(v.type.dtype)} res{i}[{rs.m}]; " for i, v in enumerate(s.outs) if v in moved)
    if fields:
        code += f"struct coop_rows_{s.cid}_t {{ struct TempStorage {{ {fields}}}; }};\n"
        code += w.storage(s.cid, f"coop_rows_{s.cid}_t")
        body = w.storage_ref(s.cid) + body
    if s.combine:  # no identity: a flag says whether a value holds any element yet (runs: contiguous, in order)
        assert rs.contiguous, "an in-order fold along rows takes each lane's columns as one run"
        body += f"  {item} acc[{R}] = {{}};\n  bool has[{R}];\n"
        body += f"  for (int k = 0; k < {R}; ++k) {{\n    has[k] = false;\n"
        body += f"    for (int j = 0; j < {ipr}; ++j) {{\n      if (c0 + j >= {rs.n}) continue;\n"
        body += f"      {item} v; {pack('v', 'x{}[k * ' + str(ipr) + ' + j]')}\n"
        body += f"      acc[k] = has[k] ? {op}{{}}(acc[k], v) : v;\n      has[k] = true;\n    }}\n"
        if G > 1:
            body += (
                f"    for (int d = 1; d < {gw}; d <<= 1) {{\n"
                f"      const {item} o = coop_shfl(acc[k], int(threadIdx.x) ^ d);\n"
                "      const bool oh = coop_shfl(has[k], int(threadIdx.x) ^ d);\n"
                f"      if (oh) acc[k] = !has[k] ? o : (lane & d) ? {op}{{}}(o, acc[k]) : {op}{{}}(acc[k], o);\n"
                "      has[k] = has[k] || oh;\n    }\n"
            )
    else:  # padding takes the identity; lanes combine in order (the lower lane's value on the left)
        body += f"  {item} acc[{R}];\n  bool has[{R}] = {{{', '.join(['true'] * R)}}};\n"
        body += f"  for (int k = 0; k < {R}; ++k) {{\n    acc[k] = {w.identity(s.op, dtypes[0])};\n"
        col = rs.column_expr("lane", "j")  # (the order of a row's items does not matter to a built-in op)
        body += (
            f"    for (int j = 0; j < {ipr}; ++j) if ({col} < {rs.n}) acc[k] = {op}{{}}(acc[k], x0[k * {ipr} + j]);\n"
        )
        if G > 1:
            body += (
                f"    for (int d = 1; d < {gw}; d <<= 1) {{\n"
                f"      const {item} o = coop_shfl(acc[k], int(threadIdx.x) ^ d);\n"
                f"      acc[k] = (lane & d) ? {op}{{}}(o, acc[k]) : {op}{{}}(acc[k], o);\n    }}\n"
            )
    body += "  }\n"
    if G > WARP:  # each warp's value of the row, then every thread folds its row's warps in order
        per = G // WARP
        body += (
            f"  if ((threadIdx.x & 31) == 0) for (int k = 0; k < {R}; ++k) "
            "{ s.temp.part[k][threadIdx.x / 32] = acc[k]; s.temp.has[k][threadIdx.x / 32] = has[k]; }\n"
            "  __syncthreads();\n"
            f"  for (int k = 0; k < {R}; ++k) {{\n    has[k] = false;\n"
            f"    for (int q = 0; q < {per}; ++q) {{\n      const int wq = group * {per} + q;\n"
            "      if (!s.temp.has[k][wq]) continue;\n"
            f"      acc[k] = has[k] ? {op}{{}}(acc[k], s.temp.part[k][wq]) : s.temp.part[k][wq];\n"
            "      has[k] = true;\n    }\n  }\n"
        )
    for i, v in enumerate(s.outs):
        if v not in moved:
            body += f"  for (int k = 0; k < {R}; ++k) o{i}[k] = {unpack('acc[k]', i)};\n"
        else:
            body += (
                f"  if (lane == 0) for (int k = 0; k < {R}; ++k) {{ const int rr = group * {R} + k; "
                f"if (rr < {rs.m}) s.temp.res{i}[rr] = {unpack('acc[k]', i)}; }}\n"
            )
    if moved:
        body += "  __syncthreads();\n"
        for i, v in enumerate(s.outs):
            if v in moved:
                lay = w.layout(v)
                body += (
                    f"  for (int i = 0; i < {lay.items_per_thread}; ++i) {{ const int e = {w.element_index(v)}; "
                    f"if (e < {rs.m}) o{i}[i] = s.temp.res{i}[e]; }}\n"
                )
    w.define(call, code, body)
    return call


def _ids(rs: RowShape) -> str:
    """The thread's row group, lane in its row and first column (`c0`), in a shim over `rs`."""
    shift = rs.lanes.bit_length() - 1
    return (
        f"  const int group = int(threadIdx.x) >> {shift}, lane = int(threadIdx.x) & {rs.lanes - 1};\n"
        f"  const int c0 = lane * {rs.row_items};\n"
    )


def columns_as_rows(program: ir.Program, cls: type) -> None:
    """The GPU form of axis ops along columns (`axis=0`, statements of class `cls`): their 2-D operands
    transposed (`ir.TileRemap`, through shared memory), the op along rows, its 2-D results transposed back and
    its per-column vectors reshaped to their shapes: one lowering, the row one, for both axes."""
    numbering = ir.Numbering(program)
    fresh, temp = numbering.place, numbering.temp

    def visit(body: list[ir.Stmt]) -> None:
        i = 0
        while i < len(body):
            s = body[i]
            for nested in ir.regions(s):
                visit(nested)
            if not (isinstance(s, cls) and s.axis == 0):
                i += 1
                continue
            before, after = [], []
            srcs = []
            for v in s.srcs:
                t = temp(TileType(v.type.dtype, 0, v.type.shape[::-1]))
                before.append(fresh(ir.TileRemap(t, v, ir.TRANSPOSE), s))
                srcs.append(t)
            outs = []
            for v in s.outs:
                if v.type.ndim == 2 and min(v.type.shape) > 1:  # a scan's result: transposed back
                    t = temp(TileType(v.type.dtype, 0, v.type.shape[::-1]))
                    after.append(fresh(ir.TileRemap(v, t, ir.TRANSPOSE), s))
                elif v.type.ndim == 2:  # a keepdims fold (1, n): along rows it is (n, 1)
                    t = temp(TileType(v.type.dtype, 0, v.type.shape[::-1]))
                    after.append(fresh(ir.TileRemap(v, t, ir.RESHAPE), s))
                else:
                    t = v
                outs.append(t)
            s.srcs, s.outs, s.axis = tuple(srcs), tuple(outs), 1
            body[i : i + 1] = [*before, s, *after]
            i += len(before) + 1 + len(after)

    visit(program.body)


def lower_scan(s: Any, w: Any) -> ShimCall:
    """`tile.scan(t, axis=1)` over the rows arrangement. A row is `Q` segments, one per run a lane holds (one
    segment for contiguous runs), each the lanes' runs in lane order. Each thread scans each of its runs; the
    row's lanes scan their runs' totals with shuffles (Kogge-Stone, earlier lanes on the left), per segment;
    rows wider than a warp add the earlier warps' totals through shared memory; each run's prefix is then the
    row's seed, the earlier segments' totals and the earlier lanes' (and warps') of its own segment, in that
    order. A row's total is the inclusive value of its last element, from the lane that holds it. A reverse
    scan (`s.reverse`) is the same mirrored (`_row_scan`): each row from its last column to its first,
    later runs, lanes, warps and segments first, the seed at the last column, the total the inclusive value of
    column 0; its padding columns, first in that order, never enter a fold. Its code has the forward one's
    shape: as many shuffles and barriers, the same TempStorage."""
    src = s.srcs[0]
    rs = w.layout(src).rows
    dtypes = [v.type.dtype for v in s.srcs]
    k_ops = len(dtypes)
    item, op, code, pack, unpack = item_code(w, s.cid, s.op, s.combine, dtypes)
    w.helper(SHUFFLE)
    G, ipr, R, T, V = rs.lanes, rs.row_items, rs.rows, w.threads, rs.run
    Q = ipr // V
    warps = T // WARP
    seeds = list(s.initial or ())
    tile_seeds = [v for v in seeds if isinstance(v, ir.Var) and isinstance(v.type, TileType)]
    totals = list(s.totals or ())
    args = [TileArg(v, f"in{i}") for i, v in enumerate(s.srcs)] + [TileArg(v, f"out{i}") for i, v in enumerate(s.outs)]
    args += [TileArg(v, f"init{i}") if v in tile_seeds else ValueArg(v, f"init{i}") for i, v in enumerate(seeds)]
    args += [TileArg(v, f"total{i}") for i, v in enumerate(totals)]
    call = ShimCall(f"coop_rowscan_{s.cid}", tuple(args))
    body = "".join(w.items_ref(f"x{i}", f"in{i}", v, R * ipr) for i, v in enumerate(s.srcs))
    body += "".join(w.items_ref(f"o{i}", f"out{i}", v, R * ipr) for i, v in enumerate(s.outs))
    body += "".join(
        w.items_ref(f"sd{i}", f"init{i}", v, w.layout(v).items_per_thread)
        for i, v in enumerate(seeds)
        if v in tile_seeds
    )
    body += "".join(w.items_ref(f"tt{i}", f"total{i}", v, w.layout(v).items_per_thread) for i, v in enumerate(totals))
    body += _ids(rs)
    moved_in = exchanged(s, w, rs, tile_seeds)
    moved_out = exchanged(s, w, rs, totals)
    fields = f"{item} part[{R}][{Q}][{warps}]; " if G > WARP else ""
    fields += f"{item} last[{R}][{T // G}]; " if G > WARP and totals else ""
    fields += "".join(f"{cxx_name(v.type.dtype)} seed{i}[{rs.m}]; " for i, v in enumerate(seeds) if v in moved_in)
    fields += "".join(f"{cxx_name(v.type.dtype)} tot{i}[{rs.m}]; " for i, v in enumerate(totals) if v in moved_out)
    if fields:
        code += f"struct coop_rows_{s.cid}_t {{ struct TempStorage {{ {fields}}}; }};\n"
        code += w.storage(s.cid, f"coop_rows_{s.cid}_t")
        body = w.storage_ref(s.cid) + body
    # the seed of each of the thread's rows (`seeded`: whether there is one)
    seeded = s.initial is not None or (not s.combine and s.exclusive)
    if seeded:
        body += f"  {item} seed[{R}];\n"
        if moved_in:
            for i, v in enumerate(seeds):
                if v in moved_in:
                    lay = w.layout(v)
                    body += (
                        f"  for (int i = 0; i < {lay.items_per_thread}; ++i) {{ const int e = {w.element_index(v)}; "
                        f"if (e < {rs.m}) s.temp.seed{i}[e] = sd{i}[i]; }}\n"
                    )
            body += "  __syncthreads();\n"
        parts = []
        for i, v in enumerate(seeds):
            if v in moved_in:
                parts.append(f"s.temp.seed{i}[rr < {rs.m} ? rr : 0]")
            elif v in tile_seeds:
                parts.append(f"sd{i}[k]")
            else:
                parts.append(f"init{i}")
        if not seeds:
            parts = [w.identity(s.op, dtypes[0])]
        fill = " ".join(f"seed[k]{f'.f{i}' if s.combine else ''} = {p};" for i, p in enumerate(parts))
        body += f"  for (int k = 0; k < {R}; ++k) {{ const int rr = group * {R} + k; (void)rr; {fill} }}\n"
    body += _row_scan(s, rs, item, op, pack, seeded)
    if totals:
        # the row's last element in scan order (its last column; its first in a reverse scan): segment, lane and
        # item of it
        last = 0 if s.reverse else rs.n - 1
        q_last, lane_last, r_last = last // (G * V), (last // V) % G, last % V
        slot = q_last * V + r_last
        # the inclusive value of that element (for an exclusive scan: its result folded with it)
        if s.exclusive:
            fill_last = pack("x_last[k]", f"x{{}}[k * {ipr} + {slot}]")
            body += f"  {item} x_last[{R}];\n  for (int k = 0; k < {R}; ++k) {{ {fill_last} }}\n"
            value = f"{op}{{}}(y[k * {ipr} + {slot}], x_last[k])"
        else:
            value = f"y[k * {ipr} + {slot}]"
        body += f"  {item} total[{R}];\n"
        if G > WARP:
            body += (
                f"  if (lane == {lane_last}) for (int k = 0; k < {R}; ++k) s.temp.last[k][group] = {value};\n"
                "  __syncthreads();\n"
                f"  for (int k = 0; k < {R}; ++k) total[k] = s.temp.last[k][group];\n"
            )
        else:
            body += (
                f"  for (int k = 0; k < {R}; ++k) total[k] = coop_shfl({value}, "
                f"(int(threadIdx.x) & ~{G - 1}) + {lane_last});\n"
            )
        for i, v in enumerate(totals):
            if v not in moved_out:
                body += f"  for (int k = 0; k < {R}; ++k) tt{i}[k] = {unpack('total[k]', i)};\n"
            else:
                body += (
                    f"  if (lane == 0) for (int k = 0; k < {R}; ++k) {{ const int rr = group * {R} + k; "
                    f"if (rr < {rs.m}) s.temp.tot{i}[rr] = {unpack('total[k]', i)}; }}\n"
                )
        if moved_out:
            body += "  __syncthreads();\n"
            for i, v in enumerate(totals):
                if v in moved_out:
                    lay = w.layout(v)
                    body += (
                        f"  for (int i = 0; i < {lay.items_per_thread}; ++i) {{ const int e = {w.element_index(v)}; "
                        f"if (e < {rs.m}) tt{i}[i] = s.temp.tot{i}[e]; }}\n"
                    )
    body += (
        f"  for (int i = 0; i < {R * ipr}; ++i) {{ "
        + " ".join(f"o{i}[i] = {unpack('y[i]', i)};" for i in range(k_ops))
        + " }\n"
    )
    w.define(call, code, body)
    return call


def _row_scan(s: Any, rs: RowShape, item: str, op: str, pack: Any, seeded: bool) -> str:
    """The row scan's code from the seeds (`seed[k]`, when `seeded`) to the results in `y`, forward or (with
    `s.reverse`) mirrored: each row from its last column to its first, the later column on the left of `op`. Each
    thread scans each of its runs in scan order; the row's lanes scan their runs' totals with shuffles from the
    lanes before them in scan order (`tid - d`, or `tid + d` in reverse), per segment; rows wider than a warp add
    the earlier warps' totals (each warp's from its last lane in scan order); each run's prefix is the seed, the
    earlier segments' totals and the earlier warps' and lanes' of its own segment. A reverse scan's padding
    columns (past `n`) come first in its order and never enter a fold: they are the end of segment `q_last` (the
    lanes past `lane_last`, the items past `r_last` of that lane) and the segments after it, all known here, so
    the bounds are constants (none where a row has no padding); a forward scan's padding comes after every
    column and needs no bound."""
    G, ipr, R, V, n = rs.lanes, rs.row_items, rs.rows, rs.run, rs.n
    Q, gw, per, rev = ipr // V, min(G, WARP), G // WARP, bool(s.reverse)
    q_last, lane_last, r_last = (n - 1) // (G * V), ((n - 1) // V) % G, (n - 1) % V
    Qs = q_last + 1 if rev else Q  # the segments scanned (in reverse, later ones are padding only)
    edge = n - q_last * G * V  # segment q_last's columns: a lane's item j is one if lane * V + j < edge
    wl = f"(lane & {gw - 1})"  # the lane within the row's part of a warp
    sign, step = ("+", -1) if rev else ("-", 1)  # the earlier lanes in scan order are at `tid {sign} d`

    def lane_real(d: str) -> str:  # " && ...": lane + d holds a column of segment q (where some lanes do not)
        return f" && (q != {q_last} || lane + {d} <= {lane_last})" if rev and lane_last < G - 1 else ""

    def item_real(j: str) -> str:  # a condition: item j of the thread's run of segment q is a column (or "")
        return f"(q != {q_last} || lane * {V} + {j} < {edge})" if rev and r_last < V - 1 else ""

    def earlier(d: str) -> str:  # whether the lane `d` before this one in scan order is in the row's warp part
        return f"{wl} + {d} < {gw}{lane_real(d)}" if rev else f"{wl} >= {d}"

    def fold(first: str, to: str, value: str) -> str:  # `value` folded with warp totals first .. to, scan order
        each = f"{value} = {op}{{}}({value}, s.temp.part[k][q][u]);"
        return f"for (int u = {first} {'-' if rev else '+'} 1; u != {to}; u += {step}) {each}"

    # each run scanned on its own, then the lanes' run totals of each segment (`run`: inclusive over lanes)
    body = f"  {item} y[{R * ipr}];\n  {item} run[{R}][{Q}];\n"
    packed = f"    for (int j = 0; j < {V}; ++j) {{ {pack('y[b + j]', 'x{}[b + j]')} }}\n"
    runs = f"  for (int k = 0; k < {R}; ++k) for (int q = 0; q < {{}}; ++q) {{{{\n"
    runs += f"    const int b = k * {ipr} + q * {V};\n"
    if Qs < Q:  # (the padding segments packed apart: one loop keeps every array in registers)
        body += runs.format(Q) + packed + "  }\n"
    body += runs.format(Qs)
    body += packed if Qs == Q else ""
    if rev:
        guard = item_real("j + 1")
        step_j = f"y[b + j] = {op}{{}}(y[b + j + 1], y[b + j]);"
        body += f"    for (int j = {V - 2}; j >= 0; --j) {f'if ({guard}) ' if guard else ''}{step_j}\n"
        body += "    run[k][q] = y[b];\n"
    else:
        body += f"    for (int j = 1; j < {V}; ++j) y[b + j] = {op}{{}}(y[b + j - 1], y[b + j]);\n"
        body += f"    run[k][q] = y[b + {V - 1}];\n"
    if G > 1:
        body += (
            f"    for (int d = 1; d < {gw}; d <<= 1) {{\n"
            f"      const {item} o = coop_shfl(run[k][q], int(threadIdx.x) {sign} d);\n"
            f"      if ({earlier('d')}) run[k][q] = {op}{{}}(o, run[k][q]);\n    }}\n"
        )
    body += "  }\n"
    if G > WARP:  # each warp's total, from its last lane in scan order
        body += (
            f"  if ((threadIdx.x & 31) == {0 if rev else 31}) for (int k = 0; k < {R}; ++k) "
            f"for (int q = 0; q < {Qs}; ++q) s.temp.part[k][q][threadIdx.x / 32] = run[k][q];\n"
            "  __syncthreads();\n"
        )
    # each run's prefix: the seed, the earlier segments' totals (`carry`), then its segment's earlier warps and lanes
    body += f"  {item} pre[{R}][{Q}];\n  bool has_pre[{R}][{Q}];\n"
    body += f"  for (int k = 0; k < {R}; ++k) {{\n"
    if seeded:
        body += f"    {item} carry = seed[k];\n    bool has_carry = true;\n"
    else:
        body += f"    {item} carry = {{}};\n    bool has_carry = false;\n"
    body += f"    for (int q = {Qs - 1}; q >= 0; --q) {{\n" if rev else f"    for (int q = 0; q < {Q}; ++q) {{\n"
    if G > WARP:  # the row's warps holding columns of segment q, from `start` to `stop` in scan order
        stop = f"group * {per}"
        start = f"{stop} + {per - 1}"
        if rev and lane_last // WARP < per - 1:
            start = f"(q == {q_last} ? {stop} + {lane_last // WARP} : {start})"
        if not rev:
            start, stop = stop, start
        body += f"      const int start = {start}, stop = {stop};\n"
    if G > 1:
        body += (
            f"      const {item} p0 = coop_shfl(run[k][q], int(threadIdx.x) {sign} 1);\n"
            f"      bool has = {earlier('1')};\n      {item} p = p0;\n"
        )
    else:
        body += f"      bool has = false;\n      {item} p = {{}};\n"
    if G > WARP:
        after = "mine < start" if rev else "mine > start"
        body += (
            "      { const int mine = int(threadIdx.x) / 32;\n"
            f"        if ({after}) {{ {item} wp = s.temp.part[k][q][start];\n"
            f"          {fold('start', 'mine', 'wp')}\n"
            f"          p = has ? {op}{{}}(wp, p) : wp; has = true; }} }}\n"
        )
    body += (
        f"      pre[k][q] = has_carry ? (has ? {op}{{}}(carry, p) : carry) : p;\n"
        "      has_pre[k][q] = has_carry || has;\n"
    )
    if Qs > 1:  # the segment's total, for the later segments: the row's last lane in scan order (or its warps')
        if G > WARP:
            total_q = f"{item} seg = s.temp.part[k][q][start];\n        {fold('start', f'stop + {step}', 'seg')}\n"
        else:
            last = f"int(threadIdx.x) & ~{G - 1}" if rev else f"(int(threadIdx.x) & ~{G - 1}) + {G - 1}"
            total_q = f"const {item} seg = coop_shfl(run[k][q], {last});\n"
        more = "q > 0" if rev else f"q + 1 < {Q}"
        carry = f"carry = has_carry ? {op}{{}}(carry, seg) : seg; has_carry = true;"
        body += f"      if ({more}) {{ {total_q}        {carry} }}\n"
    body += "    }\n  }\n"
    # the results: inclusive (prefix then the run's own scan) or exclusive (prefix then the run's scan shifted)
    if s.exclusive:
        guard = item_real("j")
        order = f"int j = {V - 1}; j >= 0; --j" if rev else f"int j = 0; j < {V}; ++j"
        body += (
            f"  for (int k = 0; k < {R}; ++k) for (int q = 0; q < {Qs}; ++q) {{\n"
            f"    const int b = k * {ipr} + q * {V};\n    {item} prev = pre[k][q];\n"
            f"    for ({order}) {{ {f'if (!{guard}) continue; ' if guard else ''}"
            f"const {item} cur = y[b + j]; y[b + j] = prev; prev = {op}{{}}(pre[k][q], cur); }}\n  }}\n"
        )
    else:
        body += (
            f"  for (int k = 0; k < {R}; ++k) for (int q = 0; q < {Qs}; ++q) if (has_pre[k][q]) "
            f"for (int j = 0; j < {V}; ++j) {{ const int b = k * {ipr} + q * {V} + j; "
            f"y[b] = {op}{{}}(pre[k][q], y[b]); }}\n"
        )
    return body
