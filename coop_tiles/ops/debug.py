"""Debugging inside programs: `ct.static_print`, `ct.static_assert`, `ct.device_print` and
`ct.device_assert`.

- `static_print` emits no code: the front end records one line per call in the program it
  builds (`ir.Program.static_prints`); `jit.py` prints them once per specialisation.
- `static_assert` emits no code either: a false compile-time condition stops the front end
  with a `TileAssertionError` at its line (so both modes raise it).
- `device_print` prints one line per program instance, the same in the interpreter and on the
  GPU: ``pid (x, y, z) prefix v1 v2 ...`` (as Python's ``print`` joins them), a tile as
  ``[e0 e1 ...]``, integers in decimal, floats as C's and Python's ``%g`` (a NaN as ``nan``),
  bools as ``True``/``False``. On the GPU the block gathers its tiles in its TempStorage and
  thread 0 prints, holding a lock for the whole line so that programs' lines do not interleave.
- `device_assert` checks a block-uniform condition, or every element of a bool tile. The
  interpreter raises `TileAssertionError`. Compiled kernels check only when built for
  debugging (the flag is in the `Signature`); otherwise `drop_device_asserts` removes the
  statement before planning, so it costs nothing. A failed check calls CUDA's `__assertfail`
  with the user's file, line and message: the device prints it with the block (the program
  id), and the launch fails with CUDA_ERROR_ASSERT (the debug launch then raises).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import bfloat16, bool_, cxx_name, float16, is_float
from ..errors import LaunchError, TileAssertionError, TileTypeError, TileValueError
from ..lang import builtins as ct
from ..lang import ir
from ..lang.types import TileType
from ..lang.values import Const, describe, is_array, is_tile
from .base import ShimCall, TileArg, TileOp, ValueArg, register

#: scalars reach the printing shim as these dtypes, by how they print
SCALAR_DTYPES = {
    "b": np.dtype(np.uint8),
    "i": np.dtype(np.int64),
    "u": np.dtype(np.uint64),
    "f": np.dtype(np.float64),
}
#: per kind, the printf conversion and the C++ expression it prints (of the value in `{}`)
PRINTF = {
    "b": ("%s", '({} ? "True" : "False")'),
    "i": ("%lld", "(long long)({})"),
    "u": ("%llu", "(unsigned long long)({})"),
    "f": ("%g", "coop_print_float({})"),
}
#: printf arguments per call (CUDA's printf takes at most 32)
PRINTF_CHUNK = 16

PRINT_HELPERS = """\
#ifndef COOP_DEVICE_PRINT
#define COOP_DEVICE_PRINT
// Held by the printing thread for a whole line, so that programs' lines do not interleave.
__device__ int coop_print_lock;
__device__ __forceinline__ void coop_print_begin() {
  while (atomicCAS(&coop_print_lock, 0, 1) != 0) __nanosleep(32);
  __threadfence();
}
__device__ __forceinline__ void coop_print_end() {
  __threadfence();
  atomicExch(&coop_print_lock, 0);
}
// A NaN prints as "nan" whatever its sign bit, as Python's %g prints it.
__device__ __forceinline__ double coop_print_float(double x) {
  return x != x ? __longlong_as_double(0x7ff8000000000000LL) : x;
}
#endif
"""


def print_kind(dt: np.dtype) -> str:
    """How values of `dt` print: "b" bool, "f" float, "u" unsigned, "i" signed integer."""
    if dt == bool_:
        return "b"
    if is_float(dt):
        return "f"
    return "u" if dt.kind == "u" else "i"


def format_item(kind: str, x: Any) -> str:
    """One value as the GPU's printf prints it (`PRINTF`)."""
    if kind == "b":
        return "True" if x else "False"
    if kind == "f":
        x = float(x)
        return "nan" if math.isnan(x) else f"{x:g}"
    return str(int(x))


