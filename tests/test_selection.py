"""Selection (issue 22) without a GPU: the interpreter against sequential NumPy references for every integer
and float dtype, a few programs compiled to sm_90 cubins (the plan's carve checked), and what the plan and the
generated C++ say."""

import numpy as np
import pytest
from carve_checker import check, format_report
from programs_select import CASES_SELECT, COMPILED, compact

import coop_tiles as ct
from coop_tiles import tile


@pytest.mark.parametrize("case", CASES_SELECT, ids=lambda c: c.name)
def test_interpreter_matches_reference(case):
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in case.args]
    ct.jit(case.kernel.fn, interpret=True)[case.grid](*case.launch_args(args), **case.constexprs)
    case.check([args[i] for i in case.outputs])


@pytest.mark.parametrize("case", COMPILED, ids=lambda c: c.name)
def test_compiles_to_cubin(case):
    k = case.kernel.compile(*case.args, arch="sm_90", **case.constexprs)
    assert k.cubin[:4] == b"\x7fELF" and k.local_memory_bytes() == 0
    problems = check(k.program, k.plan)
    assert not problems, format_report(problems, k.program, k.plan)


def test_select_plan_scans_flags_and_scatters_through_shared_memory():
    x = np.zeros(1, np.float32)
    k = compact.compile(x, np.zeros(1, bool), x, np.zeros(1, np.int64), 1, TILE=4096, arch="sm_90")
    assert "select, chained" in str(k.plan) and "BlockScan" in str(k.plan)
    # one count a thread scanned (its flags are bits of a word), not a rank per item
    assert "cub::BlockScan<int, 128>" in k.shim_source and "ExclusiveSum(own, first, count)" in k.shim_source
    assert "coop::chain_prefix<cuda::std::int64_t, coop_select_sum>" in k.shim_source
    # the first warp looks back after its scatter, with none of its items live across the wait
    assert k.shim_source.index("s.items0[d] = x0[i]") < k.shim_source.index("cb((cuda::std::int64_t)count)")
    assert k.chain_bytes == 16 and k.block_threads == 128  # (the chained scan's default block size)
    # the items and the flags, 32 each, and little else: 7 blocks of 128 threads an SM (a rank per item held 96:
    # 5 blocks, and 70% of the copy rate on an H100)
    assert k.registers() <= 72


@ct.jit
def unique_of(x, out, counts, TILE: ct.constexpr):
    u, c = tile.unique(tile.load(x, 0, TILE))
    tile.store(out, 0, u)
    counts[0] = c


def test_unique_counts_each_nan_as_a_run_and_zeroes_past_the_count():
    """Runs are what `!=` says (tile.flag_heads): equal zeros of both signs are one run, each NaN its own. Items
    past the count are unspecified; the interpreter gives zeros."""
    x = np.array([-0.0, 0.0, 1, np.nan, np.nan, 2, 2, 3], np.float32)
    out, counts = np.full(8, 9, np.float32), np.zeros(1, np.int32)
    ct.jit(unique_of.fn, interpret=True)[1](x, out, counts, TILE=8)
    assert counts[0] == 6
    np.testing.assert_array_equal(out, [-0.0, 1, np.nan, np.nan, 2, 3, 0, 0])


def test_chained_select_needs_a_1d_grid():
    x = np.zeros(8, np.float32)
    with pytest.raises(ct.LaunchError, match=r"tile.select\(..., chained=True\) scans the programs of a 1-D grid"):
        ct.jit(compact.fn, interpret=True)[2, 2](x, np.zeros(8, bool), x, np.zeros(1, np.int64), 8, TILE=4)


@pytest.mark.parametrize(
    "dtype", [np.int8, np.uint64, np.float16, ct.bfloat16, np.float64], ids=lambda d: np.dtype(d).name
)
def test_compact_and_nonzero_examples_on_numpy_arrays(dtype):
    from coop_tiles.examples import compact, nonzero

    x = np.random.default_rng(3).integers(0, 3, 9000).astype(dtype)  # 3 programs, the last partial
    np.testing.assert_array_equal(compact(x, x != 1), x[x != 1])
    np.testing.assert_array_equal(nonzero(x), np.nonzero(x)[0][:, None])
    assert compact(x[:0], x[:0] != 1).shape == (0,) and nonzero(x[:0]).shape == (0, 1)


def test_compact_and_nonzero_kernels_compile():
    from coop_tiles.examples.compaction import TILE, compact_kernel, nonzero_kernel

    x = np.zeros(1, np.float32)
    k = compact_kernel.compile(x, np.zeros(1, bool), x, np.zeros(1, np.int64), 1, TILE=TILE, arch="sm_90")
    assert k.local_memory_bytes() == 0 and k.chain_bytes == 16
    k = nonzero_kernel.compile(x, np.zeros(1, np.int64), np.zeros(1, np.int64), 1, TILE=TILE // 2, arch="sm_90")
    assert k.local_memory_bytes() == 0
