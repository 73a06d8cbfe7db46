"""Block-level GEMMs from cuBLASDx, generated as LTO-IR by libmathdx (`nvidia-libmathdx-cu13`).

libmathdx is NVIDIA's C library behind nvmath-python's device API: given a GEMM's shape,
precisions, operand arrangements, block size and target arch, it compiles cuBLASDx with its own
headers through NVRTC (no GPU, no CUDA driver) and answers the GEMM's traits (leading dimensions,
alignments, the device function's symbol) and its LTO-IR. The function it generates, `extern "C"
void symbol(C* alpha, A* a, B* b, C* beta, C* c)`, computes `c = alpha * a @ b + beta * c` with
the whole block, every operand in shared memory at the leading dimensions the traits give; the
shims call it and nvJitLink links its LTO-IR with the rest of the kernel.

It is driven here through ctypes (nvmath-python's bindings need the CUDA driver at import, which a
CI machine has not). Each generation is one or two NVRTC compiles of cuBLASDx (seconds), so the
traits and the LTO-IR are kept in the disk cache (kind "gemm"), keyed by the request, the library's
version and NVRTC's.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..errors import CompileError
from . import toolchain
from .cache import DiskCache, make_key

#: commondxPrecision of each operand precision name
PRECISIONS = {"bf16": 2, "f16": 3, "tf32": 4, "f32": 5, "f64": 6}
#: cublasdxArrangement
ARRANGEMENTS = {"col": 0, "row": 1}
# cublasdxOperatorType, cublasdxTraitType, commondxOption (libcublasdx.h, libcommondx.h)
_FUNCTION, _SIZE, _TYPE, _PRECISION, _SM, _EXECUTION, _BLOCK_DIM, _API, _ARRANGEMENT = 0, 1, 2, 3, 4, 5, 6, 9, 10
_LEADING_DIMENSION, _SYMBOL_NAME, _ALIGNMENT = 4, 5, 7
_LEADING_DIMENSION_OPERATOR, _ALIGNMENT_OPERATOR = 7, 11
_TARGET_SM, _EXTRA_NVRTC_ARGS, _ARCH_SPECIFIC = 1, 4, 1
_API_SMEM, API_TENSORS, _EXECUTION_BLOCK, _TYPE_REAL, _FUNCTION_MM = 0, 2, 1, 0, 0
# cublasdxTensorType, cublasdxTensorTrait, cublasdxDeviceFunctionType, cublasdxDeviceFunctionTrait
_SMEM_A, _SMEM_B, _SUGGESTED_RMEM_C = 0, 1, 6
STORAGE_BYTES, ALIGNMENT_BYTES, _LOGICAL_SIZE = 0, 1, 5
_EXECUTE, _MAP_IDX2CRD_PARTITIONER, _IS_THREAD_ACTIVE = 0, 6, 8
#: the alignment of each operand in shared memory (bytes): whole 16-byte words, which ldmatrix reads
OPERAND_ALIGNMENT = 16
#: bytes per element of each precision
ITEMSIZES = {"bf16": 2, "f16": 2, "tf32": 4, "f32": 4, "f64": 8}
_FUNCTION_SYMBOL = 1
LL = ctypes.c_longlong
#: the operators every descriptor sets (besides its API): a matrix product, run by a block, real
_FIXED = ((_FUNCTION, _FUNCTION_MM), (_EXECUTION, _EXECUTION_BLOCK), (_TYPE, _TYPE_REAL))


@dataclass(frozen=True)
class GemmSpec:
    """One block GEMM `c (m, n) = a (m, k) @ b (k, n)`: each operand's precision (a name of
    `PRECISIONS`) and arrangement in shared memory ("row" or "col"), the block's threads, the arch."""

    m: int
    n: int
    k: int
    precision: tuple[str, str, str]
    arrangement: tuple[str, str, str]
    threads: int
    arch: str

    def __str__(self) -> str:
        p, a = self.precision, self.arrangement
        return f"{self.m}x{self.n}x{self.k} {p[0]}*{p[1]}->{p[2]}, a {a[0]}, b {a[1]}, c {a[2]}, {self.threads} threads"


@dataclass(frozen=True)
class GemmTraits:
    """What cuBLASDx says of a `GemmSpec`: each operand's leading dimension and alignment in shared
    memory (elements and bytes), and the symbol of the device function."""

    lds: tuple[int, int, int]
    alignments: tuple[int, int, int]
    symbol: str


