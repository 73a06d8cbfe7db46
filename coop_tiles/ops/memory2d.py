"""2-D blocks of `tile.load` and `tile.store` (`a[r:r+M, c:c+N]` of a 2-D array or view, `valid=(vr, vc)`),
and `mask=`, which loads and stores of both ranks take: what the public ops in `ops/memory.py` build
for a 2-D call, and how each is interpreted. Elements past `valid` or where the mask is false are never
touched (a load gives `other` there); any other element outside the array is a TileValueError."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import TileTypeError, TileValueError
from ..lang import ir
from ..lang.types import INT64, TileType
from ..lang.values import Const
from .base import ArrayArg, ShimCall, TileArg, TileOp, ValueArg, mask_value, register
from .transfer import VECTOR_BYTES, move_words


@dataclass
class TileLoad2D(ir.Collective, defs="out", uses="array row col valid_rows valid_cols other mask"):
    """`out = a[row:row+M, col:col+N]` (M, N: `out`'s shape), elements past the valid counts or masked off
    being `other`."""

    out: ir.Var
    array: ir.Var
    row: ir.Value
    col: ir.Value
    valid_rows: ir.Value | None
    valid_cols: ir.Value | None
    other: ir.Value
    mask: ir.Var | None


@dataclass
class TileStore2D(ir.Collective, uses="array row col tile valid_rows valid_cols mask"):
    """`a[row:row+M, col:col+N] = tile` but for elements past the valid counts or masked off."""

    array: ir.Var
    row: ir.Value
    col: ir.Value
    tile: ir.Var
    valid_rows: ir.Value | None
    valid_cols: ir.Value | None
    mask: ir.Var | None


def offset_value(b: Any, v: Any, what: str) -> ir.Value:
    return b.convert(b.scalar(v, what, "iu"), np.dtype(np.int64))


def is_2d(b: Any, offset: Any, size: Any) -> bool:
    """Whether a load or store call names a 2-D block (a pair of offsets or a 2-D shape)."""
    pair = isinstance(offset, tuple) or (isinstance(offset, Const) and isinstance(offset.value, tuple))
    return pair or (isinstance(size, Const) and isinstance(size.value, tuple)) or isinstance(size, tuple)


def _pair(b: Any, v: Any, what: str) -> tuple:
    items = tuple(Const(x) for x in v.value) if isinstance(v, Const) and isinstance(v.value, tuple) else v
    if not isinstance(items, tuple) or len(items) != 2:
        raise TileTypeError(f"{what} of a 2-D block must be a pair (one per axis), got {_shown(v)}")
    return items


def _shown(v: Any) -> str:
    if isinstance(v, tuple):
        return f"a tuple of {len(v)}"
    return repr(v.value) if isinstance(v, Const) else str(getattr(v, "type", v))


def two_d_array(b: Any, v: Any, what: str) -> ir.Var:
    array = b.array(v, what)
    if array.type.ndim != 2:
        raise TileTypeError(
            f"{what} must be a 2-D array or view for a 2-D block, got a {array.type.ndim}-d array"
            + ("; use a 1-D tile (an int offset and size)" if array.type.ndim == 1 else "; index it down to two axes")
        )
    return array


def block_args(b: Any, offset: Any, valid: Any) -> tuple[ir.Value, ir.Value, ir.Value | None, ir.Value | None]:
    """(row, col, valid rows, valid cols) of a 2-D call: int64 scalars (a valid count None: the whole axis)."""
    row, col = (offset_value(b, v, "the offset") for v in _pair(b, offset, "the offset"))
    valid = b.optional(valid)
    if valid is None:
        return row, col, None, None
    counts = [b.optional(v) for v in _pair(b, valid, "valid")]
    vr, vc = (None if v is None else b.convert(b.scalar(v, "valid", "iu"), np.dtype(np.int64)) for v in counts)
    return row, col, vr, vc


def build_load_2d(b: Any, a: Any, offset: Any, size: Any, valid: Any, other: Any, mask: Any) -> ir.Var:
    array = two_d_array(b, a, "tile.load's first argument")
    shape = b.tile_shape(size, "shape")
    if len(shape) != 2:
        raise TileTypeError(f"a 2-D block needs a shape (M, N), got {shape}")
    dt = array.type.dtype
    row, col, vr, vc = block_args(b, offset, valid)
    out = b.temp(TileType(dt, 0, shape))
    other = b.convert(b.scalar(other, "other"), dt)
    b.emit(TileLoad2D(out, array, row, col, vr, vc, other, mask_value(b, mask, shape)))
    return out


def build_store_2d(b: Any, a: Any, offset: Any, t: ir.Var, valid: Any, mask: Any) -> None:
    array = two_d_array(b, a, "tile.store's first argument")
    if t.type.ndim != 2:
        raise TileTypeError(f"a 2-D block store takes a 2-D tile, got {t.type}")
    row, col, vr, vc = block_args(b, offset, valid)
    mask = mask_value(b, mask, t.type.shape)
    b.emit(TileStore2D(array, row, col, b.convert(t, array.type.dtype), vr, vc, mask))


def touched(
    frame: Any, array: np.ndarray, starts: tuple, valids: tuple, mask: ir.Var | None, shape: tuple, what: str
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """(which elements of a block of `shape` at `starts` an op touches, their array indices); a
    TileValueError when one of them is outside the array."""
    grids = np.meshgrid(*(np.arange(n) for n in shape), indexing="ij")
    take = np.ones(shape, bool)
    for g, v, n in zip(grids, valids, shape):
        count = n if v is None else int(np.clip(int(frame.get(v)), 0, n))
        take &= g < count
    if mask is not None:
        take &= np.asarray(frame.get(mask), bool)
    index = tuple(g + int(frame.get(s)) for g, s in zip(grids, starts))
    outside = np.zeros(shape, bool)
    for i, n in zip(index, array.shape):
        outside |= (i < 0) | (i >= n)
    bad = np.argwhere(take & outside)
    if len(bad):
        first = tuple(int(i[tuple(bad[0])]) for i in index)
        where = first[0] if len(first) == 1 else first
        extent = f"{array.shape[0]} elements" if array.ndim == 1 else f"shape {array.shape}"
        raise TileValueError(f"{what} touches element {where} of an array of {extent}")
    return take, index


def load_masked(frame: Any, array: np.ndarray, starts: tuple, valids: tuple, mask, shape, other, what: str):
    """The loaded block: the touched elements read, the others `other`."""
    take, index = touched(frame, array, starts, valids, mask, shape, what)
    data = np.full(shape, other, dtype=array.dtype)
    data[take] = array[tuple(i[take] for i in index)]
    return data


def store_masked(frame: Any, array: np.ndarray, starts: tuple, valids: tuple, mask, values: np.ndarray, what: str):
    take, index = touched(frame, array, starts, valids, mask, values.shape, what)
    array[tuple(i[take] for i in index)] = values[take]


@register
class Load2D(TileOp):
    stmt = TileLoad2D

    def interpret(self, s: TileLoad2D, frame) -> None:
        array = frame.get(s.array)
        shape = s.out.type.shape
        data = load_masked(
            frame, array, (s.row, s.col), (s.valid_rows, s.valid_cols), s.mask, shape, frame.get(s.other), "tile.load"
        )
        frame.env[s.out.name] = data.astype(s.out.type.dtype, copy=False)

    def global_access(self, s: TileLoad2D):
        return s.array, False

    def layout(self, s: TileLoad2D, ctx) -> None:
        ctx.join([s.out, *([s.mask] if s.mask is not None else [])])

    def takes_fragments(self, s: TileLoad2D, var: ir.Var) -> bool:
        return True  # (item by item, at each item's element index)

    def choose(self, s: TileLoad2D, ctx):
        return _choose(s, ctx, s.out, s.mask, "load")

    def lower(self, s: TileLoad2D, w):
        return lower_block(w, s, s.out, s.mask, load=True)


@register
class Store2D(TileOp):
    stmt = TileStore2D

    def interpret(self, s: TileStore2D, frame) -> None:
        array = frame.get(s.array)
        values = np.asarray(frame.get(s.tile))
        store_masked(frame, array, (s.row, s.col), (s.valid_rows, s.valid_cols), s.mask, values, "tile.store")

    def global_access(self, s: TileStore2D):
        return s.array, True

    def layout(self, s: TileStore2D, ctx) -> None:
        ctx.join([s.tile, *([s.mask] if s.mask is not None else [])])

    def takes_fragments(self, s: TileStore2D, var: ir.Var) -> bool:
        return True  # (item by item, at each item's element index)

    def choose(self, s: TileStore2D, ctx):
        return _choose(s, ctx, s.tile, s.mask, "store")

    def lower(self, s: TileStore2D, w):
        return lower_block(w, s, s.tile, s.mask, load=False)


def _vector_rows(tile: ir.Var, array: ir.Var, mask: ir.Var | None, rows: Any) -> bool:
    """Whether each run of a row a thread holds moves as whole 16-byte words (where the run is whole and
    aligned): rows of unit stride, runs a whole number of words, no mask."""
    return array.type.unit_stride and mask is None and rows.run * array.type.dtype.itemsize % VECTOR_BYTES == 0


def _choose(s: ir.Collective, ctx: Any, tile: ir.Var, mask: ir.Var | None, kind: str) -> Any:
    lay = ctx.tiles[tile.name]
    if lay.fragment is not None:
        how = "item by item, GEMM fragment"
    elif _vector_rows(tile, s.array, mask, lay.rows):
        how = "16-byte words per row run"
    else:
        how = "item by item"
    return ctx.choice(s, f"{kind} 2-D, {how}", "rows", "DIRECT", storage=False)


def lower_block(w: Any, s: Any, tile: ir.Var, mask: ir.Var | None, load: bool) -> Any:
    """The shim of a 2-D load or store: per thread, each run of each of its rows (`RowShape`), in 16-byte
    words where the run is whole, inside the array, valid and aligned, else item by item (valid counts,
    array bounds and mask checked per item)."""
    lay = w.layout(tile)
    rs = lay.rows
    m, n = tile.type.shape
    kind = "load" if load else "store"
    a = ArrayArg(s.array, "a")
    rows, cols = a.parts.shapes
    at = f"{a.parts.ptr}[{a.parts.offset(['ar', 'ac'])}]"  # (element (ar, ac))
    args = [TileArg(tile, "items"), a, ValueArg(s.row, "row"), ValueArg(s.col, "col")]
    args += [
        ValueArg(s.valid_rows if s.valid_rows is not None else ir.Lit(m, INT64), "vr"),
        ValueArg(s.valid_cols if s.valid_cols is not None else ir.Lit(n, INT64), "vc"),
    ]
    args += [ValueArg(s.other, "other")] if load else []
    args += [TileArg(mask, "mk")] if mask is not None else []
    call = ShimCall(f"coop_{kind}2d_{s.cid}", tuple(args))
    body = w.items_ref("x", "items", tile, lay.items_per_thread)
    body += w.items_ref("keep", "mk", mask, lay.items_per_thread) if mask is not None else ""
    if lay.fragment is not None:  # (a GEMM's accumulator: each item at its element, `element_index`)
        body += _item_by_item(w, tile, mask, load, a, rows, cols)
        w.define(call, "", body)
        return call
    shift = rs.lanes.bit_length() - 1
    run, ipr = rs.run, rs.row_items
    body += (
        f"  const int group = int(threadIdx.x) >> {shift}, lane = int(threadIdx.x) & {rs.lanes - 1};\n"
        f"  const long long vr_c = vr < 0 ? 0 : (vr > {m} ? {m} : vr), vc_c = vc < 0 ? 0 : (vc > {n} ? {n} : vc);\n"
        f"  for (int k = 0; k < {rs.rows}; ++k) {{\n"
        f"    const int rr = group * {rs.rows} + k;\n"
        "    const long long ar = row + rr;\n"
        f"    const bool row_ok = rr < vr_c && ar >= 0 && ar < {rows};\n"
        f"    for (int q = 0; q < {ipr // run}; ++q) {{\n"
        f"      const int c0 = (q * {rs.lanes} + lane) * {run}, first = k * {ipr} + q * {run};\n"
    )
    each = (
        f"for (int j = 0; j < {run}; ++j) {{ const int cc = c0 + j; const long long ac = col + cc; "
        f"const bool ok = row_ok && cc < vc_c && ac >= 0 && ac < {cols}"
        + (" && keep[first + j]" if mask is not None else "")
        + "; "
        + (f"x[first + j] = ok ? {at} : other; }}" if load else f"if (ok) {at} = x[first + j]; }}")
    )
    if _vector_rows(tile, s.array, mask, rs):
        words = run * s.array.type.dtype.itemsize // VECTOR_BYTES
        whole = f"row_ok && c0 + {run} <= vc_c && col + c0 >= 0 && col + c0 + {run} <= {cols}"
        ptr = f"{a.parts.ptr} + {a.parts.offset(['ar', 'col + c0'])}"  # (unit stride: the run's first element)
        aligned = f"reinterpret_cast<unsigned long long>({ptr}) % 16 == 0"
        move = move_words(load, "uint4", words, ptr, "first")
        body += f"      if ({whole} && {aligned}) {{ {move} }}\n      else {{ {each} }}\n"
    else:
        body += f"      {each}\n"
    body += "    }\n  }\n"
    w.define(call, "", body)
    return call


def _item_by_item(w: Any, tile: ir.Var, mask: ir.Var | None, load: bool, a: ArrayArg, rows: str, cols: str) -> str:
    """A 2-D transfer's body for a tile reached only by element index (a GEMM fragment): each item at its
    element of the block, checked against the valid counts and the array's bounds (`rows`, `cols`) only where
    the whole block is not valid and inside it (`whole`, tested once), and against the mask."""
    m, n = tile.type.shape
    at = f"p0[{replace(a.parts, off='0').offset(['rr', 'cc'])}]"  # (element (row + rr, col + cc))
    inside = f"rr < vr_c && cc < vc_c && row + rr >= 0 && row + rr < {rows} && col + cc >= 0 && col + cc < {cols}"
    ok = f"e < {m * n} && (whole || ({inside}))" + (" && keep[i]" if mask is not None else "")
    move = f"x[i] = ok ? {at} : other;" if load else f"if (ok) {at} = x[i];"
    return (
        f"  const long long vr_c = vr < 0 ? 0 : (vr > {m} ? {m} : vr), vc_c = vc < 0 ? 0 : (vc > {n} ? {n} : vc);\n"
        f"  const bool whole = vr_c == {m} && vc_c == {n} && row >= 0 && row + {m} <= {rows} && col >= 0 && "
        f"col + {n} <= {cols};\n"
        f"  {'const ' if load else ''}auto* p0 = {a.parts.ptr} + {a.parts.offset(['row', 'col'])};\n"
        # (unrolled: the items stay in registers)
        f"  #pragma unroll\n  for (int i = 0; i < {w.layout(tile).items_per_thread}; ++i) {{\n"
        f"    const int e = {w.element_index(tile)}, rr = e / {n}, cc = e % {n};\n"
        f"    const bool ok = {ok};\n    {move}\n  }}\n"
    )
