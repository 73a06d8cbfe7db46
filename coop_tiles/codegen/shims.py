"""The kernel's one C++ translation unit: the CUB shim of each collective, and the `__global__` entry (with, where
an op keeps launch state, `LaunchArg`, the prepare kernel that fills it from the same parameters).

Each op writes its own shim through a `ShimWriter` (`TileOp.lower`); this module owns what they
share: the shim signature derived from the op's `ShimCall`, TempStorage declarations, items
references, and the entry. Shims receive the shared TempStorage buffer and their byte offset
as arguments, so this source does not depend on the carve plan: one NVRTC run compiles it to
LTO-IR and, through the size probes' lowered names, reports every TempStorage's
`sizeof`/`alignof`; both are cached by source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..dtypes import cxx_identity, cxx_name, is_half
from ..errors import InternalError
from ..lang import ir
from ..ops.base import LAUNCH_STATE, ArrayArg, LaunchArg, OutArg, ShimCall, StateArg, TileArg, ValueArg, op_of
from ..planner.carve import StorageNeed
from ..planner.layout import BLOCKED, CollectiveChoice, LayoutPlan, TileLayout
from ..runtime import gemm_pipeline, mathdx
from .params import kernel_params

#: headers every translation unit includes; ops add their CUB headers with `ShimWriter.include`
#: (NVRTC's cost is mostly parsing CUB, so a kernel includes only what its ops use).
HEADERS = ("cuda/std/cstdint", "cuda/std/limits", "cuda/std/type_traits")
HALF_HEADERS = ("cuda_fp16.h", "cuda_bf16.h")


def include_lines(headers: tuple[str, ...] | list[str]) -> str:
    return "".join(f"#include <{h}>\n" for h in headers)


FUNCTORS = """\
namespace coop {
struct add { template <class T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return static_cast<T>(a + b); } };
struct mul { template <class T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return static_cast<T>(a * b); } };
struct max { template <class T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return (a != a || a > b) ? a : b; } };
struct min { template <class T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return (a != a || a < b) ? a : b; } };
struct bit_and { template <class T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return static_cast<T>(a & b); } };
struct bit_or { template <class T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return static_cast<T>(a | b); } };
struct bit_xor { template <class T> __device__ __forceinline__ T operator()(const T& a, const T& b) const { return static_cast<T>(a ^ b); } };
}  // namespace coop
"""

#: 16-bit floats live as their bits in the body; it converts through these (round to nearest even).
HALF_CONVERSIONS = """\
extern "C" __device__ float coop_f16_to_f32(cuda::std::uint16_t b) { return __half2float(__ushort_as_half(b)); }
extern "C" __device__ cuda::std::uint16_t coop_f32_to_f16(float f) { return __half_as_ushort(__float2half_rn(f)); }
extern "C" __device__ float coop_bf16_to_f32(cuda::std::uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }
extern "C" __device__ cuda::std::uint16_t coop_f32_to_bf16(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
// A 32-bit word of two 16-bit floats (the first in the low half) as two floats.
__device__ __forceinline__ float2 coop_f16x2_to_f32x2(unsigned w) { return __half22float2(*reinterpret_cast<__half2*>(&w)); }
__device__ __forceinline__ float2 coop_bf16x2_to_f32x2(unsigned w) { return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u)); }
"""


#: Every kernel's first statement (sm_90 and later): wait until the grid before it in the stream has finished and its
#: writes are visible. Launched with programmatic stream serialization (`runtime/launcher.py::programmatic`), a
#: kernel's launch is prepared while the kernel ahead of it runs, and its blocks start once that one's last block has
#: exited; launched without, the wait does nothing. No kernel asks for the early launch of the next (`griddepcontrol.launch_dependents`):
#: on an H200 that placed a one-wave kernel's blocks on the multiprocessors that freed first, unevenly, and made
#: top-k's float32 passes slower (45 -> 51 us); the implicit request at each block's exit keeps most of the gain.
GRID_DEPENDENCY = '#if __CUDA_ARCH__ >= 900\n  asm volatile("griddepcontrol.wait;" ::: "memory");\n#endif\n'
#: A variable template instantiated once per TempStorage by NVRTC name expressions: the lowered
#: (mangled) name of `coop_size_probe<sizeof(S), alignof(S)>` spells both numbers, so the LTO-IR
#: compile answers the size query too (nvJitLink drops the unused probes).
SIZE_PROBE = "template <unsigned Bytes, unsigned Align> __device__ unsigned char coop_size_probe;\n"
_LOWERED_PROBE = re.compile(r"coop_size_probeILj(\d+)ELj(\d+)EE")


@dataclass(frozen=True)
class ShimOrigin:
    """Where a shim is in the translation unit (lines `first` to `last`, 1-based, its declarations
    included) and the statement whose op wrote it: how a backend error is traced to the user's line."""

    first: int
    last: int
    shim: str
    stmt: ir.Stmt


