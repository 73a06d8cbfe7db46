"""`tile.sort`: stable block sort of keys (and a payload), by radix (cub::BlockRadixSort) or by a
user comparison (cub::BlockMergeSort with a `@ct.combine` function).

Radix sort orders keys by their order-preserving unsigned form (the bits CUB sorts): unsigned
integers as they are, signed ones with the sign bit flipped, floats with the sign bit flipped
when positive and every bit flipped when negative. NaNs are first made the one NaN that sorts
last (ascending: sign clear, descending: sign set), as `numpy.sort` puts NaNs last; a NaN key
therefore comes out as that NaN. Elements `i >= valid` (and a partial tile's padding) get the
key that sorts last, and being later in the input they stay after every valid key (the sort is
stable); their original keys are put back, so they come out in their original order.

Merge sort compares with the user's function wrapped so that invalid elements go last.

A 2-D tile sorts each row on its own, with the same rules per row (`valid`: a scalar for every row or a
tile of one count per row); its lowering is in `ops/rowsort.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import tile
from ..dtypes import bool_, cxx_name
from ..errors import TileTypeError, TileValueError
from ..lang import ir
from ..lang.combine import CombineFunction
from ..lang.types import TileType
from ..lang.values import Const, is_tile
from ..planner.layout import PER_ROW
from . import rowsort
from .base import ShimCall, TileArg, TileOp, register, seq, valid_arg, valid_count, valid_value
from .options import COMBINE, COUNT, TILE, TUPLE, Forbidden, Option
from .sortkeys import (
    compare_item,
    from_order_bits,
    key_code,
    low_nan,
    order_bits,
    ordered_code,
    pad_code,
    unsigned_cxx,
)

RADIX_ONLY = "descending, begin_bit and end_bit belong to the radix sort; with compare= the comparison says the order"
TUPLE_NEEDS_COMPARE = "sorting a tuple of key tiles needs a comparison: tile.sort(keys, compare=fn)"


@dataclass
class TileSort(
    ir.Collective,
    defs="key_outs value_out",
    uses="keys values valid",
    attrs="descending begin_bit end_bit compare nan_largest",
):
    key_outs: tuple[ir.Var, ...]
    value_out: ir.Var | None
    keys: tuple[ir.Var, ...]
    values: ir.Var | None
    valid: ir.Value | None
    descending: bool
    begin_bit: int
    end_bit: int
    compare: str | None  # the name of the comparison in `Program.combines`, for a merge sort
    #: NaNs count as larger than +inf (first when descending, as `tile.topk` wants), not last in both orders
    nan_largest: bool = False


@register
class Sort(TileOp):
    publics = (tile.sort,)
    stmt = TileSort
    options = (
        Option("keys", (TILE, TUPLE)),
        Option("values", (None, TILE)),
        Option("valid", (None, COUNT)),
        Option("descending", (False, True)),
        Option("begin_bit", (0, 4)),
        Option("end_bit", (None, 20)),
        Option("compare", (None, COMBINE)),
    )
    forbids = (
        Forbidden(
            lambda c: c["compare"] is not None and (c["descending"] or c["begin_bit"] or c["end_bit"] is not None),
            TileValueError,
            lambda public, c: RADIX_ONLY,
        ),
        Forbidden(
            lambda c: c["compare"] is None and c["keys"] is TUPLE, TileTypeError, lambda public, c: TUPLE_NEEDS_COMPARE
        ),
    )

    def build(self, b, public, keys, values, *, valid, descending, begin_bit, end_bit, compare):
        compare = b.optional(compare)
        one_tile = is_tile(keys)  # (not a tuple of key tiles)
        keys = seq(keys)
        if not keys or not all(is_tile(k) for k in keys):
            raise TileTypeError(f"tile.sort sorts a tile of keys (or a tuple of them with compare=), got {keys}")
        shape = keys[0].type.shape
        if any(k.type.shape != shape for k in keys):
            raise TileTypeError("tile.sort of key tiles of different shapes: " + ", ".join(str(k.type) for k in keys))
        values = b.optional(values)
        if values is not None:
            values = b.tile(values, "the payload (values)")
            if values.type.shape != shape:
                raise TileTypeError(f"the payload has shape {values.type.shape} and the keys {shape}")
        descending = b.constant(descending, "descending", bool)
        begin_bit = b.constant(begin_bit, "begin_bit", int)
        end_bit = b.optional(end_bit)
        if compare is not None:
            if not (isinstance(compare, Const) and isinstance(compare.value, CombineFunction)):
                raise TileTypeError(f"compare must be a @ct.combine function, got {compare}")
            if descending or begin_bit != 0 or end_bit is not None:
                raise TileValueError(RADIX_ONLY)
            name = b.combine(compare.value, tuple(k.type.dtype for k in keys), compare=True).name
            bits = 0
        else:
            if len(keys) != 1 or not one_tile:
                raise TileTypeError(TUPLE_NEEDS_COMPARE)
            dt = keys[0].type.dtype
            if dt == bool_:
                raise TileTypeError("tile.sort of a bool tile is not supported; convert it with t.astype(np.uint8)")
            bits = dt.itemsize * 8
            end_bit = bits if end_bit is None else b.constant(end_bit, "end_bit", int)
            if not 0 <= begin_bit < end_bit <= bits:
                raise TileValueError(
                    f"the sorted bits [begin_bit, end_bit) must satisfy 0 <= begin_bit < end_bit <= {bits} for "
                    f"{dt.name} keys, got [{begin_bit}, {end_bit})"
                )
            name = None
        key_outs = tuple(b.temp(k.type) for k in keys)
        value_out = b.temp(values.type) if values is not None else None
        valid = sort_valid(b, valid, shape)
        b.emit(TileSort(key_outs, value_out, keys, values, valid, descending, begin_bit, end_bit or bits, name))
        result = key_outs if not one_tile else key_outs[0]
        return (result, value_out) if values is not None else result

    def interpret(self, s: TileSort, frame) -> None:
        """Each row (a 1-D tile is one row) sorted on its own, by `sort_row`."""
        n = s.keys[0].type.shape[-1]
        rows = [np.asarray(frame.get(k)).reshape(-1, n) for k in s.keys]
        payload = np.asarray(frame.get(s.values)).reshape(-1, n) if s.values is not None else None
        counts = row_counts(frame, s.valid, rows[0].shape[0], n)
        outs = [np.empty_like(k) for k in rows]
        vout = np.empty_like(payload) if payload is not None else None
        for r, count in enumerate(counts):
            sorted_keys, order = sort_row(s, frame, [k[r] for k in rows], count)
            for out, key in zip(outs, sorted_keys):
                out[r] = key
            if payload is not None:
                vout[r] = np.concatenate([payload[r][order], payload[r][count:]])
        for var, value in zip(s.key_outs, outs):
            frame.env[var.name] = value.reshape(var.type.shape).astype(var.type.dtype)
        if s.values is not None:
            frame.env[s.value_out.name] = vout.reshape(s.value_out.type.shape)

    def layout(self, s: TileSort, ctx) -> None:
        """Inputs blocked. A radix sort of whole tiles may leave its results in either arrangement:
        if nothing needs them blocked, they come out STRIPED (SortBlockedToStriped), which lets
        them go to memory directly, without a shared-memory exchange."""
        inputs = [*s.keys, *([s.values] if s.values is not None else [])]
        outputs = [*s.key_outs, *([s.value_out] if s.value_out is not None else [])]
        if s.keys[0].type.ndim == 2:  # each lane's columns of a row as one run, in order (the sort is stable)
            ctx.join_blocked(inputs + outputs)
            if isinstance(s.valid, ir.Var):
                ctx.claim(s.valid, s.keys[0], PER_ROW)
            return
        size = s.keys[0].type.size
        whole = s.valid is None and size % ctx.threads == 0
        if s.compare is None and whole:
            ctx.join_blocked(inputs)
            ctx.join(outputs)
        else:
            ctx.join_blocked(inputs + outputs)

    def replicates(self, s: TileSort, var: ir.Var) -> bool:
        """A per-row `valid` tile may be held per row, replicated over the row's lanes."""
        return var is s.valid and s.keys[0].type.ndim == 2

    def power_of_two_threads(self, s: TileSort) -> bool:
        """cub::BlockMergeSort (a comparison sort, and rows wider than a warp) needs a power-of-two block."""
        return s.compare is not None or s.keys[0].type.ndim == 2

    def choose(self, s: TileSort, ctx):
        if s.keys[0].type.ndim == 2:
            return rowsort.choose(s, ctx)
        if s.compare is None:
            return ctx.choice(s, "sort", "BlockRadixSort", "descending" if s.descending else "ascending")
        return ctx.choice(s, f"sort[{s.compare}]", "BlockMergeSort", "StableSort")

    def lower(self, s: TileSort, w) -> ShimCall:
        if s.keys[0].type.ndim == 2:
            return rowsort.lower(s, w)
        k = len(s.keys)
        size = s.keys[0].type.size
        args = [TileArg(v, f"in{i}") for i, v in enumerate(s.keys)]
        args += [TileArg(v, f"out{i}") for i, v in enumerate(s.key_outs)]
        if s.values is not None:
            args += [TileArg(s.values, "vin"), TileArg(s.value_out, "vout")]
        args.append(valid_arg(s.valid, size))
        call = ShimCall(f"coop_sort_{s.cid}", tuple(args))
        items = w.layout(s.keys[0]).items_per_thread
        value_t = cxx_name(s.values.type.dtype) if s.values is not None else "cub::NullType"
        body = "".join(w.items_ref(f"x{i}", f"in{i}", v, items) for i, v in enumerate(s.keys))
        body += "".join(w.items_ref(f"y{i}", f"out{i}", v, items) for i, v in enumerate(s.key_outs))
        if s.values is not None:
            body += w.items_ref("xv", "vin", s.values, items) + w.items_ref("yv", "vout", s.value_out, items)
            body += f"  {value_t} vals[{items}];\n  for (int i = 0; i < {items}; ++i) vals[i] = xv[i];\n"
        body += w.clamp_valid(size)
        index = w.element_index(s.keys[0])
        if s.compare is None:
            code, body = self._radix(s, w, items, value_t, index, body)
        else:
            code, body = self._merge(s, w, k, items, value_t, index, body)
        if s.values is not None:
            body += f"  for (int i = 0; i < {items}; ++i) yv[i] = vals[i];\n"
        w.define(call, code, body)
        return call

    @staticmethod
    def _radix(s: TileSort, w, items: int, value_t: str, index: str, body: str) -> tuple[str, str]:
        dt = s.keys[0].type.dtype
        u = unsigned_cxx(dt)
        w.include("cub/block/block_radix_sort.cuh")
        cub_type = f"cub::BlockRadixSort<{u}, {w.threads}, {items}, {value_t}>"
        code = w.storage(s.cid, cub_type)
        body = w.storage_ref(s.cid) + body
        body += f"  {u} k[{items}];\n  for (int i = 0; i < {items}; ++i) {{\n"
        body += ordered_code(dt, low_nan(s), "x0[i]")
        body += f"    k[i] = {index} < v ? r : {pad_code(dt, s.descending)};\n  }}\n"
        striped = w.layout(s.key_outs[0]).arrangement != w.layout(s.keys[0]).arrangement
        verb = ("SortDescending" if s.descending else "Sort") + ("BlockedToStriped" if striped else "")
        values = ", vals" if s.values is not None else ""
        body += f"  {cub_type}(s.temp).{verb}(k{values}, {s.begin_bit}, {s.end_bit});\n"
        body += f"  for (int i = 0; i < {items}; ++i) {{\n"
        key = key_code(dt, "k[i]")
        # elements past `valid` get their own keys back (blocked: the same slot held them); a
        # striped result only comes from whole tiles without `valid`
        body += f"    y0[i] = {key};\n" if striped else f"    y0[i] = {index} < v ? {key} : x0[i];\n"
        return code, body + "  }\n"

    @staticmethod
    def _merge(s: TileSort, w, k: int, items: int, value_t: str, index: str, body: str) -> tuple[str, str]:
        w.include("cub/block/block_merge_sort.cuh")
        key_t, less = f"coop_sortkey_{s.cid}", f"coop_less_{s.cid}"
        prelude = compare_item(w, s, key_t, less)
        cub_type = f"cub::BlockMergeSort<{key_t}, {w.threads}, {items}, {value_t}>"
        code = w.storage(s.cid, cub_type, prelude=prelude)
        body = w.storage_ref(s.cid) + body
        pack = " ".join(f"key[i].f{j} = x{j}[i];" for j in range(k))
        body += f"  {key_t} key[{items}];\n"
        body += f"  for (int i = 0; i < {items}; ++i) {{ {pack} key[i].ok = {index} < v; }}\n"
        values = ", vals" if s.values is not None else ""
        body += f"  {cub_type}(s.temp).StableSort(key{values}, {less}{{}});\n"
        unpack = " ".join(f"y{j}[i] = key[i].f{j};" for j in range(k))
        body += f"  for (int i = 0; i < {items}; ++i) {{ {unpack} }}\n"
        return code, body


