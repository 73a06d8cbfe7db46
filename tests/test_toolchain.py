"""The toolchain through cuda.core: TempStorage sizes from the LTO-IR compile, headers per op, readable
NVRTC and nvJitLink failures, and the stage timings of a compile (no GPU needed)."""

import gc
import inspect
import re

import numpy as np
import pytest
from programs import reductions, scaled_cumsum, vector_add

import coop_tiles as ct
from coop_tiles import tile
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


@ct.jit
def load_store(x, y, n, TILE: ct.constexpr):
    t = tile.load(x, 0, TILE, valid=n)
    tile.store(y, 0, t + 1, valid=n)  # STORE


def store_line() -> int:
    lines = inspect.getsource(load_store.fn).splitlines()
    first = load_store.fn.__code__.co_firstlineno - 1  # (the source starts at the decorator)
    return first + next(i for i, text in enumerate(lines) if "# STORE" in text) + 1


# (cuda.core's Program.__dealloc__ raises an ignored AttributeError for the program that failed here;
# collected at the end of this test, it is this test's warning, not the next one's)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_shim_nvrtc_rejects_is_reported_at_its_ops_line(monkeypatch):
    """A broken shim (here the store's) is a CompileError at the line of the op that wrote it."""
    from coop_tiles.codegen.shims import ShimWriter

    define = ShimWriter.define

    def broken(self, call, code, body):
        define(self, call, code, body + ("  this is not C++;\n" if call.name.startswith("coop_store") else ""))

    monkeypatch.setattr(ShimWriter, "define", broken)
    x = np.zeros(8, np.float32)
    with pytest.raises(CompileError) as info:
        load_store.compile(x, x, 8, TILE=512, arch="sm_90")
    e = info.value
    assert (e.loc.filename, e.loc.line) == (__file__, store_line())
    assert re.search(r"in the shim of tile\.store \(coop_store_1, lines \d+-\d+ of the shims\)", e.message), e.message
    assert f"{__file__}:{store_line()}" in str(e)
    shims = compiler.shims_for(*_planned(load_store, x))
    line = toolchain.shim_lines(e.details.log)[0]
    assert shims.origin_of_line(line).shim == "coop_store_1"
    del e, info
    gc.collect()


def _planned(kernel, x):
    """(program, layouts, sig) of `kernel` over float32 arrays, TILE=512, for sm_90."""
    from coop_tiles.runtime.arguments import host_arg_type

    params = tuple((n, host_arg_type(v, n)) for n, v in zip(("x", "y", "n"), (x, x, 8)))
    sig = Signature(params, (("TILE", 512),), None, "sm_90")
    program = compiler.rewrite_stage(compiler.build_stage(kernel.fn, sig))
    return program, compiler.layout_stage(program, sig), sig


def test_a_link_failure_naming_a_shim_is_reported_at_its_ops_line():
    x = np.zeros(8, np.float32)
    shims = compiler.shims_for(*_planned(load_store, x))
    e = CompileError("nvJitLink failed: ERROR_PTX_COMPILE (4)", log="ptxas error: in function 'coop_load_0'")
    origin = compiler.failing_shim(e, shims)
    assert origin.shim == "coop_load_0" and type(origin.stmt).__name__ == "TileLoad"
    assert compiler.failing_shim(CompileError("nvJitLink failed", log="no shim named"), shims) is None


def test_each_shims_lines_are_where_the_source_has_it():
    x = np.zeros(8, np.float32)
    for kernel in (load_store, scaled_cumsum):
        program, layouts, sig = _planned(kernel, x) if kernel is load_store else _planned_cumsum()
        shims = compiler.shims_for(program, layouts, sig)
        lines = shims.source.splitlines()
        assert [o.shim for o in shims.origins] == [c.name for c in shims.calls.values()]
        for o in shims.origins:
            text = "\n".join(lines[o.first - 1 : o.last])
            assert f'extern "C" __device__ void {o.shim}(' in text and text.rstrip().endswith("}")
            assert shims.origin_of_line(o.first) is o and shims.origin_of_line(o.last) is o
        assert shims.origin_of_line(1) is None and shims.origin_of_line(len(lines)) is None  # header, entry


def _planned_cumsum():
    from coop_tiles.runtime.arguments import host_arg_type

    args = (np.zeros(1, np.int32), np.zeros(1, np.float64), 1, 2.0)
    params = tuple((n, host_arg_type(v, n)) for n, v in zip(("x", "y", "n", "alpha"), args))
    sig = Signature(params, (("TILE", 4096),), None, "sm_90")
    program = compiler.rewrite_stage(compiler.build_stage(scaled_cumsum.fn, sig))
    return program, compiler.layout_stage(program, sig), sig


def test_integer_division_intrinsic_floors_as_python_with_zero_for_what_has_no_quotient():
    """The body's integer `//` and `%` (`toolchain._int_division`, branch-free), built by the same code under Numba's
    CPU target: Python's floor rules for every integer dtype, 0 for a zero divisor and for the most negative value
    over -1, at the edges and on random operands."""
    numba = pytest.importorskip("numba")
    from numba.core.extending import intrinsic

    from coop_tiles.runtime.toolchain import _int_division

    floordiv = _int_division(intrinsic, numba.types, remainder=False)
    mod = _int_division(intrinsic, numba.types, remainder=True)

    @numba.njit
    def divide(a, b, q, r):
        for i in range(a.size):
            q[i], r[i] = floordiv(a[i], b[i]), mod(a[i], b[i])

    rng = np.random.default_rng(7)
    for dt in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
        info = np.iinfo(dt)
        edges = [
            v for v in (info.min, info.min + 1, -7, -3, -1, 0, 1, 2, 3, 7, info.max - 1, info.max) if v >= info.min
        ]
        a = np.array([v for v in edges for _ in edges] + rng.integers(info.min, info.max, 2000, dt).tolist(), dt)
        b = np.array(edges * len(edges) + rng.integers(max(info.min, -9), 10, 2000).tolist(), dt)
        q, r = np.empty_like(a), np.empty_like(a)
        divide(a, b, q, r)
        for x, y, got_q, got_r in zip(a.tolist(), b.tolist(), q.tolist(), r.tolist()):
            none = y == 0 or (x == info.min and y == -1 and info.min < 0)
            assert (got_q, got_r) == ((0, 0) if none else (x // y, x % y)), (dt.__name__, x, y)
