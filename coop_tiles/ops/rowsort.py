"""The lowering of a row-wise `tile.sort` (a 2-D tile, each row sorted on its own) over the planner's rows
(`planner/layout.py::RowShape`, each lane's columns of a row one contiguous run, in order).

Every sort is a stable merge sort of items carrying what decides the order: for the radix rules (no
`compare=`), the key's order-preserving form (`sortkeys.ordered_code`), elements past their row's `valid` given
the form that sorts last (as the 1-D radix sort does: being later in their row, they stay after every valid
element and at their own places); with `compare=`, the keys and a valid flag, compared by the user's
function with invalid elements last. How many threads share a row picks the primitive:

- one lane per row: each thread sorts each of its rows in registers (`cub::StableOddEvenSort`);
- up to a warp: `cub::WarpMergeSort` over a logical warp of the row's lanes, one row after another (the
  sorted row comes out blocked over the lanes: the rows arrangement itself, no exchange);
- wider rows: one `cub::BlockMergeSort` of the whole tile with the row index compared first (padding after
  every row), then, unless the sorted order is already the rows arrangement, an exchange through shared
  memory into it.

A per-row `valid` tile is read in registers when it is held per row of the keys' rows (replicated over the
lanes), else through shared memory by row index.
"""

from __future__ import annotations

from typing import Any

from ..dtypes import cxx_name
from ..lang import ir
from ..lang.types import INT64, TileType
from ..planner.layout import SYNCS, RowShape
from .base import ShimCall, TileArg, ValueArg
from .rows import WARP, exchanged
from .sortkeys import compare_item, key_code, low_nan, ordered_code, pad_code, unsigned_cxx

THREAD, WARP_SORT, BLOCK = "StableOddEvenSort", "WarpMergeSort", "BlockMergeSort"


def primitive(rs: RowShape) -> str:
    """The CUB primitive a row-wise sort over `rs` runs as (see the module docstring)."""
    return THREAD if rs.lanes == 1 else WARP_SORT if rs.lanes <= WARP else BLOCK


def _tile_valid(s: Any) -> ir.Var | None:
    return s.valid if isinstance(s.valid, ir.Var) and isinstance(s.valid.type, TileType) else None


def _in_order(rs: RowShape) -> bool:
    """Whether a block-wide sort's blocked result is already the rows arrangement (no exchange)."""
    return rs.lanes * rs.row_items == rs.n and (rs.rows == 1 or rs.lanes == 1)


def choose(s: Any, ctx: Any) -> Any:
    """The plan's line: the primitive, over how many lanes and items, and its steps."""
    rs = ctx.tiles[s.keys[0].name].rows
    what = "sort" if s.compare is None else f"sort[{s.compare}]"
    how = primitive(rs)
    vectors = [v] if (v := _tile_valid(s)) is not None else []
    moved = bool(exchanged(s, ctx, rs, vectors))
    if how == THREAD:
        steps = f"thread-sequential over {rs.row_items} items, {rs.rows} row{'s' * (rs.rows > 1)}/thread"
    elif how == WARP_SORT:
        steps = f"logical warps of {rs.lanes} lanes x {rs.row_items} items, {rs.rows} row{'s' * (rs.rows > 1)}/thread"
    else:
        steps = f"whole tile, row first, {rs.rows * rs.row_items} items/thread"
        if not _in_order(rs):
            steps += " + exchange to rows through shared memory"
    if moved:
        steps += " + per-row valid through shared memory"
    storage = how != THREAD or moved
    sync = SYNCS if how == BLOCK or moved else ""
    return ctx.choice(s, f"{what} axis=1: {steps}", how, "StableSort", storage=storage, sync=sync)


