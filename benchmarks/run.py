"""coop_tiles benchmarks on the GPU; writes docs/benchmarks.md (never edit that file by hand).

Every figure is a median over repetitions after warm-up, timed with `ct.testing.do_bench` (kernels: CUDA events,
the L2 cache flushed before each repetition) or perf_counter over thousands of launches (host overhead), against a
baseline timed in the same run: the device copy bandwidth, CuPy, a plain Numba kernel, a CuPy RawKernel, Triton
(benchmarks/_baselines.py), torch.cumsum, torch.bincount and torch.sort, and CUB (benchmarks/cub_baselines.cu,
built with nvcc at run time into the git-ignored benchmarks/.build/ and loaded with ctypes).

    python benchmarks/run.py [--out docs/benchmarks.md] [--quick] [--only linrec,half]
    python benchmarks/run.py --only bandwidth,launch --save a.pkl; python benchmarks/run.py --only mamba --merge a.pkl

Sections: bandwidth, launch, compile, blocks (issues 2 and 3), linrec, half, rows2d (issue 7), histogram,
segsort (issue 8), chained (issue 11), mamba (issue 9: against Mamba's own CUDA kernel, built by
benchmarks/_mamba_cuda.py from a Mamba checkout). Each section from issue 7 on records its own failures as rows of
the table rather than stopping the run.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(1, str(Path(__file__).resolve().parent))  # benchmarks/_baselines.py, however run.py is started

import coop_tiles as ct  # noqa: E402
from coop_tiles import tile  # noqa: E402

TILE = 4096


@ct.jit
def tile_cumsum(x, y, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, tile.scan(t), valid=n - base)


@ct.jit
def tile_sum(x, partial, n, TILE: ct.constexpr):
    pid = ct.program_id(0)
    base = pid * TILE
    partial[pid] = tile.sum(tile.load(x, base, TILE, valid=n - base, other=0))


@ct.jit
def row_cumsum(x, y, CHUNK: ct.constexpr):
    r = ct.program_id(0)
    row, out = x[r], y[r]  # 1-D views (N-D strided arrays per the contract)
    n = x.shape[1]
    carry = 0.0
    for base in range(0, n, CHUNK):
        t = tile.load(row, base, CHUNK, valid=n - base, other=0)
        s, carry = tile.scan(t, initial=carry, return_total=True)
        tile.store(out, base, s, valid=n - base)


# Tutorial 04's per-tile linear recurrence (the benchmark times what the tutorial shows). A library that rejects
# it fails the linrec section alone, not the import of this file (the compile section imports it).
sys.path.insert(2, str(Path(__file__).resolve().parent.parent / "tutorials"))
try:
    tile_linrec = importlib.import_module("04_linear_recurrence").tile_recurrence
    LINREC_ERROR: Exception | None = None
except Exception as error:
    tile_linrec, LINREC_ERROR = None, error


# tile.histogram, tile.atomic_add and tile.sort (issue 8) are newer still: the same guard, for the histogram and
# segsort sections.
try:

    @ct.jit
    def tile_histogram(x, out, n, BINS: ct.constexpr, CHUNK: ct.constexpr):
        """Persistent: each program strides over x a CHUNK at a time, adds each chunk's histogram to its own, and
        adds that to `out` (BINS int32 zeros) at the end."""
        h = tile.zeros(BINS, np.int32)
        for base in range(ct.program_id(0) * CHUNK, n, ct.num_programs(0) * CHUNK):
            t = tile.load(x, base, CHUNK, valid=n - base, other=0)
            h = h + tile.histogram(t, BINS, valid=n - base)
        tile.atomic_add(out, 0, h)

    @ct.jit
    def tile_segment_sort(keys, keys_out, SEGMENT: ct.constexpr):
        """One program per segment: sort its keys."""
        base = ct.program_id(0) * SEGMENT
        k = tile.load(keys, base, SEGMENT)
        tile.store(keys_out, base, tile.sort(k))

    @ct.jit
    def tile_segment_sort_pairs(keys, keys_out, vals, vals_out, SEGMENT: ct.constexpr):
        """One program per segment: sort its keys, with the values as the payload."""
        base = ct.program_id(0) * SEGMENT
        k = tile.load(keys, base, SEGMENT)
        v = tile.load(vals, base, SEGMENT)
        sk, sv = tile.sort(k, v)
        tile.store(keys_out, base, sk)
        tile.store(vals_out, base, sv)

    ISSUE8_ERROR: Exception | None = None
except Exception as error:
    tile_histogram = tile_segment_sort = tile_segment_sort_pairs = None
    ISSUE8_ERROR = error


# Chained scans (issue 11), the same guard: tutorial 02's kernels (the benchmark times what the tutorial shows),
# the whole-array cumsum and linear recurrence in one kernel and the three-kernel cumsum they replace.
try:
    _cumsum_tutorial = importlib.import_module("02_cumsum")
    chained_cumsum = _cumsum_tutorial.chained_cumsum
    chained_linrec = _cumsum_tutorial.whole_array_recurrence
    offsets_of_sums = _cumsum_tutorial.exclusive_scan_one_program
    seeded_cumsum = _cumsum_tutorial.seeded_cumsum
    CHAINED_ERROR: Exception | None = None
except Exception as error:
    chained_cumsum = chained_linrec = offsets_of_sums = seeded_cumsum = None
    CHAINED_ERROR = error


def cuda_time_ms(fn, before: Callable[[], None] | None = None) -> float:
    """Median milliseconds per fn() call from `ct.testing.do_bench`: CUDA events on the current stream, the L2
    cache flushed before each call. `before()` (resetting an output that fn accumulates into) runs before every
    call, outside the timed interval."""
    return ct.testing.do_bench(fn, setup=before)


def bandwidth_rows(sizes: list[int]) -> list[dict]:
    import cupy as cp

    rows = []
    for log2n in sizes:
        n = 1 << log2n
        for dtype in (np.int32, np.float32):
            x = cp.asarray(np.random.default_rng(0).integers(0, 8, n).astype(dtype))
            y = cp.empty_like(x)
            grid = ct.cdiv(n, TILE)
            partial = cp.empty(grid, dtype)
            copy_ms = cuda_time_ms(lambda: cp.copyto(y, x))
            scan_ms = cuda_time_ms(lambda: tile_cumsum[grid](x, y, n, TILE=TILE))
            head = cp.asnumpy(y[: 4 * TILE]).reshape(4, TILE)
            ok_scan = np.allclose(head, np.cumsum(cp.asnumpy(x[: 4 * TILE]).reshape(4, TILE), axis=1))
            sum_ms = cuda_time_ms(lambda: tile_sum[grid](x, partial, n, TILE=TILE))
            ok_sum = np.allclose(cp.asnumpy(partial[:4]), cp.asnumpy(x[: 4 * TILE]).reshape(4, TILE).sum(1))
            cupy_sum_ms = cuda_time_ms(lambda: x.sum())
            nbytes = n * np.dtype(dtype).itemsize
            rows.append(
                {
                    "n": f"2^{log2n}",
                    "dtype": np.dtype(dtype).name,
                    "copy_ms": copy_ms,
                    "copy_gbs": 2 * nbytes / copy_ms / 1e6,
                    "scan_ms": scan_ms,
                    "scan_gbs": 2 * nbytes / scan_ms / 1e6,
                    "scan_ratio": copy_ms / scan_ms,
                    "sum_ms": sum_ms,
                    "sum_gbs": nbytes / sum_ms / 1e6,
                    "sum_ratio": (copy_ms / 2) / sum_ms,
                    "cupy_sum_ms": cupy_sum_ms,
                    "correct": bool(ok_scan and ok_sum),
                }
            )
            x = y = partial = None
            cp.get_default_memory_pool().free_all_blocks()
    return rows


FIXED_BLOCKS = (128, 256, 512, 1024)


def block_size_rows(log2n: int) -> list[dict]:
    """Each bandwidth kernel with the runtime's block size against every fixed choice."""
    import cupy as cp

    n = 1 << log2n
    rows = []
    for dtype in (np.int32, np.float32):
        x = cp.asarray(np.random.default_rng(0).integers(0, 8, n).astype(dtype))
        y = cp.empty_like(x)
        grid = ct.cdiv(n, TILE)
        partial = cp.empty(grid, dtype)
        for name, kernel, out in (("scan", tile_cumsum, y), ("sum", tile_sum, partial)):
            auto_ms = cuda_time_ms(lambda: kernel[grid](x, out, n, TILE=TILE))
            fixed = {}
            for threads in FIXED_BLOCKS:
                pinned = ct.jit(kernel.fn, block_threads=threads)
                fixed[threads] = cuda_time_ms(lambda: pinned[grid](x, out, n, TILE=TILE))
            chosen = next(
                p.kernel for p in kernel._kernels.values() if p.kernel.signature.params[0][1].dtype == np.dtype(dtype)
            )
            best = min(fixed, key=fixed.get)
            rows.append(
                {
                    "kernel": name,
                    "n": f"2^{log2n}",
                    "dtype": np.dtype(dtype).name,
                    "chosen": chosen.block_threads,
                    "choice": str(chosen.block_choice),
                    "auto_ms": auto_ms,
                    "fixed": fixed,
                    "best": best,
                    "ratio": fixed[best] / auto_ms,
                }
            )
        x = y = partial = None
        cp.get_default_memory_pool().free_all_blocks()
    return rows


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


def host_overheads_us(launches: dict[str, Callable[[], None]], count: int = 2000, reps: int = 15) -> dict:
    """Median host time per launch of each callable, over `reps` rounds of `count` launches that
    take turns (so drifting clocks and caches affect them alike)."""
    import cupy as cp

    for launch in launches.values():
        for _ in range(200):
            launch()
    cp.cuda.runtime.deviceSynchronize()
    times: dict[str, list[float]] = {name: [] for name in launches}
    for _ in range(reps):
        for name, launch in launches.items():
            t0 = time.perf_counter()
            for _ in range(count):
                launch()
            times[name].append((time.perf_counter() - t0) / count * 1e6)
            cp.cuda.runtime.deviceSynchronize()
    return {name: statistics.median(t) for name, t in times.items()}


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


def compile_rows(arch: str) -> dict:
    """Cold and warm compiles by stage, in fresh processes (benchmarks/compile_profile.py)."""
    import compile_profile

    return compile_profile.measure(arch)


# ----- issue 7: a tuple scan, 16-bit floats, 2-D arrays --------------------------------------------------------

SECTIONS = (
    "bandwidth",
    "launch",
    "compile",
    "blocks",
    "linrec",
    "half",
    "rows2d",
    "histogram",
    "segsort",
    "chained",
    "mamba",
)
CHECK_TILES = 4  # correctness is checked on the first tiles of each output
LINREC_TILES = (4096, 2048)
TRITON_TILES = (1024, 2048, 4096)
TRITON_WARPS = (4, 8)
HALF_DTYPES = ("float16", "bfloat16")
ROWS2D_SHAPE = (4096, 8192)
ROWS2D_CHUNKS = (1024, 2048, 4096)