def c_string(text: str) -> str:
    """`text` as a C string literal (UTF-8, anything but printable ASCII escaped in octal)."""
    out = []
    for byte in text.encode():
        char = chr(byte)
        out.append(char if 32 <= byte < 127 and char not in '"\\?' else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _flatten(values: Any) -> list:
    out = []
    for v in values:
        if isinstance(v, tuple):
            out += _flatten(v)
        elif isinstance(v, Const) and isinstance(v.value, tuple):
            out += _flatten(tuple(Const(x) for x in v.value))
        else:
            out.append(v)
    return out


# ----- ct.static_print ------------------------------------------------------------------------
def _static_text(v: Any) -> str:
    if isinstance(v, tuple):
        return "(" + ", ".join(_static_text(x) for x in v) + ")"
    if isinstance(v, Const):
        return str(v.value)
    return describe(v)


@register
class StaticPrint(TileOp):
    publics = (ct.static_print,)

    def build(self, b, public, *values):
        b.static_prints.append(" ".join(_static_text(v) for v in values))
        return Const(None)


# ----- ct.static_assert -----------------------------------------------------------------------
@register
class StaticAssert(TileOp):
    publics = (ct.static_assert,)

    def build(self, b, public, cond, msg):
        if not (isinstance(msg, Const) and isinstance(msg.value, str)):
            raise TileTypeError(f"the message of ct.static_assert must be a string, got {describe(msg)}")
        if not isinstance(cond, Const):
            raise TileValueError(
                "ct.static_assert checks a compile-time condition (of constexprs, tile sizes, dtypes), got a "
                f"runtime {describe(cond)}; check runtime values with ct.device_assert(cond, msg)"
            )
        if not cond.value:
            raise TileAssertionError(f"static assertion failed: {msg.value or _condition_text(b.current)}")
        return Const(None)


# ----- ct.device_print ------------------------------------------------------------------------
@dataclass
class DevicePrint(ir.Collective, uses="values", attrs="prefix kinds"):
    prefix: str
    #: tiles as they are; scalars converted to their kind's `SCALAR_DTYPES`
    values: tuple[ir.Value, ...]
    kinds: tuple[str, ...]


@register
class DevicePrintOp(TileOp):
    publics = (ct.device_print,)
    stmt = DevicePrint

    def build(self, b, public, prefix, *values):
        if not (isinstance(prefix, Const) and isinstance(prefix.value, str)):
            raise TileTypeError(
                "ct.device_print takes a string prefix, then the values to print "
                f'(ct.device_print("x =", x)); got {describe(prefix)} as the prefix'
            )
        printed, kinds = [], []
        for v in _flatten(values):
            if is_array(v):
                raise TileTypeError(
                    "ct.device_print prints scalars and tiles, not arrays; load a tile (tile.load) or read an element"
                )
            if isinstance(v, Const) and not isinstance(v.value, (bool, int, float, np.bool_, np.number)):
                raise TileTypeError(
                    f"ct.device_print prints runtime values (scalars and tiles); print {v.value!r} with ct.static_print"
                )
            value = b.runtime(v, "a value printed by ct.device_print")
            kind = print_kind(value.type.dtype)
            printed.append(value if is_tile(value) else b.convert(value, SCALAR_DTYPES[kind]))
            kinds.append(kind)
        b.emit(DevicePrint(prefix.value, tuple(printed), tuple(kinds)))
        return Const(None)

    def interpret(self, s: DevicePrint, frame) -> None:
        items = []
        for v, kind in zip(s.values, s.kinds):
            x = frame.get(v)
            if isinstance(v.type, TileType):
                items.append("[" + " ".join(format_item(kind, e) for e in x) + "]")
            else:
                items.append(format_item(kind, x))
        print(" ".join(["pid ({}, {}, {})".format(*frame.pid), s.prefix, *items]))

    def choose(self, s: DevicePrint, ctx):
        tiles = any(isinstance(v.type, TileType) for v in s.values)
        algorithm = "GATHER_TO_THREAD_0" if tiles else "THREAD_0"
        return ctx.choice(s, "device_print", "printf", algorithm, storage=tiles)

    def lower(self, s: DevicePrint, w) -> ShimCall:
        args = tuple(
            TileArg(v, f"v{i}") if isinstance(v.type, TileType) else ValueArg(v, f"v{i}")
            for i, v in enumerate(s.values)
        )
        call = ShimCall(f"coop_device_print_{s.cid}", args)
        tiles = [(i, v) for i, v in enumerate(s.values) if isinstance(v.type, TileType)]
        code, body = PRINT_HELPERS, ""
        if tiles:
            members = "".join(f"{cxx_name(v.type.dtype)} t{i}[{v.type.size}]; " for i, v in tiles)
            prelude = f"struct coop_print_items_{s.cid} {{ struct TempStorage {{ {members}}}; }};\n"
            code += w.storage(s.cid, f"coop_print_items_{s.cid}", prelude=prelude)
            body += w.storage_ref(s.cid)
            for i, v in tiles:
                items = w.layout(v).items_per_thread
                body += w.items_ref(f"x{i}", f"v{i}", v, items)
                body += (
                    f"  for (int i = 0; i < {items}; ++i) {{\n"
                    f"    const int e = {w.element_index(v)};\n"
                    f"    if (e < {v.type.size}) s.temp.t{i}[e] = x{i}[i];\n  }}\n"
                )
            body += "  __syncthreads();\n"
        lines = [_printf("pid (%u, %u, %u) " + s.prefix.replace("%", "%%"), ["blockIdx.x", "blockIdx.y", "blockIdx.z"])]
        for i, (v, kind) in enumerate(zip(s.values, s.kinds)):
            if isinstance(v.type, TileType):
                lines += _tile_printfs(kind, v, f"s.temp.t{i}")
            else:
                fmt, expr = PRINTF[kind]
                lines.append(_printf(" " + fmt, [expr.format(f"v{i}")]))
        lines.append(_printf("\n", []))
        body += "  if (threadIdx.x == 0) {\n    coop_print_begin();\n"
        body += "".join(f"    {line}\n" for line in lines)
        body += "    coop_print_end();\n  }\n"
        w.define(call, code, body)
        return call


def _printf(fmt: str, args: list[str]) -> str:
    return f"printf({c_string(fmt)}{''.join(', ' + a for a in args)});"


def _tile_printfs(kind: str, v: ir.Var, buffer: str) -> list[str]:
    """printf calls for ``[e0 e1 ...]`` of tile `v` gathered in `buffer`, `PRINTF_CHUNK` per call."""
    fmt, expr = PRINTF[kind]
    dt = v.type.dtype
    widen = {float16: "coop_f16_to_f32({})", bfloat16: "coop_bf16_to_f32({})"}.get(dt, "{}")

    def element(index: str) -> str:
        return expr.format(widen.format(f"{buffer}[{index}]"))

    n = v.type.size
    first = min(n, PRINTF_CHUNK)
    out = [_printf(" [" + " ".join([fmt] * first), [element(str(j)) for j in range(first)])]
    end = first + (n - first) // PRINTF_CHUNK * PRINTF_CHUNK
    if end > first:
        chunk = _printf((" " + fmt) * PRINTF_CHUNK, [element(f"e + {j}") for j in range(PRINTF_CHUNK)])
        out.append(f"for (int e = {first}; e < {end}; e += {PRINTF_CHUNK}) {chunk}")
    if n > end:
        out.append(_printf((" " + fmt) * (n - end), [element(str(j)) for j in range(end, n)]))
    out.append(_printf("]", []))
    return out


# ----- ct.device_assert -----------------------------------------------------------------------
@dataclass
class DeviceAssert(ir.Collective, uses="cond", attrs="message function"):
    #: a bool tile (every element must hold), or a block-uniform uint8 scalar
    cond: ir.Value
    message: str
    #: the function the assert is written in (what CUDA's assertion message names)
    function: str


@register
class DeviceAssertOp(TileOp):
    publics = (ct.device_assert,)
    stmt = DeviceAssert

    def build(self, b, public, cond, msg):
        if not (isinstance(msg, Const) and isinstance(msg.value, str)):
            raise TileTypeError(f"the message of ct.device_assert must be a string, got {describe(msg)}")
        if is_tile(cond):
            if cond.type.dtype != bool_:
                raise TileTypeError(
                    f"the condition of ct.device_assert must be a bool tile (every element must hold) or a scalar, "
                    f"got {cond.type}; compare it (t > 0)"
                )
        elif is_array(cond) or isinstance(cond, tuple):
            raise TileTypeError(
                f"the condition of ct.device_assert must be a bool tile or a scalar, got {describe(cond)}"
            )
        else:
            cond = b.convert(b.truth(b.scalar(cond, "the condition of ct.device_assert")), SCALAR_DTYPES["b"])
        message = msg.value or _condition_text(b.current)
        b.emit(DeviceAssert(cond, message, b.fn.tree.name))
        return Const(None)

    def interpret(self, s: DeviceAssert, frame) -> None:
        if not np.all(frame.get(s.cond)):
            raise TileAssertionError("assertion failed in program ({}, {}, {}): {}".format(*frame.pid, s.message))

    def rewrite(self, program: ir.Program, debug: bool, arch: str) -> None:
        if not debug:  # a kernel built without debugging does not check its asserts
            drop_device_asserts(program.body)

    def choose(self, s: DeviceAssert, ctx):
        algorithm = "SYNCTHREADS_OR" if is_tile(s.cond) else "THREAD_0"
        return ctx.choice(s, "device_assert", "__assertfail", algorithm, storage=False)

    def lower(self, s: DeviceAssert, w) -> ShimCall:
        if is_tile(s.cond):
            call = ShimCall(f"coop_device_assert_{s.cid}", (TileArg(s.cond, "cond"),))
            items = w.layout(s.cond).items_per_thread
            body = w.items_ref("x", "cond", s.cond, items) + "  bool failed = false;\n"
            body += (
                f"  for (int i = 0; i < {items}; ++i)\n"
                f"    if ({w.element_index(s.cond)} < {s.cond.type.size} && !x[i]) failed = true;\n"
                "  failed = __syncthreads_or(failed);\n"
            )
        else:
            call = ShimCall(f"coop_device_assert_{s.cid}", (ValueArg(s.cond, "cond"),))
            body = "  const bool failed = !cond;\n"
        loc = s.loc
        where = f"{c_string(loc.filename if loc else '?')}, {loc.line if loc else 0}"
        body += (
            "  if (failed) {\n"
            f"    if (threadIdx.x == 0) __assertfail({c_string(s.message)}, {where}, {c_string(s.function)}, 1);\n"
            "    __syncthreads();  // the rest of the block waits here for the launch to end\n"
            "  }\n"
        )
        w.define(call, "", body)
        return call


def _condition_text(call: Any) -> str:
    """The source of a `ct.device_assert` or `ct.static_assert` call's condition: the message when
    none is given."""
    if not isinstance(call, ast.Call):
        return "the assertion"
    node = call.args[0] if call.args else next(k.value for k in call.keywords if k.arg == "cond")
    return ast.unparse(node)


def drop_device_asserts(body: list[ir.Stmt]) -> None:
    """Remove every `DeviceAssert` from `body` and the bodies nested in it (a kernel built
    without debugging: its conditions' code then has no use and is optimised away)."""
    body[:] = [s for s in body if not isinstance(s, DeviceAssert)]
    for s in body:
        for nested in ir.regions(s):
            drop_device_asserts(nested)


def check_debug_launch(stream: int, program: str) -> None:
    """After a debug launch: wait for `stream` and report a failed `ct.device_assert` (or any other
    failure of the kernel) as an error at the launch. Skipped while the stream is being captured."""
    from cuda.bindings import driver

    err, status = driver.cuStreamIsCapturing(stream)
    if err != driver.CUresult.CUDA_SUCCESS or status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
        return
    (err,) = driver.cuStreamSynchronize(stream)
    if err == driver.CUresult.CUDA_ERROR_ASSERT:
        raise TileAssertionError(
            f"{program} failed a ct.device_assert on the GPU; the device printed the assertion's file, line, "
            "message and program id (block) to stdout. A failed device assertion leaves the CUDA context "
            "unusable: restart the process"
        )
    if err != driver.CUresult.CUDA_SUCCESS:
        raise LaunchError(f"{program} failed on the GPU: {err.name}")
