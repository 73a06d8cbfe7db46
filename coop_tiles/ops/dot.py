"""`tile.dot`: the matrix product of 2-D tiles, a block GEMM of cuBLASDx on the GPU.

Two lowerings, the planner choosing (the plan names it). Where the result's group can be arranged as the
library's accumulator (`planner/layout.py`, FRAGMENT: element-wise ops, copies, fills, 2-D loads and
stores; `acc = tile.dot(a, b, acc)` in a loop), the result stays in registers: cuBLASDx's tensor API
(`mathdx.fragment_gemm`), `a` and `b` written by each thread's items into plain shared-memory layouts, one
barrier, then `execute(A, B, C)` adds into the registers; in a loop its two TempStorage alternate from run to
run, so a K loop has one barrier per step and no shared-memory copy of the accumulator (outside loops it runs
once: one TempStorage). Each operand is kept row- or column-major as its tile lies in the threads
(`operand_arrangement`: a thread's run of a row is contiguous there too), its rows padded (`mathdx.padded_lds`),
so that a thread writes each 16 bytes of a run with one store and the library reads them with ldmatrix; the
products of one accumulator share one arrangement (the planner's vote). Otherwise the shared-memory API:

The planner keeps the GEMM's operands and result in one TempStorage region, each at the leading
dimension and alignment cuBLASDx asks for (`runtime/mathdx.py`; NVRTC sizes the struct, like
CUB's). The shim writes each thread's items of `a`, `b` and `acc` (zeros without one) there at
their elements' places, synchronises, calls the library's device function (`c = a @ b + c`, the
whole block), synchronises, and reads each thread's items of the result back. Any M, N and K: the
library takes shapes that are not multiples of its MMA's.

An operand given as `u.T` is read in place, in either lowering (`read_transposes_in_place`, the op's
rewrite): the shim writes each of `u`'s items at the operand's coordinates swapped, so the transpose costs
no exchange, no shared memory and no barrier.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from .. import tile
from ..dtypes import bfloat16, cxx_name, float16, float32
from ..errors import CompileError, TileTypeError
from ..lang import ir
from ..lang.types import TileType
from ..planner.layout import REENTRANT, SYNCS, WHOLE, Fragment
from ..runtime import mathdx
from ..runtime.mathdx import GemmSpec
from .base import PARITY, ShimCall, TileArg, TileOp, register
from .options import Option

#: operand dtype -> (cuBLASDx precision of a and b, of the result; the result's dtype)
_PRECISIONS = {
    float16: ("f16", "f32", float32),
    bfloat16: ("bf16", "f32", float32),
    float32: ("f32", "f32", float32),
    np.dtype(np.float64): ("f64", "f64", np.dtype(np.float64)),
}
#: how the shim keeps each operand in shared memory, its leading dimension the library's: a (M, K) and c (M, N)
#: row-major, b (K, N) column-major, so that both operands of each MMA are contiguous along K (mma.sync's fragments
#: load as pairs; a row-major b is read one 16-bit element at a time)
ARRANGEMENT = ("row", "col", "row")


@dataclass
class TileDot(ir.Collective, defs="out", uses="a b acc", attrs="tf32 transposed"):
    """`out = a @ b (+ acc)`; `tf32`: float32 operands may be rounded to tf32 (tensor cores); `transposed`:
    whether `a` and `b` are held transposed ((True, False): `out = a.T @ b`; set by the GPU rewrite only)."""

    out: ir.Var
    a: ir.Var
    b: ir.Var
    acc: ir.Var | None
    tf32: bool
    transposed: tuple[bool, bool] = (False, False)


def operand_shapes(s: TileDot) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of `a` and `b` as multiplied, (M, K) and (K, N), whether held transposed or not."""
    return tuple(v.type.shape[::-1] if t else v.type.shape for v, t in zip((s.a, s.b), s.transposed))


def result_dtype(dt: np.dtype) -> np.dtype:
    """The dtype of the product of `dt` tiles (float32 for 16-bit and 32-bit floats)."""
    return _PRECISIONS[dt][2]


def gemm_spec(s: TileDot, threads: int, arch: str, arrangement: tuple[str, str, str] = ARRANGEMENT) -> GemmSpec:
    """The block GEMM that runs `s` with `threads` threads per block on `arch`."""
    (m, k), (_, n) = operand_shapes(s)
    return product_spec(m, n, k, s.a.type.dtype, s.tf32, threads, arch, arrangement)


