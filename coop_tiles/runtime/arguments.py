"""Kernel arguments: recognising device arrays and scalars, and packing them for a launch.

Device arrays are anything with `__cuda_array_interface__` (CuPy, PyTorch, Numba) or
DLPack (read through cuda.core's `StridedMemoryView`, so no array library is needed); CuPy
and PyTorch take fast paths that avoid building the interface dict on every launch. Each
array knows its device, which is the device a launch runs on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from ..dtypes import SUPPORTED, bfloat16
from ..errors import LaunchError
from ..lang.types import ArrayType, ScalarType, type_of_python_scalar
from . import launcher


@dataclass(frozen=True)
class DeviceArray:
    ptr: int
    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements; the kernel masks every access outside the shape
    library: str  # "cupy", "torch" or "other": which library's current stream is the default
    device: int  # the GPU holding the data

    @property
    def unit_stride(self) -> bool:
        return self.shape[-1] <= 1 or self.strides[-1] == 1

    @property
    def type(self) -> ArrayType:
        return ArrayType(self.dtype, len(self.shape), self.unit_stride)

    def launch_values(self) -> tuple[int, Any]:
        """(pointer, rest) as the launchers take an array: the length for a 1-D unit-stride array,
        else the tuple of its shape and strides (the last left out when it is unit)."""
        if len(self.shape) == 1 and self.unit_stride:
            return self.ptr, self.shape[0]
        return self.ptr, launch_extents(self.shape, self.strides, self.unit_stride)


def launch_extents(shape: tuple[int, ...], strides: tuple[int, ...], unit: bool) -> tuple[int, ...]:
    """An array's shape and element strides as the launchers take them (the last stride left out when it is 1)."""
    return (*shape, *(strides[:-1] if unit else strides))


