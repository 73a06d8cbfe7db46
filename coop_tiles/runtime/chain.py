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

from ..ops.chained import HEADER_BYTES, MAX_LAUNCHES
from .stream_memory import StreamBuffers


class GridStates:
    """The states of one process, by (stream id, bytes per program): zeroed stream buffers
    (`stream_memory.StreamBuffers`), replaced after MAX_LAUNCHES launches."""

    def __init__(self) -> None:
        self._buffers = StreamBuffers("a chained scan's grid-wide state", zeroed=True)

    def acquire(self, stream: int, programs: int, per_program: int) -> tuple[int, bool]:
        """(device pointer of the state for a launch of `programs` on `stream`, whether it was made for
        this launch alone and must be `release`d after it: under graph capture)."""
        return self._buffers.acquire(stream, HEADER_BYTES + programs * per_program, per_program, MAX_LAUNCHES)

    def release(self, ptr: int, stream: int) -> None:
        """Free a captured launch's own state after it (a graph node, ordered after the kernel)."""
        self._buffers.release(ptr, stream)


STATES = GridStates()