def lower(s: Any, w: Any) -> ShimCall:
    """The shim of a row-wise sort (see the module docstring)."""
    rs = w.layout(s.keys[0]).rows
    how = primitive(rs)
    G, ipr, R, T, m, n = rs.lanes, rs.row_items, rs.rows, w.threads, rs.m, rs.n
    items = R * ipr
    vtile = _tile_valid(s)
    moved = bool(vtile is not None and exchanged(s, w, rs, [vtile]))
    args = [TileArg(v, f"in{i}") for i, v in enumerate(s.keys)]
    args += [TileArg(v, f"out{i}") for i, v in enumerate(s.key_outs)]
    if s.values is not None:
        args += [TileArg(s.values, "vin"), TileArg(s.value_out, "vout")]
    if vtile is not None:
        args.append(TileArg(vtile, "vrow"))
    else:
        args.append(ValueArg(s.valid if s.valid is not None else ir.Lit(n, INT64), "valid"))
    call = ShimCall(f"coop_rowsort_{s.cid}", tuple(args))
    value_t = cxx_name(s.values.type.dtype) if s.values is not None else None
    block = how == BLOCK
    row_field = " unsigned row;" if block else ""

    # the sorted item and its order
    item_t, less = f"coop_rsitem_{s.cid}", f"coop_rsless_{s.cid}"
    by_row = "if (a.row != b.row) return a.row < b.row; " if block else ""
    if s.compare is None:
        dt = s.keys[0].type.dtype
        u = unsigned_cxx(dt)
        width = s.end_bit - s.begin_bit
        field = "{}"
        if width < dt.itemsize * 8:
            field = f"(({{}} >> {s.begin_bit}) & {u}(({u}(1) << {width}) - 1))"
        elif s.begin_bit:
            field = f"({{}} >> {s.begin_bit})"
        cmp = ">" if s.descending else "<"
        prelude = (
            f"struct {item_t} {{ {u} o;{row_field} }};\n"
            f"struct {less} {{ __device__ __forceinline__ bool operator()(const {item_t}& a, const {item_t}& b) "
            f"const {{ {by_row}return {field.format('a.o')} {cmp} {field.format('b.o')}; }} }};\n"
        )
    else:
        prelude = compare_item(w, s, item_t, less, row_field, by_row)

    # TempStorage: the primitive's, the exchange of a block-wide sort, the per-row counts
    fields, sort_t = "", None
    if how == THREAD:
        w.include("cub/thread/thread_sort.cuh")
    elif how == WARP_SORT:
        w.include("cub/warp/warp_merge_sort.cuh")
        sort_t = f"cub::WarpMergeSort<{item_t}, {ipr}, {G}, {value_t or 'cub::NullType'}>"
        fields += f"typename {sort_t}::TempStorage warp[{T // G}]; "
    else:
        w.include("cub/block/block_merge_sort.cuh")
        sort_t = f"cub::BlockMergeSort<{item_t}, {T}, {items}, {value_t or 'cub::NullType'}>"
        xfields = f"{item_t} it[{T * items}]; " + (f"{value_t} v[{T * items}]; " if value_t else "")
        fields += f"union {{ typename {sort_t}::TempStorage sort; struct {{ {xfields}}} x; }}; "
    if moved:
        fields += f"long long vrow[{m}]; "
    code = prelude
    body = "".join(w.items_ref(f"x{i}", f"in{i}", v, items) for i, v in enumerate(s.keys))
    body += "".join(w.items_ref(f"y{i}", f"out{i}", v, items) for i, v in enumerate(s.key_outs))
    if value_t:
        body += w.items_ref("xv", "vin", s.values, items) + w.items_ref("yv", "vout", s.value_out, items)
    if fields:
        code += w.storage(
            s.cid,
            f"coop_rowsort_{s.cid}_t",
            prelude=f"struct coop_rowsort_{s.cid}_t {{ struct TempStorage {{ {fields}}}; }};\n",
        )
        body = w.storage_ref(s.cid) + body
    shift = G.bit_length() - 1
    body += f"  const int group = int(threadIdx.x) >> {shift}, c0 = (int(threadIdx.x) & {G - 1}) * {ipr};\n"

    # each of the thread's rows' count of valid columns, `vr[k]`
    body += f"  long long vr[{R}];\n"
    if vtile is not None:
        body += w.items_ref("vd", "vrow", vtile, w.layout(vtile).items_per_thread)
        if moved:
            body += (
                f"  for (int i = 0; i < {w.layout(vtile).items_per_thread}; ++i) {{ const int e = "
                f"{w.element_index(vtile)}; if (e < {m}) s.temp.vrow[e] = vd[i]; }}\n  __syncthreads();\n"
            )
            src = f"(group * {R} + k < {m} ? s.temp.vrow[group * {R} + k] : 0)"
        else:
            src = "vd[k]"
    else:
        src = "valid"
    body += (
        f"  for (int k = 0; k < {R}; ++k) {{ const long long c = {src}; vr[k] = c < 0 ? 0 : (c > {n} ? {n} : c); }}\n"
    )

    def fill(key: str, i: str, j: str, k: str) -> str:
        """Statements filling item `key` from the thread's item `i` (column c0 + j of its row k)."""
        ok = f"(c0 + {j} < vr[{k}])"
        if s.compare is None:
            return (
                "{\n"
                + ordered_code(dt, low_nan(s), f"x0[{i}]")
                + f"    {key}.o = {ok} ? r : {pad_code(dt, s.descending)};\n  }}\n"
            )
        return " ".join(f"{key}.f{q} = x{q}[{i}];" for q in range(len(s.keys))) + f" {key}.ok = {ok};\n"

    def unpack(key: str, i: str, j: str, k: str) -> str:
        """Statements writing the thread's result item `i` (column c0 + j of its row k) from item `key`."""
        if s.compare is None:
            return f"y0[{i}] = (c0 + {j} < vr[{k}]) ? {key_code(dt, f'{key}.o')} : x0[{i}];\n"
        return " ".join(f"y{q}[{i}] = {key}.f{q};" for q in range(len(s.keys))) + "\n"

    values = ", vals" if value_t else ""
    if how in (THREAD, WARP_SORT):
        body += f"  for (int k = 0; k < {R}; ++k) {{\n    {item_t} key[{ipr}];\n"
        if value_t or how == THREAD:
            body += f"    {value_t or 'cub::NullType'} vals[{ipr}];\n"
        body += f"    for (int j = 0; j < {ipr}; ++j) {{ const int i = k * {ipr} + j; (void)i; "
        body += fill("key[j]", "i", "j", "k") + ("      vals[j] = xv[i];\n" if value_t else "") + "    }\n"
        if how == THREAD:
            body += f"    cub::StableOddEvenSort(key, vals, {less}{{}});\n"
        else:
            body += f"    {sort_t}(s.temp.warp[group]).StableSort(key{values}, {less}{{}});\n"
        body += f"    for (int j = 0; j < {ipr}; ++j) {{ const int i = k * {ipr} + j; "
        body += unpack("key[j]", "i", "j", "k") + ("      yv[i] = vals[j];\n" if value_t else "") + "    }\n  }\n"
    else:
        body += f"  {item_t} key[{items}];\n"
        if value_t:
            body += f"  {value_t} vals[{items}];\n"
        body += (
            f"  for (int i = 0; i < {items}; ++i) {{\n"
            f"    const int k = i / {ipr}, j = i % {ipr}, rr = group * {R} + k;\n"
            f"    key[i].row = (rr < {m} && c0 + j < {n}) ? unsigned(rr) : {m}u;\n    "
        )
        body += fill("key[i]", "i", "j", "k") + ("    vals[i] = xv[i];\n" if value_t else "") + "  }\n"
        body += f"  {sort_t}(s.temp.sort).StableSort(key{values}, {less}{{}});\n"
        if not _in_order(rs):  # sorted rank p is element p: through shared memory into the rows arrangement
            body += (
                "  __syncthreads();\n"
                f"  for (int i = 0; i < {items}; ++i) {{ const int p = int(threadIdx.x) * {items} + i; "
                f"if (p < {m * n}) {{ s.temp.x.it[p] = key[i];{' s.temp.x.v[p] = vals[i];' if value_t else ''} }} }}\n"
                "  __syncthreads();\n"
                f"  for (int i = 0; i < {items}; ++i) {{ const int e = {w.element_index(s.keys[0])}; "
                f"if (e < {m * n}) {{ key[i] = s.temp.x.it[e];{' vals[i] = s.temp.x.v[e];' if value_t else ''} }} }}\n"
            )
        body += f"  for (int i = 0; i < {items}; ++i) {{\n    const int k = i / {ipr}, j = i % {ipr}; (void)k;\n    "
        body += unpack("key[i]", "i", "j", "k") + ("    yv[i] = vals[i];\n" if value_t else "") + "  }\n"
    w.define(call, code, body)
    return call
