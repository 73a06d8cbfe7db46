"""Debugging inside programs on a GPU: device_print prints what the interpreter prints, and a
failed ct.device_assert fails a debug launch (needs a GPU; programs in test_debugging.py)."""

import ctypes
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_debugging import DTYPES, print_tiles, print_tiles_case, with_asserts

import coop_tiles as ct

pytestmark = pytest.mark.gpu


def _to_device(a):
    if a.dtype == ct.bfloat16:
        torch = pytest.importorskip("torch")
        return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
    cp = pytest.importorskip("cupy")
    return cp.asarray(a)


def _gpu_output(capfd) -> list[str]:
    """What the kernels printed so far: printf's buffer reaches stdout at a synchronisation, through
    C's stdio, which buffers it when stdout is not a terminal."""
    from cuda.bindings import runtime

    runtime.cudaDeviceSynchronize()
    ctypes.CDLL(None).fflush(None)
    return capfd.readouterr().out.splitlines()


@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_prints_what_the_interpreter_prints(dtype, capfd):
    args, grid, lines = print_tiles_case(dtype, n=2500, tile_size=1000)
    device_args = [_to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    _gpu_output(capfd)
    ct.jit(print_tiles)[grid](*device_args, T=1000)
    assert sorted(_gpu_output(capfd)) == sorted(lines)  # programs print in any order, each line whole


def test_gpu_runs_disabled_asserts_as_if_absent():
    cp = pytest.importorskip("cupy")
    x = -cp.arange(40, dtype=cp.float32)
    y = cp.zeros_like(x)
    ct.jit(with_asserts)[3](x, y, 40, T=16)
    np.testing.assert_array_equal(y.get(), 2 * x.get())
    ct.jit(with_asserts, debug=True)[3](-x, y, 40, T=16)  # holds: the debug launch returns normally
    np.testing.assert_array_equal(y.get(), -2 * x.get())


def test_gpu_failed_assert_fails_the_debug_launch():
    """In a separate process: a failed device assertion leaves the CUDA context unusable."""
    pytest.importorskip("cupy")
    script = textwrap.dedent(
        """\
        import ctypes, sys, cupy as cp, coop_tiles as ct
        sys.path.insert(0, "tests")
        from test_debugging import with_asserts
        x = cp.arange(40, dtype=cp.float32)
        x[35] = -1
        y = cp.zeros_like(x)
        try:
            ct.jit(with_asserts, debug=True)[3](x, y, 40, T=16)  # LAUNCH
        except ct.TileAssertionError as e:
            print("raised", type(e).__name__, e.loc.line, flush=True)
        ctypes.CDLL(None).fflush(None)
        """
    )
    launch_line = next(i for i, text in enumerate(script.splitlines(), 1) if "# LAUNCH" in text)
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    line = with_asserts.__code__.co_firstlineno + 3
    assert (
        f"test_debugging.py:{line}: with_asserts: block: [2,0,0], thread: [0,0,0] Assertion `t is negative` failed."
        in output
    ), output[-3000:]
    assert f"raised TileAssertionError {launch_line}" in done.stdout, output[-3000:]
