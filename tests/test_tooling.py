"""Tooling: ct.testing (assert_close, do_bench), the command line, logging, and errors without a GPU."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from importlib import metadata
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.__main__ import main
from coop_tiles.runtime import launcher
from coop_tiles.runtime.cache import DiskCache, make_key
from coop_tiles.runtime.extension import built_extension, missing_reason, other_packages

REPO = Path(__file__).resolve().parent.parent


def line_of(marker: str) -> int:
    """The line of this file that holds `marker` (written once, in a comment)."""
    lines = Path(__file__).read_text().splitlines()
    return 1 + next(i for i, text in enumerate(lines) if text.rstrip().endswith(marker))


def failure(actual, expected, **kwargs) -> str:
    with pytest.raises(AssertionError) as info:
        ct.testing.assert_close(actual, expected, **kwargs)
    return str(info.value)


# ================================================================================================
# ct.testing.assert_close with NumPy inputs
# ================================================================================================
@pytest.mark.parametrize(
    "actual, expected, kwargs",
    [
        (np.arange(5, dtype=np.float32), np.arange(5.0), {}),
        (np.float32([1.0, 2.0]), np.float32([1.0, 2.0 + 1e-6]), {}),  # within float32's default rtol
        (np.float32([1.0, 2.0]), [1.0, 2.05], {"rtol": 0.03}),
        (np.float32([0.0]), [0.05], {"atol": 0.1}),
        (np.array([1.0, np.inf, -np.inf]), np.array([1.0, np.inf, -np.inf]), {}),
        (np.array([1.0, np.nan]), np.array([1.0, np.nan]), {"equal_nan": True}),
        (np.array([1.0, 2.0], ml_dtypes.bfloat16), np.float32([1.01, 2.02]), {}),  # bfloat16's rtol 1.6e-2
        (np.float16([1.0]), np.float16([1.0009765625]), {}),  # one float16 ulp: float16's rtol 1e-3
        (np.array([7, 2**62]), np.array([7, 2**62]), {}),
        (np.array([True, False]), np.array([True, False]), {}),
    ],
)
def test_assert_close_accepts(actual, expected, kwargs):
    ct.testing.assert_close(actual, expected, **kwargs)


def test_assert_close_reports_the_worst_mismatches():
    assert failure(np.float32([1, 2, 3, 4]), np.array([1, 2.5, 3, np.nan])) == (
        "Arrays are not close (rtol=1.3e-06, atol=1e-05; actual float32, expected float64)\n"
        "Mismatched elements: 2 / 4 (50%)\n"
        "Greatest absolute difference: nan at index [3]\n"
        "Greatest relative difference: nan at index [3]\n"
        "Worst mismatches (index: actual, expected):\n"
        "  [3]: 4.0, nan\n"
        "  [1]: 2.0, 2.5"
    )


def test_assert_close_indexes_every_axis_and_compares_integers_exactly():
    expected = np.arange(6).reshape(2, 3)
    expected[0, 0], expected[1, 2] = -1, 7
    assert failure(np.arange(6).reshape(2, 3), expected) == (
        "Arrays are not close (rtol=0, atol=0; actual int64, expected int64)\n"
        "Mismatched elements: 2 / 6 (33.3%)\n"
        "Greatest absolute difference: 2 at index [1, 2]\n"
        "Greatest relative difference: 1 at index [0, 0]\n"
        "Worst mismatches (index: actual, expected):\n"
        "  [1, 2]: 5, 7\n"
        "  [0, 0]: 0, -1"
    )
    assert failure(np.array([2**62 + 1]), np.array([2**62])).splitlines()[2] == (
        "Greatest absolute difference: 1 at index [0]"  # float64 would round both to 2**62
    )


def test_assert_close_lists_ten_mismatches_at_most():
    message = failure(np.zeros(12), np.arange(1, 13) * 0.5).splitlines()
    assert message[4] == "Worst mismatches (index: actual, expected), 10 of 12:"
    assert message[5:] == [f"  [{i}]: 0.0, {(i + 1) * 0.5}" for i in range(11, 1, -1)]


def test_assert_close_defaults_follow_the_looser_dtype():
    assert failure(np.array([1.0, 2.0], ml_dtypes.bfloat16), np.float32([1.01, 2.1])).splitlines() == [
        "Arrays are not close (rtol=0.016, atol=1e-05; actual bfloat16, expected float32)",
        "Mismatched elements: 1 / 2 (50%)",
        "Greatest absolute difference: 0.0999999 at index [1]",
        "Greatest relative difference: 0.047619 at index [1]",
        "Worst mismatches (index: actual, expected):",
        "  [1]: 2, 2.1",
    ]


@pytest.mark.parametrize(
    "actual, expected, kwargs, line",
    [
        (np.array([1.0, np.inf]), np.array([1.0, -np.inf]), {}, "  [1]: inf, -inf"),
        (np.array([np.nan]), np.array([np.nan]), {}, "  [0]: nan, nan"),  # NaNs differ unless equal_nan
        (np.float32([1.0]), [1.5], {"rtol": 0.1}, "  [0]: 1.0, 1.5"),
    ],
)
def test_assert_close_rejects(actual, expected, kwargs, line):
    assert failure(actual, expected, **kwargs).splitlines()[-1] == line


def test_assert_close_needs_equal_shapes():
    assert failure(np.zeros(2), np.zeros(3)) == "Shapes differ: actual (2,), expected (3,)"


# ================================================================================================
# On a GPU: assert_close with CuPy and PyTorch arrays, do_bench
# ================================================================================================
def device_arrays(library: str):
    """to_device(np_array) for CuPy or PyTorch; skips when it is not installed."""
    if library == "cupy":
        return pytest.importorskip("cupy").asarray
    torch = pytest.importorskip("torch")
    return lambda a: torch.from_numpy(a).cuda()


@pytest.mark.gpu
@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_assert_close_takes_device_arrays(library):
    to_device = device_arrays(library)
    x = np.linspace(0, 1, 1000, dtype=np.float32)
    ct.testing.assert_close(to_device(x), x)
    ct.testing.assert_close(x, to_device(x.astype(np.float64)))
    bad = x.copy()
    bad[17] = 5.0
    assert failure(to_device(bad), to_device(x)).splitlines()[-1] == f"  [17]: 5.0, {x[17]!s}"


@pytest.mark.gpu
def test_assert_close_takes_16_bit_torch_tensors():
    torch = pytest.importorskip("torch")
    x = np.linspace(0, 1, 100, dtype=np.float32)
    ct.testing.assert_close(torch.from_numpy(x).cuda().to(torch.bfloat16), x)  # bfloat16's rtol 1.6e-2
    ct.testing.assert_close(torch.from_numpy(x).cuda().half(), x)  # float16's rtol 1e-3
    bf = torch.from_numpy(x).cuda().to(torch.bfloat16)
    message = failure(bf, x, rtol=1e-6, atol=0)
    assert message.startswith("Arrays are not close (rtol=1e-06, atol=0; actual bfloat16, expected float32)")


@pytest.mark.gpu
@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_do_bench_times_on_the_gpu(library):
    to_device = device_arrays(library)
    small, big = to_device(np.zeros(1 << 20, np.float32)), to_device(np.zeros(1 << 26, np.float32))
    small_out, big_out = small * 0, big * 0

    def copy(dst, src):
        return lambda: dst.__setitem__(slice(None), src)

    small_ms = ct.testing.do_bench(copy(small_out, small))
    big_ms = ct.testing.do_bench(copy(big_out, big))
    assert 0 < small_ms and big_ms > 8 * small_ms  # 64x the bytes; launch overhead shrinks the ratio
    q20, q50, q80 = ct.testing.do_bench(copy(big_out, big), quantiles=[0.2, 0.5, 0.8])
    assert q20 <= q50 <= q80 and 0.5 * big_ms < q50 < 2 * big_ms
    assert isinstance(ct.testing.do_bench(copy(small_out, small), flush_l2=False), float)


@pytest.mark.gpu
@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_do_bench_host_ahead_times_the_gpu_work_without_the_hosts_time(library):
    to_device = device_arrays(library)
    small, small_out = to_device(np.zeros(1 << 16, np.float32)), to_device(np.zeros(1 << 16, np.float32))

    def fn():
        time.sleep(5e-4)  # the host's work before it queues the copy: far longer than the L2 flush
        small_out[:] = small

    waited = ct.testing.do_bench(fn, rep=20)
    ahead = ct.testing.do_bench(fn, rep=20, host_ahead=True)
    assert waited > 0.3  # (ms) the GPU idled inside the timed interval until the copy came
    assert ahead < 0.1  # a 256 KB copy


@pytest.mark.gpu
@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_do_bench_runs_setup_before_every_call_outside_the_timed_interval(library):
    to_device = device_arrays(library)
    small, small_out = to_device(np.zeros(1 << 16, np.float32)), to_device(np.zeros(1 << 16, np.float32))
    big = to_device(np.zeros(1 << 28, np.float32))
    calls = {"fn": 0, "setup": 0}

    def fn():
        calls["fn"] += 1
        small_out[:] = small

    def setup():
        calls["setup"] += 1
        big[:] = 1.0  # a 1 GiB write: far slower than fn

    setup_ms = ct.testing.do_bench(setup, rep=20)
    calls.update(fn=0, setup=0)
    ms = ct.testing.do_bench(fn, rep=20, setup=setup)
    assert calls["setup"] == calls["fn"] - 1  # every call but the very first (which may compile)
    assert ms < setup_ms / 4


# ================================================================================================
# The command line
# ================================================================================================
@pytest.fixture
def cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("COOP_TILES_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("COOP_TILES_CACHE_MAX_BYTES", raising=False)
    return tmp_path


def fill(root: Path) -> dict[str, list[int]]:
    """Entries of three kinds, last used 5 h, 2 min and 10 s ago; returns each kind's file sizes."""
    cache = DiskCache(root)
    items = [("kernel", 1, b"k" * 300, 5 * 3600), ("kernel", 2, b"k" * 10, 120), ("shims", 3, 16, 10)]
    sizes: dict[str, list[int]] = {}
    now = time.time()
    for kind, i, value, age in items:
        cache.put(kind, make_key(i), value)
        path = root / kind / f"{make_key(i)}.bin"
        os.utime(path, (now - age, now - age))
        sizes.setdefault(kind, []).append(path.stat().st_size)
    return sizes


