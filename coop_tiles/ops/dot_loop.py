"""Which K loops cuBLASDx's pipelined GEMM can run whole (`runtime/gemm_pipeline.py`): tutorial 12's loop, exactly.

A K loop of a tile program computes `acc += a[r:r+BM, :K] @ b[:K, c:c+BN]` one (BM, BK) x (BK, BN) step at a time; on
sm_90a cuBLASDx's tile pipeline computes the same product in one call, its operand tiles brought by TMA into
`depth` stages of shared memory while WGMMA multiplies the stages already there (about 0.11x cuBLAS for the
step-by-step loop, see benchmarks/dotpipe_probe.py for the pipeline's rate). It can only when the loop is nothing
but that product, and the loads are what TMA does: a rectangle of a row-major array whose elements past the
array's extents read as zero. `match` says whether a loop is, and if so what the pipeline needs of it
(`KLoop`); if not, why not, in the words a plan can show.

The loop it takes (any names, copies between the statements allowed):

    for kk in range(0, K, BK):
        x = tile.load(a, (r, kk), (BM, BK), valid=(M - r, K - kk), other=0)     # or valid=None on an axis
        y = tile.load(b, (kk, c), (BK, BN), valid=(K - kk, N - c), other=0)
        acc = tile.dot(x, y, acc)

with `r` and `c` not changed by the loop, `a`, `b`, `M`, `N` and `K` arguments of the kernel (the device pipeline,
TMA's descriptors of `a` and `b`, is built from them by another kernel before the program runs: the library's
builder is a call that would serialise the program's WGMMAs), `a` and `b` 2-D arrays of bfloat16 or float16 with
unit-stride rows, no `mask=`, `other=0`, the dot neither transposed nor tf32, `acc` read in the loop only by the
dot, and nothing the loop defines read after it. Whether it runs pipelined is then decided at run time (rows of
whole 16 bytes, 16-byte aligned arrays, `r` and `c` multiples of BM and BN: else the loop as written runs).

At sm_90a only (`PIPELINE_ARCH`), the rewrite `pipeline_k_loops` (this module's op's `rewrite`) puts each loop it
takes behind one `TileDotLoop` statement, the loop kept as the fallback under `if not ran`, with the store of its
result fused into the statement where that is all that becomes of it (`epilogue`), and notes why it left any other
loop holding a dot; `lower_pipelined` writes its shim and its part of the kernel's prepare kernel, which builds the
device pipelines into the launch state (`runtime/launch_state.py`) before the program. docs/internals.md, "Pipelined
K loops", says what has been checked, on CPU and on an H200; tests/test_dot_loop.py pins which loops it takes and
why it refuses others, and the rewritten IR against NumPy; tests/test_gpu_dot_loop.py runs it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from ..dtypes import bfloat16, cxx_name, float16
from ..errors import CompileError
from ..lang import ir
from ..lang.types import BOOL, INT64
from ..planner.layout import SYNCS
from ..runtime import gemm_pipeline, mathdx
from ..runtime.gemm_pipeline import PipelineSpec
from ..runtime.mathdx import GemmSpec
from .base import LAUNCH_STATE, ArrayArg, OutArg, ShimCall, TileArg, TileOp, ValueArg, register
from .construct import TileFull
from .dot import TileDot, offer_accumulator, operand_arrangement, product_spec
from .memory2d import TileLoad2D, TileStore2D, load_masked, store_masked

#: the operand dtypes the pipeline streams (cuBLASDx refuses input streaming of tf32; float32 spills)
PIPELINED_DTYPES = (bfloat16, float16)


@dataclass(frozen=True)
class Operand:
    """One operand's load: the array, the offset along the axis the loop does not walk (`r` of a, `c` of b) and
    that axis's extent (`M` of `valid=M - r`; None where the load gives no `valid` on that axis: the array's own)."""

    load: TileLoad2D
    offset: ir.Value
    extent: ir.Value | None


@dataclass(frozen=True)
class KLoop:
    """A loop `match` takes: the loop, its dot, each operand's load, and K (the loop's stop, both loads' K extent)."""

    loop: ir.ForRange
    dot: TileDot
    a: Operand
    b: Operand
    k: ir.Value


