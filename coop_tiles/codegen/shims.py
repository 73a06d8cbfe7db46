"""The kernel's one C++ translation unit: CUB shims per collective, and the `__global__` entry.

Shims are `extern "C"` device functions with plain C parameters; each receives the shared
TempStorage buffer and its byte offset as arguments, so this source does not depend on the
carve plan: it is compiled once to PTX (to read every TempStorage's `sizeof`/`alignof`)
and once to LTO-IR, and both results are cached by source.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..dtypes import cxx_identity, cxx_name
from ..lang import ir
from ..lang.types import ArrayType, ScalarType
from ..planner.layout import BLOCKED, LayoutPlan

HEADERS = """\
#include <cub/block/block_load.cuh>
#include <cub/block/block_store.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_reduce.cuh>
#include <cuda/std/cstdint>
#include <cuda/std/limits>
"""

FUNCTORS = """\
namespace coop {
struct add { template <class T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return static_cast<T>(a + b); } };
struct mul { template <class T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return static_cast<T>(a * b); } };
struct max { template <class T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return (a != a || a > b) ? a : b; } };
struct min { template <class T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return (a != a || a < b) ? a : b; } };
struct bit_and { template <class T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return static_cast<T>(a & b); } };
struct bit_or { template <class T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return static_cast<T>(a | b); } };
struct bit_xor { template <class T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return static_cast<T>(a ^ b); } };
// Block prefix callback: seeds a scan with `running` and keeps the running fold (the carry).
template <class T, class Op> struct carry {
  T running;
  __device__ __forceinline__ T operator()(T block_aggregate) { T old = running; running = Op{}(running, block_aggregate); return old; }
};
}  // namespace coop
"""

OP_FUNCTORS = {
    "add": "coop::add",
    "mul": "coop::mul",
    "max": "coop::max",
    "min": "coop::min",
    "and": "coop::bit_and",
    "or": "coop::bit_or",
    "xor": "coop::bit_xor",
}


@dataclass(frozen=True)
class ShimSource:
    source: str
    kernel_name: str
    body_name: str
    #: each collective's TempStorage declaration (`@` for its id): the key of its queried size.
    storage_decls: dict[int, str]


def storage_query_source(decls: dict[int, str]) -> str:
    """A translation unit exporting sizeof/alignof of each TempStorage, for reading from PTX."""
    parts = [HEADERS, FUNCTORS]
    for cid, decl in decls.items():
        parts.append(decl.replace("@", str(cid)))
        parts.append(
            f'extern "C" __device__ unsigned coop_bytes_{cid} = sizeof(coop_storage_{cid});\n'
            f'extern "C" __device__ unsigned coop_align_{cid} = alignof(coop_storage_{cid});\n'
        )
    return "\n".join(parts)


def c_params(name: str, t: ArrayType | ScalarType) -> list[tuple[str, str]]:
    """(C type, name) of the kernel parameters of one argument: an array is its pointer and its
    length in elements (so no access can leave it), a bool one byte."""
    if isinstance(t, ArrayType):
        return [(f"{cxx_name(t.dtype)}*", f"a_{name}"), ("long long", f"a_{name}_len")]
    return [("cuda::std::uint8_t" if t.dtype == np.bool_ else cxx_name(t.dtype), f"a_{name}")]


def _items_ref(var: str, ptr: str, t: str, items: int) -> str:
    return f"  {t} (&{var})[{items}] = *reinterpret_cast<{t}(*)[{items}]>({ptr});\n"


def _storage_decl(temp_type: str, extra: str = "") -> str:
    """The TempStorage struct of one collective, with `@` standing for its collective id."""
    return f"struct coop_storage_@ {{ typename {temp_type}::TempStorage temp; {extra}}};\n"


def _storage_ref(cid: int) -> str:
    return f"  coop_storage_{cid}& s = *reinterpret_cast<coop_storage_{cid}*>(smem + soff);\n"


def _clamp(size: int) -> str:
    """`v`: how many leading elements are valid: `valid` clamped to [0, size], and never past the
    end of the array (a tile starting outside the array has none)."""
    return (
        f"  long long v = valid < 0 ? 0 : (valid > {size} ? {size} : valid);\n"
        "  const long long room = (offset < 0 || offset >= len) ? 0 : len - offset;\n"
        "  if (v > room) v = room;\n"
    )


def _index(arrangement: str, threads: int, items: int) -> str:
    if arrangement == BLOCKED:
        return f"(int(threadIdx.x) * {items} + i)"
    return f"(i * {threads} + int(threadIdx.x))"


class _ShimWriter:
    def __init__(self, layouts: LayoutPlan):
        self.layouts = layouts
        self.threads = layouts.block_threads
        self.parts: list[str] = []
        self.storage_decls: dict[int, str] = {}

    def storage(self, cid: int, temp_type: str, extra: str = "") -> str:
        decl = _storage_decl(temp_type, extra)
        self.storage_decls[cid] = decl
        return decl.replace("@", str(cid))

    def load(self, s: ir.TileLoad) -> None:
        t = cxx_name(s.out.type.dtype)
        params = f"{t}* items, const {t}* a, long long offset, long long valid, {t} other"
        self.transfer(s.cid, "load", s.out.name, t, params, guarded_extra=", other")

    def store(self, s: ir.TileStore) -> None:
        t, a_t = cxx_name(s.tile.type.dtype), cxx_name(s.array.type.dtype)
        params = f"{a_t}* a, long long offset, long long valid, {t}* items"
        self.transfer(s.cid, "store", s.tile.name, t, params, guarded_extra="")

    def transfer(self, cid: int, kind: str, tile: str, t: str, params: str, guarded_extra: str) -> None:
        """A load or store shim: BlockLoad/BlockStore WARP_TRANSPOSE, or direct striped with no storage.

        A full tile takes CUB's unguarded path; a partial one (valid < size) the guarded one."""
        lay = self.layouts.tiles[tile]
        items, full = lay.items_per_thread, self.threads * lay.items_per_thread
        verb = kind.capitalize()  # Load / Store
        sig = (
            f'extern "C" __device__ void coop_{kind}_{cid}({params}, long long len, unsigned char* smem, '
            "long long soff)"
        )
        code, body, thread = "", _items_ref("x", "items", t, items) + _clamp(lay.size), ""
        if self.layouts.collectives[cid].needs_storage:
            cub_type = f"cub::Block{verb}<{t}, {self.threads}, {items}, cub::BLOCK_{kind.upper()}_WARP_TRANSPOSE>"
            alias = f"coop_{kind}_{cid}_t"
            code = f"using {alias} = {cub_type};\n" + self.storage(cid, cub_type)
            call, body = f"{alias}(s.temp).{verb}", _storage_ref(cid) + body
        else:
            call, thread = f"cub::{verb}DirectStriped<{self.threads}>", "int(threadIdx.x), "
        body += (
            f"  if (v == {full}) {call}({thread}a + offset, x);\n"
            f"  else {call}({thread}a + offset, x, int(v){guarded_extra});\n"
        )
        self.parts.append(code + sig + " {\n" + body + "}\n")

    def scan(self, s: ir.TileScan) -> None:
        lay = self.layouts.tiles[s.src.name]
        dt = s.src.type.dtype
        t, items, cid = cxx_name(dt), lay.items_per_thread, s.cid
        alias, op, ident = f"coop_scan_{cid}_t", OP_FUNCTORS[s.op], cxx_identity(s.op, dt)
        cub_type = f"cub::BlockScan<{t}, {self.threads}, cub::BLOCK_SCAN_WARP_SCANS>"
        code = f"using {alias} = {cub_type};\n" + self.storage(cid, cub_type, f"{t} total; ")
        sig = (
            f'extern "C" __device__ {t} coop_scan_{cid}({t}* in, {t}* out, {t} initial, '
            "unsigned char* smem, long long soff)"
        )
        body = _storage_ref(cid) + _items_ref("x", "in", t, items) + _items_ref("y", "out", t, items)
        kind = "Exclusive" if s.exclusive else "Inclusive"
        carry = s.initial is not None or s.total is not None
        padded = self.threads * items != lay.size
        if carry and padded:  # padding must not change the total
            body += (
                f"  for (int i = 0; i < {items}; ++i) y[i] = ({_index(BLOCKED, self.threads, items)} < "
                f"{lay.size}) ? x[i] : {ident};\n"
            )
        else:
            body += f"  for (int i = 0; i < {items}; ++i) y[i] = x[i];\n"
        if carry:
            body += f"  coop::carry<{t}, {op}> c{{initial}};\n  {alias}(s.temp).{kind}Scan(y, y, {op}{{}}, c);\n"
            if s.total is not None:
                body += "  if (threadIdx.x == 0) s.total = c.running;\n  __syncthreads();\n  return s.total;\n"
            else:
                body += f"  return {t}(0);\n"
        elif s.exclusive:
            body += f"  {alias}(s.temp).ExclusiveScan(y, y, {ident}, {op}{{}});\n  return {t}(0);\n"
        elif s.op == "add":
            body += f"  {alias}(s.temp).InclusiveSum(y, y);\n  return {t}(0);\n"
        else:
            body += f"  {alias}(s.temp).InclusiveScan(y, y, {op}{{}});\n  return {t}(0);\n"
        self.parts.append(code + sig + " {\n" + body + "}\n")

    def reduce(self, s: ir.TileReduce) -> None:
        lay = self.layouts.tiles[s.src.name]
        dt = s.src.type.dtype
        t, items, cid = cxx_name(dt), lay.items_per_thread, s.cid
        alias, op = f"coop_reduce_{cid}_t", OP_FUNCTORS[s.op]
        cub_type = f"cub::BlockReduce<{t}, {self.threads}, cub::BLOCK_REDUCE_WARP_REDUCTIONS>"
        code = f"using {alias} = {cub_type};\n" + self.storage(cid, cub_type, f"{t} result; ")
        sig = f'extern "C" __device__ {t} coop_reduce_{cid}({t}* in, unsigned char* smem, long long soff)'
        body = _storage_ref(cid) + _items_ref("x", "in", t, items)
        body += f"  {t} acc = {cxx_identity(s.op, dt)};\n"
        if self.threads * items == lay.size:
            body += f"  for (int i = 0; i < {items}; ++i) acc = {op}{{}}(acc, x[i]);\n"
        else:
            index = _index(lay.arrangement, self.threads, items)
            body += f"  for (int i = 0; i < {items}; ++i) if ({index} < {lay.size}) acc = {op}{{}}(acc, x[i]);\n"
        reduce_call = "Sum(acc)" if s.op == "add" else f"Reduce(acc, {op}{{}})"
        body += (
            f"  {t} r = {alias}(s.temp).{reduce_call};\n"
            "  if (threadIdx.x == 0) s.result = r;\n  __syncthreads();\n  return s.result;\n"
        )
        self.parts.append(code + sig + " {\n" + body + "}\n")


