"""Which K loops cuBLASDx's pipelined GEMM can run whole (`ops/dot_loop.py::match`): tutorial 12's loop, and not its
near misses (a masked load, other= not 0, float32 operands, acc read in the loop, a loop value read after it,
the loop's step not the dot's K, an extent computed in the program); the rewrite at sm_90a (`pipeline_k_loops`),
its IR verified and interpreted against NumPy; tutorial 12 compiled for sm_90a (libmathdx, NVRTC, nvJitLink; SASS
through nvdisasm). No GPU (tests/test_gpu_dot_loop.py runs it)."""

from __future__ import annotations

import copy
import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.lang import interpreter, ir
from coop_tiles.lang.frontend import build_program
from coop_tiles.lang.types import INT64, ArrayType
from coop_tiles.ops import dot_loop
from coop_tiles.ops.dot import TileDot
from coop_tiles.ops.dot_loop import (
    PIPELINE_ARCH,
    KLoop,
    TileDotLoop,
    dot_spec,
    match,
    pipelinable,
    pipeline_k_loops,
    pipeline_spec,
    stages,
)
from coop_tiles.ops.memory2d import TileStore2D
from coop_tiles.runtime import mathdx
from coop_tiles.runtime.compiler import rewrite_stage

BLOCKS = {"BM": 128, "BN": 128, "BK": 64}


def tutorial_12():
    sys.path.insert(0, str(Path(__file__).parent.parent / "tutorials"))
    try:
        return importlib.import_module("12_matmul")
    finally:
        sys.path.pop(0)


def program(fn, dtype=ct.bfloat16, **constexprs) -> ir.Program:
    """`fn(a, b, c, m, n, k, ...)` typed with a and b of `dtype`, c float32."""
    ab, c = ArrayType(np.dtype(dtype), 2), ArrayType(np.dtype(np.float32), 2)
    params = {"a": ab, "b": ab, "c": c, "m": INT64, "n": INT64, "k": INT64}
    return build_program(fn, params, {**BLOCKS, **constexprs})


def the_loop(p: ir.Program) -> KLoop | str:
    (loop,) = [s for s in p.walk() if isinstance(s, ir.ForRange)]
    return match(loop, p)


def test_tutorial_12s_loop_is_taken():
    p = program(tutorial_12().matmul.kernel.fn, TF32=False)
    found = the_loop(p)
    assert isinstance(found, KLoop), found
    assert found.a.load.array.name == "a_a" and found.b.load.array.name == "a_b"
    assert (found.a.offset.name, found.a.extent.name) == ("v_r", "a_m")
    assert (found.b.offset.name, found.b.extent.name) == ("v_col", "a_n")
    assert found.k.name == "a_k" and found.dot.acc.name == "v_acc"


def plain(a, b, c, m, n, k, BM: ct.constexpr, BN: ct.constexpr, BK: ct.constexpr):
    r, col = ct.program_id(0) * BM, ct.program_id(1) * BN
    acc = tile.zeros((BM, BN), np.float32)
    for kk in range(0, k, BK):
        x = tile.load(a, (r, kk), (BM, BK), valid=(m - r, k - kk), other=0)
        y = tile.load(b, (kk, col), (BK, BN), valid=(k - kk, n - col), other=0)
        acc = tile.dot(x, y, acc)
    tile.store(c, (r, col), acc, valid=(m - r, n - col))


def unbounded_rows(a, b, c, m, n, k, BM: ct.constexpr, BN: ct.constexpr, BK: ct.constexpr):
    """No valid count along M and N (every block inside the arrays): still taken, the arrays' own extents."""
    r, col = ct.program_id(0) * BM, ct.program_id(1) * BN
    acc = tile.zeros((BM, BN), np.float32)
    for kk in range(0, k, BK):
        acc = tile.dot(
            tile.load(a, (r, kk), (BM, BK), valid=(None, k - kk), other=0),
            tile.load(b, (kk, col), (BK, BN), valid=(k - kk, None), other=0),
            acc,
        )
    tile.store(c, (r, col), acc)