def match(loop: ir.ForRange, program: ir.Program) -> KLoop | str:
    """`loop` as a `KLoop`, or why the pipelined GEMM cannot run it."""
    body = loop.body
    dots = [s for s in body if isinstance(s, TileDot)]
    if len(dots) != 1:
        return "the loop holds no tile.dot" if not dots else "the loop holds more than one tile.dot"
    dot = dots[0]
    dtype = dot.a.type.dtype
    if dtype not in PIPELINED_DTYPES:
        return f"{np.dtype(dtype).name} operands (the pipeline streams bfloat16 and float16 only)"
    if dot.tf32 or dot.transposed != (False, False):
        return "a transposed operand" if dot.transposed != (False, False) else "allow_tf32"
    acc = dot.acc
    back = [s for s in body if isinstance(s, ir.Copy) and s.src == dot.out and s.out == acc]
    if acc is None or not back:
        return "the dot does not add into an accumulator the loop carries (acc = tile.dot(x, y, acc))"
    if [s for s in ir.walk(body) if acc in (*ir.uses(s), *ir.refs(s))] != [dot]:
        return "the accumulator is read in the loop other than by the dot"
    if not isinstance(loop.start, ir.Lit) or loop.start.value != 0:
        return "the loop does not start at 0"
    bk = dot.a.type.shape[1]
    if not isinstance(loop.step, ir.Lit) or loop.step.value != bk:
        return f"the loop's step is not the dot's K ({bk})"
    made = _definitions(body)
    found = [_load(v, made) for v in (dot.a, dot.b)]
    for name, load in zip("ab", found):
        if isinstance(load, str):
            return f"{name}: {load}"
    load_a, load_b = found
    allowed = {id(s) for s in _feeding(body, made, dot)} | {id(dot)}
    extra = [s for s in body if id(s) not in allowed]
    if extra:
        return f"the loop does more than load, multiply and accumulate ({type(extra[0]).__name__})"
    inside = {v.name for s in ir.walk(body) for v in ir.defs(s)} | {loop.var.name}
    if isinstance(loop.stop, ir.Var) and loop.stop.name in inside:
        return "K (the loop's stop) changes in the loop"
    a = _operand(load_a, load_a.row, load_a.valid_rows, loop.var, load_a.col, load_a.valid_cols, made, inside)
    b = _operand(load_b, load_b.col, load_b.valid_cols, loop.var, load_b.row, load_b.valid_rows, made, inside)
    for name, operand in zip("ab", (a, b)):
        if isinstance(operand, str):
            return f"{name}: {operand}"
    k_extents = {_k_extent(load_a.valid_cols, loop.var, made), _k_extent(load_b.valid_rows, loop.var, made)}
    if len(k_extents) != 1 or k_extents != {loop.stop}:
        return "the loads' K extents (valid=K - kk) are not the loop's stop"
    for what, value in (("a", load_a.array), ("b", load_b.array), ("M", a.extent), ("N", b.extent), ("K", loop.stop)):
        if not _argument(value):
            return f"{what} is not a kernel argument (the descriptors are built from the arguments before the program)"
    after = _read_after(program, loop)
    leaked = sorted((inside - {acc.name}) & after)
    if leaked:
        return f"{leaked[0]} is read after the loop"
    return KLoop(loop, dot, a, b, loop.stop)


def _argument(value: ir.Value | None) -> bool:
    """Whether `value` is known before the program runs: a kernel argument, a literal, or absent."""
    return value is None or isinstance(value, ir.Lit) or value.kind == ir.PARAM


def _definitions(body: list[ir.Stmt]) -> dict[str, ir.Stmt]:
    """The statement of `body` (top level) defining each variable defined there once."""
    counts = Counter(v.name for s in body for v in ir.defs(s))
    return {v.name: s for s in body for v in ir.defs(s) if counts[v.name] == 1}


def _source(v: ir.Value, made: dict[str, ir.Stmt]) -> tuple[ir.Value, list[ir.Stmt]]:
    """`v` followed back through copies made in the loop, and those copies."""
    chain = []
    while isinstance(v, ir.Var) and isinstance(made.get(v.name), ir.Copy):
        chain.append(made[v.name])
        v = made[v.name].src
    return v, chain


def _load(v: ir.Var, made: dict[str, ir.Stmt]) -> TileLoad2D | str:
    """The load that defines `v` (through copies), or why it is not one the pipeline can do."""
    v, _ = _source(v, made)
    s = made.get(v.name) if isinstance(v, ir.Var) else None
    if not isinstance(s, TileLoad2D):
        return "not loaded in the loop by a 2-D tile.load"
    array = s.array.type
    if array.ndim != 2 or not array.unit_stride:
        return "not a row-major 2-D array (TMA reads rows of unit stride)"
    if s.mask is not None:
        return "a masked load (mask=)"
    if not (isinstance(s.other, ir.Lit) and s.other.value == 0):
        return "a load whose other= is not 0 (TMA fills with zeros)"
    return s