def run_cli(capsys, *argv: str) -> list[str]:
    assert main(list(argv)) == 0
    return capsys.readouterr().out.splitlines()


def test_cache_info_list_and_clear(cache_root, capsys):
    sizes = fill(cache_root)
    k1, k2, s3 = sizes["kernel"][0], sizes["kernel"][1], sizes["shims"][0]
    assert all(size < 1024 for size in (k1, k2, s3))  # shown in bytes below
    info = run_cli(capsys, "cache", "info")
    assert info[:3] == [
        f"cache directory: {cache_root} (COOP_TILES_CACHE_DIR moves it)",
        "size cap: 4.0 GiB (COOP_TILES_CACHE_MAX_BYTES; least recently used entries go first)",
        f"total: 3 entries, {k1 + k2 + s3} B",
    ]
    assert [re.split(r"\s{2,}", line) for line in info[3:]] == [
        ["kind", "entries", "size", "holds"],
        ["kernel", "2", f"{k1 + k2} B", "compiled kernels (cubins)"],
        ["shims", "1", f"{s3} B", "NVRTC output of the CUB shims, with their TempStorage sizes"],
        ["autotune", "0", "0 B", "autotuning timings, one per kernel, key, device and config"],
        ["gemm", "0", "0 B", "cuBLASDx block GEMMs generated by libmathdx: traits and LTO-IR"],
        [
            "ptx",
            "0",
            "0 B",
            "the linked PTX of compiled kernels, made when asked for (`kernel.ptx`, `local_memory_bytes`)",
        ],
    ]
    rows = [line.split() for line in run_cli(capsys, "cache", "list")]
    assert rows[0] == ["kind", "key", "size", "last", "used"]
    assert (
        rows[1:]
        == [  # most recently used first
            ["shims", make_key(3)[:16], str(s3), "B", "10", "s", "ago"],
            ["kernel", make_key(2)[:16], str(k2), "B", "2", "min", "ago"],
            ["kernel", make_key(1)[:16], str(k1), "B", "5", "h", "ago"],
        ]
    )
    assert run_cli(capsys, "cache", "clear", "--kind", "kernel") == [
        f"removed 2 kernel entries ({k1 + k2} B) from {cache_root}"
    ]
    assert run_cli(capsys, "cache", "list", "--kind", "kernel") == ["no entries of kind 'kernel'"]
    assert run_cli(capsys, "cache", "clear") == [f"removed 1 entries ({s3} B) from {cache_root}"]
    assert run_cli(capsys, "cache", "list") == ["no entries"]


