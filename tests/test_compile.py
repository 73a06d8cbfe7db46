"""Every shared program compiles to a cubin for sm_80 and sm_90 on a machine without a GPU."""

import itertools
import re

import numpy as np
import pytest
from carve_checker import check, format_report
from drawing_checker import drawing_problems
from programs import CASES, elementwise_math, scaled_cumsum, vector_add

from coop_tiles.codegen.numba_body import _BodyWriter, element_expr

BARRIER = re.compile(r"^\s*(?:bar|barrier)\.sync", re.M)

# Every distinct specialisation compiles for sm_90; every program compiles for sm_80 too.
_specialisations, _programs = {}, {}
for _case in CASES:
    _key = (
        _case.kernel,
        tuple(type(a) if not isinstance(a, np.ndarray) else a.dtype for a in _case.args),
        tuple(sorted(_case.constexprs.items())),
    )
    _specialisations.setdefault(_key, _case)
    _programs.setdefault(_case.kernel, _case)
COMPILE_CASES = [("sm_90", c) for c in _specialisations.values()] + [("sm_80", c) for c in _programs.values()]


@pytest.mark.parametrize("arch,case", COMPILE_CASES, ids=lambda v: v if isinstance(v, str) else v.name)
def test_compiles_to_cubin(case, arch, tmp_path):
    k = case.kernel.compile(*case.args, arch=arch, **case.constexprs)
    assert k.cubin[:4] == b"\x7fELF"
    assert k.arch == arch
    assert k.block_threads % 32 == 0
    assert "def body(" in k.numba_source
    assert f"__launch_bounds__({k.block_threads})" in k.shim_source
    problems = check(k.program, k.plan)  # the plan with NVRTC's TempStorage sizes: no race, no clobber
    assert not problems, format_report(problems, k.program, k.plan)
    problems = drawing_problems(k.plan, tmp_path / "plan.svg", k.program)  # and its drawing shows it
    assert not problems, "\n".join(problems)


def test_load_scan_store_uses_warp_transpose_and_keeps_tiles_in_registers():
    x = np.zeros(1, np.int32)
    k = scaled_cumsum.compile(x, np.zeros(1, np.float64), 1, 2.0, TILE=4096, arch="sm_90")
    # CHECK lines: the planner's choices show up in the generated C++.
    assert "cub::BlockLoad<cuda::std::int32_t, 256, 16, cub::BLOCK_LOAD_WARP_TRANSPOSE>" in k.shim_source
    assert "cub::BlockScan<double, 256, cub::BLOCK_SCAN_WARP_SCANS>" in k.shim_source
    assert "InclusiveSum(y, y)" in k.shim_source
    assert "cub::BlockStore<double, 256, 16, cub::BLOCK_STORE_WARP_TRANSPOSE>" in k.shim_source
    assert k.local_memory_bytes() == 0
    assert len(BARRIER.findall(k.ptx)) >= 2


def test_elementwise_only_program_loads_striped_without_shared_memory():
    x = np.zeros(1, np.float32)
    k = vector_add.compile(x, x, x, 1, TILE=1000, arch="sm_90")
    assert k.shared_bytes == 0
    assert "LoadDirectStriped<256>" in k.shim_source and "StoreDirectStriped<256>" in k.shim_source
    assert "BlockLoad<" not in k.shim_source
    assert all(t.arrangement == "striped" for t in k.plan.tiles.values())
    assert k.local_memory_bytes() == 0
    assert not BARRIER.findall(k.ptx)


def test_element_wise_chains_are_one_loop_and_choices_take_no_branch():
    """Numba's compile time grows with the square of a body's basic blocks: each store's chain of element-wise
    ops is one loop over the items, and tile.where, maximum and minimum choose without a branch (softplus's own
    conditional is the body's only one)."""
    x = np.zeros(1, np.float32)
    source = elementwise_math.compile(x, x, 1, TILE=1024, arch="sm_90").numba_source  # 4 items per thread
    assert source.count("for i in range(") == 1 + 7, source  # the loaded tile's copy into t, then one per store
    assert source.count(" if ") == 1 and source.count("select(") == 3, source


