"""`coop_tiles.examples.topk` and `top_p_sample` (issue 22: top-k over rows longer than a tile) against NumPy, in the
interpreter, compiled to sm_90 cubins, and on a GPU (marked); and `tile.sort_key` against `ops/sortkeys.py`."""

import importlib
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from carve_checker import check as check_carve
from carve_checker import format_report

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.examples import sampling as module
from coop_tiles.examples import top_p_sample, topk

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tutorials"))
#: the references are tutorial 14's, the ones it checks itself against
tutorial = importlib.import_module("14_topk_sampling")
DTYPES = [np.float32, ml_dtypes.bfloat16]


def logits(rows, n, dtype, seed=0):
    """Normal logits with ties (a repeated value, and small integers in the last row), -inf and NaNs."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, n)).astype(dtype)
    x[0, :: n // 9] = x[0, 1]
    x[-1] = rng.integers(-4, 4, n).astype(dtype)
    x[1 % rows, 3] = -np.inf
    x[1 % rows, n - 1] = np.nan
    return x


def check(got, want):
    (values, indices), (want_values, want_indices) = got, want
    np.testing.assert_array_equal(values.astype(np.float32), want_values.astype(np.float32))
    np.testing.assert_array_equal(indices, want_indices)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("k", [1, 9, 700])
def test_interpreter_matches_numpy(dtype, k, monkeypatch):
    monkeypatch.setattr(module, "PROGRAMS", 4)  # (several tiles per program)
    monkeypatch.setattr(module, "CANDIDATE_TILE", 64)  # (several tiles of candidates per row)
    x = logits(3, 1500, dtype)
    check(topk(x, k, tile_size=128), tutorial.reference_topk(x, k))


@pytest.mark.parametrize("k", [1, 3])
def test_interpreter_integer_keys(k, monkeypatch):
    """int32 rows with the smallest key (int32's minimum, as the padding past a row's end) and ties."""
    monkeypatch.setattr(module, "PROGRAMS", 4)
    x = np.random.default_rng(3).integers(-3, 3, (3, 300)).astype(np.int32)
    x[1] = np.iinfo(np.int32).min
    values, indices = topk(x, k, tile_size=64)
    want = np.argsort(-x.astype(np.int64), axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(indices, want)
    np.testing.assert_array_equal(values, np.take_along_axis(x, want, 1))


def test_sampler_matches_numpy():
    x = logits(4, 900, np.float32, seed=1)
    uniform = np.random.default_rng(2).random(4).astype(np.float32)
    got = top_p_sample(x, 30, 0.8, uniform, tile_size=256)
    np.testing.assert_array_equal(got, tutorial.reference_sample(x, 30, 0.8, uniform))


def test_sort_key_is_sorts_order():
    """tile.sort_key in the interpreter: sortkeys.order_bits with NaNs largest; its order is NumPy's with NaNs last."""

    @ct.jit(interpret=True)
    def keys(x, y, T: ct.constexpr):
        tile.store(y, 0, tile.sort_key(tile.load(x, 0, T)))

    x = np.array([1.5, -2, 0, -0.0, np.inf, -np.inf, np.nan, -np.nan], np.float32)
    y = np.zeros(8, np.uint32)
    keys[1](x, y, T=8)
    assert y[6] == y[7] == 0xFFFFFFFF and y[3] < y[2]
    numbers = [0, 1, 2, 4, 5]  # (-0.0 is below +0.0 in the radix order; NumPy holds them equal)
    np.testing.assert_array_equal(np.argsort(y[numbers], kind="stable"), np.argsort(x[numbers], kind="stable"))


def test_programs_compile():
    f, i32, i64 = np.zeros((2, 2), np.float32), np.zeros((2, 2), np.int32), np.zeros((2, 2), np.int64)
    h = np.zeros((2, 2), ml_dtypes.bfloat16)
    sm90 = {"TILE": 4096, "arch": "sm_90"}
    finish = {"BITS": 32, "FIRST": 11, "DIGIT": 7, "PASSES": 3, "K": 1024}
    compiled = [
        module.count_pass.compile(f, i32, 1, 1, BITS=32, FIRST=11, **sm90),
        module.gather_pass.compile(h, i32, 1, 1, 1, BITS=16, FIRST=11, CHUNKS=32, **sm90),
        module.sample_pass.compile(
            f, i32, f, i64, f[0], i64[0], 1, 1, 0.9, **finish, TILE=module.CANDIDATE_TILE, arch="sm_90"
        ),
        module.select_pass.compile(f, i32, f, i64, 1, 1, **finish, TILE=module.CANDIDATE_TILE, arch="sm_90"),
        module.argmax_pass.compile(f, i64, i64, 1, 1, **sm90),
        module.argmax_merge.compile(f, i64, i64, f, i64, 1, C=32, arch="sm_90"),
    ]
    assert "histogram[2048]" in str(compiled[0].plan) and "sort_key" in str(compiled[0].plan)
    assert "striped x4" in str(compiled[0].plan) and "BlockRadixSort" in str(compiled[2].plan)
    # the candidates' histograms: one set of counters (few candidates), not the per-lane copies
    select_plan = str(compiled[3].plan)
    assert "histogram[128] counts" in select_plan and "lane copies" not in select_plan
    for k in compiled:
        problems = check_carve(k.program, k.plan)
        assert not problems and k.local_memory_bytes() == 0, format_report(problems, k.program, k.plan)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("k", [1, 50, 1024])
@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_gpu_matches_numpy(dtype, k, library):
    x = logits(64, 128256, dtype, seed=k)
    if library == "torch":
        torch = pytest.importorskip("torch")
        t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) if dtype is ml_dtypes.bfloat16 else x
        got = [a.cpu() for a in topk(torch.as_tensor(t).cuda(), k)]
        got = [got[0].float().numpy(), got[1].numpy()]
    else:
        cp = pytest.importorskip("cupy")
        got = [cp.asnumpy(a) for a in topk(cp.asarray(x), k)]
    check(got, tutorial.reference_topk(x, k))


@pytest.mark.gpu
def test_gpu_sampler_matches_numpy():
    cp = pytest.importorskip("cupy")
    x = logits(64, 128256, np.float32, seed=3)
    uniform = np.random.default_rng(4).random(64).astype(np.float32)
    got = cp.asnumpy(top_p_sample(cp.asarray(x), 50, 0.9, cp.asarray(uniform)))
    assert np.mean(got == tutorial.reference_sample(x, 50, 0.9, uniform)) >= 0.95