def _failure(error: BaseException) -> str:
    """`Type: first line of the message`, short and safe inside a markdown table cell."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    if len(text) > 160:
        text = text[:157] + "..."
    return text.replace("|", "\\|")


def _guarded(measure: Callable[..., dict], *args: Any) -> dict:
    """measure(*args), or {"error": ...} when it raises, so that a failure (Triton missing, a feature the
    library does not have yet) shows in its own cell or row and the run goes on."""
    try:
        return measure(*args)
    except Exception as error:
        return {"error": _failure(error)}


def _section(rows: Callable[..., list[dict]], *args: Any) -> list[dict]:
    """rows(*args), or a single row holding the failure when the section cannot even start (no PyTorch, ...)."""
    try:
        return rows(*args)
    except Exception as error:
        return [{"error": _failure(error)}]


def _fill_nan(array: Any) -> None:
    """Poison an output (CuPy array or PyTorch tensor), so that a kernel that writes nothing is not correct."""
    if hasattr(array, "fill_"):
        array.fill_(float("nan"))
    else:
        array.fill(np.nan)


def _host_f32(array: Any, count: int) -> np.ndarray:
    """The first `count` elements of a 1-D CuPy array or PyTorch tensor, on the host as float32 (NumPy has no
    bfloat16)."""
    import cupy as cp

    if hasattr(array, "cpu"):
        return array[:count].float().cpu().numpy()
    return cp.asnumpy(array[:count]).astype(np.float32)


def _free_device_memory() -> None:
    """Hand both libraries' cached blocks back between sizes, so that the 2^28-element arrays fit."""
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()
    if "torch" in sys.modules:
        sys.modules["torch"].cuda.empty_cache()


def _tune(
    configs: Any,
    launch: Callable,
    reset: Callable[[], None],
    check: Callable[[Any], bool],
    *,
    reset_each_rep: bool = False,
) -> dict:
    """Time `launch(config)()` for each config on an output poisoned by `reset()`, then `check(config)` what it
    wrote: the fastest config, its time, every config's time, and whether every config was correct. With
    `reset_each_rep`, reset() runs before every repetition, outside the timing (for kernels that accumulate into
    their output)."""
    times, correct = {}, True
    for config in configs:
        reset()
        times[config] = cuda_time_ms(launch(config), before=reset if reset_each_rep else None)
        correct = bool(check(config)) and correct
    best = min(times, key=times.get)
    return {"best": best, "ms": times[best], "times": times, "correct": correct}


def _linrec_reference(a: np.ndarray, b: np.ndarray, tile_size: int) -> np.ndarray:
    """h_i = a_i * h_(i-1) + b_i in float64, one element after the other from h = 0 at each tile's start:
    what the per-tile tuple scan computes, for whole tiles of a and b."""
    a64 = a.reshape(-1, tile_size).astype(np.float64)
    b64 = b.reshape(-1, tile_size).astype(np.float64)
    h, out = np.zeros(len(a64)), np.empty_like(a64)
    for i in range(tile_size):
        h = a64[:, i] * h + b64[:, i]
        out[:, i] = h
    return out.ravel()


def _linrec_correct(a: Any, b: Any, h: Any, tile_size: int) -> bool:
    """The first tiles of h against the float64 recurrence: rtol 1e-4, and atol 1e-5 because |h| reaches about 4
    and float32 leaves about 1e-6 of absolute error, which a relative test alone rejects where h crosses zero."""
    count = CHECK_TILES * tile_size
    expected = _linrec_reference(_host_f32(a, count), _host_f32(b, count), tile_size)
    return bool(np.allclose(_host_f32(h, count), expected, rtol=1e-4, atol=1e-5))


def linrec_rows(sizes: list[int]) -> list[dict]:
    """The per-tile linear recurrence (a tuple scan with a `@ct.combine` function) against the copy rate for
    its bytes and against Triton's `tl.associative_scan` of the same tiles."""
    rows = []
    for log2n in sizes:
        rows.append({"n": f"2^{log2n}", "elements": 1 << log2n, **_guarded(_linrec_row, 1 << log2n)})
        _free_device_memory()
    return rows


def _linrec_row(n: int) -> dict:
    """One size: a in [0.5, 1) (the recurrence forgets, so h stays of order 1), b in [-1, 1); the copy
    (8 bytes per element) is timed on the same arrays, and both kernels write h."""
    import cupy as cp

    rng = cp.random.RandomState(7)
    a = rng.random_sample(n, dtype=cp.float32) * 0.5 + 0.5
    b = rng.random_sample(n, dtype=cp.float32) * 2 - 1
    h = cp.empty_like(a)
    copy_ms = cuda_time_ms(lambda: cp.copyto(h, a))
    return {
        "copy_ms": copy_ms,
        "copy_gbs": 8 * n / copy_ms / 1e6,
        "coop": _guarded(_linrec_coop, a, b, h, n),
        "triton": _guarded(_linrec_triton, a, b, h, n),
    }


def _linrec_coop(a: Any, b: Any, h: Any, n: int) -> dict:
    """tile_linrec, best of LINREC_TILES (block size chosen by the runtime)."""
    if tile_linrec is None:
        raise LINREC_ERROR
    return _tune(
        LINREC_TILES,
        lambda t: lambda: tile_linrec[ct.cdiv(n, t)](a, b, h, n, TILE=t),
        lambda: _fill_nan(h),
        lambda t: _linrec_correct(a, b, h, t),
    )


def _linrec_triton(a: Any, b: Any, h: Any, n: int) -> dict:
    """The same per-tile scan in Triton (benchmarks/_baselines.py), on zero-copy PyTorch views of the same
    arrays, best of TRITON_TILES x TRITON_WARPS."""
    from _baselines import triton_linrec

    return _tune(
        [(t, w) for t in TRITON_TILES for w in TRITON_WARPS],
        lambda c: triton_linrec(a, b, h, n, tile=c[0], warps=c[1]),
        lambda: _fill_nan(h),
        lambda c: _linrec_correct(a, b, h, c[0]),
    )


def _copy16_ms(n: int) -> float:
    """`cupy.copyto` between two n-element float16 arrays, 4 bytes moved per element; the callers scale it to
    the bytes of each kernel (a bfloat16 copy moves the same bytes, so it stands for both dtypes)."""
    import cupy as cp

    src, dst = cp.zeros(n, cp.float16), cp.empty(n, cp.float16)
    return cuda_time_ms(lambda: cp.copyto(dst, src))


def half_rows(sizes: list[int]) -> list[dict]:
    """tile_cumsum and tile_sum on 16-bit floats, which accumulate in and return float32 (the contract),
    against the copy rate for the bytes each moves."""
    rows = []
    for log2n in sizes:
        n = 1 << log2n
        copy_ms = _copy16_ms(n)
        for dtype in HALF_DTYPES:
            row = {"n": f"2^{log2n}", "dtype": dtype, "elements": n, "copy_ms": copy_ms}
            rows.append({**row, "copy_gbs": 4 * n / copy_ms / 1e6, **_guarded(_half_row, n, dtype)})
            _free_device_memory()
    return rows


def _half_arrays(n: int, dtype: str) -> tuple[Any, Any, Any]:
    """x: n 16-bit floats uniform in [0, 1); y: n float32 (the scan's output); partial: a float32 per tile.
    float16 in CuPy; bfloat16 in PyTorch, which the contract names for bfloat16 on the GPU (CuPy has none)."""
    grid = ct.cdiv(n, TILE)
    if dtype == "float16":
        import cupy as cp

        x = cp.random.RandomState(0).random_sample(n, dtype=cp.float32).astype(cp.float16)
        return x, cp.empty(n, cp.float32), cp.empty(grid, cp.float32)
    import torch

    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(n, generator=generator, device="cuda", dtype=torch.bfloat16)
    return x, torch.empty(n, device="cuda", dtype=torch.float32), torch.empty(grid, device="cuda", dtype=torch.float32)


def _half_row(n: int, dtype: str) -> dict:
    """Scan and sum of one size and dtype, each timed and checked on its own (rtol 1e-3 against float32 NumPy)."""
    x, y, partial = _half_arrays(n, dtype)
    grid, count = ct.cdiv(n, TILE), CHECK_TILES * TILE
    head = _host_f32(x, count).reshape(CHECK_TILES, TILE)
    scanned, summed = np.cumsum(head, axis=1, dtype=np.float32), head.sum(axis=1, dtype=np.float32)
    return {
        "scan": _guarded(
            _tune,
            [TILE],
            lambda t: lambda: tile_cumsum[grid](x, y, n, TILE=t),
            lambda: _fill_nan(y),
            lambda t: np.allclose(_host_f32(y, count).reshape(head.shape), scanned, rtol=1e-3),
        ),
        "sum": _guarded(
            _tune,
            [TILE],
            lambda t: lambda: tile_sum[grid](x, partial, n, TILE=t),
            lambda: _fill_nan(partial),
            lambda t: np.allclose(_host_f32(partial, CHECK_TILES), summed, rtol=1e-3),
        ),
    }


def rows2d_rows() -> list[dict]:
    """row_cumsum over a contiguous (4096, 8192) float32 PyTorch tensor and over its transpose (a strided view,
    read in place), against torch.cumsum on the same input. CuPy's events time PyTorch's work too: PyTorch's
    current stream is the legacy default stream, as is CuPy's null stream."""
    import torch

    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(ROWS2D_SHAPE, generator=generator, device="cuda", dtype=torch.float32)
    rows = []
    for name, view in (("contiguous", x), ("transposed", x.t())):
        layout = {"input": name, "shape": tuple(view.shape), "strides": tuple(view.stride())}
        rows.append({**layout, **_guarded(_rows2d_row, view)})
    return rows


def _rows2d_row(x: Any) -> dict:
    """One input layout: torch.cumsum(x, dim=1, out=y) against row_cumsum, best of ROWS2D_CHUNKS, both writing
    the same fresh contiguous y; correct is torch.allclose over the whole output (rtol 1e-4, atol 1e-2)."""
    import torch

    y = torch.empty(x.shape, device=x.device, dtype=torch.float32)
    expected = torch.cumsum(x, dim=1)
    torch_ms = cuda_time_ms(lambda: torch.cumsum(x, dim=1, out=y))
    coop = _guarded(
        _tune,
        ROWS2D_CHUNKS,
        lambda c: lambda: row_cumsum[x.shape[0]](x, y, CHUNK=c),
        lambda: _fill_nan(y),
        lambda c: torch.allclose(y, expected, rtol=1e-4, atol=1e-2),
    )
    return {"torch_ms": torch_ms, "coop": coop}


# ----- issue 8: histograms and segmented sorts, against CUB built for the run ----------------------------------

