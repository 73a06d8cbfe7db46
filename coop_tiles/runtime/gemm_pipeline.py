"""Pipelined block GEMMs from cuBLASDx (libmathdx's device and tile pipelines): a whole K loop as one call.

`mathdx.fragment_gemm` multiplies tiles the program already holds; here cuBLASDx loads them itself. Given global
`a` (M, K) and `b` (K, N), a *device pipeline* (built once per pair of matrices, on the device, in global memory:
on sm_90a it holds TMA descriptors) describes them; in the kernel each block makes a *tile pipeline* for its
(BM, BN) tile of the product, whose `execute` runs the whole K loop into an opaque register accumulator: `depth`
stages of BM x BK and BK x BN operand tiles in shared memory, filled by TMA (sm_90a, 16-byte aligned operands whose
rows are whole 16 bytes; otherwise cp.async) while the tensor cores (WGMMA on sm_90a) work on the stages already
filled. The block must have exactly `threads` threads (cuBLASDx's StaticBlockDim: without it ptxas cannot tell that
the WGMMA path is uniform, and serialises the WGMMAs). The accumulator is then copied to shared memory by the library's
own copy (a row-major float tile), from where the kernel reads it as it needs: the library's copy to global memory
instead is a function call that ptxas does not inline, and the WGMMA pipeline crossing it makes ptxas serialise the
WGMMAs too.

The generated functions (all `extern "C"`, every tensor and pipeline a struct passed by value, see `DEVICE_TYPES`):

- `create_device(DP dp, GA a, GB b)`: one thread fills the device pipeline at `dp.ptr` (`device_bytes`, global
  memory) for `a` and `b`; `a.ptr`, `b.ptr`: the matrices, with their runtime shapes and leading dimension.
- `create_tile(DP dp, TP tp, char* smem, int* tile_m, int* tile_n)`: the whole block makes its tile pipeline (at
  `tp.ptr`, `tile_bytes` of the thread's own memory) over `buffer_bytes` of shared memory at `smem`, for the tile
  of rows `tile_m * BM` and columns `tile_n * BN`.
- `create_acc(ACC acc)`, `execute(TP tp, ACC acc)` (acc += the tile's whole K loop), `destroy_acc(ACC)`,
  `destroy_tile(TP)`, `destroy_device(DP)`.
- `store_shared(ACC acc, SC c)`: the accumulator into a (BM, BN) float tile at `c.ptr` in shared memory, row-major,
  rows BN apart.

libmathdx compiles cuBLASDx for this (about 20 s of NVRTC), so the traits and LTO-IR are disk-cached (kind
"gemm") like `mathdx`'s.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, fields

from . import mathdx
from .mathdx import LL, Descriptor, GemmSpec, check, ints

#: LIBMATHDX_RUNTIME: a shape or stride given at run time
_RUNTIME = -(2**63)
#: commondxValueType of each precision name
_VALUE_TYPES = {"bf16": 4, "f16": 7, "f32": 12}
# cublasdxMemorySpace, cublasdxOperatorType, cublasdxTensorType (libcublasdx.h)
_SMEM_SPACE, _GMEM_SPACE = 1, 2
_ALIGNMENT_OP, _STATIC_BLOCK_DIM, _INPUT_STREAMING, _WITH_PIPELINE = 11, 12, 13, 14
_SUGGESTED_ACCUMULATOR_C = 10
# cublasdxDevicePipelineType, cublasdxTilePipelineType, cublasdxBlockSizeStrategy, cublasdxPipelineTrait
_DEVICE_SUGGESTED, _TILE_DEFAULT, _FIXED_BLOCK = 0, 0, 1
_STORAGE, _STORAGE_ALIGNMENT, _BUFFER_BYTES, _BUFFER_ALIGNMENT, _PIPELINE_BLOCK = 0, 1, 2, 3, 5
# cublasdxDeviceFunctionType
_EXECUTE, _COPY, _CREATE, _DESTROY = 0, 1, 11, 12
#: the alignment in bytes the pipeline may assume of a, b and c in global memory (TMA needs 16)
ALIGNMENT = 16

#: the C++ types of the generated functions' arguments: a tensor or pipeline of the thread's, block's or device's
#: memory is one pointer; a global matrix also carries its two runtime extents and its leading dimension
DEVICE_TYPES = (
    "struct coop_dx_handle { void* ptr; };\nstruct coop_dx_matrix { const void* ptr; long long rows, cols, ld; };\n"
)


@dataclass(frozen=True)
class PipelineSpec:
    """A pipelined GEMM: `gemm`, the block's tile (m, n, k = BM, BN, BK), precisions, arrangements of a and b (in
    global memory, as the library keeps them in shared memory) and c, threads and arch; `depth`, the stages."""

    gemm: GemmSpec
    depth: int

    def __str__(self) -> str:
        return f"{self.gemm}, {self.depth} stages"


@dataclass(frozen=True)
class PipelineTraits:
    """What cuBLASDx says of a `PipelineSpec`: the bytes and alignment of the device pipeline (global memory), of
    the stages' shared-memory buffer, of a tile pipeline and of the accumulator (the thread's memory); the threads
    the block must have; the symbols of the functions of the module's docstring."""

    device_bytes: int
    device_align: int
    buffer_bytes: int
    buffer_align: int
    tile_bytes: int
    tile_align: int
    acc_bytes: int
    acc_align: int
    threads: int
    create_device: str
    create_tile: str
    create_acc: str
    execute: str
    store_shared: str
    destroy_acc: str
    destroy_tile: str
    destroy_device: str

    def declarations(self) -> str:
        """C++ declaring the generated functions (after `DEVICE_TYPES`)."""
        h, g = "coop_dx_handle", "coop_dx_matrix"
        signatures = (
            (self.create_device, f"{h}, {g}, {g}"),
            (self.create_tile, f"{h}, {h}, char*, int*, int*"),
            (self.create_acc, h),
            (self.execute, f"{h}, {h}"),
            (self.store_shared, f"{h}, {h}"),
            (self.destroy_acc, h),
            (self.destroy_tile, h),
            (self.destroy_device, h),
        )
        return "".join(f'extern "C" __device__ void {name}({args});\n' for name, args in signatures)