def _element_strides(byte_strides: Any, shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Strides in elements from byte strides (None: C order)."""
    if byte_strides is None:
        out, step = [], 1
        for extent in reversed(shape):
            out.append(step)
            step *= extent
        return tuple(reversed(out))
    if any(s % itemsize for s in byte_strides):
        raise LaunchError("has strides that are not a multiple of its element size")
    return tuple(s // itemsize for s in byte_strides)


@functools.cache
def _torch_dtypes() -> Mapping[Any, np.dtype]:
    """The NumPy dtype of each PyTorch dtype coop_tiles takes (built once: it imports torch)."""
    import torch

    table = {
        torch.int8: np.int8,
        torch.int16: np.int16,
        torch.int32: np.int32,
        torch.int64: np.int64,
        torch.uint8: np.uint8,
        torch.float16: np.float16,
        torch.bfloat16: bfloat16,
        torch.float32: np.float32,
        torch.float64: np.float64,
        torch.bool: np.bool_,
    }
    for attr, np_t in (("uint16", np.uint16), ("uint32", np.uint32), ("uint64", np.uint64)):
        if hasattr(torch, attr):
            table[getattr(torch, attr)] = np_t
    return MappingProxyType({t: np.dtype(d) for t, d in table.items()})


def _torch_dtype(t) -> np.dtype:
    dt = _torch_dtypes().get(t.dtype)
    if dt is None:
        raise LaunchError(f"has PyTorch dtype {t.dtype}, which coop_tiles does not support")
    return dt


def _check_rank(shape: tuple[int, ...]) -> tuple[int, ...]:
    if not shape:
        raise LaunchError("is a 0-d array; pass a number, or an array of at least one dimension")
    return tuple(int(n) for n in shape)


def _from_cupy(a) -> DeviceArray:
    shape = _check_rank(a.shape)
    data = a.data
    strides = _element_strides(a.strides, shape, a.itemsize)
    return DeviceArray(data.ptr, a.dtype, shape, strides, "cupy", data.device_id)


def _from_torch(t) -> DeviceArray:
    if not t.is_cuda:
        raise LaunchError("is a PyTorch tensor on the CPU; move it to the GPU with .cuda()")
    shape = _check_rank(tuple(t.shape))
    return DeviceArray(t.data_ptr(), _torch_dtype(t), shape, tuple(t.stride()), "torch", t.get_device())


def _pointer_device(ptr: int) -> int:
    """The device holding `ptr` (the interface does not say); asked of the driver only when the
    process sees more than one GPU."""
    if launcher.device_count() <= 1 or not ptr:
        return 0
    from cuda.bindings import driver

    attr = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    err, device = driver.cuPointerGetAttribute(attr, ptr)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise LaunchError(f"has a pointer the CUDA driver does not know ({err.name}); pass device memory")
    return int(device)


def _from_interface(a) -> DeviceArray:
    cai = a.__cuda_array_interface__
    dtype = np.dtype(cai["typestr"])
    shape = _check_rank(tuple(cai["shape"]))
    ptr = int(cai["data"][0] or 0)
    strides = _element_strides(cai.get("strides"), shape, dtype.itemsize)
    return DeviceArray(ptr, dtype, shape, strides, "other", _pointer_device(ptr))


def _from_dlpack(a) -> DeviceArray:
    """A DLPack array of any library, through cuda.core's StridedMemoryView (no stream ordering is
    asked of the producer, as with `__cuda_array_interface__`: its work must be complete or on
    the launch's stream)."""
    from cuda.core.utils import StridedMemoryView

    try:
        view = StridedMemoryView.from_dlpack(a, stream_ptr=-1)
    except (BufferError, TypeError, ValueError) as e:
        raise LaunchError(f"could not be read through DLPack: {e}") from None
    if view.device_id < 0:
        raise LaunchError("is a DLPack array in host memory; pass a device array")
    shape = _check_rank(tuple(view.shape))
    strides = _element_strides(None, shape, 1) if view.strides is None else tuple(view.strides)
    return DeviceArray(int(view.ptr), np.dtype(view.dtype), shape, strides, "other", int(view.device_id))


def extractor(cls: type) -> Callable[[Any], DeviceArray] | None:
    """How to read an array of class `cls` (None: `cls` is no device array)."""
    module = cls.__module__.split(".")[0]
    if module == "cupy" and cls.__name__ == "ndarray":
        return _from_cupy
    if module == "torch" and hasattr(cls, "data_ptr"):
        return _from_torch
    if hasattr(cls, "__cuda_array_interface__"):
        return _from_interface
    if hasattr(cls, "__dlpack__") and cls is not np.ndarray:
        return _from_dlpack
    return None


def device_array(obj: Any, name: str) -> DeviceArray | None:
    """`obj` as a device array, None if it is not an array at all; LaunchError if it is unusable."""
    return read_array(obj, name, extractor(type(obj)))


def read_array(obj: Any, name: str, extract: Callable[[Any], DeviceArray] | None) -> DeviceArray | None:
    """`device_array` with `extract`, `extractor(type(obj))`, already known (launch paths remember it)."""
    if extract is None:
        if isinstance(obj, np.ndarray):
            raise LaunchError(
                f"argument {name!r} is a NumPy array in host memory; pass a device array (cupy.asarray(x), "
                "torch.from_numpy(x).cuda()), or run the program with interpret=True / COOP_TILES_INTERPRET=1"
            )
        return None
    try:
        arr = extract(obj)
    except LaunchError as e:
        raise LaunchError(f"argument {name!r} {e.message}") from None
    if arr.dtype not in SUPPORTED:
        supported = ", ".join(d.name for d in SUPPORTED)
        raise LaunchError(
            f"argument {name!r} has dtype {arr.dtype.name}, which is not supported; use one of {supported}"
        )
    return arr


def arg_type(obj: Any, name: str) -> ArrayType | ScalarType:
    """The type a kernel argument gives its parameter."""
    arr = device_array(obj, name)
    if arr is not None:
        return arr.type
    return scalar_arg_type(obj, name)


def scalar_arg_type(obj: Any, name: str) -> ScalarType:
    """The type of a scalar argument; LaunchError for anything else or an int beyond int64."""
    try:
        t = type_of_python_scalar(obj)
    except Exception:
        raise LaunchError(f"argument {name!r} must be an array or a number, got {type(obj).__name__}") from None
    if t.dtype.kind in "iu" and isinstance(obj, int) and not -(2**63) <= obj < 2**63:
        raise LaunchError(f"argument {name!r} = {obj} does not fit in int64")
    return t


def host_arg_type(value: Any, name: str) -> ArrayType | ScalarType:
    """The type of an argument of an interpreted launch or of `compile()`: a NumPy array stands
    for a device array of its dtype, rank and last-axis stride."""
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            raise LaunchError(f"argument {name!r} is a 0-d array; pass a number, or an array of at least one dimension")
        dtype = np.dtype(value.dtype)
        if dtype not in SUPPORTED:
            raise LaunchError(
                f"argument {name!r} has dtype {dtype.name}, which is not supported; use one of "
                + ", ".join(d.name for d in SUPPORTED)
            )
        unit = value.shape[-1] <= 1 or value.strides[-1] == value.itemsize
        return ArrayType(dtype, value.ndim, unit)
    if hasattr(value, "__cuda_array_interface__") or hasattr(value, "__dlpack_device__"):
        return arg_type(value, name)
    return scalar_arg_type(value, name)
