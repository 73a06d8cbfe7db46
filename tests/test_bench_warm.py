"""benchmarks/warm.py without a GPU: `warm_in_workers` in this process and in 2 spawn workers runs every item (a
failure comes back as text, never raised), and COOP_BENCH_WARM=0 runs nothing."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import warm  # noqa: E402


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_every_item_runs_and_failures_are_text(tmp_path, monkeypatch, capsys, workers):
    """os.mkdir (module-level, so a worker can unpickle it) makes each folder; the folder made twice fails with its
    FileExistsError as text, in its place; the log says how many failed."""
    monkeypatch.setenv(warm.ENV, "1")
    monkeypatch.setattr(os, "cpu_count", lambda: 4)  # (2 workers on the 2-core CI machine too)
    first, second = str(tmp_path / "a"), str(tmp_path / "b")
    results = warm.warm_in_workers(os.mkdir, [first, second], workers, then=[first], label="mkdir")
    assert results[:2] == [None, None]
    assert results[2].startswith("FileExistsError: ")
    assert os.path.isdir(first) and os.path.isdir(second)
    log = capsys.readouterr().err
    where = "2 worker processes" if workers == 2 else "this process"
    assert f"warm-up of mkdir: 3 items in {where}" in log and "1 failed" in log


def test_switched_off(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(warm.ENV, "0")
    assert warm.warm_in_workers(os.mkdir, [str(tmp_path / "a")], 2) == [None]
    assert not (tmp_path / "a").exists()
    assert "off (COOP_BENCH_WARM=0)" in capsys.readouterr().err


def test_worker_count(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert warm.worker_count(40) == warm.MAX_WORKERS
    assert warm.worker_count(40, 4) == 4
    assert warm.worker_count(3) == 3
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert warm.worker_count(40) == 1


def test_topk_warms_every_launch_of_the_timed_run_once():
    """The topk section's warm-up: every coop_tiles top-k (dtype, k, tile), every sampler (k > 1) and every Triton
    (dtype, k, chunk of at least k) the rows launch, each once; per dtype and tile the first round holds k = 1 and
    the first k > 1 (the passes over whole rows that the second round's launches share)."""
    from benchmarks.sections import topk

    first, then = topk.warm_items()
    everything = first + then
    assert len(set(everything)) == len(everything)
    coop = {(d, k, t) for d in topk.TOPK_DTYPES for k in topk.TOPK_KS for t in topk.TOPK_TILES}
    assert {item[1:] for item in everything if item[0] == "coop"} == coop
    assert {item[1:] for item in everything if item[0] == "sampler"} == {c for c in coop if c[1] > 1}
    triton = {(d, k, c) for d in topk.TOPK_DTYPES for k in topk.TOPK_KS for c in topk.TRITON_CHUNKS if c >= k}
    assert {item[1:] for item in everything if item[0] == "triton"} == triton
    shared = {(d, t) for what, d, k, t in first if what == "coop" and k > 1}
    assert shared == {(d, t) for d in topk.TOPK_DTYPES for t in topk.TOPK_TILES}
    assert all(what != "triton" for what, *_ in then)


def test_matmul_warms_every_coop_config_and_its_launch_multiplies(monkeypatch):
    """The matmul section's warm-up holds each case with each of tutorial 12's configs (and, where Triton imports,
    each Triton config by index, once per case); the launch it shares with the timed rows multiplies, in the
    interpreter on a small ragged problem, against NumPy."""
    import numpy as np

    from benchmarks.kernels import tutorial
    from benchmarks.sections import matmul

    ops = tutorial("12_matmul")
    items = matmul.warm_items()
    coop = [item[1:] for item in items if item[0] == "coop"]
    assert coop == [(d, tf32, matmul.config_key(c)) for d, tf32 in matmul.MATMUL_CASES for c in ops.CONFIGS]
    triton = [item[1:] for item in items if item[0] == "triton"]
    assert len(set(triton)) == len(triton) and len(triton) % len(matmul.MATMUL_CASES) == 0
    monkeypatch.setenv("COOP_TILES_INTERPRET", "1")
    rng = np.random.default_rng(21)
    a, b = rng.standard_normal((20, 12)).astype(np.float32), rng.standard_normal((12, 9)).astype(np.float32)
    c = np.full((20, 9), np.nan, np.float32)
    matmul._coop_launch(ops, (16, 16, 8, 64), a, b, c, False)()  # (threads no config pins)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_one_triton_config_leaves_one_config_and_silences_the_others(monkeypatch):
    """one_triton_config on stand-in autotuners (no Triton here): the target keeps its one config, the others launch
    nothing, and both are as before afterwards."""
    import types

    class Autotuner:
        def __init__(self, configs):
            self.configs = configs

        def run(self, *args, **kwargs):
            return "launched"

    fake = types.ModuleType("triton.runtime.autotuner")
    fake.Autotuner = Autotuner
    for name in ("triton", "triton.runtime"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "triton.runtime.autotuner", fake)
    kernels = types.ModuleType("kernels")
    kernels.first, kernels.second, kernels.other = Autotuner(["a", "b", "c"]), Autotuner(["x"]), object()
    assert set(warm.triton_autotuners([kernels])) == {"first", "second"}
    with warm.one_triton_config([kernels], "first", 1):
        assert kernels.first.configs == ["b"] and kernels.first.run() == "launched"
        assert kernels.second.run() is None
    assert kernels.first.configs == ["a", "b", "c"] and kernels.second.run() == "launched"


def test_sections_warm_what_their_rows_launch():
    """ssd: coop_tiles' forward at every shape, the first in the first round (Mamba's configs join it where Mamba's
    copy loads); mamba_bwd: every backward launch in each dtype at every shape, the first shape and the model
    first."""
    from benchmarks.sections import mamba_bwd, ssd

    first, then = ssd.warm_items()
    assert first[0] == ("coop", ssd.SSD_SHAPES[0], None, None)
    assert [item for item in first + then if item[0] == "coop"] == [("coop", s, None, None) for s in ssd.SSD_SHAPES]
    first, then = mamba_bwd.warm_items()
    bwd = {item[1:] for item in first + then if item[0] == "bwd"}
    shapes, dtypes, launches = mamba_bwd.MAMBA_SHAPES, mamba_bwd.MAMBA_DTYPES, mamba_bwd.BWD_LAUNCHES
    assert bwd == {(s, d, launch) for s in shapes for d in dtypes for launch in launches}
    assert {item[2] for item in first if item[0] == "model"} == set(dtypes)
    assert all(item[1] == shapes[0] for item in first if item[0] != "model")
