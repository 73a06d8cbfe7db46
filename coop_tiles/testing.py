"""`ct.testing`: timing GPU work (`do_bench`), sweeping and plotting it (`perf_report`) and comparing
results (`assert_close`).

They take whatever array library the caller uses: `do_bench` times on the current stream of
PyTorch or CuPy (whichever is loaded; PyTorch first, as launches do), and `assert_close`
accepts CuPy arrays, PyTorch tensors (bfloat16 and float16 included), NumPy arrays and any
mix of them. `perf_report` draws with matplotlib when it is installed (``pip install
coop-tiles[plot]``) and prints the same numbers as a table either way.
"""

from __future__ import annotations

import ctypes
import functools
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import LaunchError

__all__ = ["Benchmark", "assert_close", "do_bench", "perf_report"]

#: (rtol, atol) by dtype name when not given, as torch.testing.assert_close uses; other dtypes
#: (integers, bool) compare exactly
DEFAULT_TOLERANCES = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}
#: how many of the worst mismatches an assert_close failure lists
SHOWN_MISMATCHES = 10
#: the L2 flush buffer is this many times the device's L2 cache
FLUSH_FACTOR = 2
#: Reads the flush buffer (16-byte loads, a grid-stride loop), so the lines it leaves in L2 are
#: clean: a flush that writes (a memset) leaves dirty lines whose write-back lands in the next
#: timed call, charged to a kernel that only reads (about 9 us on an H100; issue 17). It writes
#: only if the buffer, zeroed once, ever held another value: never, but the loads must stay. The
#: delay kernel (one thread) keeps the GPU busy for `ns` nanoseconds (`do_bench`'s `host_ahead`).
_TIMING_KERNELS = r"""
extern "C" __global__ void coop_flush_read(const uint4* words, unsigned long long n, unsigned* sink) {
  unsigned acc = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    uint4 w = __ldcg(words + i);
    acc |= w.x | w.y | w.z | w.w;
  }
  if (acc != 0) *sink = acc;
}

extern "C" __global__ void coop_delay(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
"""
_FLUSH_THREADS = 256
_FLUSH_BLOCKS_PER_SM = 8
#: with `host_ahead`, the GPU waits this many times the host's time per call (and HOST_AHEAD_MARGIN_NS more)
#: before each timed call: the host's time varies from call to call
HOST_AHEAD_FACTOR = 2
HOST_AHEAD_MARGIN_NS = 20_000


# ================================================================================================
# Timing
# ================================================================================================
def do_bench(
    fn: Callable[[], Any],
    warmup: float = 25,
    rep: float = 100,
    quantiles: Sequence[float] | None = None,
    flush_l2: bool = True,
    *,
    setup: Callable[[], Any] | None = None,
    host_ahead: bool = False,
) -> float | list[float]:
    """Milliseconds per call of `fn` (which queues GPU work), from CUDA events on the current stream.

    As Triton's ``do_bench``: `warmup` and `rep` are budgets in milliseconds, turned into
    numbers of calls from the time of five calls; each timed call gets its own pair of events,
    and before each one the L2 cache is flushed by reading a buffer twice its size (unless
    ``flush_l2=False``): unlike Triton's memset, a read leaves no dirty lines whose write-back
    would be charged to the timed call. Returns the median, or with `quantiles` (fractions in [0, 1]) the list
    of those quantiles of the per-call times, in order (always a list). ``setup()``, when
    given, runs before every call, outside the timed interval (to reset an output `fn`
    accumulates into). ``host_ahead=True`` times the GPU's work alone: before each timed call the
    GPU waits (a one-thread kernel) twice as long as `fn` takes the host to queue its work, so
    that all of it is queued before the start event fires, as under a CUDA graph; otherwise, where
    `fn` takes the host longer than the flush takes the GPU (Python, allocations, several
    launches), the GPU idles inside the timed interval until the work arrives.

    >>> ms = ct.testing.do_bench(lambda: kernel[grid](x, y, n, TILE=4096))
    >>> median, p20, p80 = ct.testing.do_bench(lambda: kernel[grid](x, y, n, TILE=4096), quantiles=[0.5, 0.2, 0.8])
    """
    timer = _EventTimer(current_stream(), flush_l2, host_ahead)
    try:
        fn()  # a first call may compile: not part of the estimate
        estimate = timer.estimate(fn, setup, calls=5)
        times = timer.times(fn, setup, max(1, int(warmup / estimate)), max(1, int(rep / estimate)))
    finally:
        timer.close()
    if quantiles is None:
        return statistics.median(times)
    return [float(q) for q in np.quantile(np.asarray(times), list(quantiles))]


