"""Autotuning with the timer replaced (no GPU): choice, per-config cache, second process, damage."""

import inspect
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.runtime.cache import DiskCache

FAKE_MS = {(64, 512): 3.0, (128, 512): 1.0, (128, 1024): 2.0, (256, 1024): 0.5}


@ct.jit
def add_one(x, out, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    tile.store(out, base, tile.load(x, base, TILE, valid=n - base) + 1, valid=n - base)


class FakeTimer:
    """Times a config by a table instead of running it; records what it was asked to time."""

    def __init__(self):
        self.calls = []

    def __call__(self, launch, stream, config):
        self.calls.append(config)
        return FAKE_MS[(config.block_threads, config.kwargs["TILE"])]


def tuner(configs, timer, **kwargs):
    t = ct.autotune(configs=configs, key=["n"], **kwargs)(add_one)
    t.timer = timer
    return t


CONFIGS = [
    ct.Config(block_threads=64, TILE=512),
    ct.Config(block_threads=128, TILE=512),
    ct.Config(block_threads=128, TILE=1024),
]


def choose(t, n=1000, out=None):
    x = np.zeros(n, np.float32)
    out = np.zeros(n, np.float32) if out is None else out
    return t.best_config(ct.cdiv(n, 512), None, (x, out, n), {}, device="Fake GPU", arch="sm_90")


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("COOP_TILES_CACHE_DIR", str(tmp_path))


def test_picks_the_fastest_and_remembers_it():
    timer = FakeTimer()
    t = tuner(CONFIGS, timer)
    assert choose(t) == ct.Config(block_threads=128, TILE=512)
    assert len(timer.calls) == 3
    assert choose(t) == ct.Config(block_threads=128, TILE=512)
    assert len(timer.calls) == 3  # in memory now
    assert choose(t, n=2000) == ct.Config(block_threads=128, TILE=512)
    assert len(timer.calls) == 6  # a new key value is tuned on its own


def test_editing_the_config_list_keeps_timings_of_unchanged_configs():
    timer = FakeTimer()
    choose(tuner(CONFIGS, timer))
    timer2 = FakeTimer()
    extended = CONFIGS[1:] + [ct.Config(block_threads=256, TILE=1024)]
    assert choose(tuner(extended, timer2)) == ct.Config(block_threads=256, TILE=1024)
    assert timer2.calls == [ct.Config(block_threads=256, TILE=1024)]


def test_configs_that_fail_are_skipped_with_a_reason(caplog):
    caplog.set_level(logging.INFO, logger="coop_tiles.autotune")
    timer = FakeTimer()
    bad = ct.Config(block_threads=100, TILE=512)
    assert choose(tuner([bad] + CONFIGS, timer)) == ct.Config(block_threads=128, TILE=512)
    (record,) = caplog.records
    assert record.getMessage().splitlines() == [
        "autotuned add_one(n=1000) on Fake GPU (sm_90):",
        "  Config(block_threads=100, TILE=512): skipped (TileValueError: block_threads must be a multiple of 32 "
        "between 32 and 1024, got 100)",
        "  Config(block_threads=64, TILE=512): 3.0000 ms",
        "  Config(block_threads=128, TILE=512): 1.0000 ms",
        "  Config(block_threads=128, TILE=1024): 2.0000 ms",
        "  best: Config(block_threads=128, TILE=512)",
    ]
    with pytest.raises(ct.TileError, match="no autotuning config of add_one could run"):
        choose(tuner([bad], FakeTimer()), n=77)


def test_damaged_entries_are_remeasured(tmp_path):
    timer = FakeTimer()
    choose(tuner(CONFIGS, timer))
    entries = sorted((tmp_path / "autotune").iterdir())
    assert len(entries) == 3
    entries[0].write_bytes(b"garbage")
    timer2 = FakeTimer()
    choose(tuner(CONFIGS, timer2))
    assert len(timer2.calls) == 1


def test_reset_and_restore_leave_outputs_as_the_contract_says():
    timer = FakeTimer()
    out = np.full(1000, 7, np.float32)
    choose(tuner(CONFIGS, timer, reset=["out"]), out=out)
    assert not out.any()
    out = np.full(1000, 7, np.float32)
    choose(tuner(CONFIGS, FakeTimer(), restore=["out"]), n=999, out=out[:999])
    assert (out == 7).all()


def test_bad_parameter_names_are_rejected():
    with pytest.raises(ct.TileError, match="names 'm', which is not a parameter of add_one"):
        ct.autotune(configs=CONFIGS, key=["m"])(add_one)


SECOND_PROCESS = """
import sys
sys.path.insert(0, {tests!r})
import test_autotune as t
timer = t.FakeTimer()
best = t.choose(t.tuner(t.CONFIGS, timer))
print(len(timer.calls), best)
"""


def test_a_second_process_does_not_retune(tmp_path):
    env = dict(os.environ, COOP_TILES_CACHE_DIR=str(tmp_path))
    script = SECOND_PROCESS.format(tests=str(Path(__file__).parent))
    runs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    assert runs[0].stdout.split()[0] == "3"
    assert runs[1].stdout.split()[0] == "0"
    assert "TILE=512" in runs[1].stdout


def test_concurrent_tuning_processes_agree(tmp_path):
    env = dict(os.environ, COOP_TILES_CACHE_DIR=str(tmp_path))
    script = SECOND_PROCESS.format(tests=str(Path(__file__).parent))
    procs = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True) for _ in range(3)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert {o.split(maxsplit=1)[1].strip() for o in outputs} == {"Config(block_threads=128, TILE=512)"}
    after = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert after.stdout.split()[0] == "0"


