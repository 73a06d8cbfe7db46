"""The launch's own device memory (`ops/base.py::LaunchArg`), made and filled by the runtime before each launch of a
kernel that has some (`CompiledKernel.launch_bytes`): cuBLASDx's device pipelines (TMA descriptors of the operands)
of pipelined K loops (`ops/dot_loop.py`), which the kernel cannot build itself (calling the library's create function
in the kernel serialises every WGMMA; docs/internals.md, "Pipelined K loops").

- **Filled by the prepare kernel**, the cubin's `CompiledKernel.prepare_name`, which takes the program's own
  parameters (the same packed argument buffer) and is launched, one block of 32 threads, just before the program on
  the launch's stream: stream order makes the program see what it wrote (the program also acquires the descriptors
  for the tensormap proxy, the prepare kernel released them).
- **One buffer per stream** (by `cuStreamGetId`, never reused by the driver, so launches on two streams at once never
  share one), reused by every launch on that stream: the next launch's prepare kernel runs after the previous
  program on the same stream, so rewriting the descriptors in place is safe, and there is no allocation, no host
  synchronisation and no pool to size per launch. A stream-ordered allocation (`cuMemAllocAsync`) the first time a
  stream needs one (or a larger one; the old one freed stream-ordered after the launches queued on it); it lives as
  long as the process. Nothing is zeroed: the program reads a descriptor only where the prepare kernel, on the same
  arguments, built it.
- **Enqueued in pairs**: a prepare kernel and its program are enqueued under one process-wide lock
  (`LaunchStates.launching`), so that no other pair comes between them on a stream whichever host threads launch.
- **Under CUDA graph capture** a launch gets a buffer of its own (graph nodes: an allocation before, a free after).

Chained scans' grid-wide state (`runtime/chain.py`) is separate: it is zeroed, sized by the grid, and has epochs.
"""

from __future__ import annotations

import threading

from ..errors import LaunchError


def _driver():
    from cuda.bindings import driver

    return driver


def _check(err, what: str) -> None:
    if err != _driver().CUresult.CUDA_SUCCESS:
        raise LaunchError(f"{what} for a launch's device pipelines failed: {err.name}")


def _allocate(nbytes: int, stream: int) -> int:
    err, ptr = _driver().cuMemAllocAsync(nbytes, stream)
    _check(err, f"allocating {nbytes} bytes")
    return int(ptr)


def _free(ptr: int, stream: int) -> None:
    (err,) = _driver().cuMemFreeAsync(ptr, stream)
    _check(err, "freeing")


class LaunchStates:
    """The launch states of one process, one per stream (the largest any kernel launched there needs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: held by each launch of a kernel with launch state from packing its arguments to enqueuing its program, so
        #: that two host threads launching on one stream cannot enqueue prepare, prepare, program, program (the first
        #: program would read the second one's descriptors)
        self.launching = threading.Lock()
        self._states: dict[int, tuple[int, int]] = {}  # stream id -> (pointer, bytes)

    def acquire(self, stream: int, nbytes: int) -> tuple[int, bool]:
        """(device pointer of at least `nbytes` for a launch on `stream`, whether it was made for this launch alone
        and must be `release`d after it: under graph capture)."""
        driver = _driver()
        err, capture = driver.cuStreamIsCapturing(stream)
        _check(err, "querying the stream's capture status")
        if capture != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
            return _allocate(nbytes, stream), True
        err, stream_id = driver.cuStreamGetId(stream)
        _check(err, "querying the stream's id")
        with self._lock:
            found = self._states.get(int(stream_id))
            if found is not None and found[1] >= nbytes:
                return found[0], False
            ptr = _allocate(nbytes, stream)
            if found is not None:
                _free(found[0], stream)  # after the launches already queued on this stream
            self._states[int(stream_id)] = (ptr, nbytes)
            return ptr, False

    @staticmethod
    def release(ptr: int, stream: int) -> None:
        """Free a captured launch's own buffer after it (a graph node, ordered after the kernel)."""
        _free(ptr, stream)


STATES = LaunchStates()