BENCH_DIR = Path(__file__).resolve().parent
CUB_SOURCE = BENCH_DIR / "cub_baselines.cu"
BUILD_DIR = BENCH_DIR / ".build"  # git-ignored
HIST_CASES = (  # dtype, log2 n (capped by the run's largest size), bins, values drawn uniformly from [low, high)
    ("uint8", 28, 256, (0, 256)),
    ("int32", 26, 1000, (-100, 1100)),
)
HIST_CHUNKS = (2048, 4096, 8192)
HIST_WAVES = (4, 8)  # programs per SM of the persistent grids
TRITON_HIST_BLOCKS = (1024, 4096)
SEGSORT_LOG2N = 24
SEGMENT = 2048
SEGSORT_KEY_RANGE = (-(1 << 20), 1 << 20)  # negative keys, and about one tied pair per segment
SEGSORT_TRITON_WARPS = (4, 8)
_CUB_LIBRARY: dict[str, Any] = {}  # arch -> the loaded library, or the exception its build raised


def _nvcc() -> str:
    """The nvcc to build with: on PATH, else under $CUDA_HOME or /usr/local/cuda."""
    import shutil

    roots = [root for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if root]
    candidates = [shutil.which("nvcc"), *(str(Path(root) / "bin" / "nvcc") for root in roots)]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError("nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): CUB baselines not built")


def _build_cub_library(arch: str) -> Path:
    """benchmarks/cub_baselines.cu built with nvcc into a shared library under benchmarks/.build/, named by a
    hash of the source, the flags and nvcc's version, so that an edit or another toolkit rebuilds it."""
    import hashlib

    nvcc = _nvcc()
    flags = ["-O3", f"-arch={arch}", "-std=c++17", "-shared", "-Xcompiler", "-fPIC"]
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256("\0".join([CUB_SOURCE.read_text(), *flags, version]).encode()).hexdigest()[:16]
    library = BUILD_DIR / f"cub_baselines-{arch}-{key}.so"
    if library.exists():
        return library
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    partial = library.with_suffix(f".{os.getpid()}.tmp")
    done = subprocess.run([nvcc, *flags, "-o", str(partial), str(CUB_SOURCE)], capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error" in line] or done.stderr.splitlines() or ["?"]
        raise RuntimeError(f"nvcc failed on cub_baselines.cu: {errors[0].strip()}")
    os.replace(partial, library)
    return library


def _declare_cub(lib: Any) -> Any:
    """The ctypes signatures of cub_baselines.cu's extern "C" functions (each returns a cudaError_t as int)."""
    import ctypes

    p, i, size = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)
    histogram = [p, size, p, p, ctypes.c_longlong, i, i, i, p]
    signatures = {
        "cub_histogram_even_u8": histogram,
        "cub_histogram_even_i32": histogram,
        "cub_segment_sort_length": [],
        "cub_error_name": [i],
        "cub_segment_sort_keys": [p, p, i, p],
        "cub_segment_sort_pairs": [p, p, p, p, i, p],
        "cub_inclusive_sum_i32": [p, size, p, p, i, p],
        "cub_inclusive_sum_f32": [p, size, p, p, i, p],
    }
    for name, argtypes in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, ctypes.c_int
    lib.cub_error_name.restype = ctypes.c_char_p
    return lib


def cub_library(arch: str) -> Any:
    """The CUB baselines library for `arch` (built on first use, then loaded with ctypes), once per process; a
    failed build raises the same error for every section that asks again."""
    import ctypes

    if arch not in _CUB_LIBRARY:
        try:
            _CUB_LIBRARY[arch] = _declare_cub(ctypes.CDLL(str(_build_cub_library(arch))))
        except Exception as error:
            _CUB_LIBRARY[arch] = error
    if isinstance(_CUB_LIBRARY[arch], Exception):
        raise _CUB_LIBRARY[arch]
    return _CUB_LIBRARY[arch]


def _cub_call(lib: Any, status: int, what: str) -> None:
    """Raise, naming the error, on a non-zero cudaError_t from the library."""
    if status != 0:
        raise RuntimeError(f"{what} failed: {lib.cub_error_name(status).decode()} ({status})")


def _stream_handle() -> int:
    """The raw handle of CuPy's current stream (0: the legacy default stream), which the events time."""
    import cupy as cp

    return cp.cuda.get_current_stream().ptr


def _sm_count() -> int:
    import cupy as cp

    return cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"]


def _host(array: Any) -> np.ndarray:
    """A CuPy array or PyTorch tensor, on the host."""
    import cupy as cp

    if hasattr(array, "cpu"):
        return array.cpu().numpy()
    return cp.asnumpy(array)


# histograms


def histogram_rows(sizes: list[int], arch: str) -> list[dict]:
    """Each case of HIST_CASES (n capped at 2^max(sizes)): coop_tiles, CUB's DeviceHistogram::HistogramEven,
    Triton and torch.bincount, against the copy's read rate for the same bytes."""
    rows = []
    for dtype, log2n, bins, value_range in HIST_CASES:
        log2n = min(log2n, max(sizes))
        case = {"case": f"{dtype}, {bins} bins", "n": f"2^{log2n}", "elements": 1 << log2n, "range": value_range}
        rows.append({**case, **_guarded(_histogram_row, dtype, 1 << log2n, bins, value_range, arch)})
        _free_device_memory()
    return rows


def _histogram_data(dtype: str, n: int, value_range: tuple[int, int], bins: int) -> tuple[Any, np.ndarray]:
    """n values of `dtype` uniform in value_range on the device, and the NumPy counts of those in [0, bins)."""
    import cupy as cp

    x = cp.random.RandomState(8).randint(*value_range, size=n, dtype=cp.int32).astype(dtype)
    host = cp.asnumpy(x).astype(np.int64)
    return x, np.bincount(host[(host >= 0) & (host < bins)], minlength=bins)


def _read_limit_ms(x: Any) -> float:
    """Half the time of a device copy of x's bytes (viewed as int32, as the bandwidth section copies): the time
    a kernel that only reads x needs at the copy's read rate."""
    import cupy as cp

    words = x.view(cp.int32)
    dst = cp.empty_like(words)
    return cuda_time_ms(lambda: cp.copyto(dst, words)) / 2


def _histogram_row(dtype: str, n: int, bins: int, value_range: tuple[int, int], arch: str) -> dict:
    """One case: every implementation timed (output zeroed before each repetition, outside the timing) and its
    counts compared with NumPy's."""
    import cupy as cp

    x, expected = _histogram_data(dtype, n, value_range, bins)
    out = cp.zeros(bins, cp.int32)

    def reset() -> None:
        out.fill(0)

    def check(_config: Any = None) -> bool:
        return bool(np.array_equal(cp.asnumpy(out), expected))

    return {
        "read_ms": _read_limit_ms(x),
        "coop": _guarded(_histogram_coop, x, out, n, bins, reset, check),
        "cub": _guarded(_histogram_cub, x, out, n, bins, arch, reset, check),
        "triton": _guarded(_histogram_triton, x, out, n, bins, reset, check),
        "torch": _guarded(_histogram_torch, x, bins, expected),
    }


def _histogram_coop(x: Any, out: Any, n: int, bins: int, reset: Callable, check: Callable) -> dict:
    """tile_histogram on SMs x HIST_WAVES programs, best of HIST_CHUNKS x HIST_WAVES."""
    if tile_histogram is None:
        raise ISSUE8_ERROR
    sms = _sm_count()
    return _tune(
        [(chunk, waves) for chunk in HIST_CHUNKS for waves in HIST_WAVES],
        lambda c: lambda: tile_histogram[sms * c[1]](x, out, n, BINS=bins, CHUNK=c[0]),
        reset,
        check,
        reset_each_rep=True,
    )


def _histogram_cub(x: Any, out: Any, n: int, bins: int, arch: str, reset: Callable, check: Callable) -> dict:
    """cub::DeviceHistogram::HistogramEven over [0, bins), temporary storage sized and allocated once, outside
    the timing. CUB zeroes its output itself, inside its time; the reset before each repetition only keeps the
    timing the same as the others'."""
    import ctypes

    import cupy as cp

    lib = cub_library(arch)
    histogram = lib.cub_histogram_even_u8 if x.dtype == cp.uint8 else lib.cub_histogram_even_i32
    temp_bytes, stream = ctypes.c_size_t(0), _stream_handle()
    args = (x.data.ptr, out.data.ptr, n, bins, 0, bins, stream)
    _cub_call(lib, histogram(None, ctypes.byref(temp_bytes), *args), "HistogramEven (size query)")
    temp = cp.empty(max(temp_bytes.value, 1), cp.uint8)

    def launch() -> None:
        _cub_call(lib, histogram(temp.data.ptr, ctypes.byref(temp_bytes), *args), "HistogramEven")

    return _tune(["HistogramEven"], lambda _: launch, reset, check, reset_each_rep=True)


def _histogram_triton(x: Any, out: Any, n: int, bins: int, reset: Callable, check: Callable) -> dict:
    """The persistent tl.histogram + tl.atomic_add kernel of benchmarks/_baselines.py, best of
    TRITON_HIST_BLOCKS x HIST_WAVES."""
    from _baselines import triton_histogram

    sms = _sm_count()
    return _tune(
        [(block, waves) for block in TRITON_HIST_BLOCKS for waves in HIST_WAVES],
        lambda c: triton_histogram(x, out, n, bins, block=c[0], programs=sms * c[1]),
        reset,
        check,
        reset_each_rep=True,
    )


def _histogram_torch(x: Any, bins: int, expected: np.ndarray) -> dict:
    """torch.bincount(x, minlength=bins) on a zero-copy view of x; when values can fall outside [0, bins), they
    are masked out first (`x[(x >= 0) & (x < bins)]`, inside the timing: bincount counts every value)."""
    import cupy as cp
    import torch

    tx = torch.as_tensor(x, device="cuda")
    if x.dtype == cp.uint8 and bins >= 256:

        def count() -> Any:
            return torch.bincount(tx, minlength=bins)
    else:

        def count() -> Any:
            return torch.bincount(tx[(tx >= 0) & (tx < bins)], minlength=bins)

    ms = cuda_time_ms(count)
    counts = _host(count())
    correct = counts.shape == expected.shape and np.array_equal(counts, expected)
    return {"best": "bincount", "ms": ms, "times": {"bincount": ms}, "correct": bool(correct)}


# segmented sorts


def segsort_rows(arch: str) -> list[dict]:
    """Segmented sort of 2^24 int32 keys in segments of 2048, keys only and with an int32 payload: coop_tiles
    (one program per segment), a hand-written CUB BlockRadixSort kernel, torch.sort and Triton's tl.sort."""
    rows = []
    for payload in (False, True):
        name = "keys + int32 payload" if payload else "keys only"
        rows.append({"sort": name, "n": f"2^{SEGSORT_LOG2N}", **_guarded(_segsort_row, payload, arch)})
        _free_device_memory()
    return rows


