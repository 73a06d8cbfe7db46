"""Debugging inside programs: ct.static_print, ct.device_print and ct.device_assert.

Printed lines are compared with text built here from NumPy (C's `%g` for floats);
test_gpu_debugging.py checks that the device prints the same lines and that a failed debug
assert fails the launch. Mistakes (print(), breakpoint(), misuse of the three) are in
test_error_catalogue.py.
"""

import ctypes
from dataclasses import replace

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile


# ----- what the printed lines must be, built from NumPy ------------------------------------------
def c_format_g(value: float) -> str:
    """C's printf("%g"), from the C library: what CUDA's printf prints."""
    buffer = ctypes.create_string_buffer(64)
    ctypes.CDLL(None).snprintf(buffer, 64, b"%g", ctypes.c_double(value))
    return buffer.value.decode()


def ref_item(value, dtype) -> str:
    if dtype == np.bool_:
        return "True" if value else "False"
    if dtype.kind in "iu":
        return str(int(value))
    value = float(np.float64(value))
    return "nan" if np.isnan(value) else c_format_g(value)


def ref_line(pid: int, prefix: str, *values) -> str:
    parts = [f"pid ({pid}, 0, 0)", prefix]
    for v in values:
        if isinstance(v, np.ndarray):
            parts.append("[" + " ".join(ref_item(e, v.dtype) for e in v) + "]")
        else:
            parts.append(ref_item(v, np.asarray(v).dtype))
    return " ".join(parts)


# ----- ct.device_print ---------------------------------------------------------------------------
def print_tiles(x, flags, i, f, flag, n, T: ct.constexpr):
    pid = ct.program_id(0)
    t = tile.load(x, pid * T, T, valid=n - pid * T, other=0)
    b = tile.load(flags, pid * T, T, valid=n - pid * T, other=False)
    ct.device_print('x% "q" \u00e9:', t, b, pid, i, f, flag, (pid, n))


DTYPES = ["int8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64", "bool"]