@dataclass(frozen=True)
class ShimSource:
    source: str
    kernel_name: str
    body_name: str
    #: the collectives with a TempStorage struct (`coop_storage_<cid>`), whose size NVRTC reports
    storage_cids: tuple[int, ...]
    #: the body's call of each collective's shim, by collective id
    calls: dict[int, ShimCall]
    #: every header the translation unit includes
    headers: tuple[str, ...] = HEADERS
    #: bytes per program of the grid-wide state a chained scan needs (its entry's last parameter), or None
    chain_bytes: int | None = None
    #: each shim's lines and statement, in source order
    origins: tuple[ShimOrigin, ...] = ()
    #: the library GEMMs its shims call, whose LTO-IR the link adds (`ShimWriter.gemm`)
    gemms: tuple[tuple[mathdx.GemmSpec, bool], ...] = ()
    #: the pipelined library GEMMs its shims call, whose LTO-IR the link adds (`ShimWriter.pipeline`)
    pipelines: tuple[gemm_pipeline.PipelineSpec, ...] = ()
    #: bytes of the launch's own state (`LaunchArg`), which the prepare kernel `prepare_name` (the entry's
    #: parameters) fills before each launch; 0: no state, no prepare kernel
    launch_bytes: int = 0
    prepare_name: str = ""

    def origin_of_line(self, line: int) -> ShimOrigin | None:
        """The shim whose lines hold `line` of the source (None: a line no op wrote)."""
        return next((o for o in self.origins if o.first <= line <= o.last), None)

    def origin_of_shim(self, name: str) -> ShimOrigin | None:
        return next((o for o in self.origins if o.shim == name), None)

    @property
    def size_probes(self) -> tuple[str, ...]:
        """The NVRTC name expressions whose lowered names give each TempStorage's size and alignment."""
        return tuple(
            f"&coop_size_probe<sizeof(coop_storage_{c}), alignof(coop_storage_{c})>" for c in self.storage_cids
        )

    def storage_needs(self, lowered: dict[str, str]) -> dict[int, StorageNeed]:
        """Each collective's TempStorage size and alignment, from the probes' lowered names."""
        needs = {}
        for cid, probe in zip(self.storage_cids, self.size_probes):
            found = _LOWERED_PROBE.search(lowered.get(probe, ""))
            if found is None:
                raise ValueError(f"no size of coop_storage_{cid} in NVRTC's lowered names")
            needs[cid] = StorageNeed(int(found.group(1)), int(found.group(2)))
        return needs


def combine_symbol(name: str) -> str:
    """The C symbol of a combine function's compiled body."""
    return f"coop_{name}"


def clamp_valid(size: int) -> str:
    """`v`: how many leading elements are valid: the `valid` argument clamped to [0, size]."""
    return f"  long long v = valid < 0 ? 0 : (valid > {size} ? {size} : valid);\n"


