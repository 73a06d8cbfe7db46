"""`ct.testing`: timing GPU work (`do_bench`) and comparing results (`assert_close`).

Both take whatever array library the caller uses: `do_bench` times on the current stream of
PyTorch or CuPy (whichever is loaded; PyTorch first, as launches do), and `assert_close`
accepts CuPy arrays, PyTorch tensors (bfloat16 and float16 included), NumPy arrays and any
mix of them.
"""

from __future__ import annotations

import ctypes
import functools
import statistics
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .errors import LaunchError

__all__ = ["assert_close", "do_bench"]

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
#: only if the buffer, zeroed once, ever held another value: never, but the loads must stay.
_FLUSH_READER = r"""
extern "C" __global__ void coop_flush_read(const uint4* words, unsigned long long n, unsigned* sink) {
  unsigned acc = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    uint4 w = __ldcg(words + i);
    acc |= w.x | w.y | w.z | w.w;
  }
  if (acc != 0) *sink = acc;
}
"""
_FLUSH_THREADS = 256
_FLUSH_BLOCKS_PER_SM = 8


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
) -> float | list[float]:
    """Milliseconds per call of `fn` (which queues GPU work), from CUDA events on the current stream.

    As Triton's ``do_bench``: `warmup` and `rep` are budgets in milliseconds, turned into
    numbers of calls from the time of five calls; each timed call gets its own pair of events,
    and before each one the L2 cache is flushed by reading a buffer twice its size (unless
    ``flush_l2=False``): unlike Triton's memset, a read leaves no dirty lines whose write-back
    would be charged to the timed call. Returns the median, or with `quantiles` (fractions in [0, 1]) the list
    of those quantiles of the per-call times, in order (always a list). ``setup()``, when
    given, runs before every call, outside the timed interval (to reset an output `fn`
    accumulates into).

    >>> ms = ct.testing.do_bench(lambda: kernel[grid](x, y, n, TILE=4096))
    >>> median, p20, p80 = ct.testing.do_bench(lambda: kernel[grid](x, y, n, TILE=4096), quantiles=[0.5, 0.2, 0.8])
    """
    timer = _EventTimer(current_stream(), flush_l2)
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
def _flush_reader(device_id: int) -> Any:
    """The flush buffer's reader compiled for `device_id` (NVRTC through cuda.core), as a driver handle."""
    from cuda.core import Program, ProgramOptions

    from .runtime import launcher, toolchain

    toolchain.import_cuda_core()
    with launcher.on_device(device_id):
        options = ProgramOptions(arch=launcher.device_arch(device_id))
        code = Program(_FLUSH_READER, "c++", options).compile("cubin")
        return code.get_kernel("coop_flush_read").handle


class _EventTimer:
    """CUDA events and the L2 flush buffer for timing calls on one stream, through the driver
    API so that it works the same under any array library."""

    def __init__(self, stream: int, flush_l2: bool):
        from cuda.bindings import driver

        self.driver, self.stream = driver, stream
        self.events: list[Any] = []
        self.flush_chunks = self.buffer = 0
        if flush_l2:
            from .runtime import launcher

            device_id = launcher.current_device().device_id
            attr = driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
            l2 = self._check(driver.cuDeviceGetAttribute(attr, device_id), "L2 size query")
            self.flush_chunks = max(1, FLUSH_FACTOR * int(l2) // 16)
            # the 16-byte chunks, then the reader's never-written word
            self.buffer = self._check(driver.cuMemAlloc(16 * self.flush_chunks + 16), "allocating the L2 flush buffer")
            self._check(driver.cuMemsetD32Async(self.buffer, 0, 4 * self.flush_chunks, stream), "zeroing the buffer")
            self.reader = _flush_reader(device_id)
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
        for _ in range(warmup):
            if setup is not None:
                setup()
            fn()
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