def event_times(
    fn: Callable[[], Any],
    warmup: int,
    reps: int,
    *,
    stream: int | None = None,
    flush_l2: bool = True,
    setup: Callable[[], Any] | None = None,
) -> list[float]:
    """Milliseconds of each of `reps` calls of `fn` after `warmup` untimed calls, on `stream` (a
    raw handle; None: the current stream): `do_bench` by counts, as the autotuner uses it."""
    timer = _EventTimer(current_stream() if stream is None else stream, flush_l2)
    try:
        return timer.times(fn, setup, warmup, reps)
    finally:
        timer.close()


def current_stream() -> int:
    """The raw handle of the current stream of the array library in use (PyTorch, else CuPy,
    else the legacy default stream), in the current device's context."""
    from .runtime import launcher

    device = launcher.current_device()
    device.set_current()  # the primary context, as the libraries use it
    libraries = 0
    for name, bit in launcher.LIBRARY_BITS.items():
        if name in sys.modules:
            libraries |= bit
    return launcher.current_stream(libraries, device.device_id)


@functools.cache
def _timing_kernels(device_id: int) -> tuple[Any, Any]:
    """The flush buffer's reader and the delay kernel compiled for `device_id` (NVRTC through cuda.core), as
    driver handles."""
    from cuda.core import Program, ProgramOptions

    from .runtime import launcher, toolchain

    toolchain.import_cuda_core()
    with launcher.on_device(device_id):
        options = ProgramOptions(arch=launcher.device_arch(device_id))
        code = Program(_TIMING_KERNELS, "c++", options).compile("cubin")
        return code.get_kernel("coop_flush_read").handle, code.get_kernel("coop_delay").handle