def product_spec(
    m: int,
    n: int,
    k: int,
    dtype: np.dtype,
    tf32: bool,
    threads: int,
    arch: str,
    arrangement: tuple[str, str, str] = ARRANGEMENT,
) -> GemmSpec:
    """The block GEMM of (m, k) @ (k, n) `dtype` tiles (`tf32`: float32 ones on tensor cores), its operands in
    shared memory as `arrangement` says."""
    ab, c, _ = _PRECISIONS[dtype]
    ab = "tf32" if tf32 and ab == "f32" else ab
    return GemmSpec(m, n, k, (ab, ab, c), arrangement, threads, arch)


def operand_arrangement(transposed: tuple[bool, bool]) -> tuple[str, str, str]:
    """The arrangements in shared memory in which a product's operands are written a run at a time, given which
    are held transposed (`TileDot.transposed`): a tile's rows lie along its threads' runs, so an operand held as
    multiplied is row-major and one held transposed (`u.T`, read in place) column-major."""
    return ("col" if transposed[0] else "row", "col" if transposed[1] else "row", "row")


def fragment_key(spec: GemmSpec) -> GemmSpec:
    """What the accumulators of two products must share to be one register arrangement, the operands'
    arrangements aside (the group's vote sets them: `LayoutContext.offer_fragment`)."""
    return replace(spec, arrangement=())


def offer_accumulator(ctx, out: ir.Var, spec: GemmSpec, operands: tuple[str, str, str]) -> None:
    """Offer `out`'s group the register accumulator of `spec`, for the operand arrangement the group chooses,
    voting for `operands`."""
    ctx.offer_fragment(out, fragment_key(spec), lambda chosen: fragment(replace(spec, arrangement=chosen)), operands)