def print_tiles_case(dtype: str, n: int, tile_size: int):
    """Arguments of `print_tiles` and the lines it must print, in program order."""
    dt = np.dtype(ct.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(7)
    if dt == np.bool_:
        x = rng.integers(0, 2, n).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        x = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    else:
        special = [np.nan, np.inf, -np.inf, -0.0, 0.1, 1 / 3, 1e-8, 123456789.0, 65504.0, -2.5]
        with np.errstate(over="ignore"):  # 123456789 is inf in float16
            x = np.concatenate([special, rng.normal(0, 100, n)])[:n].astype(dt)
    flags = rng.integers(0, 2, n).astype(bool)
    args = (x, flags, np.int16(-7), 2.5e-3, True, n)
    grid = -(-n // tile_size)
    lines = []
    for pid in range(grid):
        t = np.zeros(tile_size, dt)
        b = np.zeros(tile_size, bool)
        part = slice(pid * tile_size, min(n, (pid + 1) * tile_size))
        t[: part.stop - part.start] = x[part]
        b[: part.stop - part.start] = flags[part]
        values = (t, b, np.int64(pid), np.int16(-7), np.float64(2.5e-3), np.bool_(True), np.int64(pid), np.int64(n))
        lines.append(ref_line(pid, 'x% "q" \u00e9:', *values))
    return args, grid, lines


@pytest.mark.parametrize("dtype", DTYPES)
def test_interpreter_prints_one_line_per_program(dtype, capsys):
    args, grid, lines = print_tiles_case(dtype, n=45, tile_size=16)
    ct.jit(print_tiles, interpret=True)[grid](*args, T=16)
    assert capsys.readouterr().out.splitlines() == lines


def test_interpreter_prints_at_every_execution():
    @ct.jit(interpret=True)
    def k(x, n):
        for i in range(n):
            if i % 2 == 0:
                ct.device_print("i", i, x[i])

    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        k[1](np.array([0.5, 1.5, 2.5, 3.5], np.float32), 4)
    assert out.getvalue().splitlines() == ["pid (0, 0, 0) i 0 0.5", "pid (0, 0, 0) i 2 2.5"]


def test_device_print_gathers_tiles_in_temp_storage():
    k = ct.jit(print_tiles).compile(*print_tiles_case("float16", 45, 16)[0], T=1000, arch="sm_90")
    (choice,) = [c for c in k.plan.collectives.values() if c.op == "device_print"]
    assert (choice.primitive, choice.algorithm) == ("printf", "GATHER_TO_THREAD_0")
    assert k.plan.carve.regions[choice.cid].size == 1000 * 2 + 1000 * 1  # the float16 and the bool tile
    assert "vprintf" in k.ptx


def test_device_print_of_scalars_needs_no_temp_storage():
    @ct.jit
    def k(x, n):
        ct.device_print("n", n, x[0])

    compiled = k.compile(np.zeros(4, np.float64), 4, arch="sm_90")
    assert compiled.shared_bytes == 0
    assert "vprintf" in compiled.ptx


# ----- ct.static_print ---------------------------------------------------------------------------
def scale(t):
    ct.static_print("helper got", t)
    return t * 2


def static_printing(x, n, T: ct.constexpr):
    acc = 0.0  # retyped float32 by a second round of the front end
    t = tile.load(x, 0, T)
    for i in range(n):
        acc = acc + tile.sum(t)
    ct.static_print("acc", acc, "t", t, "T", T, "t.size", t.size, "dtype", t.dtype, (T, n))
    tile.store(x, 0, scale(t))
    x[0] = acc


def expected_static(size: int) -> list[str]:
    return [
        f"acc float32 t tile<float32, {size}> T {size} t.size {size} dtype float32 ({size}, int64 (python scalar))",
        f"helper got tile<float32, {size}>",
    ]


def test_static_print_prints_once_per_specialisation(capsys, monkeypatch):
    from coop_tiles.lang import frontend

    builds = []
    original = frontend.Builder.__init__
    monkeypatch.setattr(frontend.Builder, "__init__", lambda self, *a: builds.append(1) or original(self, *a))
    x = np.zeros(64, np.float32)
    k = ct.jit(static_printing)
    first = k.compile(x, 3, T=16, arch="sm_90")
    k.compile(x, 3, T=16, arch="sm_80")
    k._compile(replace(first.signature, block_threads=64))  # another block size, as the runtime may try
    assert len(builds) >= 6  # the front end ran twice per compile: printing it as it runs would repeat
    assert capsys.readouterr().out.splitlines() == expected_static(16)
    k.compile(x, 3, T=32, arch="sm_90")
    assert capsys.readouterr().out.splitlines() == expected_static(32)


def test_static_print_in_the_interpreter(capsys):
    x = np.ones(64, np.float32)
    k = ct.jit(static_printing, interpret=True)
    k[1](x, 3, T=16)
    assert x[0] == 48 and x[1] == 2
    k[1](x, 3, T=16)
    assert capsys.readouterr().out.splitlines() == expected_static(16)


def test_static_print_shows_before_a_later_stage_fails(capsys):
    @ct.jit
    def too_large(x, T: ct.constexpr):
        t = tile.load(x, 0, T)
        ct.static_print("T is", T)
        tile.store(x, 0, t)

    with pytest.raises(ct.TileValueError, match="items per thread"):
        too_large.compile(np.zeros(8, np.float32), T=300000, arch="sm_90")
    assert capsys.readouterr().out == "T is 300000\n"


# ----- ct.device_assert --------------------------------------------------------------------------
def with_asserts(x, y, n, T: ct.constexpr):
    pid = ct.program_id(0)
    t = tile.load(x, pid * T, T, valid=n - pid * T, other=0)
    ct.device_assert(t >= 0, "t is negative")
    ct.device_assert(n)
    if n > 1000:
        ct.device_assert(x[0] < 0, "never checked")
    ct.device_assert(x[pid] >= 0, "an element is negative")
    tile.store(y, pid * T, t * 2, valid=n - pid * T)


def without_asserts(x, y, n, T: ct.constexpr):
    pid = ct.program_id(0)
    t = tile.load(x, pid * T, T, valid=n - pid * T, other=0)
    if n > 1000:
        pass
    tile.store(y, pid * T, t * 2, valid=n - pid * T)


def test_interpreter_checks_asserts():
    x = np.arange(40, dtype=np.float32)
    y = np.zeros_like(x)
    k = ct.jit(with_asserts, interpret=True)
    k[3](x, y, 40, T=16)
    np.testing.assert_array_equal(y, 2 * x)
    x[35] = -1
    with pytest.raises(ct.TileAssertionError) as e:
        k[3](x, y, 40, T=16)
    assert e.value.message == "assertion failed in program (2, 0, 0): t is negative"
    x[35] = 0
    with pytest.raises(ct.TileAssertionError, match=r"program \(0, 0, 0\): n$"):
        k[3](x, y, 0, T=16)


def _ptx(fn, **jit) -> str:
    x = np.zeros(8, np.float32)
    return ct.jit(fn, **jit).compile(x, x, 8, T=1024, arch="sm_90").ptx.replace(fn.__name__, "PROGRAM")


def test_disabled_asserts_leave_no_trace_in_the_ptx():
    assert _ptx(with_asserts) == _ptx(without_asserts)


def test_enabled_asserts_call_assertfail_with_the_users_line():
    ptx = _ptx(with_asserts, debug=True)
    assert "__assertfail" in ptx and "__assertfail" not in _ptx(without_asserts, debug=True)
    k = ct.jit(with_asserts, debug=True).compile(*(np.zeros(8, np.float32),) * 2, 8, T=1024, arch="sm_90")
    assert k.signature.debug
    line = with_asserts.__code__.co_firstlineno + 3
    assert f'__assertfail("t is negative", "{__file__}", {line}, "with_asserts", 1)' in k.shim_source
    assert '__assertfail("n", ' in k.shim_source  # no message: the condition's source


def test_environment_variable_enables_asserts(monkeypatch):
    monkeypatch.setenv("COOP_TILES_DEBUG", "1")
    assert "__assertfail" in _ptx(with_asserts)
    monkeypatch.setenv("COOP_TILES_DEBUG", "0")
    assert "__assertfail" not in _ptx(with_asserts)