def _segsort_data() -> dict:
    """Keys uniform in SEGSORT_KEY_RANGE, payload the element's index, their device copies and output arrays, and
    the expected outputs: np.sort per segment, and the payload gathered by a stable argsort."""
    import cupy as cp

    n = 1 << SEGSORT_LOG2N
    keys = np.random.default_rng(8).integers(*SEGSORT_KEY_RANGE, n).astype(np.int32)
    order = np.argsort(keys.reshape(-1, SEGMENT), axis=1, kind="stable")
    vals = np.arange(n, dtype=np.int32)
    return {
        "n": n,
        "keys": cp.asarray(keys),
        "vals": cp.asarray(vals),
        "keys_out": cp.empty(n, cp.int32),
        "vals_out": cp.empty(n, cp.int32),
        "host_keys": keys,
        "expected_keys": np.take_along_axis(keys.reshape(-1, SEGMENT), order, axis=1).ravel(),
        "expected_vals": np.take_along_axis(vals.reshape(-1, SEGMENT), order, axis=1).ravel(),
    }


def _segsort_correct(data: dict, keys_out: Any, vals_out: Any = None, *, stable: bool = True) -> bool:
    """Keys against np.sort per segment; the payload against the stable argsort gather, or (stable=False) as a
    permutation of each segment's own indices that carries the keys."""
    keys = _host(keys_out).ravel()
    if not np.array_equal(keys, data["expected_keys"]):
        return False
    if vals_out is None:
        return True
    vals = _host(vals_out).ravel()
    if stable:
        return bool(np.array_equal(vals, data["expected_vals"]))
    own = np.array_equal(np.sort(vals.reshape(-1, SEGMENT), axis=1).ravel(), np.arange(data["n"]))
    return bool(own and np.array_equal(data["host_keys"][vals], keys))


def _segsort_reset(data: dict) -> Callable[[], None]:
    """Poison both outputs (a key outside SEGSORT_KEY_RANGE, an index outside the array)."""

    def reset() -> None:
        data["keys_out"].fill(np.iinfo(np.int32).max)
        data["vals_out"].fill(-1)

    return reset


def _segsort_row(payload: bool, arch: str) -> dict:
    """One variant: every implementation timed and checked on the same keys."""
    data = _segsort_data()
    return {
        "coop": _guarded(_segsort_coop, data, payload),
        "cub": _guarded(_segsort_cub, data, payload, arch),
        "torch": _guarded(_segsort_torch, data, payload, False),
        "torch_stable": _guarded(_segsort_torch, data, payload, True),
        "triton": _guarded(_segsort_triton, data, payload),
    }


def _segsort_check(data: dict, payload: bool, stable: bool = True) -> Callable[[Any], bool]:
    """check(config) for _tune: the shared outputs checked as _segsort_correct does."""
    vals_out = data["vals_out"] if payload else None
    return lambda _config: _segsort_correct(data, data["keys_out"], vals_out, stable=stable)


def _segsort_coop(data: dict, payload: bool) -> dict:
    """tile_segment_sort(_pairs), one program per segment, block size chosen by the runtime."""
    if tile_segment_sort is None:
        raise ISSUE8_ERROR
    d, grid = data, data["n"] // SEGMENT
    if payload:
        launch = lambda: tile_segment_sort_pairs[grid](  # noqa: E731
            d["keys"], d["keys_out"], d["vals"], d["vals_out"], SEGMENT=SEGMENT
        )
    else:
        launch = lambda: tile_segment_sort[grid](d["keys"], d["keys_out"], SEGMENT=SEGMENT)  # noqa: E731
    return _tune([SEGMENT], lambda _: launch, _segsort_reset(d), _segsort_check(d, payload))


def _segsort_cub(data: dict, payload: bool, arch: str) -> dict:
    """The hand-written kernel of benchmarks/cub_baselines.cu: BlockLoad (warp-transpose), BlockRadixSort<int,
    256, 8(, int)>::SortBlockedToStriped, striped stores; one block per segment."""
    lib, d = cub_library(arch), data
    if lib.cub_segment_sort_length() != SEGMENT:
        raise RuntimeError(f"cub_baselines.cu sorts segments of {lib.cub_segment_sort_length()}, not {SEGMENT}")
    segments, stream = d["n"] // SEGMENT, _stream_handle()
    ptrs = {name: d[name].data.ptr for name in ("keys", "keys_out", "vals", "vals_out")}

    def launch() -> None:
        if payload:
            status = lib.cub_segment_sort_pairs(
                ptrs["keys"], ptrs["keys_out"], ptrs["vals"], ptrs["vals_out"], segments, stream
            )
        else:
            status = lib.cub_segment_sort_keys(ptrs["keys"], ptrs["keys_out"], segments, stream)
        _cub_call(lib, status, "segment sort launch")

    return _tune(["BlockRadixSort"], lambda _: launch, _segsort_reset(d), _segsort_check(d, payload))


def _segsort_torch(data: dict, payload: bool, stable: bool) -> dict:
    """torch.sort(keys.view(-1, 2048), dim=1, stable=...) into preallocated outputs (it always writes int64
    indices too); with the payload, torch.gather(vals, 1, indices) after it."""
    import torch

    keys = torch.as_tensor(data["keys"], device="cuda").view(-1, SEGMENT)
    vals = torch.as_tensor(data["vals"], device="cuda").view(-1, SEGMENT)
    keys_out, vals_out = torch.empty_like(keys), torch.empty_like(vals)
    indices = torch.empty(keys.shape, device=keys.device, dtype=torch.int64)

    def launch() -> None:
        torch.sort(keys, dim=1, stable=stable, out=(keys_out, indices))
        if payload:
            torch.gather(vals, 1, indices, out=vals_out)

    def reset() -> None:
        keys_out.fill_(np.iinfo(np.int32).max)
        vals_out.fill_(-1)

    def check(_config: Any) -> bool:
        return _segsort_correct(data, keys_out, vals_out if payload else None, stable=stable)

    return _tune(["stable" if stable else "default"], lambda _: launch, reset, check)


def _segsort_triton(data: dict, payload: bool) -> dict:
    """tl.sort per segment (benchmarks/_baselines.py; the payload through a packed 64-bit key), best of
    SEGSORT_TRITON_WARPS."""
    from _baselines import triton_segment_sort

    d = data
    vals = (d["vals"], d["vals_out"]) if payload else (None, None)
    return _tune(
        SEGSORT_TRITON_WARPS,
        lambda warps: triton_segment_sort(d["keys"], d["keys_out"], *vals, segment=SEGMENT, warps=warps),
        _segsort_reset(d),
        _segsort_check(d, payload),
    )


# ----- issue 11: chained scans over the whole array ----------------------------------------------------------------

CHAINED_CONFIGS = ((4096, None), (4096, 256), (8192, None), (8192, 512), (16384, None))  # TILE, threads
THREE_KERNEL_TILES = (4096,)
OFFSETS_CHUNK = 1024
CHAINED_LINREC_CONFIGS = ((4096, None), (4096, 256), (8192, None), (8192, 512))
LINREC_CHECKS = 8  # tile starts at which the recurrence is checked
LINREC_WARMUP = 1000  # elements run before each checked start (a in [0.5, 1) forgets h within a few hundred)


_PINNED: dict[tuple[Any, int], Any] = {}


def _with_threads(kernel: Any, threads: int | None) -> Any:
    """`kernel`, or a copy of it with `threads` per block pinned (one per kernel and size, so it compiles once)."""
    if threads is None:
        return kernel
    if (kernel, threads) not in _PINNED:
        _PINNED[kernel, threads] = ct.jit(kernel.fn, block_threads=threads)
    return _PINNED[kernel, threads]


def _config_name(config: tuple[int, int | None]) -> str:
    tile_size, threads = config
    return f"TILE {tile_size}" + (f" × {threads} threads" if threads else "")


def chained_results(sizes: list[int], arch: str) -> dict:
    """The whole-array cumsum of each size and dtype, the whole-array linear recurrence of each size, and what a
    chained launch costs over a plain one."""
    if chained_cumsum is None:
        raise CHAINED_ERROR
    scans = []
    for log2n in sizes:
        for dtype in ("int32", "float32"):
            row = {"n": f"2^{log2n}", "dtype": dtype, "elements": 1 << log2n}
            scans.append({**row, **_guarded(_chained_scan_row, 1 << log2n, dtype, arch)})
            _free_device_memory()
    linrec = []
    for log2n in sizes:
        linrec.append({"n": f"2^{log2n}", "elements": 1 << log2n, **_guarded(_chained_linrec_row, 1 << log2n)})
        _free_device_memory()
    return {"scans": scans, "linrec": linrec, "costs": _guarded(_chained_costs)}


def _chained_scan_row(n: int, dtype: str, arch: str) -> dict:
    """One size and dtype: x is 0 or 1 (1 with probability 1/32), so that every partial sum stays below 2^24 and
    is exact in float32 too: every implementation must equal numpy.cumsum exactly, over the whole output."""
    import cupy as cp

    host = (np.random.default_rng(11).random(n, dtype=np.float32) < 1 / 32).astype(dtype)
    expected = cp.asarray(np.cumsum(host, dtype=np.int64).astype(dtype))
    x, y = cp.asarray(host), cp.empty(n, dtype)
    del host
    copy_ms = cuda_time_ms(lambda: cp.copyto(y, x))

    def reset() -> None:
        y.fill(-1)

    def check(_config: Any = None) -> bool:
        return bool(cp.array_equal(y, expected))

    return {
        "copy_ms": copy_ms,
        "chained": _guarded(
            _tune,
            CHAINED_CONFIGS,
            lambda c: lambda: _with_threads(chained_cumsum, c[1])[ct.cdiv(n, c[0])](x, y, n, TILE=c[0]),
            reset,
            check,
        ),
        "three": _guarded(_three_kernel, x, y, n, reset, check),
        "cub": _guarded(_inclusive_sum_cub, x, y, n, arch, reset, check),
        "torch": _guarded(_cumsum_torch, x, y, reset, check),
    }


def _three_kernel(x: Any, y: Any, n: int, reset: Callable, check: Callable) -> dict:
    """Tutorial 02's whole-array cumsum before chained scans: tile sums, one program's exclusive scan of them (in
    chunks of OFFSETS_CHUNK, carrying the total), and a rescan of each tile seeded with its offset."""
    import cupy as cp

    def launch(t: int) -> Callable[[], None]:
        grid = ct.cdiv(n, t)
        sums, offsets = cp.empty(grid, x.dtype), cp.empty(grid, x.dtype)

        def three() -> None:
            tile_sum[grid](x, sums, n, TILE=t)
            offsets_of_sums[1](sums, offsets, grid, CHUNK=OFFSETS_CHUNK)
            seeded_cumsum[grid](x, offsets, y, n, TILE=t)

        return three

    return _tune(THREE_KERNEL_TILES, launch, reset, check)


