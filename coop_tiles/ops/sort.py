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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import tile
from ..dtypes import bool_, cxx_name, is_float, storage_dtype
from ..errors import TileTypeError, TileValueError
from ..lang import ir
from ..lang.combine import CombineFunction
from ..lang.values import Const, is_tile
from .base import ShimCall, TileArg, TileOp, register, seq, valid_arg, valid_count, valid_value
from .options import COMBINE, COUNT, TILE, TUPLE, Forbidden, Option

ROW_SORT = "row-wise sort (tile.sort of a 2-D tile) is not supported yet; sort a 1-D tile (tile.reshape(t, n))"

#: exponent and mantissa masks of each float width (bits), to find NaNs among stored bits
_NAN_MASKS = {
    "float16": (0x7C00, 0x03FF),
    "bfloat16": (0x7F80, 0x007F),
    "float32": (0x7F800000, 0x007FFFFF),
    "float64": (0x7FF0000000000000, 0x000FFFFFFFFFFFFF),
}


RADIX_ONLY = "descending, begin_bit and end_bit belong to the radix sort; with compare= the comparison says the order"
TUPLE_NEEDS_COMPARE = "sorting a tuple of key tiles needs a comparison: tile.sort(keys, compare=fn)"


@dataclass
class TileSort(
    ir.Collective, defs="key_outs value_out", uses="keys values valid", attrs="descending begin_bit end_bit compare"
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
        if any(k.type.ndim != 1 for k in keys):
            raise TileValueError(ROW_SORT)
        size = keys[0].type.size
        if any(k.type.size != size for k in keys):
            raise TileTypeError("tile.sort of key tiles of different sizes: " + ", ".join(str(k.type) for k in keys))
        values = b.optional(values)
        if values is not None:
            values = b.tile(values, "the payload (values)")
            if values.type.size != size:
                raise TileTypeError(f"the payload has {values.type.size} elements and the keys {size}")
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
        valid = valid_value(b, valid)
        b.emit(TileSort(key_outs, value_out, keys, values, valid, descending, begin_bit, end_bit or bits, name))
        result = key_outs if not one_tile else key_outs[0]
        return (result, value_out) if values is not None else result

    def interpret(self, s: TileSort, frame) -> None:
        keys = [frame.get(k) for k in s.keys]
        size = keys[0].size
        count = valid_count(frame, s.valid, size)
        if s.compare is None:
            ordered = order_bits(keys[0], s.descending)
            field = (ordered >> np.uint64(s.begin_bit)) & np.uint64((1 << (s.end_bit - s.begin_bit)) - 1)
            rank = (np.uint64((1 << (s.end_bit - s.begin_bit)) - 1) - field) if s.descending else field
            order = np.argsort(rank[:count], kind="stable")
            sorted_keys = from_order_bits(ordered[order], keys[0].dtype)
            outs = [np.concatenate([sorted_keys, keys[0][count:]])]
        else:
            fn = frame.program.combines[s.compare]

            def first(a: np.ndarray, b: np.ndarray) -> np.ndarray:
                """Whether element a[j] goes before element b[j], for every j at once."""
                return frame.evaluate_combine(fn, tuple(k[a] for k in keys), tuple(k[b] for k in keys))[0]

            order = stable_merge_order(count, first)
            outs = [np.concatenate([k[order], k[count:]]) for k in keys]
        for var, value in zip(s.key_outs, outs):
            frame.env[var.name] = value.astype(var.type.dtype)
        if s.values is not None:
            v = frame.get(s.values)
            frame.env[s.value_out.name] = np.concatenate([v[order], v[count:]])

    def layout(self, s: TileSort, ctx) -> None:
        """Inputs blocked. A radix sort of whole tiles may leave its results in either arrangement:
        if nothing needs them blocked, they come out STRIPED (SortBlockedToStriped), which lets
        them go to memory directly, without a shared-memory exchange."""
        inputs = [*s.keys, *([s.values] if s.values is not None else [])]
        outputs = [*s.key_outs, *([s.value_out] if s.value_out is not None else [])]
        size = s.keys[0].type.size
        whole = s.valid is None and size % ctx.threads == 0
        if s.compare is None and whole:
            ctx.join_blocked(inputs)
            ctx.join(outputs)
        else:
            ctx.join_blocked(inputs + outputs)

    def choose(self, s: TileSort, ctx):
        if s.compare is None:
            return ctx.choice(s, "sort", "BlockRadixSort", "descending" if s.descending else "ascending")
        return ctx.choice(s, f"sort[{s.compare}]", "BlockMergeSort", "StableSort")

    def lower(self, s: TileSort, w) -> ShimCall:
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
        bits = dt.itemsize * 8
        u = f"cuda::std::uint{bits}_t"
        sign = f"({u}(1) << {bits - 1})"
        w.include("cub/block/block_radix_sort.cuh")
        cub_type = f"cub::BlockRadixSort<{u}, {w.threads}, {items}, {value_t}>"
        code = w.storage(s.cid, cub_type)
        body = w.storage_ref(s.cid) + body
        raw = {"float32": "__float_as_uint(x0[i])", "float64": "(cuda::std::uint64_t)__double_as_longlong(x0[i])"}
        pad = "0" if s.descending else f"{u}(~{u}(0))"
        body += f"  {u} k[{items}];\n  for (int i = 0; i < {items}; ++i) {{\n"
        if is_float(dt):
            exp, mant = _NAN_MASKS[dt.name]
            nan = f"{u}(~{u}(0))" if s.descending else f"({u}(~{u}(0)) >> 1)"
            body += f"    {u} r = {raw.get(dt.name, f'{u}(x0[i])')};\n"
            body += f"    if ((r & {u}({exp}ull)) == {u}({exp}ull) && (r & {u}({mant}ull))) r = {nan};\n"
            body += f"    r = (r & {sign}) ? {u}(~r) : {u}(r | {sign});\n"
        elif dt.kind == "i":
            body += f"    {u} r = {u}(x0[i]) ^ {sign};\n"
        else:
            body += f"    {u} r = x0[i];\n"
        body += f"    k[i] = {index} < v ? r : {pad};\n  }}\n"
        striped = w.layout(s.key_outs[0]).arrangement != w.layout(s.keys[0]).arrangement
        verb = ("SortDescending" if s.descending else "Sort") + ("BlockedToStriped" if striped else "")
        values = ", vals" if s.values is not None else ""
        body += f"  {cub_type}(s.temp).{verb}(k{values}, {s.begin_bit}, {s.end_bit});\n"
        back = {"float32": "__uint_as_float(r)", "float64": "__longlong_as_double((long long)r)"}
        body += f"  for (int i = 0; i < {items}; ++i) {{\n    {u} r = k[i];\n"
        if is_float(dt):
            body += f"    r = (r & {sign}) ? {u}(r ^ {sign}) : {u}(~r);\n"
            key = back.get(dt.name, "r")
        elif dt.kind == "i":
            key = f"{cxx_name(dt)}(r ^ {sign})"
        else:
            key = "r"
        # elements past `valid` get their own keys back (blocked: the same slot held them); a
        # striped result only comes from whole tiles without `valid`
        body += f"    y0[i] = {key};\n" if striped else f"    y0[i] = {index} < v ? {key} : x0[i];\n"
        return code, body + "  }\n"

    @staticmethod
    def _merge(s: TileSort, w, k: int, items: int, value_t: str, index: str, body: str) -> tuple[str, str]:
        w.include("cub/block/block_merge_sort.cuh")
        types = [cxx_name(storage_dtype(v.type.dtype)) for v in s.keys]
        key_t, less = f"coop_sortkey_{s.cid}", f"coop_less_{s.cid}"
        fn = w.combine_symbol(s.compare)
        fields = " ".join(f"{t} f{i};" for i, t in enumerate(types))
        params = ", ".join([*types, *types, "bool*"])
        operands = ", ".join([*(f"a.f{i}" for i in range(k)), *(f"b.f{i}" for i in range(k)), "&r"])
        prelude = (
            f"struct {key_t} {{ {fields} bool ok; }};\n"
            f'extern "C" __device__ void {fn}({params});\n'
            f"struct {less} {{ __device__ __forceinline__ bool operator()(const {key_t}& a, const {key_t}& b) "
            f"const {{ if (!a.ok) return false; if (!b.ok) return true; bool r; {fn}({operands}); return r; }} }};\n"
        )
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


def order_bits(keys: np.ndarray, descending: bool) -> np.ndarray:
    """The order-preserving unsigned form of `keys` (as uint64), NaNs made the NaN that sorts last."""
    dt = keys.dtype
    bits = dt.itemsize * 8
    u = np.dtype(f"uint{bits}")
    r = keys.view(u).astype(np.uint64)
    sign = np.uint64(1 << (bits - 1))
    full = np.uint64((1 << bits) - 1)
    if is_float(dt):
        exp, mant = (np.uint64(m) for m in _NAN_MASKS[np.dtype(dt).name])
        nan = (r & exp) == exp
        nan &= (r & mant) != 0
        r = np.where(nan, full if descending else full >> np.uint64(1), r)
        return np.where(r & sign, ~r & full, r | sign)
    if dt.kind == "i":
        return r ^ sign
    return r


def from_order_bits(ordered: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Keys of dtype `dt` back from their order-preserving form."""
    bits = dt.itemsize * 8
    sign = np.uint64(1 << (bits - 1))
    full = np.uint64((1 << bits) - 1)
    if is_float(dt):
        r = np.where(ordered & sign, ordered ^ sign, ~ordered & full)
    elif dt.kind == "i":
        r = ordered ^ sign
    else:
        r = ordered
    return r.astype(np.dtype(f"uint{bits}")).view(dt)


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
