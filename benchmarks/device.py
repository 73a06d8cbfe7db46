"""Arrays and the device, for every section: poisoning outputs, reading results back, freeing pools, the stream
and the SM count."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


def fill_nan(array: Any) -> None:
    """Poison an output (CuPy array or PyTorch tensor), so that a kernel that writes nothing is not correct."""
    if hasattr(array, "fill_"):
        array.fill_(float("nan"))
    else:
        array.fill(np.nan)


def to_host_f32(array: Any, count: int) -> np.ndarray:
    """The first `count` elements of a 1-D CuPy array or PyTorch tensor, on the host as float32 (NumPy has no
    bfloat16)."""
    import cupy as cp

    if hasattr(array, "cpu"):
        return array[:count].float().cpu().numpy()
    return cp.asnumpy(array[:count]).astype(np.float32)


def to_host(array: Any) -> np.ndarray:
    """A CuPy array or PyTorch tensor, on the host."""
    import cupy as cp

    if hasattr(array, "cpu"):
        return array.cpu().numpy()
    return cp.asnumpy(array)


def free_device_memory() -> None:
    """Hand both libraries' cached blocks back between sizes, so that the 2^28-element arrays fit."""
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()
    if "torch" in sys.modules:
        sys.modules["torch"].cuda.empty_cache()


def stream_handle() -> int:
    """The raw handle of CuPy's current stream (0: the legacy default stream), which the events time."""
    import cupy as cp

    return cp.cuda.get_current_stream().ptr


def sm_count() -> int:
    import cupy as cp

    return cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"]


def torch_copy_rate_gbs(torch: Any) -> float:
    """The device copy rate (bytes read and written per second, in GB/s) of a 1 GiB PyTorch tensor copy."""
    from benchmarks.timing import cuda_time_ms

    src = torch.empty(1 << 28, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    ms = cuda_time_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / ms / 1e6