@register
class Dot(TileOp):
    publics = (tile.dot,)
    stmt = TileDot
    options = (Option("allow_tf32", (False, True)),)

    def build(
        self, front, public, /, a, b, acc=None, *, allow_tf32=False
    ):  # (`b` is the stub's: the front end is `front`)
        x, y = front.tile(a, "a"), front.tile(b, "b")
        if x.type.ndim != 2 or y.type.ndim != 2:
            raise TileTypeError(f"tile.dot multiplies 2-D tiles, got shapes {x.type.shape} and {y.type.shape}")
        if x.type.dtype != y.type.dtype:
            raise TileTypeError(f"tile.dot needs a and b of one dtype, got {x.type.dtype.name} and {y.type.dtype.name}")
        if x.type.dtype not in _PRECISIONS:
            names = ", ".join(d.name for d in _PRECISIONS)
            raise TileTypeError(f"tile.dot multiplies {names} tiles, got {x.type.dtype.name}")
        (m, k), (k2, n) = x.type.shape, y.type.shape
        if k != k2:
            raise TileTypeError(f"tile.dot of shapes {x.type.shape} and {y.type.shape}: a's columns must be b's rows")
        out = TileType(result_dtype(x.type.dtype), m * n, (m, n))
        z = front.optional(acc)
        if z is not None:
            z = front.tile(z, "acc")
            if z.type.shape != out.shape or z.type.dtype != out.dtype:
                raise TileTypeError(
                    f"tile.dot's acc must be a {out.dtype.name} tile of shape {out.shape}, "
                    f"got a {z.type.dtype.name} tile of shape {z.type.shape}"
                )
        tf32 = front.constant(allow_tf32, "allow_tf32", bool)
        result = front.temp(out)
        front.emit(TileDot(result, x, y, z, tf32))
        return result

    def interpret(self, s: TileDot, frame) -> None:
        out = s.out.type.dtype
        x, y = (np.asarray(frame.get(v)).astype(out) for v in (s.a, s.b))  # (16-bit floats: exactly)
        x, y = (v.T if t else v for v, t in zip((x, y), s.transposed))
        value = np.matmul(x, y)
        if s.acc is not None:
            value = value + np.asarray(frame.get(s.acc), out)
        frame.env[s.out.name] = value.astype(out)

    def layout(self, s: TileDot, ctx) -> None:
        if not mathdx.available():
            return
        spec = gemm_spec(s, ctx.threads, ctx.arch)
        ctx.join([s.out, *([s.acc] if s.acc is not None else [])])
        offer_accumulator(ctx, s.out, spec, operand_arrangement(s.transposed))

    def takes_fragments(self, s: TileDot, var: ir.Var) -> bool:
        return True  # (the result and acc: the library's own arrangement; a and b: written by element index)

    def rewrite(self, program: ir.Program, debug: bool, arch: str) -> None:
        read_transposes_in_place(program)

    def choose(self, s: TileDot, ctx):
        frag = ctx.tiles[s.out.name].fragment
        spec = gemm_spec(s, ctx.threads, "", ARRANGEMENT if frag is None else frag.operands)
        label = f"dot {spec}" + "".join(
            f", {name} = {ir.label(v)}.T read in place" for name, v, t in zip("ab", (s.a, s.b), s.transposed) if t
        )
        if frag is not None:
            # in a loop, two TempStorage alternate (no barrier before the next run); run once, one suffices
            looped = ctx.depths.get(s.cid, 0) > 0
            how = f"BLAS execute (registers; a, b padded in shared memory, {2 if looped else 1} buffer{'s' * looped})"
            return ctx.choice(s, label, "cuBLASDx", how, sync=REENTRANT if looped else SYNCS)
        return ctx.choice(s, label, "cuBLASDx", "BLAS execute (shared memory)", sync=SYNCS)

    def lower(self, s: TileDot, w) -> ShimCall:
        frag = w.layout(s.out).fragment
        if frag is not None:
            return lower_registers(s, w, gemm_spec(s, w.threads, w.arch, frag.operands))
        spec = gemm_spec(s, w.threads, w.arch)
        traits = w.gemm(spec)
        operands = (s.a, s.b, s.out)
        shapes = [*operand_shapes(s), s.out.type.shape]  # (as multiplied: a `.T` operand is held the other way)
        types = [cxx_name(v.type.dtype) for v in operands]
        # a row-major (r, c) operand takes r leading dimensions, a column-major one c
        fields = "".join(
            f" alignas({al}) {t} {name}[{shape[how == 'col'] * ld}];"
            for name, t, shape, ld, al, how in zip("abc", types, shapes, traits.lds, traits.alignments, ARRANGEMENT)
        )
        prelude = f"struct coop_gemm_{s.cid} {{ struct TempStorage {{{fields} }}; }};\n"
        w.helper(f'extern "C" __device__ void {traits.symbol}(void*, void*, void*, void*, void*);\n')
        args = [TileArg(s.a, "a_items"), TileArg(s.b, "b_items")]
        args += [TileArg(s.acc, "acc_items")] if s.acc is not None else []
        call = ShimCall(f"coop_dot_{s.cid}", (*args, TileArg(s.out, "out_items")))

        def put(var: ir.Var, items: str, field: str, ld: int, arrangement: str, transposed: bool = False) -> str:
            rows, cols = var.type.shape
            n = w.layout(var).items_per_thread
            at = f"r * {ld} + c" if arrangement == "row" else f"c * {ld} + r"
            return (
                f"  for (int i = 0; i < {n}; ++i) {{\n"
                f"    const int e = {w.element_index(var)};\n"
                f"    if (e < {rows * cols}) {{ {element_coordinates(var, transposed)}"
                f" s.temp.{field}[{at}] = {items}[i]; }}\n  }}\n"
            )

        lda, ldb, ldc = traits.lds
        how_a, how_b, how_c = ARRANGEMENT
        zero = (
            f"  for (int j = threadIdx.x; j < {shapes[2][0] * ldc}; j += {w.threads}) s.temp.c[j] = 0;\n"
            if s.acc is None
            else put(s.acc, "acc_items", "c", ldc, how_c)
        )
        rows, cols = shapes[2]
        body = (
            w.storage_ref(s.cid)
            + put(s.a, "a_items", "a", lda, how_a, s.transposed[0])
            + put(s.b, "b_items", "b", ldb, how_b, s.transposed[1])
            + zero
            + "  __syncthreads();\n"
            + f"  {types[2]} alpha = 1, beta = 1;\n"
            + f"  {traits.symbol}(&alpha, s.temp.a, s.temp.b, &beta, s.temp.c);\n"
            + "  __syncthreads();\n"
            + f"  for (int i = 0; i < {w.layout(s.out).items_per_thread}; ++i) {{\n"
            + f"    const int e = {w.element_index(s.out)};\n"
            + f"    if (e < {rows * cols}) out_items[i] = s.temp.c[(e / {cols}) * {ldc} + e % {cols}];\n  }}\n"
        )
        w.define(call, w.storage(s.cid, f"coop_gemm_{s.cid}", prelude=prelude), body)
        return call


