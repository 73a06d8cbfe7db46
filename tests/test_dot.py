"""`tile.dot`: the interpreter against NumPy (every dtype, ragged shapes, acc, transposed operands, the
program as built and as rewritten for the GPU), a compile to an sm_90 cubin through cuBLASDx (libmathdx), both
lowerings (the accumulator in registers, the shared-memory API; operands given as `u.T` read in place) and the
GPU against NumPy, the register accumulator's element map included."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.lang import interpreter, ir
from coop_tiles.ops.dot import TileDot
from coop_tiles.runtime import mathdx
from coop_tiles.runtime.compiler import rewrite_stage


def matmul(x, y, z, out, M: ct.constexpr, N: ct.constexpr, K: ct.constexpr, TRANS: ct.constexpr):
    """One (M, N) block of out = x @ y + z per program, rows from pid * M (ragged at the end);
    with TRANS, y is given as (N, K) and multiplied as y.T."""
    r = ct.program_id(0) * M
    a = tile.load(x, (r, 0), (M, K), valid=(x.shape[0] - r, None), other=0)
    c = tile.load(z, (r, 0), (M, N), valid=(x.shape[0] - r, None), other=0)
    if TRANS:
        b = tile.load(y, (0, 0), (N, K)).T
    else:
        b = tile.load(y, (0, 0), (K, N))
    tile.store(out, (r, 0), tile.dot(a, b, c), valid=(x.shape[0] - r, None))


def k_loop(x, y, out, M: ct.constexpr, N: ct.constexpr, BK: ct.constexpr, ACC: ct.constexpr):
    """out = x @ y, one (M, N) block per program, K walked in steps of BK (ragged at the end), the accumulator
    carried through the loop: the register lowering's case."""
    r, k = ct.program_id(0) * M, x.shape[1]
    acc = tile.zeros((M, N), ACC)
    for kk in range(0, k, BK):
        a = tile.load(x, (r, kk), (M, BK), valid=(x.shape[0] - r, k - kk), other=0)
        b = tile.load(y, (kk, 0), (BK, N), valid=(k - kk, None), other=0)
        acc = tile.dot(a, b, acc)
    tile.store(out, (r, 0), acc * 2.0, valid=(x.shape[0] - r, None))


def transposed_operands(
    x, y, out, M: ct.constexpr, N: ct.constexpr, BK: ct.constexpr, ACC: ct.constexpr, TA: ct.constexpr, TB: ct.constexpr
):
    """out = 2 (x @ y) as `k_loop`, x given as (K, rows) with TA, y as (N, K) with TB, each loaded along its
    rows and multiplied through `.T` (ragged in K and in rows): read in place, the transposes cost nothing."""
    r = ct.program_id(0) * M
    if TA:
        rows, k = x.shape[1], x.shape[0]
    else:
        rows, k = x.shape[0], x.shape[1]
    acc = tile.zeros((M, N), ACC)
    for kk in range(0, k, BK):
        if TA:
            xa = tile.load(x, (kk, r), (BK, M), valid=(k - kk, rows - r), other=0)
            a = xa.T
        else:
            a = tile.load(x, (r, kk), (M, BK), valid=(rows - r, k - kk), other=0)
        if TB:
            yb = tile.load(y, (0, kk), (N, BK), valid=(None, k - kk), other=0)
            b = yb.T
        else:
            b = tile.load(y, (kk, 0), (BK, N), valid=(k - kk, None), other=0)
        acc = tile.dot(a, b, acc)
    tile.store(out, (r, 0), acc * 2.0, valid=(rows - r, None))


def transposed_result(x, y, out, M: ct.constexpr, N: ct.constexpr, K: ct.constexpr, TRANS: ct.constexpr):
    """out = (x @ y).T for one (M, N) block: a transpose consumes the product, so the shared-memory lowering;
    with TRANS, x is given as (K, M) and y as (N, K), both multiplied through `.T` (read in place there too)."""
    if TRANS:
        product = tile.dot(tile.load(x, (0, 0), (K, M)).T, tile.load(y, (0, 0), (N, K)).T)
    else:
        product = tile.dot(tile.load(x, (0, 0), (M, K)), tile.load(y, (0, 0), (K, N)))
    tile.store(out, (0, 0), product.T)


DTYPES = [np.float16, ct.bfloat16, np.float32, np.float64]