def test_cache_commands_take_the_kinds_cache_info_shows(cache_root, capsys):
    (cache_root / "ltoir").mkdir()  # left by an older version
    DiskCache(cache_root).put("kernel", make_key(1), b"k")
    shown = [line.split()[0] for line in run_cli(capsys, "cache", "info")[4:]]
    assert shown == ["kernel", "shims", "autotune", "gemm", "ptx", "ltoir"]
    for kind in shown:
        assert main(["cache", "list", "--kind", kind]) == 0
    capsys.readouterr()
    for action in ("list", "clear"):
        assert main(["cache", action, "--kind", "storage"]) == 2
        out, err = capsys.readouterr()
        message = "python -m coop_tiles cache: unknown kind 'storage'; the kinds are " + ", ".join(shown)
        assert (out, err) == ("", message + "\n")
    assert len(DiskCache(cache_root).entries()) == 1  # nothing cleared


@ct.jit
def add_one(x, out, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    tile.store(out, base, tile.load(x, base, TILE, valid=n - base) + 1, valid=n - base)


@ct.jit
def add_two(x, out, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    tile.store(out, base, tile.load(x, base, TILE, valid=n - base) + 2, valid=n - base)


def tune(kernel, n: int, times: dict[int, float]) -> None:
    """Autotune `kernel` for `n` without a GPU or compiling, each config (by block_threads) taking `times` ms."""
    configs = [ct.Config(block_threads=b, TILE=512) for b in times]
    tuned = ct.autotune(configs=configs, key=["n"])(kernel)
    tuned.timer = lambda launch, stream, config: times[config.block_threads]
    x = np.zeros(n, np.float32)
    tuned.best_config(1, None, (x, x, n), {}, device="Fake GPU", arch="sm_90")


def test_tune_list_and_clear(cache_root, capsys, monkeypatch):
    monkeypatch.setattr(ct.JITFunction, "compile", lambda self, *args, **kwargs: None)  # only the timings matter
    tune(add_one, 1000, {64: 0.25, 128: 0.125})
    tune(add_two, 77, {64: 1.5})
    hours_ago = time.time() - 3 * 3600
    for path in (cache_root / "autotune").iterdir():
        os.utime(path, (hours_ago, hours_ago))
    assert [re.split(r"\s{2,}", line) for line in run_cli(capsys, "tune", "list")] == [
        ["kernel", "key", "device", "config", "time", "last used"],
        ["add_one", "n=1000", "Fake GPU (sm_90)", "Config(block_threads=128, TILE=512)", "0.1250 ms", "3 h ago"],
        ["add_one", "n=1000", "Fake GPU (sm_90)", "Config(block_threads=64, TILE=512)", "0.2500 ms", "3 h ago"],
        ["add_two", "n=77", "Fake GPU (sm_90)", "Config(block_threads=64, TILE=512)", "1.5000 ms", "3 h ago"],
    ]  # fastest first within a key
    assert run_cli(capsys, "tune", "clear", "--kernel", "add_one") == ["removed 2 autotuning results of add_one"]
    assert [line.split()[0] for line in run_cli(capsys, "tune", "list")] == ["kernel", "add_two"]
    assert run_cli(capsys, "tune", "clear") == ["removed 1 autotuning results"]
    assert run_cli(capsys, "tune", "list") == ["no autotuning results"]


def test_version_names_the_toolchain_and_the_device(capsys):
    import cuda.pathfinder
    from cuda.bindings import nvjitlink, nvrtc

    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in run_cli(capsys, "--version"))
    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    assert rows["coop_tiles"] == version  # the checkout's, installed or not
    assert rows["numba-cuda"] == metadata.version("numba-cuda")
    _, major, minor = nvrtc.nvrtcVersion()
    assert rows["NVRTC"].split(".")[:2] == [str(major), str(minor)]  # the wheel's full version, or major.minor
    assert rows["nvJitLink"].split(".")[:2] == [str(v) for v in nvjitlink.version()[:2]]
    header = Path(cuda.pathfinder.find_nvidia_header_directory("cccl")) / "cub" / "version.cuh"
    cub = int(re.search(r"#define CUB_VERSION (\d+)", header.read_text()).group(1))
    assert rows["CUB (CCCL)"].startswith(f"{cub // 100000}.{cub // 100 % 1000}.{cub % 100} in ")
    package = Path(ct.__file__).parent
    assert rows["imported from"] == str(package)
    built = built_extension(package)
    if built is not None:
        assert rows["C launch path"] == f"built: {built} (used for launches with CuPy arrays)"
    else:  # where it was looked for, and why it is missing
        assert rows["C launch path"].startswith("not built: ") and str(package / "runtime") in rows["C launch path"]
    if launcher.gpu_available():
        assert rows["device"].endswith(")") and "(sm_" in rows["device"]
    else:
        assert rows["device"].startswith("no GPU (")


@pytest.mark.parametrize(
    "setting, said", [(None, "on for sm_90 and later (COOP_TILES_PDL=0 turns it off)"), ("0", "off (COOP_TILES_PDL=0)")]
)
def test_version_says_whether_programmatic_launch_is_on(setting, said, capsys, monkeypatch):
    if setting is None:
        monkeypatch.delenv("COOP_TILES_PDL", raising=False)
    else:
        monkeypatch.setenv("COOP_TILES_PDL", setting)
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in run_cli(capsys, "--version"))
    assert rows["programmatic launch"] == said


