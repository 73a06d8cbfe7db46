"""`tile.atomic_add`, `tile.atomic_max`, `tile.atomic_min`: element-wise global atomics of a tile
into an array, at contiguous elements from an offset (a 1-D array or view) or at an index tile's
elements (one index tile per axis, as `tile.gather` takes them; `ops/indexed.py`).

Every element's update lands, duplicates within a tile included (the interpreter uses NumPy's
`ufunc.at`). Integers use CUDA's atomics directly; float max/min use the integer-reinterpret trick
(a float with its sign bit clear orders as a signed int, one with it set in reverse as an unsigned
int), with a NaN made the canonical NaN that wins (`atomic_max`: bits 0x7fff..., `atomic_min`:
0xffff...); 16-bit float adds are CUDA's `atomicAdd(__half*)` and `atomicAdd(__nv_bfloat16*)`.

A blocked tile of several items per thread added at contiguous elements (the offset form, unmasked) is
first exchanged to warp-striped order with `cub::WarpExchange` (one TempStorage per warp): blocked, a
warp's 32 lanes hit 32 elements `items` apart, up to 32 sectors of L2 per instruction where striped they hit 4,
and many programs adding into the same row (Mamba's dB) are bound by L2's atomic sector throughput.
An unmasked tile at contiguous elements whose every element is valid (every program's but the last) is added
without the per-item test against the valid count; exchanged, each lane's items are one pointer and constant
distances from it (in the selective-scan backward's state loop, whose two rows of 2048 atomics a state were
each 8 tests and 64-bit addresses in branches, the kernel's spills went from 224 to 136 bytes a thread).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tile
from ..dtypes import bfloat16, cxx_name, float16
from ..errors import TileTypeError, TileValueError
from ..lang import ir
from ..lang.types import TileType
from ..lang.values import Const, is_tile
from ..planner.layout import BLOCKED
from .base import (
    ArrayArg,
    ShimCall,
    TileArg,
    TileOp,
    ValueArg,
    mask_arg,
    mask_array,
    mask_ref,
    mask_test,
    mask_value,
    one_d,
    register,
    valid_arg,
    valid_count,
    valid_value,
)
from .construct import TileFull
from .indexed import address, index_args, index_refs, index_tiles, is_tile_value, join_items, positions, value_of
from .memory import offset_value, one_d_array
from .options import COUNT, SCALAR, TILE, Option

#: the type CUDA's atomic of each op takes each array dtype as (int64 adds as the same bits unsigned)
ATOMIC_TYPES = {
    "add": {
        np.dtype(np.int32): "int",
        np.dtype(np.uint32): "unsigned int",
        np.dtype(np.int64): "unsigned long long",
        np.dtype(np.uint64): "unsigned long long",
        np.dtype(np.float32): "float",
        np.dtype(np.float64): "double",
        float16: "__half",
        bfloat16: "__nv_bfloat16",
    },
    **{
        op: {
            np.dtype(np.int32): "int",
            np.dtype(np.uint32): "unsigned int",
            np.dtype(np.int64): "long long",
            np.dtype(np.uint64): "unsigned long long",
            np.dtype(np.float32): "float",
            np.dtype(np.float64): "double",
        }
        for op in ("max", "min")
    },
}
UFUNCS = {"add": np.add, "max": np.maximum, "min": np.minimum}
#: the algorithm of an atomic whose items go to warp-striped order first (`exchanged`)
EXCHANGED = "WARP_EXCHANGE_STRIPED"

#: float max/min through integer atomics: (signed int type, unsigned type, bits of, NaN that wins each op)
FLOAT_BITS = {
    "float": ("int", "unsigned int", "__float_as_int", "__int_as_float", "0x7fffffff", "-1"),
    "double": ("long long", "unsigned long long", "__double_as_longlong", "__longlong_as_double",
               "0x7fffffffffffffffLL", "-1LL"),
}  # fmt: skip


def float_atomic_helper(op: str, t: str) -> str:
    """`coop_atomic_<op>_<t>(p, v)`: `op` (max or min) of float type `t` by integer atomics. A value with
    its sign bit clear orders as a signed int and one with it set, in reverse, as an unsigned int; a
    NaN becomes the NaN that wins `op` in both orders (sign clear, all ones for max; all ones for min)."""
    signed, unsigned, bits, from_bits, nan_max, nan_min = FLOAT_BITS[t]
    clear, set_ = ("atomicMax", "atomicMin") if op == "max" else ("atomicMin", "atomicMax")
    return (
        f"__device__ __forceinline__ void coop_atomic_{op}_{t.replace(' ', '_')}({t}* p, {t} v) {{\n"
        f"  if (v != v) v = {from_bits}({nan_max if op == 'max' else nan_min});\n"
        f"  if ({bits}(v) >= 0) {clear}(reinterpret_cast<{signed}*>(p), {bits}(v));\n"
        f"  else {set_}(reinterpret_cast<{unsigned}*>(p), static_cast<{unsigned}>({bits}(v)));\n"
        "}\n"
    )


def atomic_statement(w, op: str, dt: np.dtype, where: str, value: str) -> str:
    """The C++ statement applying `op` of `value` (an array item, 16-bit floats as bits) at pointer `where`."""
    t = ATOMIC_TYPES[op][dt]
    if dt in (float16, bfloat16):
        bits = "__ushort_as_half" if dt == float16 else "__ushort_as_bfloat16"
        return f"atomicAdd(reinterpret_cast<{t}*>({where}), {bits}({value}));"
    if op != "add" and t in FLOAT_BITS:
        w.helper(float_atomic_helper(op, t))
        return f"coop_atomic_{op}_{t}(reinterpret_cast<{t}*>({where}), {value});"
    name = {"add": "atomicAdd", "max": "atomicMax", "min": "atomicMin"}[op]
    return f"{name}(reinterpret_cast<{t}*>({where}), static_cast<{t}>({value}));"


def _whole_tile(w, s: TileAtomic, a: ArrayArg, dt: np.dtype, item: str, index: str, items: int, size: int) -> str:
    """The update of a whole tile at contiguous elements (every program's but the last, in a loop over a row):
    no per-item test against the valid count (the general loop tests each item in 64 bits). Exchanged to
    warp-striped order with no padding items, a lane's items are 32 elements apart: one pointer, and each item's
    atomic at a constant distance from it."""
    p = a.parts
    scaled = "" if p.strides[0] == "1" else f" * {p.strides[0]}"
    row = f"    auto* row = {p.ptr} + ({p.offset(['offset'])});\n"
    pointer = w.choice(s.cid).algorithm == EXCHANGED and w.threads * items == size  # (no padding items)
    if pointer:
        lane = f"(int(threadIdx.x) / 32 * {items * 32} + int(threadIdx.x) % 32)"
        row += f"    auto* lane = row + static_cast<long long>({lane}){scaled};\n"
        where = f"lane + 32LL * i{scaled}"
        loop = f"    #pragma unroll\n    for (int i = 0; i < {items}; ++i)\n"
    else:
        padding = "" if w.threads * items == size else f"      if (e >= {size}) continue;\n"
        where = f"row + e{scaled}"
        loop = f"    for (int i = 0; i < {items}; ++i) {{\n      const long long e = {index};\n{padding}"
    update = atomic_statement(w, s.op, dt, where, item)
    close = "" if pointer else "    }\n"
    return f"  if (v == {size}) {{\n{row}{loop}      {update}\n{close}    return;\n  }}\n"


def exchanged(s: TileAtomic, tiles: dict, threads: int) -> bool:
    """Whether atomic `s` exchanges its items to warp-striped order first: an unmasked tile of several
    items per thread, blocked, added at contiguous elements by whole warps."""
    if s.index or s.mask is not None or not is_tile_value(s.value) or threads % 32:
        return False
    lay = tiles[s.value.name]
    return lay.arrangement == BLOCKED and lay.items_per_thread > 1 and lay.rows is None and lay.fragment is None


@dataclass
class TileAtomic(ir.Collective, uses="array offset index value valid mask", attrs="op"):
    array: ir.Var
    offset: ir.Value | None  # contiguous elements from `offset` (None: at `index`)
    index: tuple[ir.Var, ...]  # one index tile per axis (empty: from `offset`)
    value: ir.Value  # a tile, or (at an index) a scalar every element gets
    valid: ir.Value | None
    mask: ir.Var | None
    op: str  # add, max or min


@register
class Atomic(TileOp):
    publics = (tile.atomic_add, tile.atomic_max, tile.atomic_min)
    stmt = TileAtomic
    options = (
        Option("offset_or_index", (0, TILE)),
        Option("t", (TILE, SCALAR)),
        Option("valid", (None, COUNT)),
        Option("mask", (None, TILE)),
    )

    def build(self, b, public, a, offset_or_index, t, *, valid, mask):
        op = public.__name__.removeprefix("atomic_")
        what = f"tile.{public.__name__}"
        array = b.array(a, f"{what}'s first argument")
        dt = array.type.dtype
        if dt not in ATOMIC_TYPES[op]:
            names = ", ".join(d.name for d in ATOMIC_TYPES[op])
            raise TileTypeError(f"{what} into an array of {dt.name} is not supported; use one of {names}")
        if is_tile(offset_or_index) or isinstance(offset_or_index, tuple):
            array, index = index_tiles(b, a, offset_or_index, what)
            value, offset = value_of(b, t, index[0], dt, "the value"), None
        else:
            array, index, offset = (
                one_d_array(b, a, f"{what}'s first argument"),
                (),
                offset_value(b, offset_or_index, "the offset"),
            )
            value = value_of(b, t, None, dt, "the value")
            if is_tile_value(value):  # (elements from the offset on: a 1-D tile)
                one_d(value, what)
            else:  # a scalar is a tile of one element
                one = b.temp(TileType(dt, 1))
                b.emit(TileFull(one, value))
                value = one
        like = index[0] if index else value
        b.emit(TileAtomic(array, offset, index, value, valid_value(b, valid), mask_value(b, mask, like.type.shape), op))
        return Const(None)

    def interpret(self, s: TileAtomic, frame) -> None:
        array = frame.get(s.array)
        size = (s.index[0] if s.index else s.value).type.size
        keep = mask_array(frame, s.mask, size) & (np.arange(size) < valid_count(frame, s.valid, size))
        if s.index:
            at, kept = positions(frame, array, s.index, keep, None)
        else:
            at, kept = self.span(frame, s, array, keep)
        value = frame.get(s.value)
        with np.errstate(all="ignore"):
            UFUNCS[s.op].at(array, at, np.ravel(value)[kept] if is_tile_value(s.value) else value)

    @staticmethod
    def span(frame, s: TileAtomic, array: np.ndarray, keep: np.ndarray) -> tuple[tuple[np.ndarray], np.ndarray]:
        """The offset form's elements; TileValueError when a kept one is outside the array."""
        start = int(frame.get(s.offset))
        where = start + np.flatnonzero(keep)
        if len(where) and (where[0] < 0 or where[-1] >= array.shape[0]):
            raise TileValueError(
                f"tile.atomic_{s.op} touches elements [{where[0]}, {where[-1] + 1}) of an array of "
                f"{array.shape[0]} elements"
            )
        return (where,), keep

    def global_access(self, s: TileAtomic):
        return s.array, True

    def layout(self, s: TileAtomic, ctx) -> None:
        join_items(ctx, [*s.index, s.mask, s.value])

    def choose(self, s: TileAtomic, ctx):
        if exchanged(s, ctx.tiles, ctx.threads):
            return ctx.choice(s, f"atomic_{s.op}", "WarpExchange", EXCHANGED)
        return ctx.choice(s, f"atomic_{s.op}", f"atomic{s.op.capitalize()}", "DIRECT", storage=False)

    def lower(self, s: TileAtomic, w) -> ShimCall:
        like = s.index[0] if s.index else s.value
        size, items = like.type.size, w.layout(like).items_per_thread
        tiled = is_tile_value(s.value)
        value = TileArg(s.value, "x_items") if tiled else ValueArg(s.value, "x")
        dt = s.array.type.dtype
        a = ArrayArg(s.array, "a")
        if s.index:
            where_args = (*index_args(s.index),)
            reads, inside, where = address(a, s.index)
            body = index_refs(w, s.index, items) + w.clamp_valid(size)
        else:
            where_args = (ValueArg(s.offset, "offset"),)
            reads, inside, where = "", "true", f"{a.parts.ptr} + {a.parts.offset(['offset + e'])}"
            body = w.clamp(size, a)
        body += mask_ref(w, s.mask, items)
        code, index = "", w.element_index(like)
        if w.choice(s.cid).algorithm == EXCHANGED:  # the items to warp-striped order (see the module docstring)
            t = cxx_name(s.value.type.dtype)
            exchange = f"cub::WarpExchange<{t}, {items}, 32>"
            w.include("cub/warp/warp_exchange.cuh")
            code = w.storage(s.cid, exchange, copies=w.threads // 32)
            body += w.storage_ref(s.cid) + w.items_ref("blocked", "x_items", s.value, items) + f"  {t} x[{items}];\n"
            body += f"  {exchange}(s.temp[threadIdx.x / 32]).BlockedToStriped(blocked, x);\n"
            index = f"((int(threadIdx.x) / 32 * {items} + i) * 32 + int(threadIdx.x) % 32)"
        elif tiled:
            body += w.items_ref("x", "x_items", s.value, items)
        item = "x[i]" if tiled else "x"
        update = atomic_statement(w, s.op, dt, where, item)
        if not s.index and s.mask is None:
            body += _whole_tile(w, s, a, dt, item, index, items, size)
        body += (
            f"  for (int i = 0; i < {items}; ++i) {{\n"
            f"    const long long e = {index};\n"
            f"    if (e >= v) continue;\n{reads}"
            f"    if ({inside}{mask_test(s.mask)}) {update}\n  }}\n"
        )
        args = (a, *where_args, valid_arg(s.valid, size), *mask_arg(s.mask), value)
        call = ShimCall(f"coop_atomic_{s.op}_{s.cid}", args)
        w.define(call, code, body)
        return call
