"""How a tile moves between global memory and the block, for `tile.load` and `tile.store`: the
transfer's algorithm (planner hooks `layout` and `choose`) and its shim (`lower`).

A blocked tile of 1- or 2-byte items moves in whole 16-byte words per thread (`VECTORIZED`): its
striped or warp-transposed transfers move only 1 or 2 bytes per thread and instruction. So does
one of 4-byte items inside a loop within a loop (`INNER_LOOP_DEPTH`), which runs many times per
tile the program produces: there instructions count more than coalescing, and a 16-byte word is
one load where a warp transpose takes a load, a shared-memory store and load per item, and
barriers; and one whose thread holds exactly one 16-byte word anywhere: consecutive threads'
words are consecutive, as coalesced as a striped transfer. Other blocked tiles of unit-stride
arrays go through BLOCK_LOAD/STORE_WARP_TRANSPOSE (one warp at a time past registers); striped
tiles go straight to global memory (coalesced, no shared memory), and a blocked tile of a strided
view element by element.

A striped tile in vectors (`TileLayout.vector`, which transfers of unit-stride arrays offer the
planner: 16 bytes of the array's items) moves whole vectors (`STRIPED_VECTORIZED`: up to 16 bytes a
load or store, consecutive threads' vectors consecutive) when the tile is full and aligned, else
element by element.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import bfloat16, cxx_name, is_half
from ..lang import ir
from ..lang.types import ArrayType
from ..planner.layout import BLOCKED, PER_COL, REGISTER_ITEMS, WHOLE, TileLayout
from .base import ArrayArg, Choice, Lowering, Planning, ShimCall

VECTORIZED = "DIRECT_VECTORIZED"
#: the primitive of a transfer item by item, at each item's element index (masked, or along rows)
ITEM_BY_ITEM = "ItemByItem"
STRIPED_VECTORIZED = "STRIPED_VECTORIZED"
#: the unsigned type of a word of each size that a striped vector moves in
WORD_TYPES = {16: "uint4", 8: "uint2", 4: "unsigned", 2: "unsigned short"}
INNER_LOOP_DEPTH = 2
VECTOR_BYTES = 16
WORD_ITEMSIZE = 4  # the widest item moved in words (inside inner loops)


def vectorizable(tile: ir.Var, array: ir.Var, threads: int, widest: int = 2) -> bool:
    """Whether a blocked transfer of `tile` to or from `array` can move 16-byte words: array items
    of at most `widest` bytes, a unit-stride array, and each thread's bytes a whole number of words."""
    itemsize = array.type.dtype.itemsize
    items = -(-tile.type.size // threads)
    return itemsize <= widest and array.type.unit_stride and items * itemsize % VECTOR_BYTES == 0


def prefer_vectorized(ctx: Planning, tile: ir.Var, array: ir.Var) -> None:
    """The `layout` hook: a transfer of a unit-stride array offers `tile` vectors of 16 bytes of its items
    (striped in vectors where its group can be); one that would move whole 16-byte words per thread if it
    were blocked makes its tile BLOCKED otherwise (no op needs striped)."""
    if array.type.unit_stride:
        ctx.offer_vector(tile, VECTOR_BYTES // array.type.dtype.itemsize)
    if vectorizable(tile, array, ctx.threads):
        ctx.prefer_blocked(tile)


def choose_transfer(
    ctx: Planning, s: ir.Collective, tile: ir.Var, array: ir.Var, load: bool, mask: ir.Var | None = None
) -> Choice:
    """The `choose` hook: direct in 16-byte words for blocked tiles of 1- and 2-byte dtypes (and of
    4-byte dtypes in inner loops or one word a thread), BLOCK_*_WARP_TRANSPOSE (one warp at a time past 32 items per
    thread) for other blocked tiles of unit-stride arrays, else direct (striped: coalesced; blocked
    over a strided view: element by element). A masked transfer, or one of a vector arranged along a
    2-D tile's rows, moves item by item (`ITEM_BY_ITEM`; an unmasked vector's runs in words where they can
    be: `_vector_runs`)."""
    layout = ctx.tiles[tile.name]
    kind = "load" if load else "store"
    if mask is not None or layout.rows is not None:
        why = "masked" if mask is not None else "along rows"
        if mask is None and _vector_runs(layout, array.type) is not None:
            why += ", runs in words where whole"
        return ctx.choice(s, f"{kind}, {why}", ITEM_BY_ITEM, "DIRECT", storage=False)
    if not array.type.unit_stride:
        return ctx.choice(s, kind, "strided", "DIRECT", storage=False)
    if layout.vector > 1:
        primitive = "LoadDirectStriped" if load else "StoreDirectStriped"
        return ctx.choice(s, kind, primitive, STRIPED_VECTORIZED, storage=False)
    one_word = layout.items_per_thread * array.type.dtype.itemsize == VECTOR_BYTES  # (as coalesced as striped)
    widest = WORD_ITEMSIZE if one_word or ctx.depths.get(s.cid, 0) >= INNER_LOOP_DEPTH else 2
    if layout.arrangement == BLOCKED and vectorizable(tile, array, ctx.threads, widest):
        return ctx.choice(s, kind, f"{kind.capitalize()}DirectBlocked", VECTORIZED, storage=False)
    if layout.arrangement == BLOCKED and layout.items_per_thread > 1:
        verb = "Load" if load else "Store"
        # past registers, exchange one warp at a time: a whole-tile exchange would double the tile
        sliced = "_TIMESLICED" if layout.items_per_thread > REGISTER_ITEMS else ""
        return ctx.choice(s, kind, f"Block{verb}", f"BLOCK_{kind.upper()}_WARP_TRANSPOSE{sliced}")
    return ctx.choice(s, kind, "LoadDirectStriped" if load else "StoreDirectStriped", "DIRECT", storage=False)


def _whole(size: int, a: ArrayArg) -> str:
    """`whole`: whether all `size` elements of a transfer at `offset` of `a` are valid (`v == size`), tested
    without `v` so that only the partial path computes it and the test's loop-invariant parts can leave a loop."""
    return f"  const bool whole = valid >= {size} && offset >= 0 && {a.parts.shapes[0]} - offset >= {size};\n"


def convert_expr(expr: str, src: np.dtype, dst: np.dtype) -> str:
    """`expr` of `src` as a C++ value of `dst` (16-bit floats through the shims' HALF_CONVERSIONS)."""
    if is_half(src):
        expr = f"coop_{'bf16' if src == bfloat16 else 'f16'}_to_f32({expr})"
    return f"static_cast<{cxx_name(dst)}>({expr})"


def _unpack_words(array: ArrayType, tile: ir.Var, items: int, convert: str) -> str:
    """The loaded words `w` into the thread's items: 16-bit floats into a float32 tile two per 32-bit word,
    anything else copied into `x` and then converted as `convert` says."""
    if convert and is_half(array.dtype) and tile.type.dtype == np.float32:  # two floats per 32-bit word
        pair = f"coop_{'bf16' if array.dtype == bfloat16 else 'f16'}x2_to_f32x2"
        return (
            "    const unsigned* u = reinterpret_cast<const unsigned*>(w);\n"
            f"    for (int k = 0; k < {items // 2}; ++k) {{ const float2 f = {pair}(u[k]); "
            "loaded[2 * k] = f.x; loaded[2 * k + 1] = f.y; }\n"
        )
    return "    memcpy(x, w, sizeof(w));\n" + convert


def lower_transfer(
    w: Lowering,
    call: ShimCall,
    cid: int,
    kind: str,
    tile: ir.Var,
    a: ArrayArg,
    guarded_extra: str,
    mask: ir.Var | None = None,
) -> None:
    """The `lower` hook: a load or store shim as `choose_transfer` chose it, of the tile at `offset` of
    1-D array `a` (one of `call`'s arguments). A full tile takes CUB's unguarded path. A load into a tile
    of another dtype than the array's (a 16-bit float tile loaded as float32) converts each item after
    the transfer."""
    array = a.var.type
    base = f"{a.parts.ptr} + {a.parts.offset(['offset'])}"  # (the tile's first element)
    lay = w.layout(tile)
    items = lay.items_per_thread
    padded = w.threads * items != lay.size  # (a padded tile is never whole)
    whole = "false" if padded else "whole"
    verb = kind.capitalize()  # Load / Store
    choice = w.choice(cid)
    converted = tile.type.dtype != array.dtype  # the transfer fills `x` in the array's dtype, converted after it
    code, body = "", w.items_ref("loaded" if converted else "x", "items", tile, items) + w.clamp(lay.size, a)
    body += _whole(lay.size, a) if array.unit_stride and not padded else ""  # (strided: item by item)
    convert = ""
    if converted:
        body += f"  {cxx_name(array.dtype)} x[{items}];\n"
        value = convert_expr("x[i]", array.dtype, tile.type.dtype)
        convert = f"  for (int i = 0; i < {items}; ++i) loaded[i] = {value};\n"
    if array.unit_stride:  # CUB's Block{Load,Store} or {Load,Store}Direct*
        w.include(f"cub/block/block_{kind}.cuh")
    if choice.algorithm == STRIPED_VECTORIZED:
        body += _striped_vectors(w, kind, tile, array, base, lay, whole, convert)
        convert = ""
    elif choice.algorithm == VECTORIZED:
        # each thread's items are contiguous: whole 16-byte words when the tile is full and aligned
        words = items * array.dtype.itemsize // 16
        aligned = f"reinterpret_cast<unsigned long long>({base}) % 16 == 0"
        # otherwise item by item, against the count left from this thread's first item (no per-item index)
        mine = f"{base} + threadIdx.x * {items}"
        if kind == "load":
            move = (
                f"    const uint4* src = reinterpret_cast<const uint4*>({base}) + threadIdx.x * {words};\n"
                f"    uint4 w[{words}];\n    for (int j = 0; j < {words}; ++j) w[j] = src[j];\n"
            )
            move += _unpack_words(array, tile, items, convert)
            each = (
                f"    const auto* src = {mine};\n"
                f"    for (int i = 0; i < {items}; ++i) x[i] = i < left ? src[i] : other;\n"
            )
        else:
            move = (
                f"    uint4 w[{words}];\n    memcpy(w, x, sizeof(w));\n"
                f"    uint4* dst = reinterpret_cast<uint4*>({base}) + threadIdx.x * {words};\n"
                f"    for (int j = 0; j < {words}; ++j) dst[j] = w[j];\n"
            )
            each = f"    auto* dst = {mine};\n    for (int i = 0; i < {items}; ++i) if (i < left) dst[i] = x[i];\n"
        # (a conversion in each branch: the words convert without unpacking their halves first)
        body += (
            f"  if ({whole} && {aligned}) {{\n{move}  }} else {{\n"
            f"    const int left = int(v) - int(threadIdx.x) * {items};\n{each}{convert}  }}\n"
        )
        convert = ""
    elif mask is None and (runs := _vector_runs(lay, array)) is not None:
        body += _row_vector_words(kind, base, array, runs)
    elif not array.unit_stride or choice.primitive == ITEM_BY_ITEM:
        index = w.element_index(tile)
        where = f"{a.parts.ptr}[{a.parts.offset(['offset + e'])}]"
        ok = "e < v" if mask is None else "e < v && keep[i]"
        body += w.items_ref("keep", "mk", mask, items) if mask is not None else ""
        move = f"x[i] = {ok} ? {where} : other;" if kind == "load" else f"if ({ok}) {where} = x[i];"
        body += f"  for (int i = 0; i < {items}; ++i) {{ const long long e = {index}; {move} }}\n"
    else:
        if choice.needs_storage:
            t = cxx_name(array.dtype)
            cub_type = f"cub::Block{verb}<{t}, {w.threads}, {items}, cub::{choice.algorithm}>"
            alias = f"coop_{kind}_{cid}_t"
            code = f"using {alias} = {cub_type};\n" + w.storage(cid, cub_type)
            call_expr, thread, body = f"{alias}(s.temp).{verb}", "", w.storage_ref(cid) + body
        else:
            call_expr, thread = f"cub::{verb}DirectStriped<{w.threads}>", "int(threadIdx.x), "
        body += (
            f"  if ({whole}) {call_expr}({thread}{base}, x);\n"
            f"  else {call_expr}({thread}{base}, x, int(v){guarded_extra});\n"
        )
    w.define(call, code, body + convert)


def _vector_runs(lay: TileLayout, array: ArrayType) -> tuple[str, int, int, int] | None:
    """How a vector held along a 2-D family's rows (`RowShape` PER_COL or PER_ROW) moves to or from a
    unit-stride array in words: (run q's first element, a C++ expression of `q`; items a run; runs; bytes a
    word), or None where its runs are single items or it is not such a vector."""
    rs = lay.rows
    if rs is None or rs.holds == WHOLE or not array.unit_stride:
        return None
    if rs.holds == PER_COL:
        first = f"((q * {rs.lanes} + (int(threadIdx.x) & {rs.lanes - 1})) * {rs.run})"
        run, runs = rs.run, rs.row_items // rs.run
    else:
        first, run, runs = f"((int(threadIdx.x) >> {rs.lanes.bit_length() - 1}) * {rs.rows})", rs.rows, 1
    word = next((b for b in WORD_TYPES if run * array.dtype.itemsize % b == 0), 0)
    return (first, run, runs, word) if word > array.dtype.itemsize else None


def _row_vector_words(kind: str, base: str, array: ArrayType, runs: tuple[str, int, int, int]) -> str:
    """A vector's transfer (`_vector_runs`) from its first element `base`: each run of a thread's items in
    words where it is whole (all valid) and aligned, else item by item against the valid count `v`."""
    first, run, count, word = runs
    wt, words = WORD_TYPES[word], run * array.dtype.itemsize // word
    head = (
        f"  for (int q = 0; q < {count}; ++q) {{\n    const int e0 = {first};\n"
        f"    {'const ' if kind == 'load' else ''}auto* p = {base} + e0;\n"
        f"    if (e0 + {run} <= v && reinterpret_cast<unsigned long long>(p) % {word} == 0) {{\n"
    )
    move = f"      {move_words(kind == 'load', wt, words, 'p', f'q * {run}')}\n"
    if kind == "load":
        each = f"      for (int j = 0; j < {run}; ++j) x[q * {run} + j] = e0 + j < v ? p[j] : other;\n"
    else:
        each = f"      for (int j = 0; j < {run}; ++j) if (e0 + j < v) p[j] = x[q * {run} + j];\n"
    return f"{head}{move}    }} else {{\n{each}    }}\n  }}\n"


def move_words(load: bool, wt: str, words: int, ptr: str, first: str) -> str:
    """C++ statements moving `words` words of type `wt` between `ptr` (aligned to a word) and a thread's
    items `x[first]...`, through a word array (`memcpy`: no aliasing of the items' type)."""
    if load:
        return (
            f"{wt} wd[{words}]; for (int u = 0; u < {words}; ++u) wd[u] = reinterpret_cast<const {wt}*>({ptr})[u]; "
            f"memcpy(&x[{first}], wd, sizeof(wd));"
        )
    # (a plain `dst[u] = wd[u]` of the memcpy'd words comes out as scalar stores from NVRTC)
    return (
        f"{wt} wd[{words}]; memcpy(wd, &x[{first}], sizeof(wd)); "
        f"for (int u = 0; u < {words}; ++u) __stwb(reinterpret_cast<{wt}*>({ptr}) + u, wd[u]);"
    )


def _striped_vectors(
    w: Lowering, kind: str, tile: ir.Var, array: ArrayType, base: str, lay, whole: str, convert: str
) -> str:
    """A transfer of a tile striped in vectors of `lay.vector` items, from its first element `base`: each
    vector in words of up to 16 bytes, consecutive threads' vectors consecutive, when the tile is full and
    aligned; else element by element."""
    items, vector, itemsize = lay.items_per_thread, lay.vector, array.dtype.itemsize
    word = min(VECTOR_BYTES, vector * itemsize)
    per = vector * itemsize // word  # words per vector
    words = items // vector * per
    wt = WORD_TYPES[word]
    aligned = f"reinterpret_cast<unsigned long long>({base}) % {word} == 0"
    at = f"j * {w.threads} + int(threadIdx.x)"  # word j of this thread (vector j / per, its word j % per)
    if per > 1:
        at = f"(j / {per} * {w.threads} + int(threadIdx.x)) * {per} + j % {per}"
    index = w.element_index(tile)
    if kind == "load":
        move = f"    const {wt}* src = reinterpret_cast<const {wt}*>({base});\n    {wt} w[{words}];\n"
        move += f"    for (int j = 0; j < {words}; ++j) w[j] = src[{at}];\n"
        move += _unpack_words(array, tile, items, convert)
        each = f"    for (int i = 0; i < {items}; ++i) {{ const int e = {index}; x[i] = e < v ? src[e] : other; }}\n"
    else:
        move = f"    {wt} w[{words}];\n    memcpy(w, x, sizeof(w));\n"
        move += f"    {wt}* dst = reinterpret_cast<{wt}*>({base});\n"
        move += f"    for (int j = 0; j < {words}; ++j) dst[{at}] = w[j];\n"
        each = f"    for (int i = 0; i < {items}; ++i) {{ const int e = {index}; if (e < v) dst[e] = x[i]; }}\n"
    mine = f"    {'const ' if kind == 'load' else ''}auto* {'src' if kind == 'load' else 'dst'} = {base};\n"
    return f"  if ({whole} && {aligned}) {{\n{move}  }} else {{\n{mine}{each}{convert}  }}\n"