@dataclass(frozen=True)
class FragmentTraits:
    """What cuBLASDx's tensor API says of a `GemmSpec` whose result stays in registers: the bytes of `a` and `b` in
    shared memory, each a plain layout of its arrangement at the leading dimension `padded_lds` gives (`lda`,
    `ldb`: elements), the items of each thread's accumulator fragment, and the symbols of its device functions:
    `execute(A, B, C)` (C += A @ B, each tensor a struct of one pointer, by value), `map_c(&item, &row, &col)` (the
    element of this thread's accumulator item) and `active(&flag)` (an int: whether this thread takes part; the
    others' items are no elements)."""

    a_bytes: int
    b_bytes: int
    lda: int
    ldb: int
    items: int
    execute: str
    map_c: str
    active: str


def padded_lds(spec: GemmSpec) -> tuple[int, int, int]:
    """The leading dimensions (elements) of `spec`'s operands in shared memory: each contiguous run (a row of a
    row-major operand, a column of a column-major one) padded to an odd count of 16-byte words, so that a thread's
    16 contiguous bytes of a row store as one word and the 8 rows an ldmatrix reads fall in distinct banks
    (the library's suggested layouts are swizzled instead, which only element by element stores can fill);
    the accumulator's (in registers) unpadded."""
    (m, n, k), (pa, pb, _) = (spec.m, spec.n, spec.k), spec.precision

    def padded(extent: int, precision: str) -> int:
        size = ITEMSIZES[precision]
        words = -(-extent * size // 16)
        return (words + 1 - words % 2) * 16 // size

    (ra, rb, rc) = (arr == "row" for arr in spec.arrangement)
    return padded(k if ra else m, pa), padded(n if rb else k, pb), n if rc else m


@functools.cache
def _library() -> ctypes.CDLL:
    """libmathdx, after NVRTC (which it links against) is loaded from the NVIDIA wheels."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        load_nvidia_dynamic_lib("nvrtc")
        from nvidia.cu13 import lib  # the nvidia-libmathdx-cu13 wheel (a namespace package)

        path = next(p for d in lib.__path__ for p in Path(d).glob("libmathdx.so*"))
        return ctypes.CDLL(str(path))
    except (ImportError, StopIteration, OSError) as e:
        raise CompileError(
            "tile.dot needs libmathdx (cuBLASDx): pip install 'coop-tiles[dot]' (the nvidia-libmathdx-cu13 wheel)",
            log=str(e),
        ) from None


def available() -> bool:
    """Whether libmathdx can be loaded (tile.dot compiles only then)."""
    try:
        _library()
    except CompileError:
        return False
    return True


@functools.cache
def version() -> str:
    """cuBLASDx's version, as libmathdx reports it (part of every cache key)."""
    lib = _library()
    parts = [ctypes.c_int() for _ in range(3)]
    check(lib, lib.cublasdxGetVersion(*(ctypes.byref(p) for p in parts)), "version")
    return ".".join(str(p.value) for p in parts)


def check(lib: ctypes.CDLL, status: int, what: str) -> None:
    """A CompileError saying that libmathdx failed to do `what` (with its last error) unless `status` is success."""
    if status != 0:
        size = ctypes.c_size_t()
        lib.commondxGetLastErrorStrSize(ctypes.byref(size))
        text = ctypes.create_string_buffer(size.value + 1)
        lib.commondxGetLastErrorStr(ctypes.byref(ctypes.c_int()), size, text)
        raise CompileError(f"libmathdx failed to {what} (status {status})", log=text.value.decode(errors="replace"))


def ints(*values: int) -> ctypes.Array:
    """`values` as a C array of long long, as libmathdx takes arrays."""
    return (LL * len(values))(*values)


def _sm(arch: str) -> tuple[int, ...]:
    """libmathdx's SM of `arch`: (900,) for sm_90, (900, 1) for sm_90a (its arch-specific features: TMA's
    descriptors, WGMMA)."""
    number = int(arch.removeprefix("sm_").rstrip("a")) * 10
    return (number, _ARCH_SPECIFIC) if arch.endswith("a") else (number,)


#: libmathdx's extra NVRTC arguments: optimised LTO-IR, and the shims' macros (`toolchain.DEFINES`: CCCL's type-list
#: metafunctions unrolled 10 deep, as under nvcc, not 16), which take about a fifth off a generation (22 -> 17 s of
#: NVRTC for a 16x24x40 bf16 fragment GEMM) for the same LTO-IR, byte for byte
NVRTC_ARGS = (b"-gen-opt-lto", *(f"-D{name}={value}".encode() for name, value in toolchain.DEFINES))

# libmathdx keeps per-descriptor state and its last error per thread; one request at a time.
LOCK = threading.Lock()


class Descriptor:
    """A cuBLASDx descriptor of `spec` (destroyed on exit); `extra`: more operators to set, (operator, value) or
    (operator, values)."""

    def __init__(self, spec: GemmSpec, api: int = _API_SMEM, extra: tuple[tuple[int, int | tuple[int, ...]], ...] = ()):
        self.lib, self.spec, self.api, self.extra = _library(), spec, api, extra

    def __enter__(self) -> Descriptor:
        lib, spec, handle = self.lib, self.spec, LL()
        check(lib, lib.cublasdxCreateDescriptor(ctypes.byref(handle)), "create a descriptor")
        self.handle = h = handle.value
        scalars = [(op, v) for op, v in self.extra if isinstance(v, int)]
        for op, value in ((_API, self.api), *_FIXED, *scalars):
            check(lib, lib.cublasdxSetOperatorInt64(LL(h), op, LL(value)), f"set operator {op}")
        for op, values in (
            (_SIZE, (spec.m, spec.n, spec.k)),
            (_PRECISION, tuple(PRECISIONS[p] for p in spec.precision)),
            (_SM, _sm(spec.arch)),
            (_BLOCK_DIM, (spec.threads, 1, 1)),
            (_ARRANGEMENT, tuple(ARRANGEMENTS[a] for a in spec.arrangement)),
            *((op, v) for op, v in self.extra if not isinstance(v, int)),
        ):
            count = ctypes.c_size_t(len(values))
            check(lib, lib.cublasdxSetOperatorInt64s(LL(h), op, count, ints(*values)), f"set {spec}")
        return self

    def __exit__(self, *exc) -> None:
        self.lib.cublasdxDestroyDescriptor(LL(self.handle))

    def ints(self, trait: int) -> tuple[int, int, int]:
        out = (LL * 3)()
        status = self.lib.cublasdxGetTraitInt64s(LL(self.handle), trait, ctypes.c_size_t(3), out)
        check(self.lib, status, f"query {self.spec}")
        return tuple(int(v) for v in out)  # type: ignore[return-value]

    def text(self, trait: int) -> str:
        size = ctypes.c_size_t()
        check(self.lib, self.lib.cublasdxGetTraitStrSize(LL(self.handle), trait, ctypes.byref(size)), "query a name")
        out = ctypes.create_string_buffer(size.value)
        check(self.lib, self.lib.cublasdxGetTraitStr(LL(self.handle), trait, size, out), "query a name")
        return out.value.decode()

    def ltoir(self) -> bytes:
        """The LTO-IR of the shared-memory API's execute function."""

        def finalize(code) -> None:
            check(self.lib, self.lib.cublasdxFinalizeCode(code, LL(self.handle)), f"generate {self.spec}")

        return self.code(finalize)

    def tensor(self, kind: int) -> int:
        out = LL()
        check(self.lib, self.lib.cublasdxCreateTensor(LL(self.handle), kind, ctypes.byref(out)), "make a tensor")
        return out.value

    def tensor_int(self, tensor: int, trait: int) -> int:
        out = LL()
        check(self.lib, self.lib.cublasdxGetTensorTraitInt64(LL(tensor), trait, ctypes.byref(out)), "query a tensor")
        return int(out.value)

    def function(self, kind: int, tensors: tuple[int, ...]) -> int:
        out, args = LL(), (LL * len(tensors))(*tensors)
        status = self.lib.cublasdxCreateDeviceFunction(
            LL(self.handle), kind, ctypes.c_size_t(len(tensors)), args, ctypes.byref(out)
        )
        check(self.lib, status, f"make device function {kind} of {self.spec}")
        return out.value

    def symbol(self, function: int) -> str:
        lib, size = self.lib, ctypes.c_size_t()
        check(
            lib, lib.cublasdxGetDeviceFunctionTraitStrSize(LL(function), _FUNCTION_SYMBOL, ctypes.byref(size)), "name"
        )
        out = ctypes.create_string_buffer(size.value)
        check(lib, lib.cublasdxGetDeviceFunctionTraitStr(LL(function), _FUNCTION_SYMBOL, size, out), "name")
        return out.value.decode()

    def code(self, finalize) -> bytes:
        """The LTO-IR of the code object that `finalize(code)` fills."""
        lib, code = self.lib, LL()
        check(lib, lib.commondxCreateCode(ctypes.byref(code)), "create a code object")
        try:
            sm = _sm(self.spec.arch)
            status = lib.commondxSetCodeOptionInt64s(code, _TARGET_SM, ctypes.c_size_t(len(sm)), ints(*sm))
            check(lib, status, "set the arch")
            args = (ctypes.c_char_p * len(NVRTC_ARGS))(*NVRTC_ARGS)
            status = lib.commondxSetCodeOptionStrs(code, _EXTRA_NVRTC_ARGS, ctypes.c_size_t(len(NVRTC_ARGS)), args)
            check(lib, status, "set NVRTC options")
            finalize(code)
            size = ctypes.c_size_t()
            check(lib, lib.commondxGetCodeLTOIRSize(code, ctypes.byref(size)), "size the LTO-IR")
            out = ctypes.create_string_buffer(size.value)
            check(lib, lib.commondxGetCodeLTOIR(code, size, out), "copy the LTO-IR")
            return out.raw
        finally:
            lib.commondxDestroyCode(code)


def _generate_fragment(spec: GemmSpec) -> tuple[FragmentTraits, bytes]:
    lds = padded_lds(spec)
    extra = ((_LEADING_DIMENSION_OPERATOR, lds), (_ALIGNMENT_OPERATOR, (OPERAND_ALIGNMENT,) * 3))
    with LOCK, Descriptor(spec, API_TENSORS, extra) as d:
        lib = d.lib
        a, b, c = (d.tensor(k) for k in (_SMEM_A, _SMEM_B, _SUGGESTED_RMEM_C))
        check(lib, lib.cublasdxFinalizeTensors(ctypes.c_size_t(3), (LL * 3)(a, b, c)), f"lay out {spec}")
        functions = (
            d.function(_EXECUTE, (a, b, c)),
            d.function(_MAP_IDX2CRD_PARTITIONER, (c,)),
            d.function(_IS_THREAD_ACTIVE, (c,)),
        )
        handles = (LL * len(functions))(*functions)

        def finalize(code) -> None:
            status = lib.cublasdxFinalizeDeviceFunctions(code, ctypes.c_size_t(len(functions)), handles)
            check(lib, status, f"generate {spec}")

        ltoir = d.code(finalize)
        traits = FragmentTraits(
            d.tensor_int(a, STORAGE_BYTES),
            d.tensor_int(b, STORAGE_BYTES),
            *lds[:2],
            d.tensor_int(c, _LOGICAL_SIZE),
            *(d.symbol(f) for f in functions),
        )
        return traits, ltoir


def _generate(spec: GemmSpec) -> tuple[GemmTraits, bytes]:
    with LOCK, Descriptor(spec) as d:
        traits = GemmTraits(d.ints(_LEADING_DIMENSION), d.ints(_ALIGNMENT), d.text(_SYMBOL_NAME))
        return traits, d.ltoir()


def cached(api: tuple[str, ...], spec: GemmSpec, generate: Callable[[GemmSpec], Any]) -> Any:
    """`generate(spec)` from the disk cache (kind "gemm"), keyed by `api` (what is generated), `spec` and the
    versions of cuBLASDx and NVRTC, or generated and cached; one process at a time generates a given entry (the
    others wait for it: seconds to tens of seconds of NVRTC each)."""
    cache = DiskCache()
    # (libmathdx compiles with the NVRTC loaded here: LTO-IR of a newer NVRTC does not link with an older nvJitLink)
    # (sm_90a is requested arch-specific, (900, 1): entries made when it was requested as plain 900 are not reused)
    specific = ("arch-specific",) if spec.arch.endswith("a") else ()
    key = make_key("gemm", *api, vars(spec), version(), toolchain.versions()["nvrtc"], *specific)
    return cache.get_or_make("gemm", key, lambda: generate(spec))


@functools.lru_cache(maxsize=64)
def gemm(spec: GemmSpec) -> tuple[GemmTraits, bytes]:
    """The traits and LTO-IR of `spec` in the shared-memory API, from the disk cache or generated
    (seconds: NVRTC compiles cuBLASDx) and cached."""
    return cached((), spec, _generate)


@functools.lru_cache(maxsize=64)
def fragment_gemm(spec: GemmSpec) -> tuple[FragmentTraits, bytes]:
    """The traits and LTO-IR of `spec` in the tensor API, its accumulator in registers (disk-cached)."""
    return cached(("tensors", *(f.name for f in fields(FragmentTraits))), spec, _generate_fragment)


def library_code(spec: GemmSpec, registers: bool) -> tuple[str, bytes]:
    """(a symbol that names it, its LTO-IR): the code of `spec` in the API `registers` picks (`gemm`,
    `fragment_gemm`), for the link."""
    if registers:
        traits, ltoir = fragment_gemm(spec)
        return traits.execute, ltoir
    shared, ltoir = gemm(spec)
    return shared.symbol, ltoir