def test_item_loops_keep_apart_shared_tiles_that_share_bytes_at_different_items():
    """Statements over tiles in shared memory join one loop over the items unless two of its tiles share bytes
    other than item for item (reused memory: a loop would write one's item before it read the other's)."""
    placed = {"a": (0, 1024, 12, 4)}  # (first byte, end, bytes between threads' items, item size)
    assert not _BodyWriter.overlap({"b": (0, 1024, 12, 4)}, placed)  # a result written over its operand
    assert not _BodyWriter.overlap({"b": (1024, 2048, 12, 4)}, placed)
    assert _BodyWriter.overlap({"b": (512, 1536, 12, 4)}, placed)
    assert _BodyWriter.overlap({"b": (0, 512, 4, 2)}, placed)


def test_pinned_block_threads_sets_items_per_thread():
    import coop_tiles as ct

    k = ct.jit(scaled_cumsum.fn, block_threads=128).compile(
        np.zeros(1, np.int32), np.zeros(1, np.float64), 1, 2.0, TILE=1000, arch="sm_90"
    )
    assert k.block_threads == 128
    assert {t.items_per_thread for t in k.plan.tiles.values()} == {8}
    assert "__launch_bounds__(128)" in k.shim_source


#: programs allowed local memory, and how many bytes (None: any): large_tile's 40000-item tile (157 items
#: per thread, kept in shared memory) spills registers (176 bytes at sm_90); elementwise_math's sin and cos
#: take libdevice's slow path for arguments past about 1e5 (Payne-Hanek reduction), which keeps 7 words in
#: a local array (28 bytes, a 32-byte frame where ptxas keeps it)
LOCAL_ALLOWED = {"large_tile": None, "elementwise_math": 32}


@pytest.mark.parametrize("case", list(_programs.values()), ids=lambda c: c.kernel.__name__)
def test_no_local_memory(case):
    """Tiles, tuple items and combine functions stay in registers: no .local (stack) memory or spills."""
    k = case.kernel.compile(*case.args, arch="sm_90", **case.constexprs)
    allowed = LOCAL_ALLOWED.get(case.kernel.__name__, 0)
    if allowed is not None:
        assert k.local_memory_bytes() <= allowed


def test_fastmath_and_max_registers_are_part_of_the_key_and_reach_the_compilers(monkeypatch, tmp_path):
    import coop_tiles as ct

    monkeypatch.setenv("COOP_TILES_CACHE_DIR", str(tmp_path))  # a fresh cache: the kernel is linked here
    x = np.zeros(1, np.float32)
    plain = ct.jit(elementwise_math.fn).compile(x, x, 1, TILE=256, arch="sm_90")
    fast = ct.jit(elementwise_math.fn, fastmath=True).compile(x, x, 1, TILE=256, arch="sm_90")
    assert not plain.signature.fastmath and fast.signature.fastmath
    assert "sin.approx.ftz.f32" in fast.ptx and "sin.approx" not in plain.ptx  # the hardware sine
    args = (np.zeros(1, np.int32), np.zeros(1, np.float64), 1, 2.0)
    free = ct.jit(scaled_cumsum.fn).compile(*args, TILE=4000, arch="sm_90")
    capped = ct.jit(scaled_cumsum.fn, max_registers=40).compile(*args, TILE=4000, arch="sm_90")
    assert capped.signature.max_registers == 40 and "__maxnreg__(40)" in capped.shim_source
    assert free.registers() > 40 >= capped.registers()  # ptxas keeps to the cap (spilling what it must)
    with pytest.raises(ct.LaunchError, match="max_registers must be an int from 16 to 255, got 8"):
        ct.jit(scaled_cumsum.fn, max_registers=8)


def test_local_memory_counts_the_local_arrays_of_the_ptx():
    """libdevice's sin keeps a 7-word local array in its slow path: `local_memory_bytes` finds its declaration in
    the linked PTX (written with a tab before the name), whether or not ptxas keeps a stack frame for it."""
    case = _programs[elementwise_math]
    k = case.kernel.compile(*case.args, arch="sm_90", **case.constexprs)
    assert re.search(r"\.local \.align 4 \.b8\s+__local_depot\d+\[28\]", k.ptx)
    assert k.local_memory_bytes() in (28, 32)