def fragment(spec: GemmSpec) -> Fragment | None:
    """The arrangement of `spec`'s accumulator in registers (a libmathdx call, disk-cached); None where the
    tensor API refuses `spec` (the shared-memory API then runs it)."""
    try:
        traits = mathdx.fragment_gemm(spec)[0]
    except CompileError:
        return None
    return Fragment(spec.m, spec.n, traits.items, traits.map_c, spec.arrangement)


#: the tensor API's shared and register tensors: one pointer, passed by value
_TENSOR = "struct coop_dx_tensor { void* ptr; };\n"


def lower_registers(s: TileDot, w, spec: GemmSpec) -> ShimCall:
    """The shim of a dot whose result and acc stay in registers (see the module's docstring)."""
    t = w.gemm(spec, registers=True)
    frag = w.layout(s.out).fragment
    m, n = spec.m, spec.n
    ab = cxx_name(s.a.type.dtype)
    w.helper(_TENSOR)
    w.helper(
        f'extern "C" __device__ void {t.execute}(coop_dx_tensor, coop_dx_tensor, coop_dx_tensor);\n'
        f'extern "C" __device__ void {t.map_c}(int*, int*, int*);\n'
        f'extern "C" __device__ void {t.active}(void*);\n'
        # the element of this thread's accumulator item i (m * n: padding, and every item of a thread the
        # library leaves out)
        f"__device__ __forceinline__ int {frag.function}(int i) {{\n"
        f"  int r, c, on; {t.map_c}(&i, &r, &c); {t.active}(&on);\n"
        f"  return (on && r < {m} && c < {n}) ? r * {n} + c : {m * n};\n}}\n"
    )
    fields = f" alignas(128) {ab} a[{t.a_bytes // s.a.type.dtype.itemsize}];"
    fields += f" alignas(128) {ab} b[{t.b_bytes // s.b.type.dtype.itemsize}];"
    prelude = f"struct coop_gemm_{s.cid} {{ struct TempStorage {{{fields} }}; }};\n"
    args = [TileArg(s.a, "a_items"), TileArg(s.b, "b_items")]
    args += [TileArg(s.acc, "acc_items")] if s.acc is not None else []
    looped = w.choice(s.cid).sync == REENTRANT
    call = ShimCall(f"coop_dot_{s.cid}", (*args, TileArg(s.out, "out_items"), *([PARITY] if looped else [])))
    how_a, how_b, _ = spec.arrangement
    start = "acc_items[i]" if s.acc is not None else "0"
    body = (
        w.storage_ref(s.cid)
        + (w.alternate() + "  auto& st = s.temp[run];\n" if looped else "  auto& st = s.temp;\n")
        + "  coop_dx_tensor ta{st.a}, tb{st.b}, tc{out_items};\n"
        + put_operand(w, s.a, "a_items", "st.a", t.lda, how_a, s.transposed[0])
        + put_operand(w, s.b, "b_items", "st.b", t.ldb, how_b, s.transposed[1])
        + f"  for (int i = 0; i < {frag.items}; ++i) out_items[i] = {start};\n"
        + "  __syncthreads();\n"
        + f"  {t.execute}(ta, tb, tc);\n"
    )
    w.define(call, w.storage(s.cid, f"coop_gemm_{s.cid}", prelude=prelude, copies=2 if looped else None), body)
    return call


#: the C++ type of a vector store of each width (bytes)
_WORDS = {16: "uint4", 8: "uint2", 4: "unsigned"}