def sort_valid(b, valid, shape: tuple[int, ...]) -> ir.Value | None:
    """`valid=` of a sort: a scalar (for every row of a 2-D tile), or, for a 2-D tile of `m` rows, an
    integer tile of `m` counts, one per row (shape (m,) or (m, 1)), made 1-D int64."""
    valid = b.optional(valid)
    if not is_tile(valid):
        return valid_value(b, valid)
    m = shape[0]
    if len(shape) != 2:
        raise TileTypeError(f"valid of tile.sort of a 1-D tile must be a scalar, got {valid.type}")
    if valid.type.size != m or max(valid.type.shape) != m or valid.type.dtype.kind not in "iu":
        raise TileTypeError(
            f"valid of a row-wise tile.sort must be a scalar or a tile of {m} integer counts (one per row), "
            f"got {valid.type}"
        )
    if valid.type.shape != (m,):
        valid = b.remap(valid, ir.RESHAPE, (m,))
    return b.convert(valid, np.dtype(np.int64))


def row_counts(frame, valid: ir.Value | None, m: int, n: int) -> list[int]:
    """The interpreter's count of valid elements of each of `m` rows of `n`: `valid` (a scalar, or a tile
    of one count per row) clamped to [0, n]."""
    if isinstance(valid, ir.Var) and isinstance(valid.type, TileType):
        return [int(c) for c in np.clip(np.asarray(frame.get(valid)).astype(np.int64), 0, n)]
    return [valid_count(frame, valid, n)] * m


