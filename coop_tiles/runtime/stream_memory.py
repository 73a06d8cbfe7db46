"""Device memory the runtime keeps per stream for launches that need some of their own (a chained scan's grid-wide
state, `chain.py`; a launch's device pipelines, `launch_state.py`): one buffer per stream, reused by the launches on
it, allocated and freed stream-ordered, and a buffer of its own for each launch under CUDA graph capture.

Streams are told apart by `cuStreamGetId`, which the driver never reuses (a handle can be, once a stream is
destroyed), so launches on two streams at once never share a buffer. A buffer is replaced, the old one freed
stream-ordered after the launches already queued on its stream, when a launch needs a larger one or after
`max_uses` launches. Under capture the buffer is made of graph nodes (an allocation before the kernel, a free after
it: stream-ordered allocation is capturable), so that every replay starts from a fresh one.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

from ..errors import LaunchError


def driver():
    from cuda.bindings import driver

    return driver


class StreamBuffers:
    """The buffers of one process for one purpose, by (stream id, kind); `purpose` names them in errors ("a launch's
    device pipelines"); `zeroed`: each new buffer is zeroed on its stream (`cuMemsetD8Async`) before any launch."""

    def __init__(self, purpose: str, zeroed: bool = False) -> None:
        self.purpose, self.zeroed = purpose, zeroed
        self._lock = threading.Lock()
        self._buffers: dict[tuple[int, Hashable], list[int]] = {}  # -> [pointer, bytes, launches]

    def check(self, err, what: str) -> None:
        """A LaunchError naming `what` failed for this purpose, unless the driver call `err` succeeded."""
        if err != driver().CUresult.CUDA_SUCCESS:
            raise LaunchError(f"{what} for {self.purpose} failed: {err.name}")

    def allocate(self, nbytes: int, stream: int) -> int:
        """A stream-ordered allocation of `nbytes` on `stream`, zeroed there when the buffers are."""
        d = driver()
        err, ptr = d.cuMemAllocAsync(nbytes, stream)
        self.check(err, f"allocating {nbytes} bytes")
        if self.zeroed:
            (err,) = d.cuMemsetD8Async(ptr, 0, nbytes, stream)
            self.check(err, "zeroing")
        return int(ptr)

    def free(self, ptr: int, stream: int) -> None:
        """Free `ptr` after the work already queued on `stream`."""
        (err,) = driver().cuMemFreeAsync(ptr, stream)
        self.check(err, "freeing")

    def acquire(self, stream: int, nbytes: int, kind: Hashable = None, max_uses: int | None = None) -> tuple[int, bool]:
        """(device pointer of at least `nbytes` for a launch on `stream`, whether it was made for this launch alone
        and must be `release`d after it: under graph capture). Buffers of another `kind` are kept apart."""
        d = driver()
        err, capture = d.cuStreamIsCapturing(stream)
        self.check(err, "querying the stream's capture status")
        if capture != d.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
            return self.allocate(nbytes, stream), True
        err, stream_id = d.cuStreamGetId(stream)
        self.check(err, "querying the stream's id")
        key = (int(stream_id), kind)
        with self._lock:
            found = self._buffers.get(key)
            if found is not None and found[1] >= nbytes and (max_uses is None or found[2] < max_uses):
                found[2] += 1
                return found[0], False
            ptr = self.allocate(nbytes, stream)
            if found is not None:
                self.free(found[0], stream)  # after the launches already queued on this stream
            self._buffers[key] = [ptr, nbytes, 1]
            return ptr, False

    def release(self, ptr: int, stream: int) -> None:
        """Free a captured launch's own buffer after it (a graph node, ordered after the kernel)."""
        self.free(ptr, stream)