@pytest.mark.parametrize("dtype", [ct.bfloat16, np.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("fn", [plain, unbounded_rows])
def test_the_plain_loop_is_taken(fn, dtype):
    found = the_loop(program(fn, dtype))
    assert isinstance(found, KLoop), found
    assert (found.a.extent is None) == (fn is unbounded_rows)


def masked(a, b, c, m, n, k, BM: ct.constexpr, BN: ct.constexpr, BK: ct.constexpr):
    r, col = ct.program_id(0) * BM, ct.program_id(1) * BN
    keep = tile.full((BM, BK), True, np.bool_)
    acc = tile.zeros((BM, BN), np.float32)
    for kk in range(0, k, BK):
        x = tile.load(a, (r, kk), (BM, BK), mask=keep, other=0)
        y = tile.load(b, (kk, col), (BK, BN), valid=(k - kk, n - col), other=0)
        acc = tile.dot(x, y, acc)
    tile.store(c, (r, col), acc, valid=(m - r, n - col))


def other_one(a, b, c, m, n, k, BM: ct.constexpr, BN: ct.constexpr, BK: ct.constexpr):
    r, col = ct.program_id(0) * BM, ct.program_id(1) * BN
    acc = tile.zeros((BM, BN), np.float32)
    for kk in range(0, k, BK):
        x = tile.load(a, (r, kk), (BM, BK), valid=(m - r, k - kk), other=0)
        y = tile.load(b, (kk, col), (BK, BN), valid=(k - kk, n - col), other=1)
        acc = tile.dot(x, y, acc)
    tile.store(c, (r, col), acc, valid=(m - r, n - col))


def acc_read_in_the_loop(a, b, c, m, n, k, BM: ct.constexpr, BN: ct.constexpr, BK: ct.constexpr):
    r, col = ct.program_id(0) * BM, ct.program_id(1) * BN
    acc = tile.zeros((BM, BN), np.float32)
    for kk in range(0, k, BK):
        x = tile.load(a, (r, kk), (BM, BK), valid=(m - r, k - kk), other=0)
        y = tile.load(b, (kk, col), (BK, BN), valid=(k - kk, n - col), other=0)
        acc = tile.dot(x, y, acc)
        tile.store(c, (r, col), acc, valid=(m - r, n - col))


def operand_read_after(a, b, c, m, n, k, BM: ct.constexpr, BN: ct.constexpr, BK: ct.constexpr):
    r, col = ct.program_id(0) * BM, ct.program_id(1) * BN
    acc = tile.zeros((BM, BN), np.float32)
    x = tile.zeros((BM, BK), a.dtype)
    for kk in range(0, k, BK):
        x = tile.load(a, (r, kk), (BM, BK), valid=(m - r, k - kk), other=0)
        y = tile.load(b, (kk, col), (BK, BN), valid=(k - kk, n - col), other=0)
        acc = tile.dot(x, y, acc)
    tile.store(c, (r, col), acc + tile.sum(x.astype(np.float32)), valid=(m - r, n - col))


def half_steps(a, b, c, m, n, k, BM: ct.constexpr, BN: ct.constexpr, BK: ct.constexpr):
    r, col = ct.program_id(0) * BM, ct.program_id(1) * BN
    acc = tile.zeros((BM, BN), np.float32)
    for kk in range(0, k, BK // 2):
        x = tile.load(a, (r, kk), (BM, BK), valid=(m - r, k - kk), other=0)
        y = tile.load(b, (kk, col), (BK, BN), valid=(k - kk, n - col), other=0)
        acc = tile.dot(x, y, acc)
    tile.store(c, (r, col), acc, valid=(m - r, n - col))


def computed_extent(a, b, c, m, n, k, BM: ct.constexpr, BN: ct.constexpr, BK: ct.constexpr):
    r, col = ct.program_id(0) * BM, ct.program_id(1) * BN
    half = m // 2
    acc = tile.zeros((BM, BN), np.float32)
    for kk in range(0, k, BK):
        x = tile.load(a, (r, kk), (BM, BK), valid=(half - r, k - kk), other=0)
        y = tile.load(b, (kk, col), (BK, BN), valid=(k - kk, n - col), other=0)
        acc = tile.dot(x, y, acc)
    tile.store(c, (r, col), acc, valid=(half - r, n - col))


@pytest.mark.parametrize(
    ("fn", "dtype", "why"),
    [
        (masked, ct.bfloat16, "a: a masked load"),
        (other_one, ct.bfloat16, "b: a load whose other= is not 0"),
        (plain, np.float32, "float32 operands"),
        (acc_read_in_the_loop, ct.bfloat16, "the accumulator is read in the loop other than by the dot"),
        (operand_read_after, ct.bfloat16, "is read after the loop"),
        (half_steps, ct.bfloat16, "the loop's step is not the dot's K"),
        (computed_extent, ct.bfloat16, "M is not a kernel argument"),
    ],
    ids=["mask", "other", "float32", "acc read", "read after", "step", "computed extent"],
)
def test_near_misses_are_not_taken(fn, dtype, why):
    found = the_loop(program(fn, dtype))
    assert isinstance(found, str) and why in found, found


def test_the_tf32_product_is_not_taken():
    p = program(tutorial_12().matmul.kernel.fn, np.float32, TF32=True)
    assert "float32 operands" in the_loop(p)


# ----- the rewrite (`pipeline_k_loops`): the IR it makes, interpreted ----------------------------------------------
SMALL = {"BM": 16, "BN": 16, "BK": 8}


def small_program(fn, dtype=ct.bfloat16, **constexprs) -> ir.Program:
    ab, c = ArrayType(np.dtype(dtype), 2), ArrayType(np.dtype(np.float32), 2)
    params = {"a": ab, "b": ab, "c": c, "m": INT64, "n": INT64, "k": INT64}
    return build_program(fn, params, {**SMALL, **constexprs})


def pipelined(p: ir.Program, arch: str = PIPELINE_ARCH) -> tuple[ir.Program, dict[int, str]]:
    q = copy.deepcopy(p)
    return q, pipeline_k_loops(q, arch)


def test_tutorial_12s_loop_is_rewritten_at_sm_90a_only():
    p = program(tutorial_12().matmul.kernel.fn, TF32=False)
    same, refused = pipelined(p, "sm_90")
    assert str(same) == str(p) and refused == {}
    q, refused = pipelined(p)
    assert refused == {}
    ir.verify(q, "pipeline_k_loops")
    (s,) = [s for s in q.walk() if isinstance(s, TileDotLoop)]
    assert (s.depth, s.bk) == (4, 64) and s.out.type.shape == (128, 128)
    # (the pipeline reads a and b row-major from global memory, as the probe that ran on an H200 did; the dot's own
    # spec names the shared-memory API's arrangement, b column-major: the register accumulator's is the group's vote)
    assert pipeline_spec(s, 256, PIPELINE_ARCH).gemm.arrangement == ("row", "row", "row")
    assert pipeline_spec(s, 256, PIPELINE_ARCH).depth == 4 and dot_spec(s, 256, PIPELINE_ARCH).arrangement[1] == "col"
    # (the loop's store is fused: where the pipeline ran, it wrote c itself from an accumulator that starts at zero;
    # where it could not, the loop as written runs and then the store)
    assert s.c.name == "a_c" and s.acc_zero
    (branch,) = [t for t in q.walk() if isinstance(t, ir.If) and t.cond == s.ran]
    assert branch.then == [] and [type(t) for t in branch.orelse] == [ir.ForRange, TileStore2D]
    assert branch.orelse[1].tile == s.acc


def acc_from_ones(a, b, c, m, n, k, BM: ct.constexpr, BN: ct.constexpr, BK: ct.constexpr):
    """The accumulator starts at one: the fused store adds it."""
    r, col = ct.program_id(0) * BM, ct.program_id(1) * BN
    acc = tile.full((BM, BN), 1.0, np.float32)
    for kk in range(0, k, BK):
        x = tile.load(a, (r, kk), (BM, BK), valid=(m - r, k - kk), other=0)
        y = tile.load(b, (kk, col), (BK, BN), valid=(k - kk, n - col), other=0)
        acc = tile.dot(x, y, acc)
    tile.store(c, (r, col), acc, valid=(m - r, n - col))


def stored_twice(a, b, c, m, n, k, BM: ct.constexpr, BN: ct.constexpr, BK: ct.constexpr):
    """The result is read again after its store (a second, doubled store over the first): not fused."""
    r, col = ct.program_id(0) * BM, ct.program_id(1) * BN
    acc = tile.zeros((BM, BN), np.float32)
    for kk in range(0, k, BK):
        x = tile.load(a, (r, kk), (BM, BK), valid=(m - r, k - kk), other=0)
        y = tile.load(b, (kk, col), (BK, BN), valid=(k - kk, n - col), other=0)
        acc = tile.dot(x, y, acc)
    tile.store(c, (r, col), acc, valid=(m - r, n - col))
    tile.store(c, (r, col), acc * 2, valid=(m - r, n - col))


def stored_elsewhere(a, b, c, m, n, k, BM: ct.constexpr, BN: ct.constexpr, BK: ct.constexpr):
    """Stored one block to the right of where it was computed: not fused."""
    r, col = ct.program_id(0) * BM, ct.program_id(1) * BN
    acc = tile.zeros((BM, BN), np.float32)
    for kk in range(0, k, BK):
        x = tile.load(a, (r, kk), (BM, BK), valid=(m - r, k - kk), other=0)
        y = tile.load(b, (kk, col), (BK, BN), valid=(k - kk, n - col), other=0)
        acc = tile.dot(x, y, acc)
    tile.store(c, (r, col + BN), acc, valid=(m - r, n - col - BN))


@pytest.mark.parametrize(
    ("fn", "fused", "zero", "expected"),
    [
        (plain, True, True, lambda a, b: a @ b),
        (acc_from_ones, True, False, lambda a, b: a @ b + 1),
        (stored_twice, False, False, lambda a, b: 2 * (a @ b)),
    ],
    ids=["zeros", "ones", "read after its store"],
)
def test_the_store_is_fused_where_the_result_is_only_stored(monkeypatch, fn, fused, zero, expected):
    p = small_program(fn)
    q, refused = pipelined(p)
    assert refused == {}
    ir.verify(q, "pipeline_k_loops")
    (s,) = [s for s in q.walk() if isinstance(s, TileDotLoop)]
    assert (s.c is not None, s.acc_zero) == (fused, zero)
    seen = []
    monkeypatch.setattr(dot_loop, "pipelinable", lambda *args: seen.append(pipelinable(*args)) or seen[-1])
    m, n, k = 40, 32, 24
    rng = np.random.default_rng(23)
    a = rng.integers(-3, 4, (m, k)).astype(ct.bfloat16)
    b = rng.integers(-3, 4, (k, n)).astype(ct.bfloat16)
    got = run_tutorial_12(q, a, b, 16, 16, grid_2d=True)
    np.testing.assert_array_equal(got, expected(a.astype(np.float64), b.astype(np.float64)))
    assert seen and set(seen) == {True}


def test_a_store_elsewhere_is_not_fused():
    q, _ = pipelined(small_program(stored_elsewhere))
    (s,) = [s for s in q.walk() if isinstance(s, TileDotLoop)]
    assert s.c is None


def test_stages_follow_the_tile():
    assert [stages(*t, 2) for t in ((128, 128, 64), (128, 256, 64), (256, 128, 64), (128, 128, 32))] == [4, 3, 3, 4]
    assert stages(256, 256, 256, 2) == 0  # (not even 2 stages fit: the loop stays)


@pytest.mark.parametrize(
    ("fn", "dtype", "why"),
    [
        (masked, ct.bfloat16, "a: a masked load"),
        (plain, np.float32, "float32 operands"),
        (operand_read_after, ct.bfloat16, "is read after the loop"),
        (computed_extent, ct.bfloat16, "M is not a kernel argument"),
    ],
    ids=["mask", "float32", "read after", "computed extent"],
)
def test_near_misses_are_not_rewritten_and_say_why(fn, dtype, why):
    p = program(fn, dtype)
    q, refused = pipelined(p)
    assert str(q) == str(p)
    (dot,) = [s for s in q.walk() if isinstance(s, TileDot)]
    assert why in refused[dot.cid], refused


def run_tutorial_12(p: ir.Program, a: np.ndarray, b: np.ndarray, bm: int, bn: int, grid_2d: bool = False) -> np.ndarray:
    """c = `p`(a, b) interpreted, one program per (bm, bn) block: tutorial 12's numbering, or (row block, column
    block) as `program_id(0), program_id(1)` (`grid_2d`, as this file's own programs take them)."""
    (m, k), n = a.shape, b.shape[1]
    c = np.zeros((m, n), np.float32)
    grid = (-(-m // bm), -(-n // bn), 1) if grid_2d else (-(-m // bm) * -(-n // bn), 1, 1)
    interpreter.run(p, grid, [a, b, c, m, n, k])
    return c


@pytest.mark.parametrize(
    ("m", "n", "k", "ran"),
    [
        (45, 40, 24, True),  # ragged M and N, rows of a and b whole 16 bytes: the pipeline runs in every block
        (32, 32, 32, True),
        (45, 37, 29, False),  # rows of 29 and 37 bfloat16: not whole 16 bytes, the loop runs
    ],
)
def test_the_rewritten_tutorial_12_gives_numpys_product(monkeypatch, m, n, k, ran):
    p = small_program(tutorial_12().matmul.kernel.fn, TF32=False)
    q, _ = pipelined(p)
    ir.verify(q, "pipeline_k_loops")
    seen = []
    monkeypatch.setattr(dot_loop, "pipelinable", lambda *args: seen.append(pipelinable(*args)) or seen[-1])
    rng = np.random.default_rng(21)
    a = rng.integers(-3, 4, (m, k)).astype(ct.bfloat16)
    b = rng.integers(-3, 4, (k, n)).astype(ct.bfloat16)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(run_tutorial_12(q, a, b, 16, 16), expected)
    assert seen and set(seen) == {ran}


def test_a_misaligned_operand_runs_the_loop(monkeypatch):
    """`a` one element into its buffer (2 bytes: TMA needs 16): the loop runs, the product is NumPy's."""
    p = small_program(tutorial_12().matmul.kernel.fn, TF32=False)
    q, _ = pipelined(p)
    seen = []
    monkeypatch.setattr(dot_loop, "pipelinable", lambda *args: seen.append(pipelinable(*args)) or seen[-1])
    rng = np.random.default_rng(22)
    m, n, k = 40, 32, 24
    base = rng.integers(-3, 4, (m, k + 8)).astype(ct.bfloat16)
    a = base[:, 1 : k + 1]
    b = rng.integers(-3, 4, (k, n)).astype(ct.bfloat16)
    np.testing.assert_array_equal(run_tutorial_12(q, a, b, 16, 16), a.astype(np.float64) @ b.astype(np.float64))
    assert seen and set(seen) == {False}


def test_the_rewrite_stage_notes_why_a_loop_is_not_pipelined_at_sm_90a_only():
    p = program(masked)
    assert rewrite_stage(copy.deepcopy(p), arch="sm_90").notes == {}
    if not mathdx.available():
        pytest.skip("libmathdx is not installed (without it the rewrite leaves every loop as it is)")
    notes = rewrite_stage(copy.deepcopy(p), arch=PIPELINE_ARCH).notes
    assert list(notes.values()) == ["K loop not pipelined: a: a masked load (mask=)"]


# ----- compiled for sm_90a (no GPU: NVRTC, libmathdx, nvJitLink; each GEMM ~30 s the first time, disk-cached) ------
needs_mathdx = pytest.mark.skipif(not mathdx.available(), reason="libmathdx is not installed")


def sass(cubin: bytes, function: str) -> dict:
    """`benchmarks/dotpipe_probe.py`'s SASS facts of `function` (nvdisasm: the nvidia-cuda-nvdisasm wheel)."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
    try:
        probe = importlib.import_module("dotpipe_probe")
    finally:
        sys.path.pop(0)
    if probe.nvdisasm() is None:
        pytest.skip("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm)")
    return probe.sass_facts(cubin, function)


@needs_mathdx
def test_tutorial_12_compiles_at_sm_90a_with_tma_and_wgmma_in_its_k_loop():
    a, c = np.zeros((64, 64), ct.bfloat16), np.zeros((64, 64), np.float32)
    k = ct.jit(tutorial_12().matmul.kernel.fn, block_threads=256)
    compiled = k.compile(a, a, c, 64, 64, 64, **BLOCKS, TF32=False, arch=PIPELINE_ARCH)
    assert "K loop pipelined: cuBLASDx TMA+WGMMA, 4 stages, 131072 B" in str(compiled.plan)
    assert compiled.plan.shared_bytes >= 131072
    assert compiled.launch_bytes > 0 and compiled.prepare_name == "coop_prepare_matmul"
    assert f'extern "C" __global__ void {compiled.prepare_name}(' in compiled.shim_source
    # the run-time conditions, in the generated code: TMA's 16-byte address and row stride, the extents within the
    # arrays, the block at a whole tile index inside the product (else the loop as written runs)
    ready = compiled.shim_source.split("__device__ __forceinline__ bool coop_dotloop_ready_", 1)[1].split("}\n", 1)[0]
    assert "% 16 == 0" in ready and "(lda * size) % 16 == 0 && (ldb * size) % 16 == 0" in ready
    assert "1 <= m && 1 <= n && 1 <= k && m <= a_rows && n <= b_cols && k <= a_cols && k <= b_rows" in ready
    assert "row >= 0 && row < m && row % 128 == 0 && col >= 0 && col < n && col % 128 == 0" in compiled.shim_source
    facts = sass(compiled.cubin, compiled.kernel_name)
    assert facts["UTMALDG"] > 0 and facts["HGMMA"] > 0, facts
    assert facts["K loop LDL+STL"] == 0, facts  # (the fallback loop's mma.sync is there too, outside it)


@needs_mathdx
def test_a_near_miss_compiles_at_sm_90a_and_its_plan_says_why():
    a, c = np.zeros((64, 64), ct.bfloat16), np.zeros((64, 64), np.float32)
    compiled = ct.jit(masked, block_threads=256).compile(a, a, c, 64, 64, 64, **BLOCKS, arch=PIPELINE_ARCH)
    assert "K loop not pipelined: a: a masked load (mask=)" in str(compiled.plan)
    assert compiled.launch_bytes == 0 and "coop_prepare" not in compiled.shim_source
