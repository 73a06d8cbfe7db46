"""User mistakes raise TileError subclasses naming the user's file and line."""

import inspect
import re
import sys

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile

X = np.zeros(16, np.float32)


def line_of(fn, marker: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def compile_error(kernel, *args, **kwargs) -> ct.TileError:
    with pytest.raises(ct.TileError) as info:
        kernel.compile(*args, arch="sm_90", **kwargs)
    return info.value


def assert_located(err: ct.TileError, fn, marker: str, kind: type, message: str) -> None:
    assert isinstance(err, kind), f"{type(err).__name__}: {err}"
    text = str(err)
    assert text.startswith(f"{__file__}:{line_of(fn, marker)}:"), text
    assert re.search(message, text), text
    assert "coop_tiles/lang" not in text and "coop_tiles/runtime" not in text


def test_runtime_tile_size():
    @ct.jit
    def k(x, n):
        t = tile.load(x, 0, n)  # HERE
        tile.store(x, 0, t)

    assert_located(
        compile_error(k, X, 16),
        k.fn,
        "# HERE",
        ct.TileValueError,
        r"TileValueError: tile size must be a compile-time constant .*got a runtime int64",
    )


def test_tile_condition_is_divergence():
    @ct.jit
    def k(x, T: ct.constexpr):
        t = tile.load(x, 0, T)
        if t > 0:  # HERE
            tile.store(x, 0, t)

    err = compile_error(k, X, T=16)
    assert_located(err, k.fn, "# HERE", ct.DivergenceError, r"condition of this `if` is a tile.*ct\.where")
    assert "^^^^^" in str(err)


def test_unsupported_statement():
    @ct.jit
    def k(x, T: ct.constexpr):
        for i in range(3):
            break  # HERE

    assert_located(compile_error(k, X, T=16), k.fn, "# HERE", ct.TileSyntaxError, r"`break` is not supported")


def test_unsupported_expression():
    @ct.jit
    def k(x, T: ct.constexpr):
        f = lambda v: v  # HERE  # noqa: E731
        tile.store(x, 0, f(tile.zeros(T, np.float32)))

    assert_located(compile_error(k, X, T=16), k.fn, "# HERE", ct.TileSyntaxError, r"`Lambda` expressions")


def test_tile_size_mismatch():
    @ct.jit
    def k(x, T: ct.constexpr):
        a = tile.load(x, 0, T)
        b = tile.load(x, 0, T * 2)
        tile.store(x, 0, a + b)  # HERE

    assert_located(
        compile_error(k, X, T=8),
        k.fn,
        "# HERE",
        ct.TileTypeError,
        r"tiles of different sizes .*tile<float32, 8>, tile<float32, 16>",
    )


def test_undefined_name():
    @ct.jit
    def k(x, T: ct.constexpr):
        tile.store(x, 0, tile.zeros(T, np.float32) + undefined_thing)  # HERE  # noqa: F821

    assert_located(compile_error(k, X, T=8), k.fn, "# HERE", ct.TileSyntaxError, r"'undefined_thing' is not defined")


def test_scan_of_float_with_bitwise_op():
    @ct.jit
    def k(x, T: ct.constexpr):
        tile.store(x, 0, tile.scan(tile.load(x, 0, T), op="xor"))  # HERE

    assert_located(compile_error(k, X, T=8), k.fn, "# HERE", ct.TileTypeError, r"'xor' needs an integer tile")


def test_variable_switching_between_tile_and_scalar():
    @ct.jit
    def k(x, T: ct.constexpr):
        v = tile.zeros(T, np.float32)
        for i in range(2):
            v = 1.0  # HERE
        tile.store(x, 0, tile.zeros(T, np.float32))

    err = compile_error(k, X, T=8)
    assert isinstance(err, ct.TileTypeError) and "'v'" in str(err)


def test_error_inside_helper_names_both_lines():
    def helper(t):
        return t + tile.zeros(3, np.float32)  # HELPER

    @ct.jit
    def k(x, T: ct.constexpr):
        tile.store(x, 0, helper(tile.load(x, 0, T)))  # CALL

    err = compile_error(k, X, T=8)
    assert_located(err, helper, "# HELPER", ct.TileTypeError, "different sizes")
    assert f"inlined from {__file__}:{line_of(k.fn, '# CALL')}" in str(err)


def test_launch_with_host_array_is_a_clear_error():
    @ct.jit
    def k(x, T: ct.constexpr):
        tile.store(x, 0, tile.zeros(T, np.float32))

    with pytest.raises(ct.LaunchError, match=r"argument 'x' is a NumPy array in host memory"):
        k[1](X, T=16)


class FakeMisalignedDeviceArray:
    __cuda_array_interface__ = {
        "data": (1 << 20, False),
        "shape": (8,),
        "strides": (6,),
        "typestr": "<f4",
        "version": 3,
    }


class FakeComplexDeviceArray:
    __cuda_array_interface__ = {
        "data": (1 << 20, False),
        "shape": (8,),
        "strides": None,
        "typestr": "<c8",
        "version": 3,
    }


def test_launch_with_bad_device_arrays():
    @ct.jit
    def k(x, T: ct.constexpr):
        tile.store(x, 0, tile.zeros(T, np.float32))

    with pytest.raises(ct.LaunchError, match=r"argument 'x' has strides that are not a multiple of its element size"):
        k[1](FakeMisalignedDeviceArray(), T=16)
    with pytest.raises(ct.LaunchError, match=r"argument 'x' has dtype complex64, which is not supported"):
        k[1](FakeComplexDeviceArray(), T=16)
    with pytest.raises(ct.LaunchError, match=r"missing arguments: T"):
        k[1](X)
    with pytest.raises(ct.LaunchError, match=r"grid must be an int or a tuple"):
        k["big"](X, T=16)
    with pytest.raises(ct.LaunchError, match=r"launch a tile program with a grid"):
        k(X, T=16)


def test_interpreter_reports_tile_conditions_as_the_compiler_does():
    @ct.jit(interpret=True)
    def k(x, T: ct.constexpr):
        t = tile.load(x, 0, T)
        if t > 0:  # HERE
            tile.store(x, 0, t)

    with pytest.raises(ct.DivergenceError) as info:
        k[1](X, T=16)
    assert_located(info.value, k.fn, "# HERE", ct.DivergenceError, r"condition of this `if` is a tile")


@ct.jit
def copy_tile(x, n, T: ct.constexpr):
    tile.store(x, 0, tile.load(x, 0, T))


@pytest.mark.parametrize(
    "arch, message",
    [
        (
            "compute_90",
            'arch=\'compute_90\' is not a GPU architecture; pass it as 90, "sm_90", "sm_90a" or (9, 0) '
            '(did you mean "sm_90"?)',
        ),
        ("sm_9", 'arch=\'sm_9\' is not a GPU architecture; pass it as 90, "sm_90", "sm_90a" or (9, 0)'),
        (-1, 'arch=-1 is not a GPU architecture; pass it as 90, "sm_90", "sm_90a" or (9, 0)'),
        ((9, 0, 0), 'arch=(9, 0, 0) is not a GPU architecture; pass it as 90, "sm_90", "sm_90a" or (9, 0)'),
    ],
)
def test_a_bad_arch_is_a_launch_error_before_anything_compiles(arch, message, monkeypatch):
    monkeypatch.setattr(sys.modules["coop_tiles.jit"], "compile_kernel", lambda *a: pytest.fail("compiled"))
    with pytest.raises(ct.LaunchError) as info:
        copy_tile.compile(X, 16, T=8, arch=arch)  # ARCH
    assert info.value.message == message
    assert (info.value.loc.filename, info.value.loc.line) == (
        __file__,
        line_of(test_a_bad_arch_is_a_launch_error_before_anything_compiles, "# ARCH"),
    )


def test_an_arch_nvrtc_does_not_know_is_named_with_those_it_does():
    from coop_tiles.runtime.arch import nvrtc_archs

    version, archs = nvrtc_archs()
    assert 90 in archs and 50 not in archs
    with pytest.raises(ct.LaunchError) as info:
        copy_tile.compile(X, 16, T=8, arch="sm_50")
    listed = ", ".join(f"sm_{n}" for n in archs)
    assert info.value.message == f"arch='sm_50': NVRTC {version} does not compile for sm_50; it compiles for {listed}"


def test_a_tile_op_outside_a_program_is_located_at_its_call():
    with pytest.raises(ct.TileTypeError) as info:

        def helper(t, bias=tile.zeros(64, np.float32)):  # DEFAULT  # noqa: B008 - the mistake under test
            return t + bias

    outside = "can only be used inside a @ct.jit tile program (run it with kernel[grid](...), or interpret=True to "
    outside += "run it with NumPy)"
    here = test_a_tile_op_outside_a_program_is_located_at_its_call
    assert info.value.message == "tile.zeros() " + outside
    assert (info.value.loc.filename, info.value.loc.line) == (__file__, line_of(here, "# DEFAULT"))
    assert str(info.value).startswith(f"{__file__}:{line_of(here, '# DEFAULT')}:")
    with pytest.raises(ct.TileTypeError) as info:
        ct.exp(1.0)  # CT
    assert info.value.message == "ct.exp() " + outside
    assert (info.value.loc.filename, info.value.loc.line) == (__file__, line_of(here, "# CT"))


def test_parameters_left_out_take_their_defaults():
    """A constexpr or runtime parameter with a default may be left out of a launch or compile (as in Python); one
    without a default is still reported missing."""

    @ct.jit(interpret=True)
    def k(x, y, n, scale=2.0, TILE: ct.constexpr = 256, SHIFT: ct.constexpr = 1):
        base = ct.program_id(0) * TILE
        t = tile.load(x, base, TILE, valid=n - base, other=0)
        tile.store(y, base, t * scale + SHIFT, valid=n - base)

    x = np.arange(1000, dtype=np.float32)
    y = np.zeros_like(x)
    k[4](x, y, 1000)
    np.testing.assert_array_equal(y, 2 * x + 1)
    k[2](x, y, 1000, 3.0, TILE=512, SHIFT=0)
    np.testing.assert_array_equal(y, 3 * x)
    compiled = ct.jit(k.fn).compile(x, y, 1000, arch="sm_90")
    assert dict(compiled.signature.constexprs) == {"TILE": 256, "SHIFT": 1} and compiled.cubin
    with pytest.raises(ct.LaunchError, match=r"missing arguments: n$"):
        k[1](x, y)
