"""Reverse scans (`tile.scan(..., reverse=True)`) beyond the shared cases of programs.py and the option
matrix: the generated code (no GPU), the interpreter's order of a reverse chained launch, errors, the
warp-level building block (`reverse_warp_scan`), and on a GPU against sequential references: many
programs, block sizes and tile sizes around the padding cases, and the warp building block itself."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from programs import chained_reverse, linrec

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.ops.scan import REVERSE_LIBRARY, reverse_warp_scan

LANES = (1, 2, 4, 8, 16, 32)


@ct.jit
def suffix_sums(x, y, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, tile.scan(t, reverse=True, chained=True), valid=n - base)


@ct.jit
def block_suffix(x, y, n, TILE: ct.constexpr, REVERSE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, tile.scan(t, reverse=REVERSE), valid=n - base)


def _suffix_sums(x: np.ndarray) -> np.ndarray:
    return np.cumsum(x[::-1], dtype=x.dtype)[::-1]


# ----- without a GPU ----------------------------------------------------------------------------------------------
def test_a_reverse_chained_kernel_counts_program_ids_from_the_last_block():
    x = np.zeros(1, np.int32)
    k = suffix_sums.compile(x, x, 1, TILE=4096, arch="sm_90")
    body = k.numba_source
    # the prefetch guesses the program id from the last block; the ticket then gives it, counted from the last
    assert "cuda.gridDim.x - 1 - cuda.blockIdx.x" in body
    assert body.index("coop_prefetch_0(") < body.index("coop_chain_begin(") < body.index("coop_chain_tile_reverse()")
    assert "coop_chain_tile()" not in body
    assert "reverse_block_scan<cuda::std::int32_t, coop::add, 128, 32, 4096, false>" in k.shim_source
    assert ".chained(y, cb)" in k.shim_source
    assert "scan[add, reverse, chained]" in str(k.plan)
    assert k.chain_bytes == 16 and k.local_memory_bytes() == 0


@pytest.mark.parametrize("tile_size", [4096, 1000, 100])
def test_a_reverse_block_scan_has_one_barrier_and_no_local_memory(tile_size):
    x = np.zeros(1, np.int32)
    k = block_suffix.compile(x, x, 1, TILE=tile_size, REVERSE=True, arch="sm_90")
    assert "WarpScan" in str(k.plan) and "BlockScan" not in k.shim_source
    assert k.local_memory_bytes() == 0
    shim = k.shim_source[k.shim_source.index('extern "C" __device__ void coop_scan_') :]
    assert "__syncthreads" not in shim.split("\n}\n")[0]  # (the barrier is the scan's own, in the library)
    assert REVERSE_LIBRARY.count("__syncthreads();") == 2  # one, and the chained scan's after its look-back


def test_the_interpreter_runs_a_reverse_chained_launch_from_the_last_program():
    @ct.jit
    def order(x, seen, log, TILE: ct.constexpr):
        pid = ct.program_id(0)
        t = tile.load(x, pid * TILE, TILE)
        tile.store(x, pid * TILE, tile.scan(t, reverse=True, chained=True))
        log[pid] = seen[0]
        seen[0] = seen[0] + 1

    x, seen, log = np.ones(5 * 64, np.int32), np.zeros(1, np.int32), np.zeros(5, np.int32)
    ct.jit(order.fn, interpret=True)[5](x, seen, log, TILE=64)
    assert log.tolist() == [4, 3, 2, 1, 0]
    assert x.tolist() == list(range(5 * 64, 0, -1))


@pytest.mark.parametrize("interpret", [True, False], ids=["interpret", "compile"])
def test_reverse_must_be_a_constant(interpret):
    @ct.jit
    def bad(x, flag):
        t = tile.load(x, 0, 64)
        tile.store(x, 0, tile.scan(t, reverse=flag == 1))

    x = np.zeros(64, np.int32)
    with pytest.raises(ct.TileError) as info:
        if interpret:
            ct.jit(bad.fn, interpret=True)[1](x, 1)
        else:
            bad.compile(x, 1, arch="sm_90")
    lines, first = inspect.getsourcelines(bad.fn)
    call = first + next(i for i, line in enumerate(lines) if "reverse=" in line)
    assert "reverse" in info.value.message and info.value.loc.line == call, str(info.value)


def test_the_non_commutative_combine_takes_the_later_element_on_the_left():
    """h_t = a_t * h_{t+1} + b_t with the forward scan's combine function: the contract's operand order."""

    @ct.jit
    def backward(a, b, h, TILE: ct.constexpr):
        (_, th) = tile.scan((tile.load(a, 0, TILE), tile.load(b, 0, TILE)), op=linrec, reverse=True)
        tile.store(h, 0, th)

    a, b, h = np.array([2.0, 3.0, 5.0]), np.array([1.0, 10.0, 100.0]), np.zeros(3)
    ct.jit(backward.fn, interpret=True)[1](a, b, h, TILE=3)
    assert h.tolist() == [2 * (3 * 100 + 10) + 1, 3 * 100 + 10, 100]


def _warp_source(lanes: int) -> str:
    """A kernel scanning one int and one (int, int) pair per lane with `reverse_warp_scan` over logical warps of
    `lanes` lanes: the pair under a non-commutative op (the later lane's first field wins unless it is 0)."""
    return (
        "#include <cub/warp/warp_scan.cuh>\n" + REVERSE_LIBRARY + "struct pair { int a, b; };\n"
        "struct add { __device__ int operator()(int x, int y) const { return x + y; } };\n"
        "struct last { __device__ pair operator()(const pair& l, const pair& r) const {\n"
        "  return pair{r.a != 0 ? r.a : l.a, l.b * 3 + r.b}; } };\n"
        f'extern "C" __global__ void warp_scan_{lanes}(const int* x, int* inc, int* exc, int* pa, int* pb) {{\n'
        f"  __shared__ typename cub::WarpScan<int, {lanes}>::TempStorage ti[32];\n"
        f"  __shared__ typename cub::WarpScan<pair, {lanes}>::TempStorage tp[32];\n"
        f"  const int i = blockIdx.x * blockDim.x + threadIdx.x, g = threadIdx.x / {lanes};\n"
        "  int in, ex; pair p{x[i], x[i] & 7}, pin, pex;\n"
        f"  {reverse_warp_scan('int', lanes, 'add', 'ti[g]', 'x[i]', 'in', 'ex')}\n"
        f"  {reverse_warp_scan('pair', lanes, 'last', 'tp[g]', 'p', 'pin', 'pex')}\n"
        "  inc[i] = in; exc[i] = ex; pa[i] = pin.a; pb[i] = pin.b;\n"
        "}\n"
    )


def _warp_cubin(lanes: int, arch: str) -> bytes:
    """`_warp_source` compiled to a cubin by NVRTC with the shims' headers and options."""
    from cuda.core import Program, ProgramOptions

    from coop_tiles.runtime.toolchain import CXX_STD, include_dirs

    options = ProgramOptions(arch=arch, std=CXX_STD, include_path=list(include_dirs()))
    program = Program(_warp_source(lanes), "c++", options)
    try:
        return bytes(program.compile("cubin").code)
    finally:
        program.close()


@pytest.mark.parametrize("lanes", LANES)
def test_the_warp_building_block_compiles_for_every_logical_warp(lanes):
    assert _warp_cubin(lanes, "sm_90")[:4] == b"\x7fELF"


def test_the_warp_building_block_takes_powers_of_two_up_to_32():
    with pytest.raises(ValueError, match="power of two"):
        reverse_warp_scan("int", 12, "add", "t", "v", "i", "e")
    with pytest.raises(ValueError, match="power of two"):
        reverse_warp_scan("int", 64, "add", "t", "v", "i", "e")


def _warp_reference(x: np.ndarray, lanes: int):
    """(inclusive sums, exclusive sums, pair a, pair b) of each logical warp, from its last lane."""
    inc, exc, pa, pb = (np.zeros_like(x) for _ in range(4))
    for g in range(0, len(x), lanes):
        acc, pair = 0, None
        for i in range(g + lanes - 1, g - 1, -1):
            exc[i] = acc
            acc += int(x[i])
            inc[i] = acc
            item = (int(x[i]), int(x[i]) & 7)
            pair = item if pair is None else (item[0] if item[0] != 0 else pair[0], pair[1] * 3 + item[1])
            pa[i], pb[i] = pair[0], np.int64(pair[1]).astype(np.int32)
    return inc, exc, pa, pb


# ----- on a GPU -----------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("lanes", LANES)
def test_gpu_the_warp_building_block_matches_a_sequential_scan(lanes, tmp_path):
    import cupy as cp

    cubin = tmp_path / "warp.cubin"
    cubin.write_bytes(_warp_cubin(lanes, f"sm_{cp.cuda.Device().compute_capability}"))
    kernel = cp.RawModule(path=str(cubin)).get_function(f"warp_scan_{lanes}")
    rng = np.random.default_rng(lanes)
    x = np.where(rng.random(4 * 256) < 0.3, 0, rng.integers(-9, 10, 4 * 256)).astype(np.int32)
    outs = [cp.zeros(len(x), cp.int32) for _ in range(4)]
    kernel((4,), (256,), (cp.asarray(x), *outs))
    inc, exc, pa, pb = _warp_reference(x, lanes)
    got = [cp.asnumpy(o) for o in outs]
    np.testing.assert_array_equal(got[0], inc)
    last = np.arange(len(x)) % lanes == lanes - 1  # each logical warp's last lane comes first: no exclusive value
    np.testing.assert_array_equal(got[1][~last], exc[~last])
    np.testing.assert_array_equal(got[2], pa)
    np.testing.assert_array_equal(got[3], pb)


@pytest.mark.gpu
@pytest.mark.parametrize("programs", [1, 2, 3, 1000, 100_000])
def test_gpu_reverse_chained_suffix_sums(programs):
    import cupy as cp

    tile_size = 1024
    n = programs * tile_size - 17
    x = np.random.default_rng(programs).integers(-100, 100, n).astype(np.int64)
    y = cp.zeros(n, cp.int64)
    suffix_sums[programs](cp.asarray(x), y, n, TILE=tile_size)
    np.testing.assert_array_equal(cp.asnumpy(y), _suffix_sums(x))


@pytest.mark.gpu
def test_gpu_reverse_chained_repeated_launches_of_changing_grids():
    import cupy as cp

    rng = np.random.default_rng(7)
    for programs in [5, 300, 2, 300, 40]:
        n = programs * 512 - 3
        x = rng.integers(-100, 100, n).astype(np.int32)
        y = cp.zeros(n, cp.int32)
        suffix_sums[programs](cp.asarray(x), y, n, TILE=512)
        np.testing.assert_array_equal(cp.asnumpy(y), _suffix_sums(x))


@pytest.mark.gpu
@pytest.mark.parametrize("threads", [32, 64, 128, 256, 1024])
@pytest.mark.parametrize("tile_size", [1, 31, 32, 33, 100, 255, 256, 257, 1000, 4096, 5000])
def test_gpu_reverse_block_scans_of_every_padding(threads, tile_size):
    """Tiles smaller and larger than the block, whole warps and threads of padding, a partial last thread."""
    import cupy as cp

    kernel = ct.jit(block_suffix.fn, block_threads=threads)
    n = 3 * tile_size - 1
    x = np.random.default_rng(tile_size).integers(-100, 100, n).astype(np.int32)
    y = cp.zeros(n, cp.int32)
    kernel[3](cp.asarray(x), y, n, TILE=tile_size, REVERSE=True)
    want = np.concatenate([_suffix_sums(x[s : s + tile_size]) for s in range(0, n, tile_size)])
    np.testing.assert_array_equal(cp.asnumpy(y), want)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["add", "max", "min", "xor"])
