"""The toolchain through cuda.core: TempStorage sizes from the LTO-IR compile, headers per op, readable
NVRTC and nvJitLink failures, and the stage timings of a compile (no GPU needed)."""

import re

import numpy as np
import pytest
from programs import reductions, scaled_cumsum, vector_add

import coop_tiles as ct
from coop_tiles.errors import CompileError
from coop_tiles.runtime import compiler, toolchain
from coop_tiles.runtime.cache import DiskCache
from coop_tiles.runtime.kernel import Signature

F32, I32 = np.zeros(1, np.float32), np.zeros(1, np.int32)


def shims_of(kernel, *args, **constexprs):
    from coop_tiles.runtime.arguments import host_arg_type

    names = [p for p in kernel.parsed.params if p not in kernel.parsed.constexprs]
    params = tuple((n, host_arg_type(v, n)) for n, v in zip(names, args))
    sig = Signature(params, tuple(constexprs.items()), None, "sm_90")
    program = compiler.rewrite_stage(compiler.build_stage(kernel.fn, sig))
    return compiler.shim_stage(program, compiler.layout_stage(program, sig))


def ptx_sizes(shims) -> dict[int, tuple[int, int]]:
    """The reference: each TempStorage's sizeof/alignof exported as constants and read back from PTX."""
    from cuda.bindings import nvrtc

    source = shims.source + "".join(
        f'extern "C" __device__ unsigned ref_bytes_{c} = sizeof(coop_storage_{c});\n'
        f'extern "C" __device__ unsigned ref_align_{c} = alignof(coop_storage_{c});\n'
        for c in shims.storage_cids
    )
    _, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"ref.cu", 0, [], [])
    opts = [b"-std=c++17", b"-rdc=true", b"-arch=compute_90", *(f"-I{d}".encode() for d in toolchain.include_dirs())]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    _, size = nvrtc.nvrtcGetPTXSize(prog)
    ptx = b" " * size
    nvrtc.nvrtcGetPTX(prog, ptx)
    nvrtc.nvrtcDestroyProgram(prog)
    found = {m[0]: int(m[1] or 0) for m in re.findall(rb"\.u32 (ref_\w+)(?: = (\d+))?;", ptx)}
    return {c: (found[f"ref_bytes_{c}".encode()], found[f"ref_align_{c}".encode()]) for c in shims.storage_cids}


def test_storage_sizes_from_the_ltoir_compile_match_ptx(tmp_path):
    shims = shims_of(scaled_cumsum, I32, np.zeros(1, np.float64), 1, 2.0, TILE=4096)
    assert len(shims.storage_cids) == 3
    _, needs = compiler.nvrtc_stage(shims, "sm_90", DiskCache(tmp_path))
    assert {c: (n.size, n.align) for c, n in needs.items()} == ptx_sizes(shims)
    # BlockLoad<int, 256, 16, WARP_TRANSPOSE> needs 16896 bytes, not 256 * 16 * 4 (checked by hand, 2026-11-21)
    assert needs[shims.storage_cids[0]].size == 16896


def test_a_program_includes_only_the_cub_headers_its_ops_use():
    scan = shims_of(scaled_cumsum, I32, np.zeros(1, np.float64), 1, 2.0, TILE=4096).headers
    assert {"cub/block/block_load.cuh", "cub/block/block_store.cuh", "cub/block/block_scan.cuh"} <= set(scan)
    assert "cub/block/block_reduce.cuh" not in scan
    assert "cub/block/block_reduce.cuh" in shims_of(reductions, F32, F32, 1, TILE=1024).headers
    assert "cub/block/block_scan.cuh" not in shims_of(vector_add, F32, F32, F32, 1, TILE=1000).headers


def test_nvrtc_failure_is_a_readable_compile_error():
    with pytest.raises(CompileError) as info:
        toolchain.nvrtc_compile('extern "C" __device__ int coop_broken() { return coop_x; }\n', "sm_90")
    assert info.value.message == "NVRTC compilation of the CUB shims failed (6: NVRTC_ERROR_COMPILATION)"
    assert 'coop_shims.cu(1): error: identifier "coop_x" is undefined' in info.value.details.log


def test_nvjitlink_failure_is_a_readable_compile_error():
    source = (
        'extern "C" __device__ void coop_missing(int*);\nextern "C" __global__ void k(int* x) { coop_missing(x); }\n'
    )
    ltoir, _ = toolchain.nvrtc_compile(source, "sm_90")
    with pytest.raises(CompileError) as info:
        toolchain.link([("coop_shims", ltoir)], "sm_90")
    assert info.value.message == "nvJitLink failed: ERROR_PTX_COMPILE (4)"
    assert "Unresolved extern function 'coop_missing'" in info.value.details.log


def test_cold_compile_times_its_stages_and_a_warm_one_skips_the_compilers(tmp_path, monkeypatch):
    monkeypatch.setenv("COOP_TILES_CACHE_DIR", str(tmp_path))
    cold = ct.jit(scaled_cumsum.fn).compile(I32, np.zeros(1, np.float64), 1, 2.0, TILE=1536, arch="sm_90")
    assert {"front end", "NVRTC", "plan", "Numba", "nvJitLink", "total"} <= set(cold.timings)
    assert cold.timings["total"] >= cold.timings["NVRTC"] + cold.timings["Numba"] + cold.timings["nvJitLink"]
    assert b"coop_size_probe" not in cold.cubin  # the size probes are dropped at the link
    warm = ct.jit(scaled_cumsum.fn).compile(I32, np.zeros(1, np.float64), 1, 2.0, TILE=1536, arch="sm_90")
    assert set(warm.timings) == {"front end", "plan", "total"}
    assert warm.cubin == cold.cubin
