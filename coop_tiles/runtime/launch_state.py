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

The buffers are `runtime/stream_memory.py`'s, as chained scans' are.

Chained scans' grid-wide state (`runtime/chain.py`) is separate: it is zeroed, sized by the grid, and has epochs.
"""

from __future__ import annotations

import threading

from .stream_memory import StreamBuffers


class LaunchStates(StreamBuffers):
    """The launch states of one process, one per stream (the largest any kernel launched there needs)."""

    def __init__(self) -> None:
        super().__init__("a launch's device pipelines")
        #: held by each launch of a kernel with launch state from packing its arguments to enqueuing its program, so
        #: that two host threads launching on one stream cannot enqueue prepare, prepare, program, program (the first
        #: program would read the second one's descriptors)
        self.launching = threading.Lock()


STATES = LaunchStates()