def operands(dt, rows, n, k, trans, seed=0):
    rng = np.random.default_rng(seed)
    result = np.float64 if dt == np.float64 else np.float32
    x = rng.standard_normal((rows, k)).astype(dt)
    y = rng.standard_normal((n, k) if trans else (k, n)).astype(dt)
    z = rng.standard_normal((rows, n)).astype(result)
    return x, y, z, np.zeros((rows, n), result)


def reference(x, y, z, trans):
    """float64 products of the exactly converted operands, plus z."""
    y = y.astype(np.float64)
    return x.astype(np.float64) @ (y.T if trans else y) + z


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(("rows", "M", "N", "K", "trans"), [(50, 16, 24, 40, False), (37, 24, 8, 9, True)])
def test_interpreter_matches_numpy(dt, rows, M, N, K, trans):
    x, y, z, out = operands(dt, rows, N, K, trans)
    ct.jit(matmul, interpret=True)[ct.cdiv(rows, M)](x, y, z, out, M=M, N=N, K=K, TRANS=trans)
    tol = 1e-12 if dt == np.float64 else 1e-4
    np.testing.assert_allclose(out, reference(x, y, z, trans), rtol=tol, atol=tol)
    assert out.dtype == (np.float64 if dt == np.float64 else np.float32)


needs_mathdx = pytest.mark.skipif(not mathdx.available(), reason="libmathdx (nvidia-libmathdx-cu13) not installed")


@needs_mathdx
def test_compiles_to_cubin_with_the_gemm_in_the_plan():
    x, y, z, out = operands(ct.bfloat16, 50, 24, 40, False)
    k = ct.jit(matmul).compile(x, y, z, out, M=16, N=24, K=40, TRANS=False, arch="sm_90")
    assert len(k.cubin) > 0
    plan = str(k.plan)
    # (both operands held as multiplied: row-major, each thread's runs stored whole)
    assert "dot 16x24x40 bf16*bf16->f32, a row, b row, c row" in plan and "cuBLASDx" in plan
    assert "cublasdx_execute_" in k.shim_source
    # run once (no loop): one TempStorage, no alternation
    assert "BLAS execute (registers; a, b padded in shared memory, 1 buffer)" in plan
    assert "parity" not in _dot_shim(k.shim_source) and "s.temp[" not in _dot_shim(k.shim_source)


def test_interpreter_k_loop_and_transposed_result():
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((50, 70)).astype(ct.bfloat16), rng.standard_normal((70, 24)).astype(ct.bfloat16)
    out = np.zeros((50, 24), np.float32)
    ct.jit(k_loop, interpret=True)[4](x, y, out, M=16, N=24, BK=40, ACC=np.float32)
    np.testing.assert_allclose(out, 2 * (x.astype(np.float64) @ y.astype(np.float64)), rtol=1e-4, atol=1e-4)
    expected = (x[:16, :40].astype(np.float64) @ y[:40].astype(np.float64)).T
    for trans, given in ((False, (x, y)), (True, (np.ascontiguousarray(x.T), np.ascontiguousarray(y.T)))):
        out_t = np.zeros((24, 16), np.float32)
        ct.jit(transposed_result, interpret=True)[1](*given, out_t, M=16, N=24, K=40, TRANS=trans)
        np.testing.assert_allclose(out_t, expected, rtol=1e-4)


def transposed_inputs(dt, ta, tb, seed=3):
    """x (50, 70) and y (70, 24) of `dt`, and how `transposed_operands` takes them (x.T with ta, y.T with tb)."""
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((50, 70)).astype(dt), rng.standard_normal((70, 24)).astype(dt)
    return x, y, np.ascontiguousarray(x.T) if ta else x, np.ascontiguousarray(y.T) if tb else y


FORMS = [(True, False), (False, True), (True, True)]


