"""Host time per launch of a do-nothing kernel: coop_tiles against a CuPy RawKernel, Numba and a bare cuLaunchKernel
(issue 3)."""

from __future__ import annotations

import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.charts import declare
from benchmarks.section import Section
from benchmarks.timing import host_overheads_us


def _launch_kernels(arity: int):
    """The same do-nothing kernel with `arity` array arguments, in coop_tiles, Numba and CuPy."""
    import cupy as cp
    from numba import cuda

    names = [f"a{i}" for i in range(arity)]
    namespace = {"cuda": cuda}
    path = Path(tempfile.mkdtemp()) / f"launch_{arity}.py"
    path.write_text(
        "import coop_tiles as ct\n\n\n@ct.jit\n"
        + textwrap.dedent(f"""
        def program({", ".join(names)}):
            if ct.program_id(0) < 0:
                a0[0] = 0
    """)
        + "\n\n@ct.jit\n"
        + textwrap.dedent(f"""
        def program_2d({", ".join(names)}):
            if ct.program_id(0) < 0:
                a0[0, 0] = 0
    """)
    )
    sys.path.insert(0, str(path.parent))
    ours = __import__(path.stem).program
    exec(
        textwrap.dedent(f"""
        def numba_kernel({", ".join(names)}):
            if cuda.blockIdx.x > 1000000:
                a0[0] = 0
    """),
        namespace,
    )
    numba_kernel = cuda.jit(namespace["numba_kernel"])
    params = ", ".join(f"float* a{i}" for i in range(arity))
    raw = cp.RawKernel(f'extern "C" __global__ void k({params}) {{ if (blockIdx.x > 1000000) a0[0] = 0; }}', "k")
    return ours, numba_kernel, raw


def _bare_driver_launch(raw: Any, arrays: tuple) -> Callable[[], None]:
    """cuLaunchKernel of the RawKernel's function on a parameter buffer built once, through CuPy's
    thinnest driver binding: about the least a launch from Python can cost."""
    import ctypes

    import cupy as cp

    values = (ctypes.c_uint64 * len(arrays))(*(a.data.ptr for a in arrays))
    params = (ctypes.c_void_p * len(arrays))(*(ctypes.addressof(values) + 8 * i for i in range(len(arrays))))
    function, pointer, launch = raw.kernel.ptr, ctypes.addressof(params), cp.cuda.driver.launchKernel

    def bare() -> None:
        launch(function, 1, 1, 1, 32, 1, 1, 0, 0, pointer, 0)

    bare.keep_alive = (values, params)
    return bare


def launch_rows() -> list[dict]:
    import cupy as cp

    rows = []
    for arity in (1, 4, 8):
        arrays = tuple(cp.zeros(16, cp.float32) for _ in range(arity))
        ours, numba_kernel, raw = _launch_kernels(arity)
        # each as its users write it: the grid and block given on every call
        times = host_overheads_us(
            {
                "coop_us": lambda: ours[1](*arrays),
                "cupy_us": lambda: raw((1,), (32,), arrays),
                "numba_us": lambda: numba_kernel[1, 32](*arrays),
                "driver_us": _bare_driver_launch(raw, arrays),
            }
        )
        rows.append({"arrays": arity, **times})
    return rows


#: the argument kinds and grids of `path_rows`, with the launch path each takes
PATHS = {
    "CuPy 1-D, `kernel[1]`": "C",
    "CuPy 1-D, `kernel[(1,)]`": "C",
    "CuPy 2-D, `kernel[(1, 1)]`": "generated Python",
    "PyTorch 1-D, `kernel[1]`": "C",
    "PyTorch 2-D, `kernel[(1, 1)]`": "C",
}
PATH_ARITY = 4