def test_python_dash_m_help():
    result = subprocess.run(
        [sys.executable, "-m", "coop_tiles", "--help"], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.startswith("usage: python -m coop_tiles [-h] [--version] {demo,cache,tune,plan} ...")
    bad = subprocess.run([sys.executable, "-m", "coop_tiles", "cache"], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2 and "the following arguments are required: action" in bad.stderr


@pytest.mark.skipif(launcher.gpu_available(), reason="the demo's no-GPU path")
def test_demo_without_a_gpu(capsys):
    from coop_tiles import demo

    assert demo.main() == 0
    out = capsys.readouterr().out
    assert out.startswith(f"No GPU found ({launcher.no_gpu_reason()}).\nRan scaled_cumsum in the NumPy interpreter")
    assert "Compiled it for sm_90" in out and out.rstrip().endswith("max |error| against NumPy: 0.00e+00")


@pytest.mark.gpu
def test_demo_on_the_gpu(capsys):
    from coop_tiles import demo

    assert demo.main() == 0
    assert "Ran scaled_cumsum on the GPU" in capsys.readouterr().out


# ================================================================================================
# Logging
# ================================================================================================
def python_with_env(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, env={**os.environ, **env}
    )


def test_coop_tiles_log_installs_a_stderr_handler():
    code = "import logging, coop_tiles; logging.getLogger('coop_tiles.compile').debug('hello')"
    assert "[coop_tiles DEBUG] hello\n" in python_with_env(code, COOP_TILES_LOG="debug").stderr
    assert "hello" not in python_with_env(code, COOP_TILES_LOG="info").stderr
    assert python_with_env(code, COOP_TILES_LOG="").stderr == ""
    loud = python_with_env(code, COOP_TILES_LOG="loud").stderr
    warning = "[coop_tiles WARNING] COOP_TILES_LOG='loud' is not one of debug, info, warning, error; logging at info\n"
    assert warning in loud


def test_a_missing_c_launch_path_is_logged_as_a_warning():
    code = "import sys; sys.modules['coop_tiles.runtime._claunch'] = None; import coop_tiles"
    stderr = python_with_env(code, COOP_TILES_LOG="warning").stderr
    head = "[coop_tiles WARNING] the C launch path (coop_tiles.runtime._claunch) is not built: "
    tail = ". Launches go through the Python fast path, which costs more host time per launch\n"
    assert stderr.startswith(head) and stderr.endswith(tail), stderr
    assert str(REPO / "coop_tiles" / "runtime") in stderr  # where it was looked for


def fake_package(root: Path, checkout: bool = False, built: bool = False) -> Path:
    """A coop_tiles package directory under `root` (in a checkout: beside setup.py and pyproject.toml)."""
    package = root / "coop_tiles"
    (package / "runtime").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    if checkout:
        (root / "setup.py").write_text("")
        (root / "pyproject.toml").write_text("")
    if built:
        (package / "runtime" / f"_claunch{EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    return package


def test_a_missing_c_launch_path_says_what_was_imported_and_what_builds_it(tmp_path):
    checkout = fake_package(tmp_path / "repo", checkout=True)
    installed = fake_package(tmp_path / "site", built=True)
    error = "No module named 'coop_tiles.runtime._claunch'"
    build = "`pip install -e .` (or `python setup.py build_ext --inplace`)"
    said = f"coop_tiles was imported from the source checkout {tmp_path}/repo, which has no _claunch extension in "
    said += f"{checkout}/runtime"
    assert missing_reason(error, checkout, [installed]) == (
        f"{said}; the checkout comes first on sys.path (as the current directory does with `python -m`), before the "
        f"installed coop_tiles at {installed}, which has one: run from another directory, or build it in the "
        f"checkout with {build}"
    )
    assert missing_reason(error, checkout, []) == f"{said}; build it there with {build}, which needs a C compiler"
    bare = fake_package(tmp_path / "bare")
    assert missing_reason(error, bare, [installed]) == (
        f"no _claunch extension in {bare}/runtime; reinstall coop_tiles with a C compiler present to build it"
    )
    extension = installed / "runtime" / f"_claunch{EXTENSION_SUFFIXES[0]}"
    assert missing_reason("undefined symbol: x", installed, []) == (
        f"{extension} did not load: undefined symbol: x; rebuild it with {build} in {tmp_path}/site"
    )


def test_other_coop_tiles_packages_are_those_found_past_the_imported_one(tmp_path, monkeypatch):
    first = fake_package(tmp_path / "first", checkout=True)
    second = fake_package(tmp_path / "second", built=True)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "first"), str(tmp_path / "second")])
    others = other_packages(first)
    assert second.resolve() in others and first.resolve() not in others