def _inclusive_sum_cub(x: Any, y: Any, n: int, arch: str, reset: Callable, check: Callable) -> dict:
    """cub::DeviceScan::InclusiveSum (benchmarks/cub_baselines.cu), temporary storage sized and allocated once,
    outside the timing."""
    import ctypes

    import cupy as cp

    lib = cub_library(arch)
    scan = lib.cub_inclusive_sum_i32 if x.dtype == cp.int32 else lib.cub_inclusive_sum_f32
    temp_bytes, stream = ctypes.c_size_t(0), _stream_handle()
    args = (x.data.ptr, y.data.ptr, n, stream)
    _cub_call(lib, scan(None, ctypes.byref(temp_bytes), *args), "InclusiveSum (size query)")
    temp = cp.empty(max(temp_bytes.value, 1), cp.uint8)

    def launch() -> None:
        _cub_call(lib, scan(temp.data.ptr, ctypes.byref(temp_bytes), *args), "InclusiveSum")

    return _tune(["InclusiveSum"], lambda _: launch, reset, check)


def _cumsum_torch(x: Any, y: Any, reset: Callable, check: Callable) -> dict:
    """torch.cumsum into y, on zero-copy PyTorch views of the CuPy arrays (in their dtype: dtype= keeps int32)."""
    import torch

    tx, ty = torch.as_tensor(x, device="cuda"), torch.as_tensor(y, device="cuda")
    return _tune(["cumsum"], lambda _: lambda: torch.cumsum(tx, 0, dtype=tx.dtype, out=ty), reset, check)