@pytest.mark.parametrize("rewritten", [False, True], ids=["as built", "rewritten"])
@pytest.mark.parametrize(("ta", "tb"), FORMS, ids=["a.T", "b.T", "both"])
def test_interpreter_transposed_operands(monkeypatch, rewritten, ta, tb):
    """`.T` operands in a K loop with acc, ragged, against NumPy: the program as built (what the interpreter
    runs) and as rewritten for the GPU (each dot reading the loaded tile itself, transposed; no transpose left)."""
    if rewritten:
        run = interpreter.run

        def run_rewritten(program, grid, args):
            p = rewrite_stage(copy.deepcopy(program))
            assert not any(isinstance(s, ir.TileRemap) for s in p.walk())
            assert [s.transposed for s in p.walk() if isinstance(s, TileDot)] == [(ta, tb)]
            run(p, grid, args)

        monkeypatch.setattr(interpreter, "run", run_rewritten)
    x, y, xg, yg = transposed_inputs(ct.bfloat16, ta, tb)
    out = np.zeros((50, 24), np.float32)
    ct.jit(transposed_operands, interpret=True)[4](xg, yg, out, M=16, N=24, BK=40, ACC=np.float32, TA=ta, TB=tb)
    np.testing.assert_allclose(out, 2 * (x.astype(np.float64) @ y.astype(np.float64)), rtol=1e-4, atol=1e-4)


def _dot_shim(source: str) -> str:
    start = source.index('extern "C" __device__ void coop_dot_')
    return source[start : source.index("\n}\n", start)]


@needs_mathdx
def test_k_loop_keeps_the_accumulator_in_registers():
    """The K loop's accumulator is the library's register fragment: no shared-memory copy of it, one barrier
    per K step (in the dot's shim; none from the plan), no local memory (the GEMM of the test above: no new
    library code)."""
    x, y = np.zeros((50, 70), ct.bfloat16), np.zeros((70, 24), ct.bfloat16)
    k = ct.jit(k_loop).compile(x, y, np.zeros((50, 24), np.float32), M=16, N=24, BK=40, ACC=np.float32, arch="sm_90")
    plan = str(k.plan)
    assert "dot 16x24x40 bf16*bf16->f32" in plan and "BLAS execute (registers" in plan and "2 buffers" in plan
    assert all("GEMM fragment" in line and "registers" in line for line in plan.splitlines() if "16x24 " in line)
    assert "store 2-D, item by item, GEMM fragment" in plan
    assert "barriers (__syncthreads before):\n  none" in plan
    shim = _dot_shim(k.shim_source)
    assert shim.count("__syncthreads()") == 1 and "out_items[i] = acc_items[i]" in shim
    # the accumulator's store tests the valid counts and bounds once for the whole block, per item only if not whole
    assert "e < 384 && (whole || (rr < vr_c" in k.shim_source
    assert k.local_memory_bytes() == 0


@needs_mathdx
@pytest.mark.parametrize(("ta", "tb"), FORMS, ids=["a.T", "b.T", "both"])
def test_transposed_operands_are_read_in_place(ta, tb):
    """`a = xa.T`, `b = yb.T`: the dot writes the loaded tiles' items at swapped coordinates; no transpose
    (exchange) is left, the accumulator stays in registers with one barrier per K step, no local memory (the
    GEMM of `k_loop`'s test: no new library code)."""
    _, _, xg, yg = transposed_inputs(ct.bfloat16, ta, tb)
    k = ct.jit(transposed_operands).compile(
        xg, yg, np.zeros((50, 24), np.float32), M=16, N=24, BK=40, ACC=np.float32, TA=ta, TB=tb, arch="sm_90"
    )
    plan = str(k.plan)
    assert "dot 16x24x40 bf16*bf16->f32" in plan and "BLAS execute (registers" in plan and "2 buffers" in plan
    assert ("a = xa.T read in place" in plan) == ta and ("b = yb.T read in place" in plan) == tb
    assert "transpose" not in plan.split("collectives:")[1] and "exchange" not in plan
    assert "barriers (__syncthreads before):\n  none" in plan
    assert _dot_shim(k.shim_source).count("__syncthreads()") == 1
    assert k.local_memory_bytes() == 0


@needs_mathdx
def test_a_transposed_product_takes_the_shared_memory_api():
    """A transpose of the product: the shared-memory API, its `.T` operands still read in place (the one
    exchange left is the product's)."""
    x, y = np.zeros((40, 16), ct.bfloat16), np.zeros((24, 40), ct.bfloat16)
    k = ct.jit(transposed_result).compile(
        x, y, np.zeros((24, 16), np.float32), M=16, N=24, K=40, TRANS=True, arch="sm_90"
    )
    plan = str(k.plan)
    assert "BLAS execute (shared memory)" in plan and "GEMM fragment" not in plan
    assert "a = (t" in plan and "b = (t" in plan and plan.count("transpose through shared memory") == 1