@ct.jit
def store_n(out, n):
    out[0] = n


def test_a_cold_compile_is_logged_at_info_and_a_warm_one_says_so(cache_root, caplog):
    caplog.set_level(logging.INFO, logger="coop_tiles")
    out = np.zeros(1, np.int64)
    ct.jit(store_n.fn).compile(out, 1, arch="sm_90")
    assert {e.kind for e in DiskCache(cache_root).entries()} == {"kernel", "shims"}  # kinds `cache info` shows
    messages = [r.getMessage() for r in caplog.records if r.name == "coop_tiles.compile"]
    assert messages[0] == "compiling store_n(out: array<int64, 1d>, n: int64 (python scalar)) for sm_90"
    assert re.fullmatch(r"compiled store_n for sm_90 in \d+\.\d\d s", messages[1]) and len(messages) == 2
    caplog.clear()
    ct.jit(store_n.fn).compile(out, 1, arch="sm_90")
    (warm,) = [r.getMessage() for r in caplog.records if r.name == "coop_tiles.compile"]
    assert re.fullmatch(r"store_n for sm_90: cubin from the disk cache in \d+\.\d\d s", warm)


@pytest.mark.gpu
def test_block_size_choice_is_logged(caplog):
    cp = pytest.importorskip("cupy")
    caplog.set_level(logging.INFO, logger="coop_tiles.blockdims")
    x = cp.zeros(4096, cp.float32)
    ct.jit(add_one.fn)[1](x, x, 4096, TILE=4096)
    (message,) = caplog.messages
    assert re.match(r"add_one: \d+ threads per block \(", message)