def _clamp(size: int, a: ArrayArg) -> str:
    """`clamp_valid`, and never past the end of 1-D array `a` (a tile starting at `offset` outside it has none)."""
    n = a.parts.shapes[0]
    return (
        clamp_valid(size)
        + f"  const long long room = (offset < 0 || offset >= {n}) ? 0 : {n} - offset;\n"
        + "  if (v > room) v = room;\n"
    )


def element_index(lay: TileLayout, threads: int, tid: str = "int(threadIdx.x)", python: bool = False) -> str:
    """The index of item `i` of thread `tid` in the tile (a C++ expression, or with `python` a Python one;
    the size or more for a padding item): `TileLayout.element` as code. Striped in vectors of V items (a power
    of two): item i of thread t is element `((i // V) * threads + t) * V + i % V`."""
    if lay.fragment is not None:
        if python:
            raise InternalError(f"tile {lay.name}: a GEMM fragment's map is known only to C++")
        return lay.fragment.index_expr()
    if lay.rows is not None:
        return lay.rows.index_expr(tid, lay.size, python)
    if lay.arrangement == BLOCKED:
        return f"({tid} * {lay.items_per_thread} + i)"
    if lay.vector > 1:
        shift = lay.vector.bit_length() - 1
        return f"(((i >> {shift}) * {threads} + {tid}) * {lay.vector} + (i & {lay.vector - 1}))"
    return f"(i * {threads} + {tid})"