def _chained_linrec_row(n: int) -> dict:
    """h_i = a_i * h_(i-1) + b_i over the whole array from h = 0 (a in [0.5, 1), b in [-1, 1), float32): 12 bytes
    per element. Checked at LINREC_CHECKS tile starts, the carried state's hardest places: 64 elements from
    each against a float64 recurrence started LINREC_WARMUP elements earlier (by then h has forgotten its start)."""
    import cupy as cp

    rng = cp.random.RandomState(5)
    a = rng.random_sample(n, dtype=cp.float32) * 0.5 + 0.5
    b = rng.random_sample(n, dtype=cp.float32) * 2 - 1
    h = cp.empty_like(a)
    copy_ms = cuda_time_ms(lambda: cp.copyto(h, a))

    def check(t: int) -> bool:
        starts = np.linspace(0, n // t - 1, LINREC_CHECKS).astype(np.int64) * t
        for start in starts:
            lo = max(0, int(start) - LINREC_WARMUP)
            ha = cp.asnumpy(a[lo : start + 64]).astype(np.float64)
            hb = cp.asnumpy(b[lo : start + 64]).astype(np.float64)
            state, expected = 0.0, np.empty(len(ha))
            for i in range(len(ha)):
                state = ha[i] * state + hb[i]
                expected[i] = state
            if not np.allclose(cp.asnumpy(h[start : start + 64]), expected[start - lo :], rtol=1e-4, atol=1e-5):
                return False
        return True

    coop = _guarded(
        _tune,
        CHAINED_LINREC_CONFIGS,
        lambda c: lambda: _with_threads(chained_linrec, c[1])[ct.cdiv(n, c[0])](a, b, h, n, TILE=c[0]),
        lambda: _fill_nan(h),
        lambda c: check(c[0]),
    )
    return {"copy_ms": copy_ms, "coop": coop}


def _chained_costs() -> dict:
    """A chained launch against a plain one (tile_cumsum): host time per launch of one 4096-element program (the
    runtime's per-launch steps: capture query, stream id, state lookup), and the event time around one 2^20-element
    launch (the ticket and look-back, and the launch's host time when that is the longer); and a CUDA graph of the
    chained launch (its own zeroed state: allocation, memset and free nodes) replayed, against the direct launch."""
    import cupy as cp

    small, mid = cp.ones(4096, cp.int32), cp.ones(1 << 20, cp.int32)
    out_small, out_mid = cp.empty_like(small), cp.empty_like(mid)
    host = host_overheads_us(
        {
            "plain_us": lambda: tile_cumsum[1](small, out_small, 4096, TILE=4096),
            "chained_us": lambda: chained_cumsum[1](small, out_small, 4096, TILE=4096),
        },
        count=500,
        reps=7,
    )
    grid = (1 << 20) // 4096
    plain_ms = cuda_time_ms(lambda: tile_cumsum[grid](mid, out_mid, 1 << 20, TILE=4096))
    chained_ms = cuda_time_ms(lambda: chained_cumsum[grid](mid, out_mid, 1 << 20, TILE=4096))
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        chained_cumsum[grid, stream](mid, out_mid, 1 << 20, TILE=4096)
        stream.begin_capture()
        chained_cumsum[grid, stream](mid, out_mid, 1 << 20, TILE=4096)
        graph = stream.end_capture()
        graph_ms = cuda_time_ms(lambda: graph.launch(stream))
        direct_ms = cuda_time_ms(lambda: chained_cumsum[grid, stream](mid, out_mid, 1 << 20, TILE=4096))
        ok = bool(cp.array_equal(out_mid, cp.arange(1, (1 << 20) + 1, dtype=cp.int32)))
    return {
        **host,
        "plain_ms": plain_ms,
        "chained_ms": chained_ms,
        "graph_ms": graph_ms,
        "direct_ms": direct_ms,
        "correct": ok,
    }


# ----- issue 9: Mamba's selective scan, against Mamba's own CUDA kernel --------------------------------------------

MAMBA_SHAPES = ((8, 1536, 2048, 16), (8, 4096, 2048, 16), (2, 2048, 8192, 16))  # batch, dim, L, dstate
MAMBA_DTYPES = ("float32", "bfloat16")
MAMBA_TOLERANCE = {"float32": (6e-4, 2e-3), "bfloat16": (3e-2, 5e-2)}  # Mamba's own tests' rtol, atol
MAMBA_TRITON = ((64, 4), (128, 4))  # BLOCK_L, warps
MAMBA_CHECK_DIMS = 64  # every implementation is checked on the first channels of each batch


def mamba_rows() -> list[dict]:
    """coop_tiles.examples.selective_scan_fwd, Mamba's CUDA kernel, the Triton version and (smallest shape) the
    PyTorch sequential reference, on variable B and C (one group) with z, D, delta_bias and softplus, against the
    time the bytes they must move take at the device copy rate."""
    import torch

    copy_gbs = _copy_rate_gbs(torch)
    mamba = _guarded(_mamba_extension)
    rows = []
    for shape in MAMBA_SHAPES:
        for dtype in MAMBA_DTYPES:
            row = {"shape": shape, "dtype": dtype, **_guarded(_mamba_row, shape, dtype, mamba, copy_gbs)}
            rows.append(row)
            _free_device_memory()
    return rows


def _copy_rate_gbs(torch: Any) -> float:
    """The device copy rate (bytes read and written per second, in GB/s) of a 1 GiB tensor copy."""
    src = torch.empty(1 << 28, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    ms = cuda_time_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / ms / 1e6


def _mamba_extension() -> dict:
    """Mamba's forward, built (or found built) by benchmarks/_mamba_cuda.py."""
    import _mamba_cuda

    return {"ext": _mamba_cuda.load()}


def _mamba_inputs(shape: tuple[int, ...], dtype: str) -> dict:
    """Inputs drawn as Mamba's tests draw them (B and C as (batch, 1, dstate, L)), contiguous PyTorch tensors."""
    import torch

    batch, dim, L, N = shape
    g = torch.Generator(device="cuda").manual_seed(9)
    t = getattr(torch, dtype)

    def randn(*s: int) -> Any:
        return torch.randn(*s, device="cuda", generator=g)

    def rand(*s: int) -> Any:
        return torch.rand(*s, device="cuda", generator=g)

    return {
        "u": randn(batch, dim, L).to(t),
        "delta": (0.5 * rand(batch, dim, L)).to(t),
        "A": -0.5 * rand(dim, N),
        "B": randn(batch, 1, N, L).to(t),
        "C": randn(batch, 1, N, L).to(t),
        "D": randn(dim),
        "z": randn(batch, dim, L).to(t),
        "delta_bias": 0.5 * rand(dim),
    }


def _mamba_bytes(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes a forward must move at least: u, delta and z read, out written, B and C read once, A, D, delta_bias
    read and last_state written (float32)."""
    batch, dim, L, N = shape
    item = np.dtype(dtype if dtype != "bfloat16" else "float16").itemsize
    return 4 * batch * dim * L * item + 2 * batch * N * L * item + 4 * (dim * N + 2 * dim + batch * dim * N)


def _mamba_row(shape: tuple[int, ...], dtype: str, mamba: dict, copy_gbs: float) -> dict:
    """One shape and dtype: every implementation timed, and checked on the first channels against the float64
    sequential reference with Mamba's tolerances (last_state with float32's)."""
    import torch
    from _baselines import torch_selective_scan_ref

    from coop_tiles.examples import selective_scan_fwd

    x = _mamba_inputs(shape, dtype)
    args = [x[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
    head = [a[:, :MAMBA_CHECK_DIMS] if a.dim() == 3 else a for a in args]
    head[2], head[5], head[7] = (args[i][:MAMBA_CHECK_DIMS] for i in (2, 5, 7))
    ref_out, ref_last = torch_selective_scan_ref(*head, dtype=torch.float64)
    rtol, atol = MAMBA_TOLERANCE[dtype]

    def close(x: Any, ref: Any, rtol: float, atol: float) -> bool:
        return bool((x[:, :MAMBA_CHECK_DIMS].double() - ref).abs().max() <= atol + rtol * ref.abs().max())

    def correct(out: Any, last: Any) -> bool:
        return close(out, ref_out, rtol, atol) and close(last, ref_last, 1e-3, 1e-3)

    def run_coop() -> tuple[Any, Any]:
        return selective_scan_fwd(*args[:5], D=args[5], z=args[6], delta_bias=args[7], delta_softplus=True,
                                  return_last_state=True)  # fmt: skip

    row = {
        "elements": shape[0] * shape[1] * shape[2] * shape[3],
        "limit_ms": _mamba_bytes(shape, dtype) / 1e6 / copy_gbs,
        "coop": _guarded(_single, run_coop, correct),
        "mamba": _guarded(_mamba_cuda_result, mamba, args, correct),
        "triton": _guarded(_mamba_triton, args, correct),
    }
    if shape == MAMBA_SHAPES[0]:
        row["torch"] = _guarded(_single, lambda: torch_selective_scan_ref(*args), correct)
    return row


def _single(run: Callable[[], tuple[Any, Any]], correct: Callable) -> dict:
    """Time `run()` (returning (out, last_state)) and check what it returned."""
    ms = cuda_time_ms(run)
    return {"best": None, "ms": ms, "times": {None: ms}, "correct": correct(*run())}


def _mamba_cuda_result(mamba: dict, args: list, correct: Callable) -> dict:
    """Mamba's kernel through its forward binding (which also writes the chunk states and, with z, both out and
    out_z, as Mamba's forward does for its backward)."""
    import _mamba_cuda

    if "error" in mamba:
        raise RuntimeError(mamba["error"])
    return _single(lambda: _mamba_cuda.selective_scan(mamba["ext"], *args, delta_softplus=True), correct)


def _mamba_triton(args: list, correct: Callable) -> dict:
    """The Triton version (benchmarks/_baselines.py), best of MAMBA_TRITON, into preallocated outputs."""
    import torch
    from _baselines import triton_selective_scan

    u, A = args[0], args[2]
    out = torch.empty_like(u)
    last = torch.empty(u.shape[0], u.shape[1], A.shape[1], device=u.device)
    return _tune(
        MAMBA_TRITON,
        lambda c: triton_selective_scan(*args[:5], args[5], args[6], args[7], out, last, block_l=c[0], warps=c[1]),
        lambda: _fill_nan(out),
        lambda c: correct(out, last),
    )


# ----- the markdown ----------------------------------------------------------------------------------------------


def _header_lines(device: str) -> list[str]:
    today = datetime.date.today().isoformat()
    return [
        "# Benchmarks",
        "",
        f"Written by `benchmarks/run.py` on **{device}**, {today}. Medians after warm-up; kernel times from",
        "`ct.testing.do_bench` (CUDA events, L2 cache flushed before each run), host overheads from perf_counter",
        "(medians of 15 rounds of 2,000 launches, the launch paths taking turns). Baselines were timed in the same "
        "run.",
        "Ratios are what to compare across machines; absolute times differ between GPUs.",
        "",
    ]


def _bandwidth_lines(bandwidth: list[dict]) -> list[str]:
    lines = [
        f"## Load → inclusive scan → store, and load → `tile.sum` (TILE={TILE}, block size chosen by the runtime)",
        "",
        "Scan bandwidth counts bytes read and written, as the copy does; `tile.sum` reads only, so its ratio is "
        "against half the copy time (the copy's read rate).",
        "",
        "| n | dtype | copy GB/s | scan GB/s | scan / copy | sum GB/s | sum / copy read | cupy.sum ms | "
        "tile.sum ms | correct |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in bandwidth:
        lines.append(
            f"| {r['n']} | {r['dtype']} | {r['copy_gbs']:.0f} | {r['scan_gbs']:.0f} | "
            f"**{r['scan_ratio']:.1%}** | {r['sum_gbs']:.0f} | **{r['sum_ratio']:.1%}** | "
            f"{r['cupy_sum_ms']:.3f} | {r['sum_ms']:.3f} | {'yes' if r['correct'] else 'NO'} |"
        )
    return lines + ["", "Bar (issue 2): at least 90% of the copy bandwidth.", ""]


def _launch_lines(launches: list[dict]) -> list[str]:
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


def _blocks_lines(blocks: list[dict]) -> list[str]:
    lines = [
        "",
        "## Block size chosen by the runtime (`block_threads=None`) against fixed choices",
        "",
        "Times in ms; the ratio is the best fixed time over the runtime's (100% = as fast as the best).",
        "",
        "| kernel | n | dtype | chosen | runtime ms | "
        + " | ".join(f"{b} threads" for b in FIXED_BLOCKS)
        + " | best fixed / runtime |",
        "|---|---|---|---|---|" + "---|" * len(FIXED_BLOCKS) + "---|",
    ]
    for r in blocks:
        fixed = " | ".join(f"{r['fixed'][b]:.3f}" for b in FIXED_BLOCKS)
        lines.append(
            f"| {r['kernel']} | {r['n']} | {r['dtype']} | {r['chosen']} | {r['auto_ms']:.3f} | {fixed} | "
            f"**{r['ratio']:.1%}** |"
        )
    if blocks:
        lines += ["", f"How the first was chosen: {blocks[0]['choice']}."]
    return lines + ["", "Bar (issue 3): the runtime's choice within 10% of the best fixed choice.", ""]


def _compile_lines(compiles: dict) -> list[str]:
    import compile_profile

    return compile_profile.render_lines(compiles)


def _cells(*cells: Any) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _gbs(nbytes: float, ms: float) -> str:
    return f"{nbytes / ms / 1e6:.0f}"


def _verdict(result: dict) -> str:
    """yes / NO for a checked result, a dash for one that failed before it could be checked."""
    if "error" in result:
        return "—"
    return "yes" if result["correct"] else "NO"


def _failed_row(r: dict, keys: tuple[str, ...], width: int) -> str:
    """A table row for a failed measurement: its key cells, the failure, dashes to the table's width."""
    lead = [r.get(k, "—") for k in keys]
    return _cells(*lead, f"failed: {r['error']}", *["—"] * (width - len(lead) - 1))


def _config_times(result: dict, name: Callable[[Any], str]) -> str:
    """Every config's time in ms, or the failure."""
    if "error" in result:
        return f"failed: {result['error']}"
    return ", ".join(f"{name(c)} {ms:.3f}" for c, ms in result["times"].items())


def _linrec_lines(rows: list[dict]) -> list[str]:
    tiles = "/".join(map(str, TRITON_TILES))
    warps = "/".join(map(str, TRITON_WARPS))
    lines = [
        "",
        "## Linear recurrence: a per-tile tuple scan with a `@ct.combine` function (float32)",
        "",
        "`h_i = a_i * h_(i-1) + b_i` from h = 0 at each tile's start, `tile.scan((a, b), op=linrec)`: it reads a "
        "and b and writes h, 12 bytes per element. The copy rate is `cupy.copyto` of n float32 elements (8 bytes "
        "per element) in the same run; *of copy rate* is the copy's time scaled by 12/8 over the kernel's time.",
        "Triton runs the same per-tile scan, `tl.associative_scan((a, b), axis=0, combine_fn=...)`, on the same "
        f"arrays, best of TILE {tiles} × num_warps {warps}; coop_tiles best of TILE "
        f"{'/'.join(map(str, LINREC_TILES))}, block size chosen by the runtime. *coop / Triton* is Triton's time "
        "over coop_tiles' (above 1: coop_tiles faster).",
        f"Correct: the first {CHECK_TILES} tiles of every configuration's output against a sequential float64 "
        "recurrence, rtol 1e-4 and atol 1e-5 (|h| reaches about 4, and float32 leaves about 1e-6 of absolute "
        "error, which a relative test alone rejects where h crosses zero); a in [0.5, 1), b in [-1, 1).",
        "",
        "| n | copy GB/s | coop_tiles GB/s | of copy rate | Triton GB/s | coop / Triton | "
        "correct (coop_tiles / Triton) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(_failed_row(r, ("n",), 7))
            continue
        coop, triton, nbytes = r["coop"], r["triton"], 12 * r["elements"]
        if "error" in coop:
            coop_cells = [f"failed: {coop['error']}", "—"]
        else:
            rate = r["copy_ms"] * 12 / 8 / coop["ms"]
            coop_cells = [f"{_gbs(nbytes, coop['ms'])} (TILE {coop['best']})", f"**{rate:.1%}**"]
        if "error" in triton:
            triton_cell = f"failed: {triton['error']}"
        else:
            tile_size, warps_used = triton["best"]
            triton_cell = f"{_gbs(nbytes, triton['ms'])} (TILE {tile_size}, {warps_used} warps)"
        both = "error" not in coop and "error" not in triton
        speed = f"**{triton['ms'] / coop['ms']:.2f}x**" if both else "—"
        verdict = f"{_verdict(coop)} / {_verdict(triton)}"
        lines.append(_cells(r["n"], f"{r['copy_gbs']:.0f}", *coop_cells, triton_cell, speed, verdict))
    measured = [r for r in rows if "error" not in r]
    if measured:
        lines += ["", "Every configuration, ms:", ""]
    for r in measured:
        coop = _config_times(r["coop"], lambda t: f"TILE {t}")
        triton = _config_times(r["triton"], lambda c: f"TILE {c[0]} × {c[1]} warps")
        lines.append(f"- {r['n']}: coop_tiles {coop}; Triton {triton}")
    bar = "Bar (issue 7): faster than Triton (coop / Triton above 1) and at least 90% of the copy rate for its bytes."
    return lines + ["", bar, ""]


def _half_lines(rows: list[dict]) -> list[str]:
    lines = [
        "",
        f"## 16-bit floats: load → scan → store, and load → `tile.sum` (TILE={TILE}, float32 results)",
        "",
        "float16 data are CuPy arrays, bfloat16 data PyTorch tensors. Both accumulate in float32 and return "
        "float32 (the contract), so the scan reads 2 bytes and writes 4 per element and `tile.sum` reads 2.",
        "The copy rate is `cupy.copyto` between two n-element float16 arrays (4 bytes moved per element); *scan / "
        "copy* is that copy's time scaled by 6/4 over the scan's time, *sum / copy read* the copy's time scaled "
        "by 2/4 (its read rate, as above) over the sum's.",
        f"Correct: the first {CHECK_TILES} tiles against a float32 NumPy cumsum and sum, rtol 1e-3; data uniform in "
        "[0, 1).",
        "",
        "| n | dtype | copy GB/s | scan GB/s | scan / copy | sum GB/s | sum / copy read | correct (scan / sum) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(_failed_row(r, ("n", "dtype"), 8))
            continue
        n, copy_ms = r["elements"], r["copy_ms"]
        cells = [r["n"], r["dtype"], f"{r['copy_gbs']:.0f}"]
        for kind, nbytes, copy_scale in (("scan", 6 * n, 6 / 4), ("sum", 2 * n, 2 / 4)):
            result = r[kind]
            if "error" in result:
                cells += [f"failed: {result['error']}", "—"]
            else:
                cells += [_gbs(nbytes, result["ms"]), f"**{copy_ms * copy_scale / result['ms']:.1%}**"]
        lines.append(_cells(*cells, f"{_verdict(r['scan'])} / {_verdict(r['sum'])}"))
    return lines + ["", "Bar (issue 7): at least 90% of the copy rate for their bytes.", ""]


def _rows2d_lines(rows: list[dict]) -> list[str]:
    rows_n, cols_n = ROWS2D_SHAPE
    lines = [
        "",
        "## Row-wise cumsum of a 2-D float32 tensor: one program per row, a chunked loop with a carry",
        "",
        f"`row_cumsum` over a ({rows_n}, {cols_n}) contiguous PyTorch tensor and over its transpose (a view with "
        f"strides (1, {cols_n}), read in place), writing a fresh contiguous output, against "
        "`torch.cumsum(x, dim=1, out=y)` on the same input. coop_tiles best of CHUNK "
        f"{'/'.join(map(str, ROWS2D_CHUNKS))}; *torch / coop* above 1: coop_tiles faster.",
        "Correct: `torch.allclose` with `torch.cumsum` over the whole output, rtol 1e-4, atol 1e-2; data uniform "
        "in [0, 1).",
        "",
        "| input | shape, strides | coop_tiles ms | torch.cumsum ms | torch / coop | correct |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(_failed_row(r, ("input",), 6))
            continue
        coop = r["coop"]
        layout = f"{r['shape']}, {r['strides']}"
        if "error" in coop:
            coop_cell, ratio = f"failed: {coop['error']}", "—"
        else:
            coop_cell, ratio = f"{coop['ms']:.3f} (CHUNK {coop['best']})", f"**{r['torch_ms'] / coop['ms']:.2f}x**"
        lines.append(_cells(r["input"], layout, coop_cell, f"{r['torch_ms']:.3f}", ratio, _verdict(coop)))
    measured = [r for r in rows if "error" not in r]
    if measured:
        lines += ["", "Every CHUNK, ms:", ""]
    for r in measured:
        lines.append(f"- {r['input']}: {_config_times(r['coop'], lambda c: f'CHUNK {c}')}")
    bar = (
        "Bar (issue 7): contiguous rows at least as fast as `torch.cumsum` (torch / coop at least 1); "
        "the transposed view's ratio is reported, with no bar."
    )
    return lines + ["", bar, ""]


def _rate_cell(result: dict, nbytes: float, label: Callable[[Any], str] | None = None) -> str:
    """GB/s of a result (with its best config when `label` names it), or its failure."""
    if "error" in result:
        return f"failed: {result['error']}"
    cell = _gbs(nbytes, result["ms"])
    return f"{cell} ({label(result['best'])})" if label else cell


def _ms_cell(result: dict, label: Callable[[Any], str] | None = None) -> str:
    """ms of a result (with its best config when `label` names it), or its failure."""
    if "error" in result:
        return f"failed: {result['error']}"
    return f"{result['ms']:.3f} ({label(result['best'])})" if label else f"{result['ms']:.3f}"


def _speedup(baseline: dict, coop: dict) -> str:
    """The baseline's time over coop_tiles' (above 1: coop_tiles faster), bold, or a dash if either failed."""
    if "error" in baseline or "error" in coop:
        return "—"
    return f"**{baseline['ms'] / coop['ms']:.2f}x**"


def _histogram_lines(rows: list[dict]) -> list[str]:
    chunks, waves = "/".join(map(str, HIST_CHUNKS)), "/".join(map(str, HIST_WAVES))
    lines = [
        "",
        "## Histograms: `tile.histogram` in a persistent loop, merged with `tile.atomic_add`",
        "",
        "`tile_histogram` runs SMs × k programs, each striding over the array a CHUNK at a time, "
        "`h = h + tile.histogram(t, BINS, valid=n - base)` from `h = tile.zeros(BINS, np.int32)`, then "
        f"`tile.atomic_add(out, 0, h)`; best of CHUNK {chunks} × k {waves}. Baselines on the same array: "
        "`cub::DeviceHistogram::HistogramEven` over [0, BINS) (benchmarks/cub_baselines.cu, built with nvcc for "
        "the run; temporary storage allocated once, outside the timing), a persistent Triton kernel "
        f"(`tl.histogram` + `tl.atomic_add`, best of BLOCK {'/'.join(map(str, TRITON_HIST_BLOCKS))} × k {waves}, "
        "4 warps), and `torch.bincount(x, minlength=BINS)`; for int32, whose values fall outside [0, BINS), "
        "torch first masks them out (`x[(x >= 0) & (x < BINS)]`, inside its time: bincount counts every value).",
        "The output (BINS int32) is zeroed before every repetition, outside the timing; CUB zeroes its output "
        "itself, inside its time. GB/s counts the bytes read (n × itemsize); the read limit is half the time of "
        "a device copy of the same bytes (the copy's read rate, as for `tile.sum`), and *of read rate* is that "
        "limit over coop_tiles' time. *coop / X* is X's time over coop_tiles' (above 1: coop_tiles faster).",
        "Correct: every implementation's counts equal `np.bincount` of the values in [0, BINS).",
        "",
        "| case | n | values | read limit GB/s | coop_tiles GB/s | of read rate | CUB GB/s | coop / CUB | "
        "Triton GB/s | coop / Triton | torch.bincount GB/s | correct (coop / CUB / Triton / torch) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(_failed_row(r, ("case", "n"), 12))
            continue
        coop, cub, triton, torch_ = r["coop"], r["cub"], r["triton"], r["torch"]
        nbytes = r["elements"] * (1 if r["case"].startswith("uint8") else 4)
        rate = "—" if "error" in coop else f"**{r['read_ms'] / coop['ms']:.1%}**"
        verdict = " / ".join(_verdict(x) for x in (coop, cub, triton, torch_))
        lines.append(
            _cells(
                r["case"],
                r["n"],
                f"[{r['range'][0]}, {r['range'][1]})",
                _gbs(nbytes, r["read_ms"]),
                _rate_cell(coop, nbytes, lambda c: f"CHUNK {c[0]}, k {c[1]}"),
                rate,
                _rate_cell(cub, nbytes),
                _speedup(cub, coop),
                _rate_cell(triton, nbytes, lambda c: f"BLOCK {c[0]}, k {c[1]}"),
                _speedup(triton, coop),
                _rate_cell(torch_, nbytes),
                verdict,
            )
        )
    measured = [r for r in rows if "error" not in r]
    if measured:
        lines += ["", "Every configuration, ms:", ""]
    for r in measured:
        coop = _config_times(r["coop"], lambda c: f"CHUNK {c[0]} k {c[1]}")
        triton = _config_times(r["triton"], lambda c: f"BLOCK {c[0]} k {c[1]}")
        lines.append(f"- {r['case']}: coop_tiles {coop}; Triton {triton}")
    bar = "Bar (issue 8): at least 0.9x CUB DeviceHistogram's throughput, and at least 4x Triton's."
    return lines + ["", bar, ""]


def _faster(a: dict, b: dict) -> dict:
    """The faster of two results (the one that did not fail, if one did)."""
    if "error" in a:
        return b
    if "error" in b:
        return a
    return a if a["ms"] <= b["ms"] else b


def _segsort_lines(rows: list[dict]) -> list[str]:
    lo, hi = SEGSORT_KEY_RANGE
    lines = [
        "",
        f"## Segmented sort: `tile.sort`, one program per segment of {SEGMENT} int32 keys",
        "",
        f"`k = tile.load(keys, base, {SEGMENT})`, `tile.sort(k)` (payload: `sk, sv = tile.sort(k, v)`), stores; "
        "block size chosen by the runtime. Baselines on the same arrays: a hand-written CUB kernel "
        "(benchmarks/cub_baselines.cu: `BlockLoad` warp-transpose, `BlockRadixSort<int, 256, 8(, int)>::"
        "SortBlockedToStriped`, striped stores, one block per segment), "
        f"`torch.sort(x.view(-1, {SEGMENT}), dim=1)` into preallocated outputs (it writes int64 indices too; "
        "with the payload, `torch.gather(v, 1, indices)` after it), default and `stable=True`, and Triton "
        "`tl.sort` per segment (payload: sorting `key << 32 | position` as int64, then gathering the payload "
        f"by position), best of {'/'.join(map(str, SEGSORT_TRITON_WARPS))} warps.",
        f"Keys uniform in [{lo}, {hi}) (negative keys, and about one tied pair per segment); the payload is the "
        "element's index. *coop / X* is X's time over coop_tiles' (above 1: coop_tiles faster); *coop / torch* "
        "takes the faster torch.sort variant.",
        "Correct: keys equal `np.sort` per segment; the payload equals the stable-argsort gather, except for "
        "torch.sort's default (unstable) variant, where it must be a permutation of the segment's indices that "
        "carries the keys.",
        "",
        "| sort | n | coop_tiles ms | CUB kernel ms | coop / CUB | torch.sort ms | torch.sort stable ms | "
        "coop / torch | Triton ms | correct (coop / CUB / torch / torch stable / Triton) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(_failed_row(r, ("sort", "n"), 10))
            continue
        coop, cub, triton = r["coop"], r["cub"], r["triton"]
        torch_, stable = r["torch"], r["torch_stable"]
        verdict = " / ".join(_verdict(x) for x in (coop, cub, torch_, stable, triton))
        lines.append(
            _cells(
                r["sort"],
                r["n"],
                _ms_cell(coop),
                _ms_cell(cub),
                _speedup(cub, coop),
                _ms_cell(torch_),
                _ms_cell(stable),
                _speedup(_faster(torch_, stable), coop),
                _ms_cell(triton, lambda warps: f"{warps} warps"),
                verdict,
            )
        )
    bar = "Bar (issue 8): at least 0.95x the hand-written CUB kernel, and at least 2x torch.sort."
    return lines + ["", bar, ""]


def _chained_lines(results: dict | list) -> list[str]:
    configs = ", ".join(_config_name(c) for c in CHAINED_CONFIGS)
    lines = [
        "",
        "## Whole-array scans in one pass: `tile.scan(t, chained=True)` (issue 11)",
        "",
        "`chained_cumsum`: `tile.store(y, base, tile.scan(t, chained=True), valid=n - base)`, one kernel, best of "
        f"{configs} (threads per block chosen by the runtime unless given). Baselines on the same arrays: "
        "`cupy.copyto` (the copy "
        "rate, 8 bytes per element), `cub::DeviceScan::InclusiveSum` (benchmarks/cub_baselines.cu, built with nvcc "
        "for the run; temporary storage allocated once, outside the timing; it launches its own init kernel each "
        "time), `torch.cumsum(x, 0, out=y)` on zero-copy views, and tutorial 02's three kernels (tile sums, one "
        f"program's exclusive scan of them, a seeded rescan; TILE {'/'.join(map(str, THREE_KERNEL_TILES))}).",
        "Data: 0 or 1 (1 with probability 1/32), so that every partial sum is exact in float32 too. Correct: the "
        "whole output equals `numpy.cumsum`. *of copy* is the copy's time over the scan's; *coop / X* is X's time "
        "over coop_tiles' (above 1: coop_tiles faster).",
        "",
        "| n | dtype | copy GB/s | chained GB/s | of copy | CUB GB/s | coop / CUB | torch.cumsum GB/s | coop / torch "
        "| three kernels GB/s | coop / three | correct (chained / CUB / torch / three) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if isinstance(results, list):  # the section failed before measuring anything
        return lines + [_cells(f"failed: {results[0]['error']}", *["—"] * 11), ""]
    for r in results["scans"]:
        if "error" in r:
            lines.append(_failed_row(r, ("n", "dtype"), 12))
            continue
        nbytes = 8 * r["elements"]
        chained, cub, torch_, three = r["chained"], r["cub"], r["torch"], r["three"]
        rate = "—" if "error" in chained else f"**{r['copy_ms'] / chained['ms']:.1%}**"
        lines.append(
            _cells(
                r["n"],
                r["dtype"],
                _gbs(nbytes, r["copy_ms"]),
                _rate_cell(chained, nbytes, _config_name),
                rate,
                _rate_cell(cub, nbytes),
                _speedup(cub, chained),
                _rate_cell(torch_, nbytes),
                _speedup(torch_, chained),
                _rate_cell(three, nbytes, lambda c: f"TILE {c}"),
                _speedup(three, chained),
                " / ".join(_verdict(v) for v in (chained, cub, torch_, three)),
            )
        )
    measured = [r for r in results["scans"] if "error" not in r]
    if measured:
        lines += ["", "Every configuration of the chained scan, ms:", ""]
    for r in measured:
        lines.append(f"- {r['n']} {r['dtype']}: {_config_times(r['chained'], _config_name)}")
    lines += [
        "",
        "Bar (issue 11): at least 90% of the copy bandwidth and at least 0.95x CUB's device scan.",
        "",
        "### Whole-array linear recurrence (float32 pairs, `@ct.combine`)",
        "",
        "`_, h = tile.scan((a, b), op=linrec, chained=True)`: `h_i = a_i * h_(i-1) + b_i` over the whole array, "
        "reading a and b and writing h, 12 bytes per element; the memory-traffic limit is the copy's rate for those "
        f"bytes (its time scaled by 12/8). Best of {', '.join(_config_name(c) for c in CHAINED_LINREC_CONFIGS)}. "
        "Correct: at "
        f"{LINREC_CHECKS} tile starts, 64 elements against a float64 recurrence (rtol 1e-4, atol 1e-5).",
        "",
        "| n | copy GB/s | chained GB/s | of the limit | correct |",
        "|---|---|---|---|---|",
    ]
    for r in results["linrec"]:
        if "error" in r:
            lines.append(_failed_row(r, ("n",), 5))
            continue
        coop, nbytes = r["coop"], 12 * r["elements"]
        rate = "—" if "error" in coop else f"**{r['copy_ms'] * 12 / 8 / coop['ms']:.1%}**"
        lines.append(
            _cells(
                r["n"],
                _gbs(8 * r["elements"], r["copy_ms"]),
                _rate_cell(coop, nbytes, _config_name),
                rate,
                _verdict(coop),
            )
        )
    costs = results["costs"]
    lines += ["", "### What chaining costs", ""]
    if "error" in costs:
        return lines + [f"failed: {costs['error']}", ""]
    return lines + [
        "Host time per launch (one 4096-element program; the chained launch also asks the driver whether the "
        "stream is capturing and for its id): "
        f"plain {costs['plain_us']:.2f} µs, chained {costs['chained_us']:.2f} µs. Event time around one launch of "
        f"a 2^20-element cumsum (256 programs; it includes the launch's host time where that is the longer): plain "
        f"per-tile scan {costs['plain_ms'] * 1e3:.1f} µs, chained "
        f"{costs['chained_ms'] * 1e3:.1f} µs. The chained launch captured in a CUDA graph (allocation, memset and "
        f"free nodes around the kernel) and replayed: {costs['graph_ms'] * 1e3:.1f} µs per replay, against "
        f"{costs['direct_ms'] * 1e3:.1f} µs for the direct launch on the same stream; correct: "
        f"{'yes' if costs['correct'] else 'NO'}.",
        "",
    ]


def _mamba_lines(rows: list[dict]) -> list[str]:
    tols = "; ".join(f"{d} rtol {r:g}, atol {a:g}" for d, (r, a) in MAMBA_TOLERANCE.items())
    lines = [
        "",
        "## Mamba's selective scan forward: `coop_tiles.examples.selective_scan_fwd` against Mamba's CUDA kernel",
        "",
        "Variable B and C (one group), with z, D, delta_bias and softplus; contiguous PyTorch tensors drawn as Mamba's "
        "tests draw them. Baselines in the same run: Mamba's own kernel (`csrc/selective_scan`, built for sm_90 by "
        "benchmarks/_mamba_cuda.py with Mamba's flags; through its forward binding, which allocates its outputs as "
        "coop_tiles' does, and also writes the per-chunk states and, with z, `out` beside `out_z` for its backward), "
        "a Triton version of the same chunked algorithm (`tl.associative_scan` over (a, b) pairs of a (dstate, "
        f"BLOCK_L) tile, best of BLOCK_L x warps {', '.join(f'{b}x{w}' for b, w in MAMBA_TRITON)}, into "
        "preallocated outputs), and on the first shape the PyTorch sequential reference (Mamba's "
        "`selective_scan_ref` equations, float32).",
        "The memory limit is the bytes a forward must move (u, delta, z read, out written, B and C read once, "
        "last_state written) at the device copy rate of the run. *X / coop* is X's time over coop_tiles' (above 1: "
        "coop_tiles faster); *of limit* is the limit's time over coop_tiles'; states/s counts batch × dim × L × "
        "dstate.",
        f"Correct: out and last_state of the first {MAMBA_CHECK_DIMS} channels against the float64 sequential "
        f"reference: the largest difference at most atol + rtol × the largest value, with Mamba's tolerances "
        f"({tols}; last_state 1e-3). (Element by element, at L = 8192 in float32 every implementation, Mamba's "
        "own kernel included, misses them where the output cancels to near zero.)",
        "",
        "| (batch, dim, L, dstate) | dtype | coop_tiles ms | G states/s | Mamba CUDA ms | Mamba / coop | Triton ms | "
        "Triton / coop | torch sequential ms | torch / coop | memory limit ms | of limit | "
        "correct (coop / Mamba / Triton / torch) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(_failed_row(r, ("shape", "dtype"), 13))
            continue
        coop, mamba, triton = r["coop"], r["mamba"], r["triton"]
        torch_ = r.get("torch", {"error": "not run (first shape only)"})
        states = "—" if "error" in coop else f"{r['elements'] / coop['ms'] / 1e6:.0f}"
        limit = "—" if "error" in coop else f"**{r['limit_ms'] / coop['ms']:.0%}**"
        verdict = " / ".join(_verdict(x) for x in (coop, mamba, triton)) + (
            f" / {_verdict(torch_)}" if "torch" in r else " / —"
        )
        lines.append(
            _cells(
                str(r["shape"]),
                r["dtype"],
                _ms_cell(coop),
                states,
                _ms_cell(mamba),
                _speedup(mamba, coop),
                _ms_cell(triton, lambda c: f"{c[0]}x{c[1]}"),
                _speedup(triton, coop),
                _ms_cell(torch_) if "torch" in r else "—",
                _speedup(torch_, coop) if "torch" in r else "—",
                f"{r['limit_ms']:.3f}",
                limit,
                verdict,
            )
        )
    bar = (
        "Bar (issue 9): at least 1.0x Mamba's CUDA kernel at every shape and dtype, and faster than the Triton version."
    )
    return lines + ["", bar, ""]


def render(
    device: str,
    bandwidth: list[dict] | None = None,
    launches: list[dict] | None = None,
    compiles: dict | None = None,
    blocks: list[dict] | None = None,
    linrec: list[dict] | None = None,
    half: list[dict] | None = None,
    rows2d: list[dict] | None = None,
    histogram: list[dict] | None = None,
    segsort: list[dict] | None = None,
    chained: dict | list | None = None,
    mamba: list[dict] | None = None,
) -> str:
    """The markdown of docs/benchmarks.md: the header, then every section that was run (None: not run), in a
    fixed order."""
    sections = (
        (bandwidth, _bandwidth_lines),
        (launches, _launch_lines),
        (blocks, _blocks_lines),
        (compiles, _compile_lines),
        (linrec, _linrec_lines),
        (half, _half_lines),
        (rows2d, _rows2d_lines),
        (histogram, _histogram_lines),
        (segsort, _segsort_lines),
        (chained, _chained_lines),
        (mamba, _mamba_lines),
    )
    lines = _header_lines(device)
    for data, section_lines in sections:
        if data is not None:
            lines += section_lines(data)
    return "\n".join(lines)


def _section_names(text: str) -> tuple[str, ...]:
    """--only's comma list, checked against SECTIONS."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown section {', '.join(unknown) or '(none)'}: use {', '.join(SECTIONS)}")
    return names


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        default=None,
        help="the markdown file to write (default docs/benchmarks.md; with --only, none: the markdown is printed "
        "and docs/benchmarks.md is left alone)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="only 2^24 elements (a smoke run: histograms capped at 2^24; rows2d and segsort keep their sizes)",
    )
    parser.add_argument(
        "--only", type=_section_names, default=None, help=f"comma list of sections to run, of {', '.join(SECTIONS)}"
    )
    parser.add_argument(
        "--save", default=None, help="also keep the measured results in this file (pickle), for --merge"
    )
    parser.add_argument(
        "--merge",
        nargs="*",
        default=(),
        help="results saved by earlier --save runs on the same device, rendered together with this run's "
        "(one document from a run split over several commands)",
    )
    return parser.parse_args()


def measure(only: tuple[str, ...], sizes: list[int], arch: str) -> dict[str, Any]:
    """The results of the sections in `only`, keyed as render() takes them. Issues 7's, 8's and 11's sections come last:
    each records its own failures, but a kernel that faults leaves the CUDA context unusable for whatever
    follows."""
    results: dict[str, Any] = {}
    if "bandwidth" in only:
        results["bandwidth"] = bandwidth_rows(sizes)
    if "blocks" in only:
        results["blocks"] = [row for log2n in sizes for row in block_size_rows(log2n)]
    if "launch" in only:
        results["launches"] = launch_rows()
    if "compile" in only:
        results["compiles"] = compile_rows(arch)
    if "linrec" in only:
        results["linrec"] = _section(linrec_rows, sizes)
    if "half" in only:
        results["half"] = _section(half_rows, sizes)
    if "rows2d" in only:
        results["rows2d"] = _section(rows2d_rows)
    if "histogram" in only:
        results["histogram"] = _section(histogram_rows, sizes, arch)
    if "segsort" in only:
        results["segsort"] = _section(segsort_rows, arch)
    if "chained" in only:
        results["chained"] = _section(chained_results, sizes, arch)
    if "mamba" in only:
        results["mamba"] = _section(mamba_rows)
    return results


def main() -> None:
    args = _parse_args()
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(0)
    device = props["name"].decode()
    arch = f"sm_{props['major']}{props['minor']}"
    results = measure(args.only or SECTIONS, [24] if args.quick else [26, 28], arch)
    if args.save:
        Path(args.save).write_bytes(pickle.dumps({"device": device, "results": results}))
    for path in args.merge:
        saved = pickle.loads(Path(path).read_bytes())
        if saved["device"] != device:
            raise SystemExit(f"{path} was measured on {saved['device']}, not {device}: ratios come from one device")
        results = {**saved["results"], **results}
    text = render(device, **results)
    out = args.out or (None if args.only else str(Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