# ================================================================================================
# Without a GPU: located errors
# ================================================================================================
@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(launcher, "no_gpu_reason", lambda: "no NVIDIA driver")
    monkeypatch.delenv("COOP_TILES_INTERPRET", raising=False)


def test_compile_without_a_gpu_or_an_arch(no_gpu):
    x = np.zeros(16, np.float32)
    with pytest.raises(ct.TileError) as info:
        add_one.compile(x, x, 16, TILE=512)  # COMPILE-WITHOUT-ARCH
    e = info.value
    assert type(e) is ct.TileError
    assert e.message == (
        "no CUDA GPU found (no NVIDIA driver) to compile for; pass the target arch to compile without one: "
        'add_one.compile(..., arch="sm_90")'
    )
    assert (e.loc.filename, e.loc.line) == (__file__, line_of("# COMPILE-WITHOUT-ARCH"))


def test_autotune_without_a_gpu(no_gpu):
    tuned = ct.autotune(configs=[ct.Config(block_threads=64, TILE=512)], key=["n"])(add_one)
    x = np.zeros(16, np.float32)
    with pytest.raises(ct.TileError) as info:
        tuned[1](x, x, 16)  # AUTOTUNE-WITHOUT-GPU
    e = info.value
    assert type(e) is ct.TileError
    assert e.message == (
        "no CUDA GPU found (no NVIDIA driver) to time the configs of add_one on; set COOP_TILES_INTERPRET=1 to "
        "run its first config in the interpreter, or compile a config without a GPU with "
        'add_one.kernel.compile(..., arch="sm_90")'
    )
    assert (e.loc.filename, e.loc.line) == (__file__, line_of("# AUTOTUNE-WITHOUT-GPU"))


def test_the_longest_tests_conftest_collects_first_exist():
    """conftest.SLOWEST names tests by node id: a renamed one would silently stop being collected first."""
    from conftest import SLOWEST

    for nodeid in SLOWEST:
        path, name = nodeid.split("::")
        source = (REPO / path).read_text()
        assert re.search(rf"^def {re.escape(name.split('[')[0])}\(", source, re.M), f"{nodeid} is not a test"