@needs_mathdx
def test_shared_memory_api_sizes_transposed_operands_as_multiplied():
    """In the shared-memory lowering a `.T` operand held (K, M) is stored as the (M, K) operand: its array holds
    M rows of the library's leading dimension (sized from the held shape, M > K overflowed it)."""
    M, N, K = 64, 48, 16
    x, y = np.zeros((K, M), ct.bfloat16), np.zeros((N, K), ct.bfloat16)
    k = ct.jit(transposed_result).compile(x, y, np.zeros((N, M), np.float32), M=M, N=N, K=K, TRANS=True, arch="sm_90")
    assert "BLAS execute (shared memory)" in str(k.plan)
    fields = re.search(r"struct TempStorage \{([^}]*)\}", _dot_shim_struct(k.shim_source)).group(1)
    sizes = dict(re.findall(r"\b([abc])\[(\d+)\]", fields))
    assert int(sizes["a"]) >= M * K and int(sizes["b"]) >= K * N and int(sizes["c"]) >= M * N, fields


def _dot_shim_struct(source: str) -> str:
    start = source.index("struct coop_gemm_")
    return source[start : source.index("\n", start)]


@pytest.mark.gpu
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(("M", "N"), [(16, 16), (32, 48), (64, 64)])
def test_gpu_fragment_map(dt, M, N):
    """The register accumulator's element map: identity @ (the index of each element), stored item by item
    at each item's element, must give each element its own index (exact: integers to 256 in bfloat16, to 2048 in
    float16, so their shapes are cut to that many elements)."""
    import cupy as cp

    exact = {np.dtype(ct.bfloat16): 256, np.dtype(np.float16): 2048}.get(np.dtype(dt))
    if exact is not None and M * N > exact:
        M, N = (16, 16) if exact == 256 else (32, 64)
    out = np.full((M, N), -1, np.float64 if dt == np.float64 else np.float32)
    index = np.arange(M * N).reshape(M, N)
    x, y = np.eye(M).astype(dt), index.astype(dt)
    args = [cp.asarray(a) for a in (x, y, out)]
    ct.jit(identity_product)[1](*args, M=M, N=N)
    got = cp.asnumpy(args[2])
    wrong = np.argwhere(got != index)
    assert not len(wrong), "element (row, col) got the value of another: " + ", ".join(
        f"{tuple(w)} <- {got[tuple(w)]:.0f}" for w in wrong[:12]
    )


def identity_product(x, y, out, M: ct.constexpr, N: ct.constexpr):
    """out = x @ y for one (M, M) x (M, N) block, stored from the accumulator's registers."""
    tile.store(out, (0, 0), tile.dot(tile.load(x, (0, 0), (M, M)), tile.load(y, (0, 0), (M, N))))


@pytest.mark.gpu
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
def test_gpu_k_loop_and_transposed_result(dt):
    import cupy as cp

    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((50, 70)).astype(dt), rng.standard_normal((70, 24)).astype(dt)
    result = np.float64 if dt == np.float64 else np.float32
    tol = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-4}.get(np.dtype(dt), 2e-3)
    exact = x.astype(np.float64) @ y.astype(np.float64)
    args = [cp.asarray(a) for a in (x, y, np.zeros((50, 24), result))]
    ct.jit(k_loop)[4](*args, M=16, N=24, BK=40, ACC=result)
    np.testing.assert_allclose(cp.asnumpy(args[2]), 2 * exact, rtol=tol, atol=tol * 70)
    expected = (x[:16, :40].astype(np.float64) @ y[:40].astype(np.float64)).T
    for trans, given in ((False, (x, y)), (True, (np.ascontiguousarray(x.T), np.ascontiguousarray(y.T)))):
        args = [cp.asarray(a) for a in (*given, np.zeros((24, 16), result))]
        ct.jit(transposed_result)[1](*args, M=16, N=24, K=40, TRANS=trans)
        np.testing.assert_allclose(cp.asnumpy(args[2]), expected, rtol=tol, atol=tol * 40)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [ct.bfloat16, np.float32], ids=lambda d: np.dtype(d).name)
