"""Ops between neighbouring elements: `tile.flag_heads` (cub::BlockDiscontinuity) and
`tile.adjacent_difference` (cub::BlockAdjacentDifference), over blocked items."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tile
from ..dtypes import bfloat16, cast, cxx_name, is_half
from ..errors import TileTypeError
from ..lang import ir
from ..lang.types import TileType
from .base import ShimCall, TileArg, TileOp, one_d, register


@dataclass
class TileFlagHeads(ir.Collective, defs="out", uses="src"):
    out: ir.Var
    src: ir.Var


@dataclass
class TileAdjacentDifference(ir.Collective, defs="out", uses="src"):
    out: ir.Var
    src: ir.Var


def _as_float(dt: np.dtype, expr: str) -> str:
    """A C++ expression of `expr` (an element of `dt`, as stored) as a comparable/computable value."""
    if is_half(dt):
        return f"coop_{'bf16' if dt == bfloat16 else 'f16'}_to_f32({expr})"
    return expr


def heads(x: np.ndarray) -> np.ndarray:
    """Where each element of `x` starts a run (differs from its predecessor; element 0 does): the
    interpreter's `tile.flag_heads`, also the runs of `tile.unique` and `tile.run_length_encode`."""
    x = x.astype(np.float32) if is_half(x.dtype) else x
    return np.concatenate([np.ones(min(x.size, 1), bool), x[1:] != x[:-1]])


def heads_functor(name: str, dt: np.dtype) -> str:
    """The C++ functor `name` telling cub::BlockDiscontinuity where a run of `dt` elements starts."""
    t = cxx_name(dt)
    return (
        f"struct {name} {{ __device__ __forceinline__ bool operator()(const {t}& a, "
        f"const {t}& b) const {{ return {_as_float(dt, 'a')} != {_as_float(dt, 'b')}; }} }};\n"
    )


def _neighbor_lower(w, s, kind: str, primitive: str, header: str, functor: str, call_args: str) -> ShimCall:
    call = ShimCall(f"coop_{kind}_{s.cid}", (TileArg(s.src, "in0"), TileArg(s.out, "out0")))
    items = w.layout(s.src).items_per_thread
    t = cxx_name(s.src.type.dtype)
    w.include(header)
    cub_type = f"cub::{primitive}<{t}, {w.threads}>"
    code = w.storage(s.cid, cub_type) + functor
    body = w.storage_ref(s.cid) + w.items_ref("x", "in0", s.src, items) + w.items_ref("y", "out0", s.out, items)
    body += f"  {cub_type}(s.temp).{call_args.format(op=f'coop_{kind}_op_{s.cid}{{}}')};\n"
    w.define(call, code, body)
    return call


@register
class FlagHeads(TileOp):
    publics = (tile.flag_heads,)
    stmt = TileFlagHeads

    def build(self, b, public, t):
        src = one_d(b.tile(t, "tile.flag_heads' argument"), "tile.flag_heads")
        out = b.temp(TileType(np.dtype(np.bool_), src.type.size))
        b.emit(TileFlagHeads(out, src))
        return out

    def interpret(self, s: TileFlagHeads, frame) -> None:
        frame.env[s.out.name] = heads(frame.get(s.src))

    def layout(self, s: TileFlagHeads, ctx) -> None:
        ctx.join_blocked([s.src, s.out])

    def choose(self, s: TileFlagHeads, ctx):
        return ctx.choice(s, "flag_heads", "BlockDiscontinuity", "FlagHeads")

    def lower(self, s: TileFlagHeads, w) -> ShimCall:
        functor = heads_functor(f"coop_flag_heads_op_{s.cid}", s.src.type.dtype)
        return _neighbor_lower(
            w,
            s,
            "flag_heads",
            "BlockDiscontinuity",
            "cub/block/block_discontinuity.cuh",
            functor,
            "FlagHeads(y, x, {op})",
        )


@register
class AdjacentDifference(TileOp):
    publics = (tile.adjacent_difference,)
    stmt = TileAdjacentDifference

    def build(self, b, public, t):
        src = one_d(b.tile(t, "tile.adjacent_difference's argument"), "tile.adjacent_difference")
        if src.type.dtype == np.bool_:
            raise TileTypeError("tile.adjacent_difference of a bool tile is not defined; use tile.flag_heads")
        out = b.temp(src.type)
        b.emit(TileAdjacentDifference(out, src))
        return out

    def interpret(self, s: TileAdjacentDifference, frame) -> None:
        x = frame.get(s.src)
        calc = x.astype(np.float32) if is_half(x.dtype) else x
        out = x.copy()
        with np.errstate(all="ignore"):
            out[1:] = cast(calc[1:] - calc[:-1], x.dtype)
        frame.env[s.out.name] = out

    def layout(self, s: TileAdjacentDifference, ctx) -> None:
        ctx.join_blocked([s.src, s.out])

    def choose(self, s: TileAdjacentDifference, ctx):
        return ctx.choice(s, "adjacent_difference", "BlockAdjacentDifference", "SubtractLeft")

    def lower(self, s: TileAdjacentDifference, w) -> ShimCall:
        dt = s.src.type.dtype
        t = cxx_name(dt)
        if is_half(dt):
            tag = "bf16" if dt == bfloat16 else "f16"
            diff = f"coop_f32_to_{tag}({_as_float(dt, 'a')} - {_as_float(dt, 'b')})"
        else:
            diff = f"static_cast<{t}>(a - b)"
        functor = (
            f"struct coop_adjacent_difference_op_{s.cid} {{ __device__ __forceinline__ {t} operator()(const {t}& a, "
            f"const {t}& b) const {{ return {diff}; }} }};\n"
        )
        return _neighbor_lower(
            w,
            s,
            "adjacent_difference",
            "BlockAdjacentDifference",
            "cub/block/block_adjacent_difference.cuh",
            functor,
            "SubtractLeft(x, y, {op})",
        )
