"""The program body as readable Numba Python source.

Each tile is a `cuda.local.array` of its items per thread; element-wise operations are
loops over those items (unrolled by LLVM, so tiles stay in registers); collectives call
the C++ shims with the array's data pointer, the TempStorage buffer and the planned byte
offset; `cuda.syncthreads()` goes exactly where the plan puts barriers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..dtypes import numba_name
from ..lang import ir
from ..lang.types import ArrayType, ScalarType, TileType
from ..planner.layout import BLOCKED
from ..planner.plan import Plan

INFIX = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "truediv": "/",
    "floordiv": "//",
    "mod": "%",
    "pow": "**",
    "and": "&",
    "or": "|",
    "xor": "^",
    "lshift": "<<",
    "rshift": ">>",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
    "land": "and",
    "lor": "or",
}
MATH = {
    "exp": "math.exp",
    "log": "math.log",
    "log1p": "math.log1p",
    "sqrt": "math.sqrt",
    "sin": "math.sin",
    "cos": "math.cos",
}


@dataclass(frozen=True)
class ShimDecl:
    """A shim as Numba declares it: name, return type and argument types (Numba type names)."""

    name: str
    restype: str
    argtypes: tuple[str, ...]


@dataclass(frozen=True)
class BodySource:
    source: str
    function: str
    shims: tuple[ShimDecl, ...]
    #: Numba type names of the body's parameters (after the shared-memory pointer).
    param_types: tuple[str, ...]


def numba_type(dt: np.dtype) -> str:
    return "boolean" if dt == np.bool_ else dt.name


def param_numba_type(t: ArrayType | ScalarType) -> str:
    if isinstance(t, ArrayType):
        return f"CPointer({numba_type(t.dtype)})"
    return "uint8" if t.dtype == np.bool_ else numba_type(t.dtype)


def literal(value: object, dt: np.dtype) -> str:
    if dt == np.bool_:
        return "True" if bool(value) else "False"
    if dt.kind == "f":
        v = float(value)  # type: ignore[arg-type]
        text = (
            "np.nan" if math.isnan(v) else ("np.inf" if v == math.inf else ("-np.inf" if v == -math.inf else repr(v)))
        )
        return f"{numba_name(dt)}({text})"
    return f"{numba_name(dt)}({int(value)})"  # type: ignore[call-overload]


def convert(expr: str, src: np.dtype, dst: np.dtype) -> str:
    if src == dst:
        return expr
    if dst == np.bool_:
        return f"({expr} != 0)"
    return f"{numba_name(dst)}({expr})"


def element_expr(op: str, args: list[str], dtypes: list[np.dtype], compute: np.dtype, out: np.dtype) -> str:
    """One element of an element-wise op: operands converted to `compute`, result to `out`."""
    if op == "where":
        cond = convert(args[0], dtypes[0], np.dtype(np.bool_))
        a, b = (convert(x, d, compute) for x, d in zip(args[1:], dtypes[1:]))
        return convert(f"({a} if {cond} else {b})", compute, out)
    if op == "cast":
        return convert(args[0], dtypes[0], out)
    xs = [convert(x, d, compute) for x, d in zip(args, dtypes)]
    one = literal(1, compute)
    if op in INFIX:
        expr = f"({xs[0]} {INFIX[op]} {xs[1]})"
    elif op == "neg":
        expr = f"(-{xs[0]})"
    elif op == "pos":
        expr = xs[0]
    elif op == "invert":
        expr = f"(not {xs[0]})" if compute == np.bool_ else f"(~{xs[0]})"
    elif op == "not":
        expr = f"(not {xs[0]})"
    elif op in MATH:
        expr = f"{MATH[op]}({xs[0]})"
    elif op == "exp2":
        expr = f"({literal(2, compute)} ** {xs[0]})"
    elif op == "abs":
        expr = f"abs({xs[0]})"
    elif op == "sigmoid":
        expr = f"({one} / ({one} + math.exp(-{xs[0]})))"
    elif op == "softplus":
        expr = f"({xs[0]} if {xs[0]} > {literal(20, compute)} else math.log1p(math.exp({xs[0]})))"
    elif op == "minimum":
        expr = f"({xs[0]} if ({xs[0]} != {xs[0]} or {xs[0]} < {xs[1]}) else {xs[1]})"
    elif op == "maximum":
        expr = f"({xs[0]} if ({xs[0]} != {xs[0]} or {xs[0]} > {xs[1]}) else {xs[1]})"
    else:
        raise AssertionError(f"no lowering for element-wise op {op!r}")
    result_dtype = np.dtype(np.bool_) if op in ("lt", "le", "gt", "ge", "eq", "ne", "land", "lor", "not") else compute
    return convert(expr, result_dtype, out)


class _BodyWriter:
    def __init__(self, program: ir.Program, plan: Plan):
        self.program = program
        self.plan = plan
        self.lines: list[str] = []
        self.shims: list[ShimDecl] = []

    def line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def items(self, var: ir.Var) -> int:
        return self.plan.tiles[var.name].items_per_thread

    def element_index(self, var: ir.Var) -> str:
        lay = self.plan.tiles[var.name]
        if lay.arrangement == BLOCKED:
            return f"(tid * {lay.items_per_thread} + i)"
        return f"(i * {self.plan.block_threads} + tid)"

    def operand(self, v: ir.Value, element: bool) -> str:
        if isinstance(v, ir.Lit):
            return literal(v.value, v.type.dtype)
        if element and isinstance(v.type, TileType):
            return f"{v.name}[i]"
        return v.name

    def offset(self, cid: int) -> str:
        region = self.plan.carve.regions.get(cid)
        return str(region.offset if region else 0)

    def shim(self, name: str, restype: str, *argtypes: str) -> str:
        self.shims.append(ShimDecl(name, restype, argtypes))
        return name

    def stmts(self, body: list[ir.Stmt], depth: int) -> None:
        if not body:
            self.line(depth, "pass")
        for s in body:
            if self.plan.barrier_before(s):
                self.line(depth, "cuda.syncthreads()")
            getattr(self, "s_" + type(s).__name__)(s, depth)

    # ----- statements ---------------------------------------------------------------------------
    def s_Param(self, s: ir.Param, depth: int) -> None:
        if isinstance(s.out.type, ScalarType) and s.out.type.dtype == np.bool_:
            self.line(depth, f"{s.out.name} = {s.out.name}_u8 != 0")

    def s_ScalarOp(self, s: ir.ScalarOp, depth: int) -> None:
        args = [self.operand(a, False) for a in s.args]
        expr = element_expr(s.op, args, [a.type.dtype for a in s.args], s.compute, s.out.type.dtype)
        self.line(depth, f"{s.out.name} = {expr}")

    def s_ProgramId(self, s: ir.ProgramId, depth: int) -> None:
        source = "cuda.gridDim" if s.count else "cuda.blockIdx"
        self.line(depth, f"{s.out.name} = np.int64({source}.{'xyz'[s.axis]})")

    def s_ArrayRead(self, s: ir.ArrayRead, depth: int) -> None:
        index, array = self.operand(s.index, False), s.array.name
        zero = literal(0, s.out.type.dtype)
        self.line(depth, f"{s.out.name} = {array}[{index}] if {index} >= 0 and {index} < {array}_len else {zero}")

    def s_ArrayWrite(self, s: ir.ArrayWrite, depth: int) -> None:
        index, array = self.operand(s.index, False), s.array.name
        self.line(depth, f"if tid == 0 and {index} >= 0 and {index} < {array}_len:")
        self.line(depth + 1, f"{array}[{index}] = {self.operand(s.value, False)}")

    def s_Copy(self, s: ir.Copy, depth: int) -> None:
        src_dt, dst_dt = s.src.type.dtype, s.out.type.dtype
        if isinstance(s.out.type, TileType):
            self.line(depth, f"for i in range({self.items(s.out)}):")
            self.line(depth + 1, f"{s.out.name}[i] = {convert(self.operand(s.src, True), src_dt, dst_dt)}")
        else:
            self.line(depth, f"{s.out.name} = {convert(self.operand(s.src, False), src_dt, dst_dt)}")

    def s_TileFull(self, s: ir.TileFull, depth: int) -> None:
        self.line(depth, f"for i in range({self.items(s.out)}):")
        self.line(depth + 1, f"{s.out.name}[i] = {self.operand(s.value, False)}")

    def s_TileArange(self, s: ir.TileArange, depth: int) -> None:
        self.line(depth, f"for i in range({self.items(s.out)}):")
        self.line(depth + 1, f"{s.out.name}[i] = {numba_name(s.out.type.dtype)}({self.element_index(s.out)})")

    def s_TileMap(self, s: ir.TileMap, depth: int) -> None:
        args = [self.operand(a, True) for a in s.args]
        expr = element_expr(s.op, args, [a.type.dtype for a in s.args], s.compute, s.out.type.dtype)
        self.line(depth, f"for i in range({self.items(s.out)}):")
        self.line(depth + 1, f"{s.out.name}[i] = {expr}")

    def _valid(self, v: ir.Value | None, size: int) -> str:
        return str(size) if v is None else self.operand(v, False)

    def s_TileLoad(self, s: ir.TileLoad, depth: int) -> None:
        t = numba_type(s.out.type.dtype)
        name = self.shim(
            f"coop_load_{s.cid}",
            "void",
            f"CPointer({t})",
            f"CPointer({t})",
            "int64",
            "int64",
            t,
            "int64",
            "CPointer(uint8)",
            "int64",
        )
        self.line(
            depth,
            f"{name}(ptr({s.out.name}), {s.array.name}, {self.operand(s.offset, False)}, "
            f"{self._valid(s.valid, s.out.type.size)}, {self.operand(s.other, False)}, {s.array.name}_len, smem, "
            f"{self.offset(s.cid)})",
        )

    def s_TileStore(self, s: ir.TileStore, depth: int) -> None:
        t, a = numba_type(s.tile.type.dtype), numba_type(s.array.type.dtype)
        name = self.shim(
            f"coop_store_{s.cid}",
            "void",
            f"CPointer({a})",
            "int64",
            "int64",
            f"CPointer({t})",
            "int64",
            "CPointer(uint8)",
            "int64",
        )
        self.line(
            depth,
            f"{name}({s.array.name}, {self.operand(s.offset, False)}, "
            f"{self._valid(s.valid, s.tile.type.size)}, ptr({s.tile.name}), {s.array.name}_len, smem, "
            f"{self.offset(s.cid)})",
        )

    def s_TileScan(self, s: ir.TileScan, depth: int) -> None:
        dt = s.src.type.dtype
        t = numba_type(dt)
        name = self.shim(f"coop_scan_{s.cid}", t, f"CPointer({t})", f"CPointer({t})", t, "CPointer(uint8)", "int64")
        initial = self.operand(s.initial, False) if s.initial is not None else literal(0, dt)
        target = s.total.name if s.total is not None else "_"
        self.line(
            depth, f"{target} = {name}(ptr({s.src.name}), ptr({s.out.name}), {initial}, smem, {self.offset(s.cid)})"
        )

    def s_TileReduce(self, s: ir.TileReduce, depth: int) -> None:
        t = numba_type(s.src.type.dtype)
        name = self.shim(f"coop_reduce_{s.cid}", t, f"CPointer({t})", "CPointer(uint8)", "int64")
        self.line(depth, f"{s.out.name} = {name}(ptr({s.src.name}), smem, {self.offset(s.cid)})")

    def s_If(self, s: ir.If, depth: int) -> None:
        self.line(depth, f"if {self.operand(s.cond, False)}:")
        self.stmts(s.then, depth + 1)
        if s.orelse:
            self.line(depth, "else:")
            self.stmts(s.orelse, depth + 1)

    def s_ForRange(self, s: ir.ForRange, depth: int) -> None:
        bounds = ", ".join(self.operand(v, False) for v in (s.start, s.stop, s.step))
        self.line(depth, f"for {s.var.name} in range({bounds}):")
        self.stmts(s.body, depth + 1)

    def s_While(self, s: ir.While, depth: int) -> None:
        self.line(depth, "while True:")
        self.stmts(s.cond_body, depth + 1)
        self.line(depth + 1, f"if not {self.operand(s.cond, False)}:")
        self.line(depth + 2, "break")
        self.stmts(s.body, depth + 1)

    def s_Return(self, s: ir.Return, depth: int) -> None:
        self.line(depth, "return")


def generate_body(program: ir.Program, plan: Plan, function: str) -> BodySource:
    """Numba source of `function(smem, *params)`, the program body called by the C++ entry."""
    writer = _BodyWriter(program, plan)
    params, param_types = [], []
    for name, t in program.params:
        is_bool = isinstance(t, ScalarType) and t.dtype == np.bool_
        params.append(f"a_{name}_u8" if is_bool else f"a_{name}")
        param_types.append(param_numba_type(t))
        if isinstance(t, ArrayType):  # its length: accesses outside the array are masked
            params.append(f"a_{name}_len")
            param_types.append("int64")
    writer.line(0, f"def {function}({', '.join(['smem', *params])}):")
    writer.line(1, "tid = np.int64(cuda.threadIdx.x)")
    declared: set[str] = set()
    for s in program.walk():
        out = getattr(s, "out", None)
        if isinstance(out, ir.Var) and out.name not in declared and not isinstance(s, ir.Param):
            declared.add(out.name)
            if isinstance(out.type, TileType):
                items = plan.tiles[out.name].items_per_thread
                writer.line(1, f"{out.name} = cuda.local.array({items}, {numba_name(out.type.dtype)})")
            elif out.name.startswith(("v_", "h")):
                writer.line(1, f"{out.name} = {literal(0, out.type.dtype)}")
    writer.stmts(program.body, 1)
    unique = tuple(dict.fromkeys(writer.shims))
    header = "# coop_tiles program body (generated; see .plan for layouts and barriers)\n"
    return BodySource(header + "\n".join(writer.lines) + "\n", function, unique, tuple(param_types))