def test_gpu_transposed_wide_operands_in_shared_memory(dt):
    """The shared-memory lowering with `.T` operands wider than K (M, N > K: their arrays sized as multiplied)."""
    import cupy as cp

    M, N, K = 64, 48, 16
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((K, M)).astype(dt), rng.standard_normal((N, K)).astype(dt)
    args = [cp.asarray(a) for a in (x, y, np.zeros((N, M), np.float32))]
    ct.jit(transposed_result)[1](*args, M=M, N=N, K=K, TRANS=True)
    expected = (x.T.astype(np.float64) @ y.T.astype(np.float64)).T
    tol = 1e-4 if dt == np.float32 else 2e-3
    np.testing.assert_allclose(cp.asnumpy(args[2]), expected, rtol=tol, atol=tol * K)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(("ta", "tb"), FORMS, ids=["a.T", "b.T", "both"])
def test_gpu_transposed_operands(dt, ta, tb):
    """`.T` operands read in place (the register lowering, a K loop with acc, ragged) against NumPy."""
    import cupy as cp

    x, y, xg, yg = transposed_inputs(dt, ta, tb)
    result = np.float64 if dt == np.float64 else np.float32
    tol = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-4}.get(np.dtype(dt), 2e-3)
    args = [cp.asarray(a) for a in (xg, yg, np.zeros((50, 24), result))]
    ct.jit(transposed_operands)[4](*args, M=16, N=24, BK=40, ACC=result, TA=ta, TB=tb)
    np.testing.assert_allclose(
        cp.asnumpy(args[2]), 2 * (x.astype(np.float64) @ y.astype(np.float64)), rtol=tol, atol=tol * 70
    )


@pytest.mark.gpu
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(("rows", "M", "N", "K", "trans"), [(200, 64, 64, 32, False), (37, 24, 8, 9, True)])
def test_gpu_matches_numpy(dt, rows, M, N, K, trans):
    import cupy as cp

    x, y, z, out = operands(dt, rows, N, K, trans)
    args = [cp.asarray(a) for a in (x, y, z, out)]
    ct.jit(matmul)[ct.cdiv(rows, M)](*args, M=M, N=N, K=K, TRANS=trans)
    tol = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-4}.get(np.dtype(dt), 2e-3)
    np.testing.assert_allclose(cp.asnumpy(args[3]), reference(x, y, z, trans), rtol=tol, atol=tol * K)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("dt", "tf32"), [(ct.bfloat16, False), (np.float16, False), (np.float32, False), (np.float32, True)]
)
def test_gpu_tutorial_matmul_ragged(dt, tf32):
    """Tutorial 12's K-looped program at one of its benchmark block shapes, M, N, K not multiples of it, against
    float64 NumPy (tf32 rounds each operand to 11 significant bits)."""
    import importlib
    import sys
    from pathlib import Path

    import cupy as cp

    sys.path.insert(0, str(Path(__file__).parent.parent / "tutorials"))
    t = importlib.import_module("12_matmul")
    m, n, k = 300, 270, 200
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
    c = cp.zeros((m, n), np.float32)
    blocks = {"BM": 128, "BN": 128, "BK": 32}
    ct.jit(t.matmul.kernel.fn, block_threads=256)[t.grid(m, n)(blocks)](
        cp.asarray(a), cp.asarray(b), c, m, n, k, TF32=tf32, **blocks
    )
    expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(cp.asnumpy(c), expected, rtol=0, atol=0.3 if tf32 else 1e-2)


# ----- operand arrangements (the register lowering's plain layouts) ---------------------------------------------
def test_padded_leading_dimensions():
    """Each contiguous run of an operand padded to an odd count of 16-byte words (worked by hand): a row-major
    bf16 (64, 64) a has rows of 128 bytes, 8 words -> 9, 72 elements; a column-major (64, 128) b: columns of 64
    bf16 -> 72; float32 rows of 24: 96 bytes, 6 words -> 7, 28 elements; float64 rows of 16: 128 bytes, 8 words
    -> 9, 18 elements; a run of one word stays one. The accumulator's (in registers) is not padded."""
    spec = mathdx.GemmSpec(64, 128, 64, ("bf16", "bf16", "f32"), ("row", "col", "row"), 256, "sm_90")
    assert mathdx.padded_lds(spec) == (72, 72, 128)
    spec = mathdx.GemmSpec(24, 40, 24, ("f32", "f32", "f32"), ("row", "row", "row"), 128, "sm_90")
    assert mathdx.padded_lds(spec) == (28, 44, 40)
    spec = mathdx.GemmSpec(16, 16, 16, ("f64", "f64", "f64"), ("col", "row", "row"), 128, "sm_90")
    assert mathdx.padded_lds(spec) == (18, 18, 16)
    spec = mathdx.GemmSpec(16, 8, 8, ("f16", "f16", "f32"), ("row", "col", "row"), 32, "sm_90")
    assert mathdx.padded_lds(spec) == (8, 8, 8)