class ShimWriter:
    """What an op's `lower` writes through: the layouts, and the shim's pieces."""

    def __init__(self, layouts: LayoutPlan, arch: str = "sm_90"):
        self.layouts = layouts
        self.threads = layouts.block_threads
        self.arch = arch
        #: the library GEMMs the shims call (`gemm`)
        self.gemms: list[tuple[mathdx.GemmSpec, bool]] = []
        self.parts: list[str] = []
        #: the shim name and statement of each of `parts`
        self.part_origins: list[tuple[str, ir.Stmt]] = []
        #: the statement whose op is writing now
        self.writing: ir.Stmt | None = None
        self.storage_cids: list[int] = []
        self.headers: list[str] = list(HEADERS)
        #: declarations that ops' shims share, each once (`helper`)
        self.helpers: list[str] = []
        #: set by a chained scan: bytes per program of grid-wide state (see `ShimSource.chain_bytes`)
        self.chain_bytes: int | None = None
        #: the pipelined GEMMs the shims call (`pipeline`), the launch state's bytes (`launch_state`), the prepare
        #: kernel's code (`prepare`) and the alignment the stages need of the dynamic shared memory
        self.pipelines: list[gemm_pipeline.PipelineSpec] = []
        self.launch_bytes = 0
        self.prepare_code: list[str] = []
        self.smem_align = 16

    def include(self, *headers: str) -> None:
        """Include `headers` in the translation unit (once each)."""
        self.headers += [h for h in headers if h not in self.headers]

    @property
    def block_values(self) -> frozenset[str]:
        return self.layouts.block_values

    def layout(self, var: ir.Var) -> TileLayout:
        return self.layouts.tiles[var.name]

    def choice(self, cid: int) -> CollectiveChoice:
        return self.layouts.collectives[cid]

    def helper(self, code: str) -> None:
        """Put `code`, a declaration an op's shims share (several shims of one op may need it), into
        the translation unit once, before every shim."""
        if code not in self.helpers:
            self.helpers.append(code)

    def element_index(self, var: ir.Var) -> str:
        return element_index(self.layout(var), self.threads)

    @staticmethod
    def clamp(size: int, a: ArrayArg) -> str:
        """`v`, the count of valid leading elements of a transfer at `offset` of `a` (see `_clamp`)."""
        return _clamp(size, a)

    @staticmethod
    def clamp_valid(size: int) -> str:
        return clamp_valid(size)

    def identity(self, op: str, dt) -> str:
        return cxx_identity(op, dt)

    def combine_symbol(self, name: str) -> str:
        return combine_symbol(name)

    def gemm(self, spec: mathdx.GemmSpec, registers: bool = False) -> mathdx.GemmTraits | mathdx.FragmentTraits:
        """The traits of cuBLASDx's block GEMM `spec`, its result in shared memory or, with `registers`, in
        registers (the tensor API); its device functions' LTO-IR joins the link."""
        if (spec, registers) not in self.gemms:
            self.gemms.append((spec, registers))
        return (mathdx.fragment_gemm if registers else mathdx.gemm)(spec)[0]

    def pipeline(self, spec: gemm_pipeline.PipelineSpec) -> gemm_pipeline.PipelineTraits:
        """The traits of cuBLASDx's pipelined GEMM `spec`; its LTO-IR joins the link, and the dynamic shared memory
        is aligned as its stages need."""
        if spec not in self.pipelines:
            self.pipelines.append(spec)
        traits = gemm_pipeline.pipeline_gemm(spec)[0]
        self.smem_align = max(self.smem_align, traits.buffer_align)
        return traits

    def launch_state(self, nbytes: int, align: int) -> int:
        """The offset of `nbytes` (aligned to `align`) reserved in the launch's own state (`LaunchArg`)."""
        at = -(-self.launch_bytes // align) * align
        self.launch_bytes = at + nbytes
        return at

    def prepare(self, code: str) -> None:
        """Add `code` to the prepare kernel's thread 0 (which takes the entry's parameters, by their names)."""
        self.prepare_code.append(code)

    def storage(self, cid: int, temp_type: str, extra: str = "", prelude: str = "", copies: int | None = None) -> str:
        """Declare collective `cid`'s TempStorage struct (NVRTC reports its size), after `prelude`
        (the declarations it needs, such as a combine function's item struct); with `copies`,
        `temp` is an array of that many TempStorage."""
        self.storage_cids.append(cid)
        temp = "temp" if copies is None else f"temp[{copies}]"
        return prelude + f"struct coop_storage_{cid} {{ typename {temp_type}::TempStorage {temp}; {extra}}};\n"

    @staticmethod
    def alternate() -> str:
        """`run`: which of two TempStorage this run uses (0, 1, 0, ...), kept in the shim's `PARITY`
        argument. A collective whose runs alternate may run again without a barrier before it: what
        a run reads after its barrier is apart from what the next one writes before its own."""
        return "  const int run = *parity;\n  *parity = run ^ 1;\n"

    @staticmethod
    def storage_ref(cid: int) -> str:
        return f"  coop_storage_{cid}& s = *reinterpret_cast<coop_storage_{cid}*>(smem + soff);\n"

    def items_ref(self, var: str, ptr: str, tile: ir.Var, items: int) -> str:
        t = cxx_name(tile.type.dtype)
        return f"  {t} (&{var})[{items}] = *reinterpret_cast<{t}(*)[{items}]>({ptr});\n"

    def define(self, call: ShimCall, code: str, body: str) -> None:
        """Append `code` and the shim `call.name` with the parameters its arguments give, then `body`."""
        params = []
        for a in call.args:
            if isinstance(a, ArrayArg):
                p = a.parts
                params += [f"{cxx_name(a.var.type.dtype)}* {p.ptr}", *(f"long long {n}" for n in (p.off, *p.sizes))]
            elif isinstance(a, ValueArg):
                params.append(f"{cxx_name(a.value.type.dtype)} {a.name}")
            elif isinstance(a, StateArg):
                params.append(f"int* {a.name}")
            elif isinstance(a, LaunchArg):
                params.append(f"unsigned char* {a.name}")
            else:
                assert isinstance(a, (TileArg, OutArg))
                params.append(f"{cxx_name(a.var.type.dtype)}* {a.name}")
        params += ["unsigned char* smem", "long long soff"]
        self.parts.append(f'{code}extern "C" __device__ void {call.name}({", ".join(params)}) {{\n{body}}}\n')
        self.part_origins.append((call.name, self.writing))


def generate_shims(
    program: ir.Program, layouts: LayoutPlan, max_registers: int | None = None, arch: str = "sm_90"
) -> ShimSource:
    """The C++ source of every shim of `program` for `arch` plus its kernel entry, which caps the
    registers per thread at `max_registers` (`__maxnreg__`, which ptxas keeps to; its `-maxrregcount`
    leaves a kernel with launch bounds as it is) or else declares the block size (`__launch_bounds__`)."""
    writer = ShimWriter(layouts, arch)
    calls = {}
    halves = (
        any(is_half(t.dtype) for t in ir.tile_vars(program).values())
        or any(is_half(p.type.dtype) for p in program.params)
        or any(is_half(d) for c in program.combines.values() for d in c.dtypes)
    )
    if halves:
        writer.include(*HALF_HEADERS)
    collectives = [s for s in program.walk() if isinstance(s, ir.Collective)]
    for s in collectives:
        writer.writing = s
        calls[s.cid] = op_of(s).lower(s, writer)
    for s in collectives:
        writer.writing = s
        op_of(s).lower_after(s, program, writer)
    chain = writer.chain_bytes is not None
    kernel, body = f"coop_kernel_{program.name}", f"coop_body_{program.name}"
    flat = [p for var in program.params for p in kernel_params(var.name, var.type)]
    params = [f"{p.cxx} {p.name}" for p in flat]
    body_params = ", ".join(["unsigned char*"] + [p.cxx for p in flat])
    args = ", ".join(["coop_smem"] + [p.name for p in flat])
    if chain:  # an op's grid-wide state comes last; the body takes its program id from it first
        params.append("unsigned char* coop_grid_state")
        body_params += ", unsigned char*"
        args += ", coop_grid_state"
    prepare = ""
    if writer.launch_bytes:  # the launch's own state after that; the prepare kernel takes the same parameters
        params.append(f"unsigned char* {LAUNCH_STATE.name}")
        body_params += ", unsigned char*"
        args += f", {LAUNCH_STATE.name}"
        prepare = (
            f'extern "C" __global__ void coop_prepare_{program.name}({", ".join(params)}) {{\n'
            + GRID_DEPENDENCY
            + "  if (threadIdx.x != 0) return;\n"
            + "".join(writer.prepare_code)
            + "}\n"
        )
    # (the two cannot qualify one kernel)
    bounds = f"__launch_bounds__({layouts.block_threads})" if max_registers is None else f"__maxnreg__({max_registers})"
    entry = (
        f'extern "C" __device__ void {body}({body_params});\n'
        f'extern "C" __global__ void {bounds} {kernel}({", ".join(params)}) {{\n'
        f"  extern __shared__ __align__({writer.smem_align}) unsigned char coop_smem[];\n"
        f"{GRID_DEPENDENCY}  {body}({args});\n}}\n{prepare}"
    )
    before = [
        f"// coop_tiles shims for {program.name}",
        include_lines(writer.headers),
        FUNCTORS,
        HALF_CONVERSIONS if halves else "",
        SIZE_PROBE if writer.storage_cids else "",
        *writer.helpers,
    ]
    origins, line = [], 1 + sum(piece.count("\n") + 1 for piece in before)  # (the pieces are joined by newlines)
    for part, (shim, stmt) in zip(writer.parts, writer.part_origins):
        origins.append(ShimOrigin(line, line + part.count("\n"), shim, stmt))
        line += part.count("\n") + 1
    source = "\n".join([*before, *writer.parts, entry])
    return ShimSource(
        source,
        kernel,
        body,
        tuple(writer.storage_cids),
        calls,
        tuple(writer.headers),
        writer.chain_bytes,
        tuple(origins),
        tuple(writer.gemms),
        tuple(writer.pipelines),
        writer.launch_bytes,
        f"coop_prepare_{program.name}" if writer.launch_bytes else "",
    )
