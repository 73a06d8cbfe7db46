"""`tile.dot`: the interpreter against NumPy (every dtype, ragged shapes, acc, a transposed operand),
a compile to an sm_90 cubin through cuBLASDx (libmathdx), and the GPU against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.runtime import mathdx


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
    assert "dot 16x24x40 bf16*bf16->f32, a row, b col, c row" in plan and "cuBLASDx" in plan
    assert "cublasdx_execute_" in k.shim_source


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