def mixed_products(x, y, z, out, M: ct.constexpr, N: ct.constexpr, K: ct.constexpr, VOTES: ct.constexpr):
    """out = x @ y.T + x @ z (+ x @ z again with VOTES == 3): products of one accumulator asking for different
    arrangements of their b (y.T, read in place: column-major; z: row-major)."""
    a = tile.load(x, (0, 0), (M, K))
    acc = tile.dot(a, tile.load(y, (0, 0), (N, K)).T)
    acc = tile.dot(a, tile.load(z, (0, 0), (K, N)), acc)
    if VOTES == 3:
        acc = tile.dot(a, tile.load(z, (0, 0), (K, N)), acc)
    tile.store(out, (0, 0), acc)


def mixed_inputs(dt, M=32, N=48, K=64, seed=5):
    rng = np.random.default_rng(seed)
    x, y, z = (rng.integers(-3, 4, shape).astype(dt) for shape in ((M, K), (N, K), (K, N)))
    return x, y, z, np.zeros((M, N), np.float64 if dt == np.float64 else np.float32)


@pytest.mark.parametrize("votes", [2, 3])
def test_interpreter_mixed_products(votes):
    x, y, z, out = mixed_inputs(ct.bfloat16)
    ct.jit(mixed_products, interpret=True)[1](x, y, z, out, M=32, N=48, K=64, VOTES=votes)
    xf, yf, zf = (v.astype(np.float32) for v in (x, y, z))
    np.testing.assert_array_equal(out, xf @ yf.T + (votes - 1) * (xf @ zf))


@needs_mathdx
@pytest.mark.parametrize(("votes", "chosen"), [(2, "b col"), (3, "b row")], ids=["tie", "majority"])
def test_products_of_one_accumulator_take_the_arrangement_most_ask_for(votes, chosen):
    """y.T asks for b column-major, z for row-major: on a tie the first product's, else the majority's; every
    product runs with it (their accumulator's spread depends on it), the accumulator stays in registers; the
    operands laid out as asked are written a run of a row a store, the others item by item."""
    x, y, z, out = mixed_inputs(ct.bfloat16)
    k = ct.jit(mixed_products).compile(x, y, z, out, M=32, N=48, K=64, VOTES=votes, arch="sm_90")
    dots = [line for line in str(k.plan).splitlines() if " dot 32x48x64" in line]
    assert len(dots) == votes and all(
        f"a row, {chosen}, c row" in line and "BLAS execute (registers" in line for line in dots
    )
    shims = [k.shim_source[i : k.shim_source.index("\n}\n", i)] for i in _starts(k.shim_source, "void coop_dot_")]
    vectors = [shim.count(" v; memcpy(&v") for shim in shims]  # (a vector of a run: 16 or 8 bytes here)
    # a: row-major as held (a vector store in each); b: a vector store only where laid out as its product asked
    assert sorted(vectors) == ([1, 2] if votes == 2 else [1, 2, 2])
    assert k.local_memory_bytes() == 0


def _starts(text: str, needle: str) -> list[int]:
    found, at = [], text.find(needle)
    while at >= 0:
        found.append(at)
        at = text.find(needle, at + 1)
    return found


@pytest.mark.gpu
@pytest.mark.parametrize("votes", [2, 3], ids=["tie", "majority"])
@pytest.mark.parametrize("dt", [ct.bfloat16, np.float32], ids=lambda d: np.dtype(d).name)
def test_gpu_mixed_products_share_the_accumulator(dt, votes):
    """Products asking for different operand arrangements share one register accumulator: exact against NumPy
    (small integers)."""
    import cupy as cp

    x, y, z, out = mixed_inputs(dt)
    args = [cp.asarray(a) for a in (x, y, z, out)]
    ct.jit(mixed_products)[1](*args, M=32, N=48, K=64, VOTES=votes)
    xf, yf, zf = (v.astype(np.float32) for v in (x, y, z))
    np.testing.assert_array_equal(cp.asnumpy(args[3]), xf @ yf.T + (votes - 1) * (xf @ zf))