def path_rows() -> list[dict]:
    """Host time per launch of the 4-array do-nothing kernel through each launch path (PATHS), against the
    CuPy RawKernel's in the same rounds; PyTorch rows only when PyTorch is installed."""
    import importlib

    import cupy as cp

    ours, _, raw = _launch_kernels(PATH_ARITY)
    ours_2d = importlib.import_module(ours.fn.__module__).program_2d
    flat = tuple(cp.zeros(16, cp.float32) for _ in range(PATH_ARITY))
    square = tuple(cp.zeros((4, 4), cp.float32) for _ in range(PATH_ARITY))
    launches = {
        "CuPy 1-D, `kernel[1]`": lambda: ours[1](*flat),
        "CuPy 1-D, `kernel[(1,)]`": lambda: ours[(1,)](*flat),
        "CuPy 2-D, `kernel[(1, 1)]`": lambda: ours_2d[(1, 1)](*square),
        "CuPy RawKernel": lambda: raw((1,), (32,), flat),
    }
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tflat = tuple(torch.zeros(16, device="cuda") for _ in range(PATH_ARITY))
        tsquare = tuple(torch.zeros(4, 4, device="cuda") for _ in range(PATH_ARITY))
        launches["PyTorch 1-D, `kernel[1]`"] = lambda: ours[1](*tflat)
        launches["PyTorch 2-D, `kernel[(1, 1)]`"] = lambda: ours_2d[(1, 1)](*tsquare)
    times = host_overheads_us(launches)
    cupy_us = times.pop("CuPy RawKernel")
    return [{"path": name, "us": us, "cupy_us": cupy_us} for name, us in times.items()]


def launch_lines(launches: list[dict]) -> list[str]:
    lines = [
        "## Host overhead per launch",
        "",
        "A do-nothing kernel with N array arguments (CuPy arrays), launched back to back, each written",
        "as its users write it: `kernel[1](*arrays)`, `raw((1,), (32,), arrays)`, `numba_kernel[1, 32](*arrays)`.",
        "*bare cuLaunchKernel* calls the driver through CuPy's thinnest binding on a parameter buffer",
        "built once: about the least a launch from Python can cost. *above the floor* is each path's own cost.",
        "",
        "| arrays | coop_tiles µs | CuPy RawKernel µs | Numba µs | bare cuLaunchKernel µs "
        "| coop_tiles / CuPy | above the floor: coop_tiles / CuPy |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in launches:
        floor = r["driver_us"]
        lines.append(
            f"| {r['arrays']} | {r['coop_us']:.2f} | {r['cupy_us']:.2f} | {r['numba_us']:.2f} | {floor:.2f} | "
            f"**{r['coop_us'] / r['cupy_us']:.2f}x** | {r['coop_us'] - floor:.2f} / {r['cupy_us'] - floor:.2f} µs |"
        )
    return lines + ["", "Bar (issue 3): at most 0.8x the CuPy RawKernel's time per launch.", ""]


def path_lines(paths: list[dict]) -> list[str]:
    lines = [
        f"Each launch path, the kernel with {PATH_ARITY} arrays (a 2-D one for 2-D arrays), against the CuPy "
        "RawKernel's time in the same rounds:",
        "",
        "| arguments and grid | launch path | coop_tiles µs | CuPy RawKernel µs | coop_tiles / CuPy |",
        "|---|---|---|---|---|",
    ]
    for r in paths:
        path = PATHS[r["path"]]
        lines.append(
            f"| {r['path']} | {path} | {r['us']:.2f} | {r['cupy_us']:.2f} | **{r['us'] / r['cupy_us']:.2f}x** |"
        )
    return lines + [""]


def run(sizes: list[int], arch: str) -> list[dict]:
    return launch_rows() + path_rows()


def lines(rows: list[dict]) -> list[str]:
    """The table by arity (rows with "arrays"), then the table by launch path (rows with "path", in runs that
    measured them)."""
    paths = [r for r in rows if "path" in r]
    return launch_lines([r for r in rows if "arrays" in r]) + (path_lines(paths) if paths else [])


SECTION = Section(
    "launch",
    key="launches",
    needs=("cupy", "numba"),
    run=run,
    lines=lines,
    guarded=False,
    chart=declare(
        "host overhead per launch",
        {
            "coop_tiles": lambda r: r["coop_us"],
            "CuPy RawKernel": lambda r: r["cupy_us"],
            "Numba": lambda r: r["numba_us"],
        },
        x="arrays",
        rows=lambda rows: [r for r in rows if "arrays" in r],
        dashed={"bare cuLaunchKernel": lambda r: r["driver_us"]},
        plot="lines",
        xlabel="array arguments",
        ylabel="µs per launch (lower is better)",
        y_log=True,
    ),
)
