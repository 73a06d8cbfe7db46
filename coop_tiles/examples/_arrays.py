"""Arrays of the caller's library, shared by the examples' host entry points."""

from __future__ import annotations

from typing import Any

import numpy as np


def empty_like(like: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """A new contiguous array of `shape` and `dtype` from the library (and device) of `like`."""
    if isinstance(like, np.ndarray):
        return np.empty(shape, np.dtype(dtype))
    if type(like).__module__.split(".")[0] == "torch":
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype) if isinstance(dtype, str) else dtype, device=like.device)
    import cupy as cp

    with cp.cuda.Device(like.device.id):
        return cp.empty(shape, dtype)


def zeros_like(like: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """`empty_like`, zeroed: the target of atomic adds."""
    out = empty_like(like, shape, dtype)
    out[...] = 0
    return out


def cast(x: Any, like: Any) -> Any:
    """`x` contiguous in the dtype of `like` (the same library), without a copy when it is already."""
    if type(x).__module__.split(".")[0] == "torch":
        return x.to(like.dtype).contiguous()
    return x.astype(like.dtype, order="C", copy=False)


def split(whole: Any, *sizes: int) -> tuple[Any, ...]:
    """Consecutive views of the 1-D array `whole`: `sizes[0]` elements, `sizes[1]`, ..., then the rest (one host
    call for PyTorch, whose views cost a microsecond or so each)."""
    if type(whole).__module__.split(".")[0] == "torch":
        return whole.split([*sizes, whole.shape[0] - sum(sizes)])
    views, at = [], 0
    for size in sizes:
        views.append(whole[at : at + size])
        at += size
    return (*views, whole[at:])