class _EventTimer:
    """CUDA events and the L2 flush buffer for timing calls on one stream, through the driver
    API so that it works the same under any array library."""

    def __init__(self, stream: int, flush_l2: bool, host_ahead: bool = False):
        from cuda.bindings import driver

        from .runtime import launcher

        self.driver, self.stream = driver, stream
        self.events: list[Any] = []
        self.flush_chunks = self.buffer = 0
        device_id = launcher.current_device().device_id
        self.reader, self.delay = _timing_kernels(device_id) if flush_l2 or host_ahead else (None, None)
        self.host_ahead, self.delay_ns = host_ahead, 0
        if flush_l2:
            attr = driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
            l2 = self._check(driver.cuDeviceGetAttribute(attr, device_id), "L2 size query")
            self.flush_chunks = max(1, FLUSH_FACTOR * int(l2) // 16)
            # the 16-byte chunks, then the reader's never-written word
            self.buffer = self._check(driver.cuMemAlloc(16 * self.flush_chunks + 16), "allocating the L2 flush buffer")
            self._check(driver.cuMemsetD32Async(self.buffer, 0, 4 * self.flush_chunks, stream), "zeroing the buffer")
            attr = driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
            sms = self._check(driver.cuDeviceGetAttribute(attr, device_id), "SM count query")
            self.flush_blocks = int(sms) * _FLUSH_BLOCKS_PER_SM
            chunks, sink = self.flush_chunks, int(self.buffer) + 16 * self.flush_chunks
            self.flush_args = ((int(self.buffer), chunks, sink), (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p))

    def _check(self, result: Any, what: str) -> Any:
        err = result[0] if isinstance(result, tuple) else result
        if err != self.driver.CUresult.CUDA_SUCCESS:
            raise LaunchError(f"{what} failed: {err.name}")
        return result[1] if isinstance(result, tuple) and len(result) > 1 else None

    def _event(self) -> Any:
        event = self._check(self.driver.cuEventCreate(0), "creating a CUDA event")
        self.events.append(event)
        return event

    def _before(self, setup: Callable[[], Any] | None) -> None:
        if setup is not None:
            setup()
        if self.buffer:
            launch = self.driver.cuLaunchKernel(
                self.reader, self.flush_blocks, 1, 1, _FLUSH_THREADS, 1, 1, 0, self.stream, self.flush_args, 0
            )
            self._check(launch, "L2 flush")
        if self.delay_ns:
            args = ((self.delay_ns,), (ctypes.c_uint64,))
            self._check(self.driver.cuLaunchKernel(self.delay, 1, 1, 1, 1, 1, 1, 0, self.stream, args, 0), "delay")

    def _record(self, event: Any) -> None:
        self._check(self.driver.cuEventRecord(event, self.stream), "recording a CUDA event")

    def _elapsed(self, start: Any, stop: Any) -> float:
        return float(self._check(self.driver.cuEventElapsedTime(start, stop), "reading a CUDA event"))

    def estimate(self, fn: Callable[[], Any], setup: Callable[[], Any] | None, calls: int) -> float:
        """Milliseconds per call, flush and setup included, over `calls` calls (for sizing)."""
        start, stop = self._event(), self._event()
        self._check(self.driver.cuStreamSynchronize(self.stream), "synchronizing the stream")
        self._record(start)
        for _ in range(calls):
            self._before(setup)
            fn()
        self._record(stop)
        self._check(self.driver.cuEventSynchronize(stop), "waiting for a CUDA event")
        return max(self._elapsed(start, stop) / calls, 1e-4)

    def times(self, fn: Callable[[], Any], setup: Callable[[], Any] | None, warmup: int, reps: int) -> list[float]:
        host = []
        for _ in range(warmup):
            if setup is not None:
                setup()
            start = time.perf_counter()
            fn()
            host.append(time.perf_counter() - start)
        if self.host_ahead:  # (the host's time to queue a call's work, the median of the warm-up's)
            self.delay_ns = int(HOST_AHEAD_FACTOR * statistics.median(host) * 1e9) + HOST_AHEAD_MARGIN_NS
        pairs = [(self._event(), self._event()) for _ in range(reps)]
        for start, stop in pairs:
            self._before(setup)
            self._record(start)
            fn()
            self._record(stop)
        self._check(self.driver.cuEventSynchronize(pairs[-1][1]), "waiting for a CUDA event")
        return [self._elapsed(start, stop) for start, stop in pairs]

    def close(self) -> None:
        for event in self.events:
            self.driver.cuEventDestroy(event)
        self.events = []
        if self.buffer:
            self.driver.cuStreamSynchronize(self.stream)
            self.driver.cuMemFree(self.buffer)
            self.buffer = 0


# ================================================================================================
# Sweeping and plotting
# ================================================================================================
@dataclass
class Benchmark:
    """One sweep of `perf_report`, as Triton's ``triton.testing.Benchmark``: for every value of
    `x_vals` (given to each argument of `x_names`; a tuple gives one to each) and every value of
    `line_vals` (given to argument `line_arg`), the decorated function's result, a number or
    ``(value, low, high)``; one line per `line_vals`, named by `line_names`, drawn in
    `styles` (``(color, linestyle)`` pairs)."""

    x_names: list[str]
    x_vals: list[Any]
    line_arg: str
    line_vals: list[Any]
    line_names: list[str]
    plot_name: str
    args: dict[str, Any] = field(default_factory=dict)
    xlabel: str = ""
    ylabel: str = ""
    x_log: bool = False
    y_log: bool = False
    styles: list[tuple[str, str]] | None = None


@dataclass
class PerfTable:
    """The results of one `Benchmark`: a row per x value, the x value then one value per line."""

    benchmark: Benchmark
    rows: list[tuple[Any, list[tuple[float, float, float]]]]

    def series(self) -> dict[str, list[tuple[float, float, float]]]:
        """Each line's (value, low, high) over the x values, by its name."""
        names = self.benchmark.line_names
        return {name: [values[i] for _, values in self.rows] for i, name in enumerate(names)}

    def __str__(self) -> str:
        b = self.benchmark
        headers = [b.xlabel or ", ".join(b.x_names), *b.line_names]
        rows = [[_cell(x), *(f"{v:.6g}" for v, _, _ in values)] for x, values in self.rows]
        widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
        lines = ["  ".join(f"{c:>{w}}" for c, w in zip(r, widths)) for r in [headers, *rows]]
        return "\n".join([f"{b.plot_name}:", *lines])


class Mark:
    """A function under `perf_report`: call it as before, or `.run()` its sweeps."""

    def __init__(self, fn: Callable[..., Any], benchmarks: list[Benchmark]):
        self.fn, self.benchmarks = fn, benchmarks
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def run(
        self, show_plots: bool = False, print_data: bool = False, save_path: str | Path = "", **kwargs: Any
    ) -> list[PerfTable]:
        """Sweep every benchmark (`kwargs` go to every call): print each table with `print_data`,
        show each plot with `show_plots`, and with `save_path` (a directory) write
        ``<plot_name>.csv``, and ``<plot_name>.png`` when matplotlib is installed. Without it, a
        plot asked for becomes a one-line note and the table."""
        tables = [self._sweep(b, kwargs) for b in self.benchmarks]
        plotting = show_plots or bool(save_path)
        missing = plotting and not _has_matplotlib()
        if missing:
            print("matplotlib is not installed (pip install coop-tiles[plot]): printing the table instead of a plot")
        for table in tables:
            if print_data or missing:
                print(table)
            if save_path:
                folder = Path(save_path)
                folder.mkdir(parents=True, exist_ok=True)
                _write_csv(table, folder / f"{table.benchmark.plot_name}.csv")
            if plotting and not missing:
                b = table.benchmark
                png = Path(save_path) / f"{b.plot_name}.png" if save_path else None
                draw_lines(
                    png, b.plot_name, b.xlabel or ", ".join(b.x_names), b.ylabel, [x for x, _ in table.rows],
                    table.series(), x_log=b.x_log, y_log=b.y_log, styles=b.styles, show=show_plots,
                )  # fmt: skip
        return tables

    def _sweep(self, b: Benchmark, kwargs: dict[str, Any]) -> PerfTable:
        rows = []
        for x in b.x_vals:
            xs = x if isinstance(x, (tuple, list)) else (x,) * len(b.x_names)
            values = []
            for line in b.line_vals:
                result = self.fn(**dict(zip(b.x_names, xs)), **{b.line_arg: line}, **b.args, **kwargs)
                value, low, high = result if isinstance(result, (tuple, list)) else (result, result, result)
                values.append((float(value), float(low), float(high)))
            rows.append((x, values))
        return PerfTable(b, rows)


def perf_report(benchmarks: Benchmark | list[Benchmark]) -> Callable[[Callable[..., Any]], Mark]:
    """Mark a function for sweeps, as Triton's ``triton.testing.perf_report``: the function takes
    the x and line arguments by name and returns what to plot (a number, or ``(value, low,
    high)``); ``fn.run(print_data=True, show_plots=False, save_path="plots/")`` runs them.

    >>> @ct.testing.perf_report(ct.testing.Benchmark(x_names=["n"], x_vals=[2**k for k in range(12, 28, 2)],
    ...     line_arg="provider", line_vals=["coop", "cupy"], line_names=["coop_tiles", "CuPy"],
    ...     plot_name="cumsum", ylabel="GB/s", x_log=True))
    ... def bench(n, provider): ...
    >>> bench.run(print_data=True, save_path=".")
    """
    listed = benchmarks if isinstance(benchmarks, list) else [benchmarks]
    return lambda fn: Mark(fn, listed)


def draw_lines(
    path: str | Path | None,
    title: str,
    xlabel: str,
    ylabel: str,
    x: Sequence[Any],
    series: dict[str, Sequence[float | tuple[float, float, float]]],
    *,
    dashed: dict[str, Sequence[float]] | None = None,
    x_log: bool = False,
    y_log: bool = False,
    styles: Sequence[tuple[str, str]] | None = None,
    show: bool = False,
) -> None:
    """One line per `series` over `x` (a value, or (value, low, high) drawn with a band), the
    `dashed` ones as limits, written to `path` (any format matplotlib writes; Agg, no window)
    and shown with `show`. Needs matplotlib (``pip install coop-tiles[plot]``)."""
    from matplotlib.figure import Figure  # not pyplot: no backend or global state unless showing

    if show:
        from matplotlib import pyplot as plt

        fig = plt.figure(figsize=(7, 4.5))
    else:
        fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    xs = list(range(len(x))) if any(isinstance(v, (str, tuple, list)) for v in x) else list(x)
    for i, (name, values) in enumerate(series.items()):
        points = [v if isinstance(v, (tuple, list)) else (v, v, v) for v in values]
        color, style = styles[i] if styles and i < len(styles) else (None, "-")
        line = ax.plot(xs, [p[0] for p in points], marker="o", markersize=3, label=name, color=color, linestyle=style)
        if any(p[1] != p[2] for p in points):
            ax.fill_between(xs, [p[1] for p in points], [p[2] for p in points], alpha=0.2, color=line[0].get_color())
    for name, values in (dashed or {}).items():
        ax.plot(xs, list(values), linestyle="--", color="#555555", label=name)
    ax.set_xscale("log" if x_log and xs == list(x) else "linear")
    ax.set_yscale("log" if y_log else "linear")
    if not y_log:  # from zero, with room above the highest point
        ax.set_ylim(0, ax.get_ylim()[1] * 1.08)
    if xs != list(x):  # categories (after the scale, which resets the ticks)
        ax.set_xticks(xs, [_cell(v) for v in x])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    if show:
        plt.show()


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _cell(x: Any) -> str:
    return ", ".join(str(v) for v in x) if isinstance(x, (tuple, list)) else str(x)


def _write_csv(table: PerfTable, path: Path) -> None:
    b = table.benchmark
    lines = [",".join([*b.x_names, *b.line_names])]
    for x, values in table.rows:
        xs = x if isinstance(x, (tuple, list)) else (x,) * len(b.x_names)
        lines.append(",".join([*(str(v) for v in xs), *(f"{v:.6g}" for v, _, _ in values)]))
    path.write_text("\n".join(lines) + "\n")


# ================================================================================================
# Comparing
# ================================================================================================
def assert_close(
    actual: Any,
    expected: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
) -> None:
    """Raise AssertionError unless ``|actual - expected| <= atol + rtol * |expected|`` everywhere.

    Either argument may be a CuPy array, a PyTorch tensor, a NumPy array or anything NumPy
    converts; shapes must be equal, dtypes may differ. A tolerance not given defaults by
    dtype as in ``torch.testing.assert_close`` (float32: rtol 1.3e-6, atol 1e-5; bfloat16:
    rtol 1.6e-2; integers and bool: exact), the looser of the two arguments' dtypes; values
    are compared in float64 (complex128), integers without tolerances exactly. Equal
    infinities are close; NaNs are close to each other only with ``equal_nan=True``. The
    message lists the worst mismatches with their index, actual and expected values.

    >>> ct.testing.assert_close(y_gpu, np.cumsum(x), rtol=1e-5)
    """
    a, e = to_numpy(actual), to_numpy(expected)
    if a.shape != e.shape:
        raise AssertionError(f"Shapes differ: actual {a.shape}, expected {e.shape}")
    default_rtol, default_atol = (max(pair) for pair in zip(_tolerances(a.dtype), _tolerances(e.dtype)))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    wide = np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(e) else np.float64
    af, ef = a.astype(wide), e.astype(wide)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(af - ef)
        within = (diff <= atol + rtol * np.abs(ef)) & np.isfinite(diff)  # an infinity is close only to itself
    integers = a.dtype.kind in "biu" and e.dtype.kind in "biu"
    if integers:  # equal exactly (float64 rounds past 2**53)
        close = (a == e) | (within if rtol or atol else False)
    else:
        close = (af == ef) | within  # equal infinities are close
    if equal_nan:
        close |= np.isnan(af) & np.isnan(ef)
    if close.all():
        return
    if integers:  # the differences shown, exactly
        diff = np.abs(a.astype(object) - e.astype(object)).astype(np.float64)
    raise AssertionError(_mismatch_message(a, e, diff, ~close, rtol, atol))


def _tolerances(dtype: np.dtype) -> tuple[float, float]:
    return DEFAULT_TOLERANCES.get(np.dtype(dtype).name, (0.0, 0.0))


def to_numpy(x: Any) -> np.ndarray:
    """`x` as a NumPy array on the host: CuPy arrays and PyTorch tensors are copied back, a
    PyTorch bfloat16 tensor becomes an ml_dtypes bfloat16 array (the dtype `ct.bfloat16` is)."""
    if isinstance(x, np.ndarray):
        return x
    library = type(x).__module__.split(".")[0]
    if library == "torch":
        t = x.detach().resolve_conj().cpu()
        if str(t.dtype) == "torch.bfloat16":
            import ml_dtypes
            import torch

            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return t.numpy()
    if library == "cupy":
        return x.get()
    if hasattr(x, "copy_to_host"):  # a Numba device array
        return x.copy_to_host()
    return np.asarray(x)


def _mismatch_message(a: np.ndarray, e: np.ndarray, diff: np.ndarray, bad: np.ndarray, rtol: float, atol: float) -> str:
    count, total = int(bad.sum()), bad.size
    flat = np.flatnonzero(bad)
    bad_diff = diff.reshape(-1)[flat]
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = bad_diff / np.abs(e.reshape(-1)[flat].astype(diff.dtype))
    # worst first: a NaN difference (a NaN against a number) counts as infinitely far
    order = np.argsort(-np.where(np.isnan(bad_diff), np.inf, bad_diff), kind="stable")
    worst_relative = int(np.argmax(np.where(np.isnan(relative), np.inf, relative)))
    shown = "" if count <= SHOWN_MISMATCHES else f", {SHOWN_MISMATCHES} of {count}"
    lines = [
        f"Arrays are not close (rtol={rtol:g}, atol={atol:g}; actual {a.dtype.name}, expected {e.dtype.name})",
        f"Mismatched elements: {count} / {total} ({100 * count / total:.3g}%)",
        f"Greatest absolute difference: {_number(bad_diff[order[0]])} at index {_index(flat[order[0]], a.shape)}",
        f"Greatest relative difference: {_number(relative[worst_relative])} at index "
        f"{_index(flat[worst_relative], a.shape)}",
        f"Worst mismatches (index: actual, expected){shown}:",
    ]
    for k in order[:SHOWN_MISMATCHES]:
        i = flat[k]
        lines.append(f"  {_index(i, a.shape)}: {a.reshape(-1)[i]!s}, {e.reshape(-1)[i]!s}")  # str: in its dtype
    return "\n".join(lines)


def _index(flat_index: int, shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat_index, shape)) + "]"


def _number(x: Any) -> str:
    return f"{float(np.real(x)):.6g}" if not np.iscomplexobj(x) else f"{complex(x):.6g}"