def put_operand(w, var: ir.Var, items: str, to: str, ld: int, arrangement: str, transposed: bool) -> str:
    """C++ writing each thread's items of operand tile `var` into `to`, a plain `arrangement` layout of leading
    dimension `ld` (`var` held transposed where `transposed`): a run of a row at a time where the held rows lie
    along the layout's contiguous axis and each thread's runs allow (`run_items`), else item by item."""
    rows, cols = var.type.shape
    size = rows * cols
    n = w.layout(var).items_per_thread
    itemsize = var.type.dtype.itemsize
    vec = run_items(w.layout(var), cols, itemsize) if (arrangement == "row") != transposed else 1
    if vec > 1:  # (held element (r, c) at r * ld + c: a run of c is contiguous)
        word = _WORDS[vec * itemsize]
        return (
            f"  for (int i = 0; i < {n}; i += {vec}) {{\n"
            f"    const int e = {w.element_index(var)};\n"
            f"    if (e < {size}) {{ {word} v; memcpy(&v, &{items}[i], sizeof(v));"
            f" *reinterpret_cast<{word}*>(&{to}[(e / {cols}) * {ld} + e % {cols}]) = v; }}\n  }}\n"
        )
    at = f"r * {ld} + c" if arrangement == "row" else f"c * {ld} + r"
    return (
        f"  for (int i = 0; i < {n}; ++i) {{\n"
        f"    const int e = {w.element_index(var)};\n"
        f"    if (e < {size}) {{ {element_coordinates(var, transposed)} {to}[{at}] = {items}[i]; }}\n  }}\n"
    )


def run_items(lay, cols: int, itemsize: int) -> int:
    """Items of a thread's row run of a tile laid out as `lay` that move as one vector store (1: none): a power
    of two of at most 16 bytes dividing the run and the row (runs start at multiples of their length)."""
    rs = lay.rows
    if rs is None or rs.holds != WHOLE:
        return 1
    vec = 1
    while vec * 2 * itemsize <= 16 and rs.run % (vec * 2) == 0 and cols % (vec * 2) == 0:
        vec *= 2
    return vec


def element_coordinates(var: ir.Var, transposed: bool) -> str:
    """C++ declaring `r` and `c`, the operand's (row, column) of `var`'s element `e`: swapped where the dot
    reads `var` transposed (each item written at its place in the transpose: no exchange)."""
    cols = var.type.shape[1]
    r, c = ("c", "r") if transposed else ("r", "c")
    return f"int {r} = e / {cols}, {c} = e % {cols};"


def read_transposes_in_place(program: ir.Program) -> None:
    """Make each dot whose operand is `u.T` (through copies: `a = u.T`) read `u` itself, transposed
    (`TileDot.transposed`), and drop the transpose and those copies where nothing else reads them. Only
    variables defined by one statement are followed, so `u` holds at the dot what it held at the transpose."""
    stmts = list(program.walk())
    counts = Counter(v.name for s in stmts for v in ir.defs(s))
    made = {v.name: s for s in stmts for v in ir.defs(s) if counts[v.name] == 1}
    passed: list[ir.Stmt] = []  # the transposes and copies the dots now see past

    def source(v: ir.Var) -> ir.Var | None:
        """The tile whose transpose `v` is, or None."""
        chain = []
        s = made.get(v.name)
        while isinstance(s, ir.Copy) and isinstance(s.src, ir.Var):
            chain.append(s)
            s = made.get(s.src.name)
        if not (isinstance(s, ir.TileRemap) and s.kind == ir.TRANSPOSE and s.src.name in made):
            return None
        passed.extend([*chain, s])
        return s.src

    for s in stmts:
        if isinstance(s, TileDot):
            found = [source(v) for v in (s.a, s.b)]
            s.a, s.b = (u if u is not None else v for u, v in zip(found, (s.a, s.b)))
            s.transposed = tuple(t != (u is not None) for t, u in zip(s.transposed, found))
    dead = _unread(program, passed)
    while dead:
        _remove(program.body, dead)
        dead = _unread(program, passed)


def _unread(program: ir.Program, candidates: list[ir.Stmt]) -> set[int]:
    """The ids of the statements among `candidates`, still in `program`, whose result nothing reads."""
    stmts = list(program.walk())
    read = {v.name for s in stmts for v in (*ir.uses(s), *ir.refs(s))}
    present = {id(s) for s in stmts}
    return {id(s) for s in candidates if id(s) in present and all(v.name not in read for v in ir.defs(s))}


def _remove(body: list[ir.Stmt], ids: set[int]) -> None:
    """Remove the statements of `ids` from `body` and its nested regions."""
    body[:] = [s for s in body if id(s) not in ids]
    for s in body:
        for region in ir.regions(s):
            _remove(region, ids)