def test_gpu_reverse_chained_scans_of_ops_with_padding(op):
    import cupy as cp
    from programs import _identity, ref_chained_reverse

    n, tile_size = 100_003, 1000
    grid = ct.cdiv(n, tile_size)
    x = np.random.default_rng(3).integers(-1000, 1000, n).astype(np.int32)
    other = _identity(op, x.dtype)
    y, totals = cp.zeros(n, cp.int32), cp.zeros(grid, cp.int32)
    chained_reverse[grid](cp.asarray(x), y, totals, n, other, TILE=tile_size, OP=op, EXCLUSIVE=False)
    want_y, want_totals = ref_chained_reverse(
        x, np.zeros(n, np.int32), np.zeros(grid, np.int32), n, other, tile_size, op, False
    )
    np.testing.assert_array_equal(cp.asnumpy(y), want_y)
    np.testing.assert_array_equal(cp.asnumpy(totals), want_totals)


@pytest.mark.gpu
def test_gpu_reverse_and_forward_scans_in_one_loop():
    """A reverse scan in a loop next to a forward one: two TempStorage in turn, no barrier between runs."""
    import cupy as cp

    @ct.jit
    def both(x, fwd, bwd, n, CHUNK: ct.constexpr):
        f = 0
        b = 0
        for base in range(0, n, CHUNK):
            t = tile.load(x, base, CHUNK, valid=n - base, other=0)
            s, f = tile.scan(t, initial=f, return_total=True)
            r, b = tile.scan(t, reverse=True, initial=b, return_total=True)
            tile.store(fwd, base, s, valid=n - base)
            tile.store(bwd, base, r, valid=n - base)

    n, chunk = 10_000, 512
    x = np.random.default_rng(1).integers(-100, 100, n).astype(np.int64)
    fwd, bwd = cp.zeros(n, cp.int64), cp.zeros(n, cp.int64)
    both[1](cp.asarray(x), fwd, bwd, n, CHUNK=chunk)
    np.testing.assert_array_equal(cp.asnumpy(fwd), np.cumsum(x))
    # each chunk's suffix sums, after the sum of the chunks before it (the carry runs forward through the loop)
    want = np.concatenate([_suffix_sums(x[s : s + chunk]) + x[:s].sum() for s in range(0, n, chunk)])
    np.testing.assert_array_equal(cp.asnumpy(bwd), want)
