"""The grid-wide state of chained scans (`ops/chained.py` has the protocol that uses it), allocated
and reset by the runtime: the user passes no memory.

- **One state per stream**, reused by every launch on that stream: launches on one stream run one
  after the other, and each launch leaves the state ready for the next (it resets its ticket
  counter and moves to a new epoch itself), so there is nothing to clear between launches, no
  memset and no host synchronisation. After `MAX_LAUNCHES` launches a state is replaced by a
  fresh one, before its 32-bit epoch could come round again. Streams are told apart by `cuStreamGetId`, which the driver
  never reuses (a handle can be, once a stream is destroyed), so launches on two streams at once
  never share a state. A state is allocated zeroed, stream-ordered (`cuMemAllocAsync` +
  `cuMemsetD8Async` on the launch's stream), the first time its stream needs it or needs a larger
  one (the old one is freed stream-ordered after the launches that use it): its size is
  `HEADER_BYTES` plus the kernel's bytes per program times the grid, and it lives as long as the
  process. Kernels whose descriptors differ in size keep separate states.
- **Under CUDA graph capture** the launch gets a state of its own, made of graph nodes: an
  allocation, a memset to zero and, after the kernel, a free (stream-ordered allocation is
  capturable). Every replay of the graph then starts from zeroed state, and no two graphs, nor a
  graph and direct launches, share one. (A graph with memory nodes can only be instantiated once at
  a time: CUDA's rule for stream-ordered allocations in graphs.)
"""

from __future__ import annotations

import threading

from ..errors import LaunchError
from ..ops.chained import HEADER_BYTES, MAX_LAUNCHES


def _driver():
    from cuda.bindings import driver

    return driver


def _check(err, what: str) -> None:
    if err != _driver().CUresult.CUDA_SUCCESS:
        raise LaunchError(f"{what} for a chained scan's grid-wide state failed: {err.name}")


def _zeroed(nbytes: int, stream: int) -> int:
    """A stream-ordered allocation of `nbytes`, zeroed on `stream`."""
    driver = _driver()
    err, ptr = driver.cuMemAllocAsync(nbytes, stream)
    _check(err, f"allocating {nbytes} bytes")
    (err,) = driver.cuMemsetD8Async(ptr, 0, nbytes, stream)
    _check(err, "zeroing")
    return int(ptr)


def _free(ptr: int, stream: int) -> None:
    (err,) = _driver().cuMemFreeAsync(ptr, stream)
    _check(err, "freeing")


class GridStates:
    """The states of one process, by (stream id, bytes per program)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[tuple[int, int], list[int]] = {}  # -> [pointer, bytes, launches]

    def acquire(self, stream: int, programs: int, per_program: int) -> tuple[int, bool]:
        """(device pointer of the state for a launch of `programs` on `stream`, whether it was made for
        this launch alone and must be `release`d after it: under graph capture)."""
        driver = _driver()
        nbytes = HEADER_BYTES + programs * per_program
        err, capture = driver.cuStreamIsCapturing(stream)
        _check(err, "querying the stream's capture status")
        if capture != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
            return _zeroed(nbytes, stream), True
        err, stream_id = driver.cuStreamGetId(stream)
        _check(err, "querying the stream's id")
        key = (int(stream_id), per_program)
        with self._lock:
            found = self._states.get(key)
            if found is not None and found[1] >= nbytes and found[2] < MAX_LAUNCHES:
                found[2] += 1
                return found[0], False
            ptr = _zeroed(nbytes, stream)
            if found is not None:
                _free(found[0], stream)  # after the launches already queued on this stream
            self._states[key] = [ptr, nbytes, 1]
            return ptr, False

    @staticmethod
    def release(ptr: int, stream: int) -> None:
        """Free a captured launch's own state after it (a graph node, ordered after the kernel)."""
        _free(ptr, stream)


STATES = GridStates()
