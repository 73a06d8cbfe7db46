"""Autotuning, block-size selection and pre-launch hooks on a GPU (needs a GPU)."""

import logging

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile

pytestmark = pytest.mark.gpu


@ct.jit
def accumulate(x, out, n, TILE: ct.constexpr):
    """Read-modify-write of `out`: running it twice doubles the result, so tuning must reset it."""
    pid = ct.program_id(0)
    base = pid * TILE
    out[pid] = out[pid] + tile.sum(tile.load(x, base, TILE, valid=n - base, other=0))


def test_autotune_resets_outputs_and_launches_the_best(monkeypatch, tmp_path, caplog):
    cp = pytest.importorskip("cupy")
    monkeypatch.setenv("COOP_TILES_CACHE_DIR", str(tmp_path))
    caplog.set_level(logging.INFO, logger="coop_tiles.autotune")
    configs = [ct.Config(block_threads=b, TILE=t) for b, t in ((128, 1024), (256, 1024), (256, 4096), (100, 1024))]
    tuned = ct.autotune(configs=configs, key=["n"], reset=["out"])(accumulate)
    n = 1 << 20
    x = cp.asarray(np.random.default_rng(0).integers(0, 5, n).astype(np.int64))
    out = cp.zeros(n // 1024, cp.int64)
    tuned[lambda meta: ct.cdiv(n, meta["TILE"])](x, out, n)
    best = tuned._best[next(iter(tuned._best))]
    expected = x.get().reshape(-1, best.kwargs["TILE"]).sum(1)
    np.testing.assert_array_equal(out.get()[: len(expected)], expected)
    (report,) = caplog.messages
    assert "Config(block_threads=100, TILE=1024): skipped (TileValueError" in report
    assert report.count(" ms") >= 3


def test_pre_launch_hook_runs_once_per_kernel():
    cp = pytest.importorskip("cupy")
    calls = []
    kernel = ct.jit(accumulate.fn)
    kernel.add_pre_launch_hook(lambda k, function, device: calls.append((k.kernel_name, device)))
    x, out = cp.ones(4096, cp.int64), cp.zeros(4, cp.int64)
    for _ in range(3):
        kernel[4](x, out, 4096, TILE=1024)
    cp.cuda.runtime.deviceSynchronize()
    assert calls == [("coop_kernel_accumulate", 0)]
    assert (out.get() == 3 * 1024).all()


def test_block_size_is_chosen_with_the_occupancy_api():
    cp = pytest.importorskip("cupy")
    kernel = ct.jit(accumulate.fn)
    x, out = cp.ones(8192, cp.int64), cp.zeros(2, cp.int64)
    kernel[2](x, out, 8192, TILE=4096)
    prepared = next(iter(kernel._kernels.values()))
    choice = prepared.kernel.block_choice
    assert choice is not None and choice.block_threads == prepared.kernel.block_threads
    assert all(0 < m.occupancy <= 1 and m.registers > 0 for m in choice.measured)
    assert "threads per block" in str(choice)