def _feeding(body: list[ir.Stmt], made: dict[str, ir.Stmt], dot: TileDot) -> list[ir.Stmt]:
    """The statements of `body` that the dot's operands come from: the loads, the copies of them, the scalar
    statements giving the loads' valid counts, and the copy of the result into the accumulator."""
    out = [s for s in body if isinstance(s, ir.Copy) and s.src == dot.out]
    for v in (dot.a, dot.b):
        v, chain = _source(v, made)
        load = made[v.name]
        out += [*chain, load]
        for valid in (load.valid_rows, load.valid_cols):
            if isinstance(valid, ir.Var) and isinstance(made.get(valid.name), ir.ScalarOp):
                out.append(made[valid.name])
    return out


def _difference(valid: ir.Value | None, made: dict[str, ir.Stmt]) -> tuple[ir.Value, ir.Value] | None:
    """(E, x) where `valid` is `E - x` computed in the loop, else None."""
    s = made.get(valid.name) if isinstance(valid, ir.Var) else None
    if isinstance(s, ir.ScalarOp) and s.op == "sub" and len(s.args) == 2:
        return s.args[0], s.args[1]
    return None


def _k_extent(valid: ir.Value | None, kk: ir.Var, made: dict[str, ir.Stmt]) -> ir.Value | None:
    """K of `valid = K - kk` (None where the load gives no such count)."""
    found = _difference(valid, made)
    return found[0] if found is not None and found[1] == kk else None


def _operand(
    load: TileLoad2D,
    offset: ir.Value,
    valid: ir.Value | None,
    kk: ir.Var,
    k_offset: ir.Value,
    k_valid: ir.Value | None,
    made: dict[str, ir.Stmt],
    inside: set[str],
) -> Operand | str:
    """An operand's load as `Operand`, or why not: its K offset is the loop variable, its other offset and extent
    are not changed by the loop, its valid counts are `extent - offset` (or absent)."""
    if k_offset != kk:
        return "the load's K offset is not the loop variable"
    if isinstance(offset, ir.Var) and offset.name in inside:
        return "the load's offset changes in the loop"
    extent = None
    if valid is not None:
        found = _difference(valid, made)
        if found is None or found[1] != offset or (isinstance(found[0], ir.Var) and found[0].name in inside):
            return "a valid count that is not extent - offset (TMA's bounds)"
        extent = found[0]
    if k_valid is None or _k_extent(k_valid, kk, made) is None:
        return "no valid count K - kk along K"
    return Operand(load, offset, extent)


def _read_after(program: ir.Program, loop: ir.ForRange, *skip: ir.Stmt) -> set[str]:
    """The names of the variables read by any statement of `program` outside `loop` (after it, or before it in an
    enclosing loop's next iteration: every statement that is not the loop's own) but `skip`."""
    own = {id(s) for s in ir.walk(loop.body)} | {id(loop)} | {id(s) for s in skip}
    return {v.name for s in program.walk() if id(s) not in own for v in (*ir.uses(s), *ir.refs(s))}


#: the target whose TMA and WGMMA the pipeline uses (arch-specific: sm_90 code cannot hold them)
PIPELINE_ARCH = "sm_90a"
#: the most stages, and the most shared memory the stages may take (H200: 227 KiB a block; the rest for the
#: program's own TempStorage); measured best on an H200: 4 stages of 128x128x64, 3 of 128x256x64 and 256x128x64
MAX_STAGES, STAGE_BUDGET = 4, 160 * 1024
#: what TMA needs of each operand in global memory: its address and its row stride a multiple of 16 bytes
TMA_BYTES = 16
#: the arrangements of a, b (row-major arrays: `match` takes unit-stride rows only) and c of the pipelined GEMM
GLOBAL_ARRANGEMENT = ("row", "row", "row")