def sort_row(s: TileSort, frame, keys: list[np.ndarray], count: int) -> tuple[list[np.ndarray], np.ndarray]:
    """One row's sorted keys (each key tile's) and the order of its first `count` elements (the payload
    goes with it); the elements past `count` stay where they are."""
    if s.compare is None:
        ordered = order_bits(keys[0], low_nan(s))
        field = (ordered >> np.uint64(s.begin_bit)) & np.uint64((1 << (s.end_bit - s.begin_bit)) - 1)
        rank = (np.uint64((1 << (s.end_bit - s.begin_bit)) - 1) - field) if s.descending else field
        order = np.argsort(rank[:count], kind="stable")
        sorted_keys = from_order_bits(ordered[order], keys[0].dtype)
        return [np.concatenate([sorted_keys, keys[0][count:]])], order
    fn = frame.program.combines[s.compare]

    def first(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Whether element a[j] goes before element b[j], for every j at once."""
        return frame.evaluate_combine(fn, tuple(k[a] for k in keys), tuple(k[b] for k in keys))[0]

    order = stable_merge_order(count, first)
    return [np.concatenate([k[order], k[count:]]) for k in keys], order


def stable_merge_order(count: int, first: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """The permutation a stable merge sort gives, with `first(a, b)` (element-wise over index
    arrays) true when element `a` goes before `b`. Bottom-up: at each width every element finds
    its place in the merged pair of runs by a binary search in the other run, all elements at
    once (the comparison runs vectorized, a few times per level, never once per pair)."""
    order = np.arange(count, dtype=np.int64)
    width = 1
    while width < count:
        pos = np.arange(count)
        run = pos // width
        partner_lo = np.minimum((run ^ 1) * width, count)
        partner_len = np.minimum(partner_lo + width, count) - partner_lo
        left = run % 2 == 0
        lo, hi = np.zeros(count, dtype=np.int64), partner_len.astype(np.int64)
        while np.any(lo < hi):
            active = lo < hi
            mid = (lo + hi) // 2
            other = order[np.minimum(partner_lo + mid, count - 1)]
            me = order[pos]
            # a left element counts the right ones that strictly go first; a right element the
            # left ones that do not go after it (equal keys keep their order: the sort is stable)
            goes_before = np.where(left, first(other, me), ~first(me, other))
            lo = np.where(active & goes_before, mid + 1, lo)
            hi = np.where(active & ~goes_before, mid, hi)
        block = (run // 2) * 2 * width
        new = np.empty_like(order)
        new[block + (pos - run * width) + lo] = order
        order = new
        width *= 2
    return order
