"""The NumPy interpreter against sequential NumPy references, for every shared program."""

import math

import numpy as np
import pytest
from programs import CASES

import coop_tiles as ct
from coop_tiles import tile


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_interpreter_matches_reference(case):
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in case.args]
    ct.jit(case.kernel.fn, interpret=True)[case.grid](*case.launch_args(args), **case.constexprs)
    case.check([args[i] for i in case.outputs])


def test_environment_variable_selects_interpreter(monkeypatch):
    from programs import vector_add

    monkeypatch.setenv("COOP_TILES_INTERPRET", "1")
    x = np.arange(10, dtype=np.float32)
    out = np.zeros_like(x)
    ct.jit(vector_add.fn)[1](x, x, out, 10, TILE=16)  # read at a kernel's first launch
    np.testing.assert_array_equal(out, 2 * x)


def test_interpreter_rejects_out_of_bounds_loads():
    from programs import vector_add

    x = np.zeros(10, np.float32)
    with pytest.raises(ct.TileValueError, match=r"touches elements \[0, 16\) of an array of 10"):
        ct.jit(vector_add.fn, interpret=True)[1](x, x, x, 16, TILE=16)


def test_interpreter_rejects_out_of_range_scalar_indexes():
    @ct.jit(interpret=True)
    def k(x, i):
        x[0] = x[i]

    x = np.arange(4, dtype=np.float32)
    k[1](x, 3)
    assert x[0] == 3
    for bad in (4, -1):
        with pytest.raises(ct.TileValueError, match=f"index {bad} is outside an array of 4 elements"):
            k[1](x, bad)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_interpreted_value_has_its_compiled_type(case, monkeypatch):
    """After each statement, every variable it assigned holds a value of the dtype (and tile shape)
    the typed IR gives it, the one the compiled kernel uses."""
    from coop_tiles.lang import interpreter, ir
    from coop_tiles.lang.types import ArrayType, TileType

    checked = []
    original = interpreter.Frame.run

    def run_and_check(frame, body):
        for s in body:
            original(frame, [s])
            for var in ir.defs(s):
                if isinstance(var.type, ArrayType) or var.name not in frame.env:
                    continue
                value = np.asarray(frame.env[var.name])
                assert value.dtype == var.type.dtype, f"{s}: {var} holds {value.dtype}"
                if isinstance(var.type, TileType):
                    assert value.shape == var.type.shape, f"{s}: {var} holds shape {value.shape}"
                checked.append(var)

    monkeypatch.setattr(interpreter.Frame, "run", run_and_check)
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in case.args]
    ct.jit(case.kernel.fn, interpret=True)[case.grid](*case.launch_args(args), **case.constexprs)
    assert checked


@pytest.mark.parametrize("case", [c for c in CASES if c.name.startswith("histogram_loop[")][:3], ids=lambda c: c.name)
def test_rewritten_histogram_loop_keeps_its_meaning(case):
    """The GPU's IR keeps a loop's histogram counts in shared memory (begin, composite, end): run
    that rewritten IR in the interpreter and check it against the same reference."""
    from coop_tiles.lang import interpreter
    from coop_tiles.ops.histogram import HistogramComposite

    program = case.kernel.compile(*case.args, arch="sm_90", **case.constexprs).program
    assert any(isinstance(s, HistogramComposite) for s in program.walk())
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in case.args]
    runtime = [a for a, name in zip(args, case.kernel.parsed.params) if name not in case.constexprs]
    interpreter.run(program, (case.grid, 1, 1), runtime)
    case.check([args[i] for i in case.outputs])


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 8, 13, 100, 257, 1000])
def test_interpreter_merge_sort_is_the_stable_order(n):
    """The interpreter's vectorized merge sort gives the permutation a stable sort gives."""
    from coop_tiles.ops.sort import stable_merge_order

    keys = np.random.default_rng(n).integers(0, 7, n)
    np.testing.assert_array_equal(
        stable_merge_order(n, lambda a, b: keys[a] < keys[b]), np.argsort(keys, kind="stable")
    )
    descending = sorted(range(n), key=lambda i: -keys[i])
    np.testing.assert_array_equal(stable_merge_order(n, lambda a, b: keys[a] > keys[b]), descending)


@ct.combine
def _affine(a_l, b_l, a_r, b_r):
    return a_r * a_l, a_r * b_l + b_r


def _discards(a, b, h, last, h0, TILE: ct.constexpr):
    """`_` takes a tile in one target and a scalar in another of one unpacking: both are discarded."""
    x = tile.load(a, 0, TILE)
    y = tile.load(b, 0, TILE)
    (_, hs), (_, h_last) = tile.scan((x, y), op=_affine, initial=(1.0, h0), return_total=True)
    tile.store(h, 0, hs)
    last[0] = h_last


def test_underscore_discards_tiles_and_scalars_of_one_unpacking():
    a, b = np.linspace(0.5, 1.0, 64, dtype=np.float32), np.linspace(-1, 1, 64, dtype=np.float32)
    h, last = np.zeros(64, np.float32), np.zeros(1, np.float32)
    ct.jit(_discards, interpret=True)[1](a, b, h, last, np.float32(2.0), TILE=64)
    expected, state = [], 2.0
    for ai, bi in zip(a.astype(np.float64), b.astype(np.float64)):
        state = ai * state + bi
        expected.append(state)
    np.testing.assert_allclose(h, expected, rtol=1e-5)
    np.testing.assert_allclose(last, expected[-1:], rtol=1e-5)
    compiled = ct.jit(_discards).compile(a, b, h, last, np.float32(2.0), TILE=64, arch="sm_90")
    assert compiled.cubin


def test_dtype_aliases_name_numpy_types_in_programs_too():
    import ml_dtypes

    for name in [f"{k}{bits}" for k in ("int", "uint") for bits in (8, 16, 32, 64)] + ["float16", "float32", "float64"]:
        assert getattr(ct, name) is getattr(np, name), name
    assert ct.bool_ is np.bool_ and ct.bfloat16 is ml_dtypes.bfloat16

    @ct.jit(interpret=True)
    def k(y, T: ct.constexpr):
        t = tile.arange(T, dtype=ct.int16).astype(ct.float32) * ct.float32(0.5)
        tile.store(y, 0, t)
        y[0] = ct.erf(0.5) + ct.rsqrt(4.0) + ct.tanh(1.0) + ct.log2(8.0)  # folded at compile time

    y = np.zeros(8, np.float32)
    k[1](y, T=8)
    expected = np.arange(8, dtype=np.float32) * 0.5
    expected[0] = math.erf(0.5) + 0.5 + math.tanh(1.0) + 3.0
    np.testing.assert_array_equal(y, expected)