def test_entries_record_kernel_key_device_and_config(tmp_path):
    choose(tuner(CONFIGS, FakeTimer()))
    cache = DiskCache(tmp_path)
    values = [cache.read(e) for e in cache.entries("autotune")]
    assert sorted((v["config"], v["ms"]) for v in values) == sorted(
        (str(c), FAKE_MS[(c.block_threads, c.kwargs["TILE"])]) for c in CONFIGS
    )
    assert {(v["kernel"], tuple(v["key"].items()), v["device"], v["arch"], v["reason"]) for v in values} == {
        ("add_one", (("n", 1000),), "Fake GPU", "sm_90", None)
    }


@ct.jit
def partial_sums(x, out, n, TILE: ct.constexpr):
    pid = ct.program_id(0)
    base = pid * TILE
    out[pid] = tile.sum(tile.load(x, base, TILE, valid=n - base, other=0))


class NoTimer:
    def __call__(self, launch, stream, config):
        raise AssertionError("the interpreter timed a config")


@pytest.mark.parametrize("how", ["environment", "interpret=True"])
def test_in_the_interpreter_the_first_config_runs_untimed(monkeypatch, how):
    if how == "environment":
        monkeypatch.setenv("COOP_TILES_INTERPRET", "1")
        kernel = ct.jit(partial_sums.fn)
    else:
        monkeypatch.delenv("COOP_TILES_INTERPRET", raising=False)
        kernel = ct.jit(partial_sums.fn, interpret=True)
    configs = [ct.Config(block_threads=64, TILE=256), ct.Config(block_threads=128, TILE=512)]
    tuned = ct.autotune(configs=configs, key=["n"])(kernel)
    tuned.timer = NoTimer()
    n = 1000
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(8, np.float32)
    tuned[lambda meta: ct.cdiv(n, meta["TILE"])](x, out, n)
    expected = np.zeros(8, np.float32)
    expected[:4] = [x[i : i + 256].sum() for i in range(0, n, 256)]  # TILE=256: the first config's
    np.testing.assert_array_equal(out, expected)


def line_of(fn, marker: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(lines) if marker in text)


ALLOWED = "a config sets block_threads and the ct.constexpr parameters of add_one (TILE)"


@pytest.mark.parametrize(
    "config, message",
    [
        (
            ct.Config(num_warps=4, TILE=1024),
            "Config(block_threads=None, TILE=1024, num_warps=4) sets num_warps: coop_tiles counts threads, not warps; "
            "use block_threads=128 (num_warps * 32)",
        ),
        (
            ct.Config(block_threads=128, TILES=1024),
            "Config(block_threads=128, TILES=1024) sets 'TILES', which is not a parameter of add_one "
            f"(did you mean 'TILE'?); {ALLOWED}",
        ),
        (
            ct.Config(TILE=512, n=1000),
            f"Config(block_threads=None, TILE=512, n=1000) sets 'n', a runtime parameter of add_one; {ALLOWED}",
        ),
    ],
)
def test_a_config_that_sets_no_constexpr_is_rejected_at_the_decorator(config, message):
    def decorate():
        @ct.autotune(configs=[CONFIGS[0], config])  # DECORATOR
        @ct.jit
        def add_one(x, out, n, TILE: ct.constexpr):
            pass

    with pytest.raises(ct.TileValueError) as info:
        decorate()
    assert info.value.message == message
    assert (info.value.loc.filename, info.value.loc.line) == (__file__, line_of(decorate, "# DECORATOR"))


@pytest.mark.parametrize("interpret", [True, False])
def test_a_launch_that_passes_a_tuned_parameter_is_a_located_launch_error(interpret):
    tuned = ct.autotune(configs=CONFIGS, key=["n"])(ct.jit(add_one.fn, interpret=interpret))
    tuned.timer = NoTimer()
    x = np.zeros(16, np.float32)

    def launch():
        tuned[1](x, x, 16, TILE=512)  # KEYWORD

    def positional():
        tuned[1](x, x, 16, 512)  # POSITIONAL

    for how, marker in ((launch, "# KEYWORD"), (positional, "# POSITIONAL")):
        with pytest.raises(ct.LaunchError) as info:
            how()
        assert info.value.message == "add_one is autotuned: its configs set 'TILE', so the launch must not pass it"
        assert (info.value.loc.filename, info.value.loc.line) == (__file__, line_of(how, marker))
