"""The program body, and each combine function, as readable Numba Python source. This is the
only module that writes Numba code.

Each tile is a `cuda.local.array` of its items per thread (16-bit floats as their bits), or,
when the plan keeps it in shared memory, an array over this thread's bytes of its region;
element-wise operations are loops over those items, consecutive ones one loop (unrolled by
LLVM, so register tiles stay in registers; few loops are few basic blocks, which Numba's compile
time grows with the square of); collectives call their C++ shims as their `ShimCall` says, with
the TempStorage buffer and the planned byte offset; `cuda.syncthreads()` goes exactly where the
plan puts barriers. Arrays and views are a pointer, an element offset, and per-axis shapes and
strides.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from ..dtypes import bfloat16, compute_dtype, float32, is_half, storage_dtype
from ..lang import ir
from ..lang.types import ArrayType, ScalarType, TileType
from ..ops.base import (
    LAUNCH_STATE,
    ArrayArg,
    BodyStart,
    LaunchArg,
    OutArg,
    ShimCall,
    StateArg,
    TileArg,
    ValueArg,
    element_op,
    op_of,
)
from ..planner.carve import tile_stride
from ..planner.plan import Plan
from .params import ArrayParts, kernel_params, numba_storage
from .shims import combine_symbol, element_index

BOOL = np.dtype(np.bool_)


@dataclass(frozen=True)
class ShimDecl:
    """A device function as Numba declares it: name, return type and argument types (Numba names)."""

    name: str
    restype: str
    argtypes: tuple[str, ...]


#: the 16-bit float conversions the shim translation unit defines
HALF_DECLS = (
    ShimDecl("coop_f16_to_f32", "float32", ("uint16",)),
    ShimDecl("coop_f32_to_f16", "uint16", ("float32",)),
    ShimDecl("coop_bf16_to_f32", "float32", ("uint16",)),
    ShimDecl("coop_f32_to_bf16", "uint16", ("float32",)),
)


@dataclass(frozen=True)
class BodySource:
    source: str
    function: str
    shims: tuple[ShimDecl, ...]
    #: Numba type names of the function's parameters.
    param_types: tuple[str, ...]
    #: the C symbol it is compiled under
    abi_name: str = ""


def _tag(dt: np.dtype) -> str:
    return "bf16" if dt == bfloat16 else "f16"


def numba_name(dt: np.dtype) -> str:
    """The NumPy constructor of a value of `dt` in the body (`np.float32`; 16-bit floats as bits)."""
    dt = storage_dtype(dt)
    return "np.bool_" if dt == BOOL else f"np.{dt.name}"


def literal(value: object, dt: np.dtype) -> str:
    if dt == BOOL:
        return "True" if bool(value) else "False"
    if is_half(dt):
        bits = int(np.asarray(value, dtype=np.float64).astype(dt).view(np.uint16))
        return f"np.uint16({bits})"
    if dt.kind == "f":
        v = float(value)  # type: ignore[arg-type]
        text = (
            "np.nan" if math.isnan(v) else ("np.inf" if v == math.inf else ("-np.inf" if v == -math.inf else repr(v)))
        )
        return f"{numba_name(dt)}({text})"
    return f"{numba_name(dt)}({int(value)})"  # type: ignore[call-overload]


def convert(expr: str, src: np.dtype, dst: np.dtype) -> str:
    """`expr` of `src` as a value of `dst` (16-bit floats convert through float32)."""
    if src == dst:
        return expr
    if is_half(src):
        return convert(f"coop_{_tag(src)}_to_f32({expr})", float32, dst)
    if is_half(dst):
        return f"coop_f32_to_{_tag(dst)}({convert(expr, src, float32)})"
    if dst == BOOL:
        return f"({expr} != 0)"
    return f"{numba_name(dst)}({expr})"


def element_expr(op: str, args: list[str], dtypes: list[np.dtype], compute: np.dtype, out: np.dtype) -> str:
    """One element of an element-wise op: operands converted to `compute`, result to `out`."""
    if op == "cast":
        return convert(args[0], dtypes[0], out)
    calc = compute_dtype(compute)
    xs = [convert(convert(x, d, compute), compute, calc) for x, d in zip(args, dtypes)]
    if op == "where":
        xs[0] = convert(args[0], dtypes[0], BOOL)
    definition = element_op(op)
    integer = np.issubdtype(calc, np.integer)
    lower = definition.lower_integer if integer and definition.lower_integer is not None else definition.lower
    expr = lower(xs, lambda v: literal(v, calc))
    if integer and not definition.boolean and calc == out and calc.itemsize < 8:
        # Numba computes integer arithmetic in 64 bits: cast back, so that the result wraps as NumPy's does and a
        # scalar assigned from it keeps its 32-bit type (Numba unifies a variable's types; 64-bit compares and
        # adds cost two or more instructions each)
        return f"{numba_name(out)}({expr})"
    return convert(expr, BOOL if definition.boolean else calc, out)


@dataclass
class _BodyWriter:
    plan: Plan | None
    lines: list[str] = field(default_factory=list)
    shims: list[ShimDecl] = field(default_factory=lambda: list(HALF_DECLS))
    arrays: dict[str, ArrayParts] = field(default_factory=dict)
    calls: dict[int, ShimCall] = field(default_factory=dict)
    #: what an op with grid-wide state has the body do first (a chained scan's ticket is its program id)
    start: BodyStart | None = None

    def line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def items(self, var: ir.Var) -> int:
        return self.plan.tiles[var.name].items_per_thread

    def operand(self, v: ir.Value, element: bool) -> str:
        if isinstance(v, ir.Lit):
            return literal(v.value, v.type.dtype)
        if element and isinstance(v.type, TileType):
            return f"{v.name}[i]"
        return v.name

    def declare(self, body: list[ir.Stmt], depth: int) -> None:
        """Every variable at the top of the function (Numba needs one type per name), but the scalars and views
        that are temporaries: defined once, before every use (the IR's rule), by a statement that every thread
        runs (an element read runs in thread 0 alone when only thread 0 needs it), they need no declaration, and a
        declaration would define them twice (Numba's SSA pass then rewrites each of them through the whole body)."""
        declared: set[str] = set()
        for s in ir.walk(body):
            for out in ir.defs(s):
                if out.name in declared or isinstance(s, (ir.Param, ir.ForRange)):  # (they bind their own)
                    continue
                if out.kind == ir.TEMP and not isinstance(out.type, TileType) and not isinstance(s, ir.ArrayRead):
                    continue
                declared.add(out.name)
                if isinstance(out.type, TileType) and self.plan is not None and out.name in self.plan.carve.tiles:
                    region, lay = self.plan.carve.tiles[out.name], self.plan.tiles[out.name]
                    where = f"np.int64({region.offset}) + tid * {tile_stride(lay)}"
                    self.line(
                        depth,
                        f"{out.name} = shared_tile(smem, {where}, np.int64({lay.items_per_thread}), "
                        f"{numba_name(out.type.dtype)})",
                    )
                elif isinstance(out.type, TileType):
                    self.line(depth, f"{out.name} = cuda.local.array({self.items(out)}, {numba_name(out.type.dtype)})")
                elif isinstance(out.type, ArrayType):
                    self.line(depth, f"{out.name}_ok = False")
                    for n in [f"{out.name}_off", *(f"{out.name}_shape{k}" for k in range(out.type.ndim))]:
                        self.line(depth, f"{n} = np.int64(0)")
                else:
                    self.line(depth, f"{out.name} = {literal(0, out.type.dtype)}")
            if isinstance(s, ir.Collective):
                for a in self.calls[s.cid].args:
                    if isinstance(a, OutArg) and a.var.name + "_out" not in declared:
                        declared.add(a.var.name + "_out")
                        self.line(depth, f"{a.var.name}_out = cuda.local.array(1, {numba_name(a.var.type.dtype)})")
                    elif isinstance(a, StateArg):
                        state = _state_name(s.cid, a)
                        self.line(depth, f"{state} = cuda.local.array(1, np.int32)")
                        self.line(depth, f"{state}[0] = 0")

    def stmts(self, body: list[ir.Stmt], depth: int) -> None:
        """`body`'s statements, those that make a tile item by item gathered into one loop over the items per count
        of items until a statement of another kind or a barrier: Numba's compile time grows with the square of a
        body's basic blocks, and each loop is several. A gathered statement reads item i of its operands only,
        tiles of its own count of items, so item i of each loop runs the statements in order, as long as no two
        tiles of the loops share bytes at different items (`overlap`)."""
        if not body:
            self.line(depth, "pass")
        loops: dict[int, list[str]] = {}  # items per thread: the gathered assignments
        placed: dict[str, tuple[int, ...]] = {}  # the gathered tiles in shared memory (`placements`)
        barriers = self.barrier_positions(body)
        for index, s in enumerate(body):
            barrier = index in barriers
            expr = self.item_expr(s)
            shared = self.placements(s) if expr is not None else {}
            if barrier or expr is None or self.overlap(shared, placed):
                self.item_loops(loops, depth)
                placed.clear()
            if barrier:
                self.line(depth, "cuda.syncthreads()")
            if expr is not None:
                loops.setdefault(self.items(s.out), []).append(f"{s.out.name}[i] = {expr}")
                placed.update(shared)
            else:
                self.stmt(s, depth)
        self.item_loops(loops, depth)

    def barrier_positions(self, body: list[ir.Stmt]) -> set[int]:
        """The indices of `body`'s statements a `cuda.syncthreads()` goes before: each planned barrier moved up past
        the statements before it that touch neither memory nor the block's other threads (element-wise work in
        registers, scalar arithmetic). Those then run after it, so the values they make are not held across the
        wait: the flags of a select are folded into its bits as they are made, not kept in 32 registers."""
        if self.plan is None:
            return set()
        positions = set()
        for index, s in enumerate(body):
            if self.plan.barrier_before(s):
                while index > 0 and index - 1 not in positions and self.in_registers(body[index - 1]):
                    index -= 1
                positions.add(index)
        return positions

    def in_registers(self, s: ir.Stmt) -> bool:
        """Whether `s` is register work alone: scalar arithmetic, or a tile made item by item none of whose tiles
        is in shared memory."""
        if isinstance(s, ir.ScalarOp):
            return True
        return self.item_expr(s) is not None and not self.placements(s)

    def placements(self, s: ir.Stmt) -> dict[str, tuple[int, ...]]:
        """The tiles `s` names that are in shared memory: (first byte, end, bytes between threads' items, bytes
        of an item)."""
        carve, tiles = self.plan.carve.tiles, self.plan.tiles
        named = {v.name for v in (*ir.defs(s), *ir.uses(s))} & carve.keys()
        return {n: (carve[n].offset, carve[n].end, tile_stride(tiles[n]), tiles[n].itemsize) for n in named}

    @staticmethod
    def overlap(tiles: dict[str, tuple[int, ...]], placed: dict[str, tuple[int, ...]]) -> bool:
        """Whether a tile of `tiles` shares bytes with one of `placed` (reused shared memory) other than item for
        item (an element-wise result written over its operand): one loop would write an item of one before it
        read the other's."""
        pairs = ((a, b) for a in tiles.values() for b in placed.values())
        return any(a[0] < b[1] and b[0] < a[1] and (a[0], *a[2:]) != (b[0], *b[2:]) for a, b in pairs)

    def stmt(self, s: ir.Stmt, depth: int) -> None:
        """One statement, on its own."""
        expr = self.item_expr(s)
        if expr is not None:
            self.item_loops({self.items(s.out): [f"{s.out.name}[i] = {expr}"]}, depth)
        elif isinstance(s, ir.Collective):
            self.call(self.calls[s.cid], s.cid, depth)
        else:
            _HANDLERS[type(s)](self, s, depth)

    def item_expr(self, s: ir.Stmt) -> str | None:
        """Item i of the tile that `s` makes item by item (an element-wise op, a tile copy, a tile constructor's
        `TileOp.item_value`); None for any other statement."""
        out = getattr(s, "out", None)
        if isinstance(s, ir.Collective) or not isinstance(getattr(out, "type", None), TileType):
            return None
        if isinstance(s, ir.TileMap):
            args = [self.operand(a, True) for a in s.args]
            return element_expr(s.op, args, [a.type.dtype for a in s.args], s.compute, out.type.dtype)
        if isinstance(s, ir.Copy):
            return convert(self.operand(s.src, True), s.src.type.dtype, out.type.dtype)
        return None if type(s) in _HANDLERS else op_of(s).item_value(s, self)

    def item_loops(self, loops: dict[int, list[str]], depth: int) -> None:
        """For each count of items, its assignments for each item i (no loop for one item); `loops` emptied."""
        for items, lines in loops.items():
            if items == 1:
                self.line(depth, "i = 0")
            else:
                self.line(depth, f"for i in range({items}):")
            for text in lines:
                self.line(depth + (items > 1), text)
        loops.clear()

    def item_index(self, tile: ir.Var) -> str:
        """Item `i`'s index in `tile`, an int64."""
        lay = self.plan.tiles[tile.name]
        return f"np.int64({element_index(lay, self.plan.block_threads, tid='tid', python=True)})"

    @staticmethod
    def convert(expr: str, src: np.dtype, dst: np.dtype) -> str:
        return convert(expr, src, dst)

    def call(self, c: ShimCall, cid: int, depth: int) -> None:
        """A collective: its shim called as its ShimCall describes."""
        parts, types, after = [], [], []
        for a in c.args:
            if isinstance(a, TileArg):
                parts.append(f"ptr({a.var.name})")
                types.append(f"CPointer({numba_storage(a.var.type.dtype)})")
            elif isinstance(a, ValueArg):
                parts.append(self.operand(a.value, False))
                types.append(numba_storage(a.value.type.dtype))
            elif isinstance(a, ArrayArg):  # (the shim's parameters, `ArrayArg.parts`, in the same order)
                p = self.arrays[a.var.name]
                parts += [p.ptr, p.off, *p.sizes]
                types += [f"CPointer({numba_storage(a.var.type.dtype)})", "int64", *["int64"] * len(p.sizes)]
            elif isinstance(a, StateArg):
                parts.append(f"ptr({_state_name(cid, a)})")
                types.append("CPointer(int32)")
            elif isinstance(a, LaunchArg):
                parts.append(a.name)
                types.append("CPointer(uint8)")
            else:
                assert isinstance(a, OutArg)
                parts.append(f"ptr({a.var.name}_out)")
                types.append(f"CPointer({numba_storage(a.var.type.dtype)})")
                after.append(f"{a.var.name} = {a.var.name}_out[0]")
        region = self.plan.carve.regions.get(cid)
        parts += ["smem", str(region.offset if region else 0)]
        self.shims.append(ShimDecl(c.name, "void", (*types, "CPointer(uint8)", "int64")))
        self.line(depth, f"{c.name}({', '.join(parts)})")
        for text in after:
            self.line(depth, text)

    def address(self, array: ir.Var, indices: tuple[ir.Value, ...]) -> tuple[str, str, str]:
        """(in-range condition, element offset, element expression) of `array[indices]`. Each index is
        checked with one unsigned comparison (a negative index wraps past any extent), and the checks are
        combined without branches, so that those of loop-invariant indices can leave a loop."""
        p = self.arrays[array.name]
        idx = [self.operand(i, False) for i in indices]
        ok = " & ".join(f"(np.uint64({i}) < np.uint64({n}))" for i, n in zip(idx, p.shapes))
        offset = p.offset(idx)
        return ok, offset, f"{p.ptr}[{offset}]"


def _state_name(cid: int, a: StateArg) -> str:
    """The body's variable holding collective `cid`'s state argument `a` (one per collective)."""
    return f"state{cid}_{a.name}"


# ----- generic statements -------------------------------------------------------------------------
def _param(w: _BodyWriter, s: ir.Param, depth: int) -> None:
    if isinstance(s.out.type, ScalarType) and s.out.type.dtype == BOOL:
        w.line(depth, f"{s.out.name} = {s.out.name}_u8 != 0")


def _scalar_op(w: _BodyWriter, s: ir.ScalarOp, depth: int) -> None:
    args = [w.operand(a, False) for a in s.args]
    expr = element_expr(s.op, args, [a.type.dtype for a in s.args], s.compute, s.out.type.dtype)
    w.line(depth, f"{s.out.name} = {expr}")


def _copy(w: _BodyWriter, s: ir.Copy, depth: int) -> None:
    w.line(depth, f"{s.out.name} = {convert(w.operand(s.src, False), s.src.type.dtype, s.out.type.dtype)}")


def _program_id(w: _BodyWriter, s: ir.ProgramId, depth: int) -> None:
    if w.start is not None and s.axis == 0 and not s.count:
        w.shims.append(ShimDecl(w.start.program_id, "int64", ()))
        w.line(depth, f"{s.out.name} = {w.start.program_id}()")
        return
    source = "cuda.gridDim" if s.count else "cuda.blockIdx"
    w.line(depth, f"{s.out.name} = np.int64({source}.{'xyz'[s.axis]})")


def _array_view(w: _BodyWriter, s: ir.ArrayView, depth: int) -> None:
    base = w.arrays[s.array.name]
    k = len(s.indices)
    ok, offset, _ = w.address(s.array, s.indices)
    name = s.out.name
    w.line(depth, f"{name}_ok = {ok}")
    w.line(depth, f"{name}_off = select({name}_ok, {offset}, np.int64(0))")
    shapes = [f"{name}_shape{j}" for j in range(s.out.type.ndim)]
    for j, n in enumerate(shapes):
        w.line(depth, f"{n} = select({name}_ok, {base.shapes[k + j]}, np.int64(0))")
    w.arrays[name] = ArrayParts(base.ptr, f"{name}_off", tuple(shapes), base.strides[k:])


def _array_shape(w: _BodyWriter, s: ir.ArrayShape, depth: int) -> None:
    w.line(depth, f"{s.out.name} = np.int64({w.arrays[s.array.name].shapes[s.axis]})")


def _array_read(w: _BodyWriter, s: ir.ArrayRead, depth: int) -> None:
    ok, _, element = w.address(s.array, s.indices)
    if s.out.name not in w.plan.block_values:  # only thread 0 needs it (the plan orders it as thread 0's)
        w.line(depth, "if tid == 0:")
        depth += 1
    w.line(depth, f"{s.out.name} = {element} if {ok} else {literal(0, s.out.type.dtype)}")


def _array_write(w: _BodyWriter, s: ir.ArrayWrite, depth: int) -> None:
    ok, _, element = w.address(s.array, s.indices)
    w.line(depth, f"if tid == 0 and {ok}:")
    w.line(depth + 1, f"{element} = {w.operand(s.value, False)}")


def _if(w: _BodyWriter, s: ir.If, depth: int) -> None:
    w.line(depth, f"if {w.operand(s.cond, False)}:")
    w.stmts(s.then, depth + 1)
    if s.orelse:
        w.line(depth, "else:")
        w.stmts(s.orelse, depth + 1)


def _for(w: _BodyWriter, s: ir.ForRange, depth: int) -> None:
    bounds = ", ".join(w.operand(v, False) for v in (s.start, s.stop, s.step))
    w.line(depth, f"for {s.var.name} in range({bounds}):")
    w.stmts(s.body, depth + 1)


def _while(w: _BodyWriter, s: ir.While, depth: int) -> None:
    w.line(depth, "while True:")
    w.stmts(s.cond_body, depth + 1)
    w.line(depth + 1, f"if not {w.operand(s.cond, False)}:")
    w.line(depth + 2, "break")
    w.stmts(s.body, depth + 1)


def _return(w: _BodyWriter, s: ir.Return, depth: int) -> None:
    w.line(depth, "return")


def _handlers() -> dict:
    return {
        ir.Param: _param,
        ir.ScalarOp: _scalar_op,
        ir.Copy: _copy,
        ir.ProgramId: _program_id,
        ir.ArrayView: _array_view,
        ir.ArrayShape: _array_shape,
        ir.ArrayRead: _array_read,
        ir.ArrayWrite: _array_write,
        ir.If: _if,
        ir.ForRange: _for,
        ir.While: _while,
        ir.Return: _return,
    }


_HANDLERS = _handlers()


def _start(w: _BodyWriter, start: BodyStart) -> None:
    """The start of a program whose op has grid-wide state (`BodyStart`): its statements again, on
    renamed variables (`<name>_pf`), with program id 0 guessed as the block index (from the last block
    when `descending`), then its calls,
    then `begin` (a chained scan: prefetch its first loads while its ticket is in flight)."""
    renamed = {v.name: dataclasses.replace(v, name=f"{v.name}_pf") for s in start.stmts for v in ir.defs(s)}

    def rename(v: ir.Var) -> ir.Var:
        return renamed.get(v.name, v)

    stmts = [ir.rewrite(s, rename) for s in start.stmts]
    w.declare(stmts, 1)
    for s in stmts:
        if isinstance(s, ir.ProgramId) and s.axis == 0 and not s.count:
            guess = "cuda.gridDim.x - 1 - cuda.blockIdx.x" if start.descending else "cuda.blockIdx.x"
            w.line(1, f"{s.out.name} = np.int64({guess})")  # the guess; the ticket comes after
        else:
            w.stmt(s, 1)
    for s in start.calls_for:
        w.call(start.call(ir.rewrite(s, rename)), -1, 1)
    w.shims.append(ShimDecl(start.begin, "void", ("CPointer(uint8)",)))
    w.line(1, f"{start.begin}(coop_grid_state)")


def generate_body(
    program: ir.Program, plan: Plan, calls: dict[int, ShimCall], function: str, abi_name: str
) -> BodySource:
    """Numba source of `function(smem, *params)`, the program body the C++ entry calls as `abi_name`
    (and, last, the grid-wide state of an op that has a `BodyStart`)."""
    starts = [start for s in program.walk() if (op := op_of(s)) is not None and (start := op.body_start(s, program))]
    w = _BodyWriter(plan, calls=calls, start=starts[0] if starts else None)
    params, param_types = ["smem"], ["CPointer(uint8)"]
    for var in program.params:
        t = var.type
        for p in kernel_params(var.name, t):
            is_bool = isinstance(t, ScalarType) and t.dtype == BOOL
            params.append(f"{p.name}_u8" if is_bool else p.name)
            param_types.append(p.numba)
        if isinstance(t, ArrayType):
            w.arrays[var.name] = ArrayParts.named(var.name, t, off="0")
    if w.start is not None:
        params.append("coop_grid_state")
        param_types.append("CPointer(uint8)")
    if any(isinstance(a, LaunchArg) for c in calls.values() if c is not None for a in c.args):
        params.append(LAUNCH_STATE.name)  # (the launch's own state: the entry passes it last)
        param_types.append("CPointer(uint8)")
    w.line(0, f"def {function}({', '.join(params)}):")
    w.line(1, "tid = np.int64(cuda.threadIdx.x)")
    w.declare(program.body, 1)
    if w.start is not None:
        _start(w, w.start)
    w.stmts(program.body, 1)
    header = "# coop_tiles program body (generated; see .plan for layouts and barriers)\n"
    shims = tuple(dict.fromkeys(w.shims))
    return BodySource(header + "\n".join(w.lines) + "\n", function, shims, tuple(param_types), abi_name)


def generate_combine(combine: ir.Combine) -> BodySource:
    """Numba source of a combine function: operands by value, results through pointers (the C
    functor in the shims calls it inside CUB; LTO inlines it)."""
    w = _BodyWriter(None)
    k = len(combine.result_dtypes)
    results = [f"r{i}" for i in range(k)]
    w.line(0, f"def {combine.name}({', '.join([p.name for p in combine.params] + results)}):")
    w.declare(combine.body, 1)
    w.stmts(combine.body, 1)
    for r, value, dt in zip(results, combine.results, combine.result_dtypes):
        # a bool result goes out as a byte (Numba stores its booleans in bytes; C++'s bool is one)
        stored = w.operand(value, False)
        w.line(1, f"{r}[0] = {convert(stored, dt, np.dtype(np.uint8)) if dt == BOOL else stored}")
    types = [numba_storage(p.type.dtype) for p in combine.params] + [
        f"CPointer({'uint8' if d == BOOL else numba_storage(d)})" for d in combine.result_dtypes
    ]
    source = "# coop_tiles combine function (generated)\n" + "\n".join(w.lines) + "\n"
    return BodySource(source, combine.name, HALF_DECLS, tuple(types), combine_symbol(combine.name))