def _strided(lib: ctypes.CDLL, space: int, precision: str, shape: tuple[int, int], stride: tuple[int, int]) -> int:
    """A strided tensor handle (cublasdxCreateTensorStrided) of `space`; `_RUNTIME` extents are run-time values."""
    out = LL()
    status = lib.cublasdxCreateTensorStrided(
        space, _VALUE_TYPES[precision], None, LL(2), ints(*shape), ints(*stride), ctypes.byref(out)
    )
    check(lib, status, "make a strided tensor")
    return out.value


def _strides(arrangement: str, ld: int) -> tuple[int, int]:
    """The (row, column) strides of a matrix of `arrangement` whose leading dimension is `ld`."""
    return (ld, 1) if arrangement == "row" else (1, ld)


def _generate(spec: PipelineSpec) -> tuple[PipelineTraits, bytes]:
    g = spec.gemm
    ab, _, c = g.precision
    extra = ((_ALIGNMENT_OP, (ALIGNMENT,) * 3), (_STATIC_BLOCK_DIM, 1), (_INPUT_STREAMING, 1), (_WITH_PIPELINE, 1))
    with mathdx.LOCK, Descriptor(g, mathdx.API_TENSORS, extra) as d:
        lib, h = d.lib, LL(d.handle)
        runtime = (_RUNTIME, _RUNTIME)
        a = _strided(lib, _GMEM_SPACE, ab, runtime, _strides(g.arrangement[0], _RUNTIME))
        b = _strided(lib, _GMEM_SPACE, ab, runtime, _strides(g.arrangement[1], _RUNTIME))
        out_shared = _strided(lib, _SMEM_SPACE, c, (g.m, g.n), (g.n, 1))
        acc = d.tensor(_SUGGESTED_ACCUMULATOR_C)
        device, tile = LL(), LL()
        status = lib.cublasdxCreateDevicePipeline(
            h, _DEVICE_SUGGESTED, LL(spec.depth), _FIXED_BLOCK, LL(a), LL(b), ctypes.byref(device)
        )
        check(lib, status, f"make the device pipeline of {spec}")
        check(lib, lib.cublasdxCreateTilePipeline(h, _TILE_DEFAULT, device, ctypes.byref(tile)), "make a tile pipeline")
        tensors = (LL * 4)(a, b, out_shared, acc)
        pipelines = (LL * 2)(device.value, tile.value)
        check(lib, lib.cublasdxFinalize(ctypes.c_size_t(4), tensors, ctypes.c_size_t(2), pipelines), f"lay out {spec}")

        def with_pipelines(kind: int, tensors: tuple[int, ...], pipelines: tuple[int, ...]) -> int:
            out = LL()
            status = lib.cublasdxCreateDeviceFunctionWithPipelines(
                h,
                kind,
                ctypes.c_size_t(len(tensors)),
                (LL * max(1, len(tensors)))(*tensors),
                ctypes.c_size_t(len(pipelines)),
                (LL * len(pipelines))(*pipelines),
                ctypes.byref(out),
            )
            check(lib, status, f"make device function {kind} of {spec}")
            return out.value

        dp, tp = device.value, tile.value
        functions = (
            with_pipelines(_CREATE, (), (dp,)),
            with_pipelines(_CREATE, (), (tp,)),
            d.function(_CREATE, (acc,)),
            with_pipelines(_EXECUTE, (acc,), (tp,)),
            d.function(_COPY, (acc, out_shared)),
            d.function(_DESTROY, (acc,)),
            with_pipelines(_DESTROY, (), (tp,)),
            with_pipelines(_DESTROY, (), (dp,)),
        )
        handles = (LL * len(functions))(*functions)

        def finalize(code) -> None:
            status = lib.cublasdxFinalizeDeviceFunctions(code, ctypes.c_size_t(len(functions)), handles)
            check(lib, status, f"generate {spec}")

        ltoir = d.code(finalize)

        def trait(pipeline: int, which: int) -> int:
            out = LL()
            check(lib, lib.cublasdxGetPipelineTraitInt64(LL(pipeline), which, ctypes.byref(out)), "query a pipeline")
            return int(out.value)

        block = (LL * 3)()
        check(lib, lib.cublasdxGetPipelineTraitInt64s(device, _PIPELINE_BLOCK, ctypes.c_size_t(3), block), "query")
        traits = PipelineTraits(
            trait(dp, _STORAGE),
            trait(dp, _STORAGE_ALIGNMENT),
            trait(dp, _BUFFER_BYTES),
            trait(dp, _BUFFER_ALIGNMENT),
            trait(tp, _STORAGE),
            trait(tp, _STORAGE_ALIGNMENT),
            d.tensor_int(acc, mathdx.STORAGE_BYTES),
            d.tensor_int(acc, mathdx.ALIGNMENT_BYTES),
            int(block[0] * block[1] * block[2]),
            *(d.symbol(f) for f in functions),
        )
        return traits, ltoir


@functools.lru_cache(maxsize=16)
def pipeline_gemm(spec: PipelineSpec) -> tuple[PipelineTraits, bytes]:
    """The traits and LTO-IR of `spec` (disk-cached; generated in about 20 s of NVRTC)."""
    api = (
        "pipeline",
        "static block",
        "shared out",
        str(spec.depth),
        str(ALIGNMENT),
        *(f.name for f in fields(PipelineTraits)),
    )
    return mathdx.cached(api, spec.gemm, lambda _: _generate(spec))