def stages(bm: int, bn: int, bk: int, itemsize: int) -> int:
    """How many stages of (BM, BK) and (BK, BN) operand tiles the pipeline keeps: as many as fit in `STAGE_BUDGET`,
    at most `MAX_STAGES` (0 where fewer than 2 fit: no pipeline)."""
    depth = min(MAX_STAGES, STAGE_BUDGET // ((bm * bk + bk * bn) * itemsize))
    return depth if depth >= 2 else 0


@dataclass
class TileDotLoop(ir.Collective, defs="out ran", uses="a b acc row col m n k c", attrs="bk depth acc_zero"):
    """The whole K loop of a `KLoop` as one statement (sm_90a: cuBLASDx's tile pipeline, TMA + WGMMA):
    `out = acc + a[row:row+BM, :k] @ b[:k, col:col+BN]` (BM, BN: `out`'s shape; BK: the replaced loop's step, the
    K of `TileDot`; rows of `a` past `m`, columns of `b` past `n` and both past `k` read as zero) and `ran` true,
    where the pipeline can run it (`pipelinable`); else `ran` false and `out` is `acc` (the loop, kept after it
    under `if not ran`, then runs). `m`, `n`: None where the loads give no valid count on that axis (the arrays'
    own extents); `depth`: the stages of operand tiles in shared memory.

    With `c` (the loop's store fused, `Epilogue`), where it ran the product goes straight to `c[row:row+BM,
    col:col+BN]` (rows below `m`, columns below `n`) and `out` is not written; `acc_zero`: the loop's accumulator
    starts as zeros (nothing to add)."""

    out: ir.Var
    ran: ir.Var
    a: ir.Var
    b: ir.Var
    acc: ir.Var
    row: ir.Value
    col: ir.Value
    m: ir.Value | None
    n: ir.Value | None
    k: ir.Value
    c: ir.Var | None
    bk: int
    depth: int
    acc_zero: bool


def pipelinable(
    a: np.ndarray, b: np.ndarray, row: int, col: int, m: int, n: int, k: int, tile: tuple[int, int]
) -> bool:
    """Whether the pipeline computes the K loop's product for the (BM, BN) = `tile` block at (`row`, `col`) of
    `a` (M, K) @ `b` (K, N) exactly as the loop does (the GPU checks the same in the generated code): each
    operand's address and row stride whole multiples of 16 bytes, its rows contiguous (TMA); M, N and K within the
    arrays (TMA reads the rectangle the descriptor gives, the loop only what it touches) and K at least 1; the block
    at a whole tile index (the tile pipeline's coordinates) inside the product."""
    bm, bn = tile
    for x in (a, b):
        if x.ctypes.data % TMA_BYTES or x.strides[0] <= 0 or x.strides[0] % TMA_BYTES or x.strides[1] != x.itemsize:
            return False
    if not (1 <= k <= a.shape[1] and k <= b.shape[0] and m <= a.shape[0] and n <= b.shape[1]):
        return False
    return 0 <= row < m and row % bm == 0 and 0 <= col < n and col % bn == 0


@register
class DotLoop(TileOp):
    """The pipelined K loop (`TileDotLoop`), which only the GPU rewrite `pipeline_k_loops` makes."""

    stmt = TileDotLoop

    def interpret(self, s: TileDotLoop, frame) -> None:
        """The replaced loop's product where `pipelinable` (`ran`), step by step as the loop takes it."""
        a, b = frame.get(s.a), frame.get(s.b)
        acc = np.asarray(frame.get(s.acc), s.out.type.dtype)
        (bm, bn), bk = s.out.type.shape, s.bk
        row, col, k = (int(frame.get(v)) for v in (s.row, s.col, s.k))
        m = a.shape[0] if s.m is None else int(frame.get(s.m))
        n = b.shape[1] if s.n is None else int(frame.get(s.n))
        ran = pipelinable(a, b, row, col, m, n, k, (bm, bn))
        frame.set(s.ran, ran)
        if not ran:
            frame.env[s.out.name] = acc.copy()
            return
        for kk in range(0, k, bk):
            at = (ir.Lit(row, INT64), ir.Lit(kk, INT64))
            x = load_masked(
                frame, a, at, (ir.Lit(m - row, INT64), ir.Lit(k - kk, INT64)), None, (bm, bk), 0, "tile.load"
            )
            at = (ir.Lit(kk, INT64), ir.Lit(col, INT64))
            y = load_masked(
                frame, b, at, (ir.Lit(k - kk, INT64), ir.Lit(n - col, INT64)), None, (bk, bn), 0, "tile.load"
            )
            acc = acc + np.matmul(x.astype(acc.dtype), y.astype(acc.dtype))
        frame.env[s.out.name] = acc.astype(s.out.type.dtype)
        if s.c is not None:
            valid = (ir.Lit(m - row, INT64), ir.Lit(n - col, INT64))
            store_masked(frame, frame.get(s.c), (s.row, s.col), valid, None, frame.env[s.out.name], "tile.store")

    def global_access(self, s: TileDotLoop):
        return None if s.c is None else (s.c, True)

    def rewrite(self, program: ir.Program, debug: bool, arch: str) -> None:
        """At sm_90a, K loops to pipelined GEMMs (`pipeline_k_loops`); the plan says why any other is not."""
        if not mathdx.available():  # (no GEMM compiles without it; the loop's dot says so)
            return
        for cid, why in pipeline_k_loops(program, arch).items():
            program.notes[cid] = f"K loop not pipelined: {why}"

    def layout(self, s: TileDotLoop, ctx) -> None:
        """`out` and `acc` in the arrangement the replaced loop's dot offers (the same key: one fragment)."""
        ctx.join([s.out, s.acc])
        if mathdx.available():
            # (voting as the replaced loop's dot does: its operands are loaded as multiplied)
            offer_accumulator(ctx, s.out, dot_spec(s, ctx.threads, ctx.arch), operand_arrangement((False, False)))

    def takes_fragments(self, s: TileDotLoop, var: ir.Var) -> bool:
        return True  # (`out` and `acc` item by item at their element indices; `a`, `b`: arrays)

    def choose(self, s: TileDotLoop, ctx):
        bm, bn = s.out.type.shape
        nbytes = stage_bytes(s)
        how = f"K loop pipelined: cuBLASDx TMA+WGMMA, {s.depth} stages, {nbytes} B"
        return ctx.choice(s, f"dot loop {bm}x{bn}x{s.bk}", "cuBLASDx", how, sync=SYNCS)

    def lower(self, s: TileDotLoop, w) -> ShimCall:
        return lower_pipelined(s, w)


def pipeline_k_loops(program: ir.Program, arch: str) -> dict[int, str]:
    """At `PIPELINE_ARCH`, put each K loop `match` takes (and whose stages fit) behind a `TileDotLoop`:

        out, ran = <the whole loop's product, added to acc>
        if ran: acc = out
        else: <the loop as written>

    or, where the loop's result is only stored (`epilogue`), the store fused into the pipeline's own:

        out, ran = <the whole loop's product, added to acc, stored>
        <the scalar statements between the loop and its store>
        if not ran: <the loop as written>; <its store>

    and return why each other loop holding a dot was left as it is, by the dot's cid (for the plan). Elsewhere
    nothing changes."""
    if arch != PIPELINE_ARCH:
        return {}
    numbering = ir.Numbering(program)
    refused: dict[int, str] = {}

    def visit(body: list[ir.Stmt]) -> None:
        for s in list(body):
            for region in ir.regions(s):
                visit(region)
            if not isinstance(s, ir.ForRange) or not any(isinstance(t, TileDot) for t in ir.walk(s.body)):
                continue
            found = match(s, program)
            if isinstance(found, KLoop):
                (bm, bk), bn = found.dot.a.type.shape, found.dot.b.type.shape[1]
                depth = stages(bm, bn, bk, found.dot.a.type.dtype.itemsize)
                if depth:
                    at = body.index(s)
                    fused = epilogue(body, at, found, program)
                    end = at + 1 if fused is None else body.index(fused.store) + 1
                    body[at:end] = _pipelined(found, depth, fused, numbering)
                    continue
                found = f"not even 2 stages of {bm}x{bk} and {bk}x{bn} tiles fit in {STAGE_BUDGET} bytes"
            for t in ir.walk(s.body):
                if isinstance(t, TileDot):
                    refused[t.cid] = found

    visit(program.body)
    return refused


@dataclass(frozen=True)
class Epilogue:
    """The store of a K loop's result that its pipeline can do itself (`epilogue`): the store, the scalar
    statements between the loop and it, and whether the accumulator starts as zeros."""

    store: TileStore2D
    between: list[ir.Stmt]
    acc_zero: bool


def epilogue(body: list[ir.Stmt], at: int, found: KLoop, program: ir.Program) -> Epilogue | None:
    """Where the loop `body[at]` is followed (past scalar statements) by `tile.store(c, (r, col), acc, valid=(M - r,
    N - col))` of the operands' own r, col, M and N, without a mask, and `acc` is read nowhere else after the loop:
    that store, which the pipeline then does from its shared memory (rows of float4: the accumulator's own
    fragment, item by item, is slow to store and holds registers while the pipeline runs), else None."""
    acc, (bn,) = found.dot.acc, found.dot.b.type.shape[1:]
    between = []
    for s in body[at + 1 :]:
        if isinstance(s, TileStore2D):
            break
        if not isinstance(s, ir.ScalarOp):
            return None
        between.append(s)
    else:
        return None
    if s.tile != acc or s.mask is not None or (s.row, s.col) != (found.a.offset, found.b.offset) or bn % 4:
        return None
    made = _definitions(body)
    for valid, operand in ((s.valid_rows, found.a), (s.valid_cols, found.b)):
        if operand.extent is None or _difference(valid, made) != (operand.extent, operand.offset):
            return None
    if acc.name in _read_after(program, found.loop, s):
        return None
    return Epilogue(s, between, _starts_zero(body[:at], acc))


def _starts_zero(before: list[ir.Stmt], v: ir.Var) -> bool:
    """Whether `v` is zeros after `before` (straight-line: its last definition there, through copies, a
    `tile.zeros`)."""
    for s in reversed(before):
        if any(v in ir.defs(t) for t in ir.walk([s])):
            if isinstance(s, ir.Copy) and isinstance(s.src, ir.Var):
                return _starts_zero(before[: before.index(s)], s.src)
            return isinstance(s, TileFull) and isinstance(s.value, ir.Lit) and s.value.value == 0
    return False


def _pipelined(found: KLoop, depth: int, fused: Epilogue | None, numbering: ir.Numbering) -> list[ir.Stmt]:
    """The statements standing for `found.loop`, and its store where `fused` (see `pipeline_k_loops`)."""
    loop, acc = found.loop, found.dot.acc
    out, ran = numbering.temp(acc.type), numbering.temp(BOOL)
    a, b = found.a.load, found.b.load
    bk = found.dot.a.type.shape[1]
    pipelined = TileDotLoop(
        out,
        ran,
        a.array,
        b.array,
        acc,
        found.a.offset,
        found.b.offset,
        found.a.extent,
        found.b.extent,
        found.k,
        None if fused is None else fused.store.array,
        bk,
        depth,
        fused is not None and fused.acc_zero,
    )
    if fused is None:
        take = ir.If(ran, [numbering.place(ir.Copy(acc, out), loop)], [loop])
        return [numbering.place(pipelined, loop), numbering.place(take, loop)]
    take = ir.If(ran, [], [loop, fused.store])
    return [numbering.place(pipelined, loop), *fused.between, numbering.place(take, loop)]


def dot_spec(s: TileDotLoop, threads: int, arch: str) -> GemmSpec:
    """The block GEMM of one step of the loop `s` replaced (its dot's)."""
    (bm, bn), dtype = s.out.type.shape, s.a.type.dtype
    return product_spec(bm, bn, s.bk, dtype, False, threads, arch)


def pipeline_spec(s: TileDotLoop, threads: int, arch: str) -> PipelineSpec:
    """The pipelined GEMM of `s`: its dot's block shape and precisions, `a` and `b` row-major as the loop's loads read
    them from global memory (the dot's own spec keeps `b` column-major in *its* shared memory; the pipeline's
    arrangements say how the arrays lie in global memory, the layout of TMA's descriptors)."""
    return PipelineSpec(replace(dot_spec(s, threads, arch), arrangement=GLOBAL_ARRANGEMENT), s.depth)


def stage_bytes(s: TileDotLoop) -> int:
    """The bytes of `s`'s stages of operand tiles in shared memory (the library adds the stages' barriers)."""
    (bm, bn), size = s.out.type.shape, s.a.type.dtype.itemsize
    return s.depth * (bm * s.bk + s.bk * bn) * size


def _ready(cid: int) -> str:
    """The C++ function saying whether the pipeline can run a product of these operands at all (`pipelinable`
    less the block's own conditions): the same in the prepare kernel, which then builds the device pipeline, and
    in the program, which then uses it."""
    return (
        f"__device__ __forceinline__ bool coop_dotloop_ready_{cid}(const void* a, long long a_rows, long long a_cols,"
        " long long lda, const void* b, long long b_rows, long long b_cols, long long ldb, long long m, long long n,"
        " long long k, int size) {\n"
        f"  const bool aligned = (reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b))"
        f" % {TMA_BYTES} == 0\n"
        f"      && lda > 0 && ldb > 0 && (lda * size) % {TMA_BYTES} == 0 && (ldb * size) % {TMA_BYTES} == 0;\n"
        "  return aligned && 1 <= m && 1 <= n && 1 <= k && m <= a_rows && n <= b_cols && k <= a_cols && k <= b_rows;\n"
        "}\n"
    )


def _value(v: ir.Value | None, otherwise: str) -> str:
    """`v` as the prepare kernel spells it (a kernel parameter by its name, a literal), `otherwise` for None."""
    if v is None:
        return otherwise
    return repr(int(v.value)) if isinstance(v, ir.Lit) else v.name


def _store_c(s: TileDotLoop, w, e: str, items: int) -> str:
    """The shim's fused store (`Epilogue`): the accumulator's items added to the product in shared memory (unless
    it starts as zeros), then the block's (BM, BN) tile of `c` written from there in rows of float4 (single floats
    at ragged edges or where `c` is not 16-byte aligned), rows below `m` and columns below `n` (and `c`'s own)."""
    (bm, bn), pc = s.out.type.shape, ArrayArg(s.c, "c").parts
    m = "m" if s.m is not None else ArrayArg(s.a, "a").parts.shapes[0]
    n = "n" if s.n is not None else ArrayArg(s.b, "b").parts.shapes[1]
    ld, unit = pc.strides[0], pc.strides[1]
    add = (
        ""
        if s.acc_zero
        else f"  for (int i = 0; i < {items}; ++i) {{\n    const int e = {e};\n"
        f"    if (e < {bm * bn}) staged[e] += acc_items[i];\n  }}\n  __syncthreads();\n"
    )
    return add + (
        f"  const long long rows = min(min((long long)({m}), {pc.shapes[0]}) - row, {bm}LL);\n"
        f"  const long long cols = min(min((long long)({n}), {pc.shapes[1]}) - col, {bn}LL);\n"
        f"  float* corner = c + {pc.off} + row * {ld} + col * {unit};\n"
        f"  const bool vec = {unit} == 1 && {ld} % 4 == 0 && reinterpret_cast<unsigned long long>(corner) % 16 == 0;\n"
        f"  for (int q = int(threadIdx.x); q < {bm * bn // 4}; q += {w.threads}) {{\n"
        f"    const int i = q / {bn // 4}, j = q % {bn // 4} * 4;\n"
        "    if (i >= rows) break;\n"
        "    const float4 v = reinterpret_cast<const float4*>(staged)[q];\n"
        f"    float* to = corner + i * {ld} + j * {unit};\n"
        "    if (vec && j + 4 <= cols) {\n      *reinterpret_cast<float4*>(to) = v;\n    } else {\n"
        f"      if (j < cols) to[0] = v.x;\n      if (j + 1 < cols) to[{unit}] = v.y;\n"
        f"      if (j + 2 < cols) to[2 * {unit}] = v.z;\n      if (j + 3 < cols) to[3 * {unit}] = v.w;\n    }}\n"
        "  }\n"
    )


def lower_pipelined(s: TileDotLoop, w) -> ShimCall:
    """The shim of `s`: whether this block can run the pipeline (`_ready` and its tile at a whole tile index inside
    the product), then its tile pipeline over the stages (the TempStorage) with the device pipeline the prepare
    kernel built in the launch state, the K loop (`execute`), the accumulator through the stages' shared memory
    (the library's copy, row-major, then each item of `out` at its element: each side's own map) added to `acc`.
    Also the prepare kernel's part: `s`'s device pipeline built from the kernel's arguments, where `_ready`."""
    (bm, bn), cid = s.out.type.shape, s.cid
    t = w.pipeline(pipeline_spec(s, w.threads, w.arch))
    if t.threads != w.threads:
        raise CompileError(f"cuBLASDx's pipeline of {bm}x{bn}x{s.bk} wants {t.threads} threads, not {w.threads}")
    w.helper(gemm_pipeline.DEVICE_TYPES)
    w.helper(t.declarations())
    w.helper(_ready(cid))
    # (whole 128-byte lines: the shim acquires the device pipeline line by line for the tensormap proxy)
    state = w.launch_state(-(-t.device_bytes // 128) * 128, max(t.device_align, 128))
    size = s.a.type.dtype.itemsize
    ab = cxx_name(s.a.type.dtype)
    pa, pb = ArrayArg(s.a, "a").parts, ArrayArg(s.b, "b").parts
    args = [ArrayArg(s.a, "a"), ArrayArg(s.b, "b"), ValueArg(s.row, "row"), ValueArg(s.col, "col")]
    args += [ValueArg(v, name) for v, name in ((s.m, "m"), (s.n, "n")) if v is not None]
    args.append(ValueArg(s.k, "k"))
    args += [] if s.c is not None and s.acc_zero else [TileArg(s.acc, "acc_items")]
    args += [ArrayArg(s.c, "c")] if s.c is not None else [TileArg(s.out, "out_items")]
    call = ShimCall(f"coop_dotloop_{cid}", (*args, OutArg(s.ran, "ran"), LAUNCH_STATE))
    m = "m" if s.m is not None else pa.shapes[0]
    n = "n" if s.n is not None else pb.shapes[1]
    items, e = w.layout(s.out).items_per_thread, w.element_index(s.out)
    fields = f" alignas({t.buffer_align}) char stages[{max(t.buffer_bytes, bm * bn * 4)}];"
    prelude = f"struct coop_dotloop_{cid}_t {{ struct TempStorage {{{fields} }}; }};\n"
    body = (
        f"  const {ab}* pa = a + {pa.off};\n  const {ab}* pb = b + {pb.off};\n"
        f"  const bool go = coop_dotloop_ready_{cid}(pa, {pa.shapes[0]}, {pa.shapes[1]}, {pa.strides[0]}, pb,"
        f" {pb.shapes[0]}, {pb.shapes[1]}, {pb.strides[0]}, {m}, {n}, k, {size})\n"
        f"      && row >= 0 && row < {m} && row % {bm} == 0 && col >= 0 && col < {n} && col % {bn} == 0;\n"
        "  *ran = go;\n"
        + (
            "  if (!go) return;\n"
            if s.c is not None
            else f"  if (!go) {{\n    for (int i = 0; i < {items}; ++i) out_items[i] = acc_items[i];\n"
            "    return;\n  }\n"
        )
        + w.storage_ref(cid)
        + f"  alignas({t.tile_align}) char tile_storage[{t.tile_bytes}];\n"
        f"  alignas({t.acc_align}) char acc_storage[{t.acc_bytes}];\n"
        f"  unsigned char* device = {LAUNCH_STATE.name} + {state};\n"
        "  coop_dx_handle dp{device}, tp{tile_storage}, acc{acc_storage};\n"
        "  // (the prepare kernel wrote the descriptors through the generic proxy; TMA reads them through the\n"
        "  // tensormap proxy)\n"
        f"  for (int at = 0; at < {t.device_bytes}; at += 128)\n"
        '    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" :: "l"(device + at) : "memory");\n'
        f"  int tm = int(row / {bm}), tn = int(col / {bn});\n"
        f"  {t.create_tile}(dp, tp, s.temp.stages, &tm, &tn);\n"
        f"  {t.create_acc}(acc);\n"
        f"  {t.execute}(tp, acc);\n"
        "  __syncthreads();  // (every stage consumed: the accumulator goes where they were)\n"
        "  float* staged = reinterpret_cast<float*>(s.temp.stages);\n"
        f"  {t.store_shared}(acc, coop_dx_handle{{staged}});\n"
        "  __syncthreads();\n"
        + (
            _store_c(s, w, e, items)
            if s.c is not None
            else f"  for (int i = 0; i < {items}; ++i) {{\n"
            f"    const int e = {e};\n"
            f"    out_items[i] = acc_items[i] + (e < {bm * bn} ? staged[e] : 0.0f);\n  }}\n"
        )
        + f"  {t.destroy_acc}(acc);\n"
        f"  {t.destroy_tile}(tp);\n"
        "  __syncthreads();  // (the stages' memory is the TempStorage of what runs next)\n"
    )
    w.define(call, w.storage(cid, f"coop_dotloop_{cid}_t", prelude=prelude), body)
    a = ArrayArg(s.a, s.a.name).parts
    b = ArrayArg(s.b, s.b.name).parts
    m, n, k = _value(s.m, a.shapes[0]), _value(s.n, b.shapes[1]), _value(s.k, "")
    w.prepare(
        f"  {{  // the device pipeline of the K loop of collective {cid}\n"
        f"    if (coop_dotloop_ready_{cid}({a.ptr}, {a.shapes[0]}, {a.shapes[1]}, {a.strides[0]}, {b.ptr},"
        f" {b.shapes[0]}, {b.shapes[1]}, {b.strides[0]}, {m}, {n}, {k}, {size})) {{\n"
        f"      {t.create_device}(coop_dx_handle{{{LAUNCH_STATE.name} + {state}}},"
        f" coop_dx_matrix{{{a.ptr}, {m}, {k}, {a.strides[0]}}}, coop_dx_matrix{{{b.ptr}, {k}, {n}, {b.strides[0]}}});\n"
        '      asm volatile("fence.proxy.tensormap::generic.release.gpu;" ::: "memory");\n'
        "    }\n  }\n"
    )
    return call