def generate_shims(program: ir.Program, layouts: LayoutPlan) -> ShimSource:
    """The C++ source of every shim of `program` plus its kernel entry."""
    writer = _ShimWriter(layouts)
    handlers = {
        ir.TileLoad: writer.load,
        ir.TileStore: writer.store,
        ir.TileScan: writer.scan,
        ir.TileReduce: writer.reduce,
    }
    for s in program.walk():
        handler = handlers.get(type(s))
        if handler is not None:
            handler(s)
    kernel, body = f"coop_kernel_{program.name}", f"coop_body_{program.name}"
    flat = [p for name, t in program.params for p in c_params(name, t)]
    params = [f"{c_type} {name}" for c_type, name in flat]
    body_params = ", ".join(["unsigned char*"] + [c_type for c_type, _ in flat])
    args = ", ".join(["coop_smem"] + [name for _, name in flat])
    entry = (
        f'extern "C" __device__ void {body}({body_params});\n'
        f'extern "C" __global__ void __launch_bounds__({layouts.block_threads}) {kernel}({", ".join(params)}) {{\n'
        "  extern __shared__ __align__(16) unsigned char coop_smem[];\n"
        f"  {body}({args});\n}}\n"
    )
    source = "\n".join([f"// coop_tiles shims for {program.name}", HEADERS, FUNCTORS, *writer.parts, entry])
    return ShimSource(source, kernel, body, writer.storage_decls)