@pytest.mark.parametrize("arch, name", [(90, "sm_90"), ((9, 0), "sm_90"), ("sm_90a", "sm_90a")])
def test_arch_may_be_a_number_a_pair_or_an_arch_name(arch, name):
    x = np.zeros(1, np.float32)
    k = vector_add.compile(x, x, x, 1, arch=arch, TILE=256)
    assert k.arch == name and k.cubin[:4] == b"\x7fELF"


def test_gather_and_scatter_are_direct_without_shared_memory_or_barriers():
    """Each item is one bounds test and one access: no TempStorage, no barrier, no local memory; the index is
    compared unsigned (a negative one wraps past the extent) and never divided, in 32 bits for an int32 index (the
    extent clamped to 2**31) and in 64 bits for an int64 one."""
    from programs import gather_masked, scatter_masked

    x = np.zeros(1, np.float32)
    tests = {
        np.int32: ("static_cast<unsigned>(static_cast<int>(idx0[i])) < (a_shape0 < 0x80000000ll ?", "u32"),
        np.int64: ("static_cast<unsigned long long>(j0) < static_cast<unsigned long long>(a_shape0)", "u64"),
    }
    for (dtype, (test, width)), kernel in itertools.product(tests.items(), (gather_masked, scatter_masked)):
        idx = np.zeros(1, dtype)
        k = kernel.compile(x, idx, x, 1, TILE=4096, arch="sm_90")
        assert k.shared_bytes == 0 and k.local_memory_bytes() == 0
        assert not BARRIER.findall(k.ptx)
        assert test in k.shim_source
        assert re.search(rf"setp\.(lt|ge)\.{width}", k.ptx) and "div" not in k.ptx
        assert "DIRECT" in str(k.plan)


def test_atomics_of_a_blocked_tile_go_to_warp_striped_order_first():
    """A blocked tile of several items per thread (a scan's) at contiguous elements is exchanged within each warp
    (cub::WarpExchange) so that consecutive lanes update consecutive elements; a whole tile (all of it valid) is
    updated without per-item tests, each item at a constant distance from its lane's first element."""
    from programs import atomic_running_sums

    x = np.zeros(1, np.float32)
    k = atomic_running_sums.compile(x, x, x, 1, TILE=1024, arch="sm_90")
    assert str(k.plan).count("WARP_EXCHANGE_STRIPED") == 2 and "WarpExchange<float, 4, 32>" in k.shim_source
    assert k.shim_source.count("if (v == 1024) {") == 2 and k.shim_source.count("(lane + 32LL * i)") == 2


def test_a_gather_after_a_scatter_into_the_same_array_waits_for_it():
    import coop_tiles as ct
    from coop_tiles import tile

    @ct.jit
    def scatter_then_gather(x, idx, out, y, n, TILE: ct.constexpr):
        i = tile.load(idx, 0, TILE, valid=n)
        tile.scatter(out, i, tile.load(x, 0, TILE, valid=n))
        tile.store(y, 0, tile.gather(out, i), valid=n)

    x = np.zeros(1, np.float32)
    k = scatter_then_gather.compile(x, np.zeros(1, np.int32), x, x, 1, TILE=512, arch="sm_90")
    assert "read after write of" in str(k.plan)
    assert len(BARRIER.findall(k.ptx)) == 1


def test_integer_arithmetic_below_64_bits_is_cast_back_to_its_dtype():
    """Numba computes int32 - int32 in 64 bits: the body casts the result back, so that it wraps as NumPy's does
    and a scalar assigned from it stays int32 (64-bit compares and adds cost two instructions each); 64-bit and
    float arithmetic and comparisons are left as they are."""
    i8, i32, i64, f32 = (np.dtype(t) for t in (np.int8, np.int32, np.int64, np.float32))
    assert element_expr("sub", ["a", "b"], [i32, i32], i32, i32) == "np.int32((a - b))"
    assert element_expr("add", ["a", "b"], [i8, i8], i8, i8) == "np.int8((a + b))"
    assert element_expr("floordiv", ["a", "b"], [i32, i32], i32, i32) == "np.int32(int_floordiv(a, b))"
    assert element_expr("sub", ["a", "b"], [i64, i64], i64, i64) == "(a - b)"
    assert element_expr("add", ["a", "b"], [f32, f32], f32, f32) == "(a + b)"
    assert element_expr("lt", ["a", "b"], [i32, i32], i32, np.dtype(bool)) == "(a < b)"
