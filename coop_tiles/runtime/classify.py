"""Launch arguments classified for the launch paths: each argument's type key (what picks the
kernel's specialisation), the values the launcher packs, its array library and its device.

A `Classifier` remembers, per argument class, how to classify it (and per PyTorch dtype the key
of a plain tensor); each kernel has its own, so nothing is shared between kernels and nothing
lives at module level.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import is_half
from ..errors import LaunchError
from . import arguments, launcher

#: (type key, (pointer, length) or (scalar, unused), array-library bit, device or -1 for a scalar)
Classified = tuple[Any, tuple, int, int]


def many_devices() -> bool:
    """Whether this process sees several GPUs, so that launches read each CuPy and PyTorch array's device."""
    return launcher.device_count() > 1


def launch_device(devices: list[tuple[str, int]]) -> int:
    """The device holding the arrays among (argument name, device or -1) pairs, a LaunchError naming
    two arguments on different devices; this thread's current device when there is no array."""
    first = next(((name, d) for name, d in devices if d >= 0), None)
    if first is None:
        return launcher.current_device_id()
    for name, d in devices:
        if d >= 0 and d != first[1]:
            raise LaunchError(
                f"arguments {first[0]!r} and {name!r} are on different devices (GPU {first[1]} and GPU {d}); "
                "a launch runs on the device of its arrays, so move them to one device"
            )
    return first[1]


class Classifier:
    """Classifies launch arguments (`classify`), choosing how once per argument class."""

    def __init__(self) -> None:
        self._by_class: dict[type, Callable[[Any, str], Classified]] = {
            int: self._scalar,
            float: self._scalar,
            bool: self._scalar,
        }
        self._extractors: dict[type, Callable[[Any], arguments.DeviceArray] | None] = {}
        #: the key `_array` gave the first PyTorch tensor of a (torch dtype, rank, unit last-axis stride), and the
        #: first CuPy array of a (dtype number, rank, unit last-axis stride); the C launch path (_claunch.c) looks
        #: tensors' keys up here by the same (torch dtype, rank, unit) kinds, so it learns nothing itself
        self.learnt_keys: dict[tuple, Any] = {}
        #: whether the CuPy and PyTorch classifiers read their arrays' devices (set when the first is
        #: chosen: with one GPU every array is on device 0)
        self._read_devices = True

    def classify(self, value: Any, name: str) -> Classified:
        """`value`, the launch argument `name`, classified (see `Classified`)."""
        classify = self._by_class.get(type(value)) or self._choose(type(value))
        return classify(value, name)

    def _choose(self, cls: type) -> Callable[[Any, str], Classified]:
        """How to classify launch arguments of class `cls`, chosen once per class."""
        if issubclass(cls, np.generic):
            found = self._numpy_scalar
        elif cls.__module__.split(".")[0] == "cupy" and cls.__name__ == "ndarray":
            found = self._cupy_array
        elif cls.__module__.split(".")[0] == "torch" and hasattr(cls, "data_ptr"):
            found = self._torch_tensor
        else:
            found = self._array
        if found in (self._cupy_array, self._torch_tensor):
            self._read_devices = many_devices()
        self._by_class[cls] = found
        return found

    @staticmethod
    def _scalar(value: Any, name: str) -> Classified:
        return type(value), (value, 0), 0, -1

    @staticmethod
    def _numpy_scalar(value: Any, name: str) -> Classified:
        if is_half(value.dtype):  # 16-bit floats travel as their bits
            return ("scalar", value.dtype), (int(np.asarray(value).view(np.uint16)), 0), 0, -1
        if value.dtype == np.bool_:
            return ("scalar", value.dtype), (int(value), 0), 0, -1
        return ("scalar", value.dtype), (value, 0), 0, -1

    def _array(self, value: Any, name: str) -> Classified:
        cls = type(value)
        if cls not in self._extractors:
            self._extractors[cls] = arguments.extractor(cls)
        arr = arguments.read_array(value, name, self._extractors[cls])
        if arr is None:
            arguments.arg_type(value, name)  # raises a LaunchError naming the argument
            return type(value), (value, 0), 0, -1
        t = arr.type
        key = arr.dtype.num if t.ndim == 1 and t.unit_stride else (arr.dtype.num, t.ndim, t.unit_stride)
        if arr.dtype.num >= 256:  # a user-defined dtype (bfloat16): its num is not unique
            key = (arr.dtype, t.ndim, t.unit_stride)
        return key, arr.launch_values(), launcher.LIBRARY_BITS.get(arr.library, 0), arr.device

    def _torch_tensor(self, value: Any, name: str) -> Classified:
        """A PyTorch tensor on the GPU, of any rank and strides, without building a DeviceArray once a
        tensor of its dtype, rank and last-axis stride kind has been classified (`_array` gives the key)."""
        shape = value.shape
        if not shape:  # (a 0-d tensor: `_array` says what is wrong)
            return self._array(value, name)
        if len(shape) == 1:
            strides = None
            unit = shape[0] <= 1 or value.stride(0) == 1
        else:
            strides = value.stride()
            unit = shape[-1] <= 1 or strides[-1] == 1
        kind = (value.dtype, len(shape), unit)
        key = self.learnt_keys.get(kind)
        if key is None or not value.is_cuda:
            return self._learn(kind, value, name)
        device = value.get_device() if self._read_devices else 0
        if strides is None and unit:
            return key, (value.data_ptr(), shape[0]), launcher.TORCH, device
        strides = strides if strides is not None else value.stride()
        return key, (value.data_ptr(), arguments.launch_extents(shape, strides, unit)), launcher.TORCH, device

    def _cupy_array(self, value: Any, name: str) -> Classified:
        """A CuPy array of any rank and strides, without building a DeviceArray once an array of its dtype, rank and
        last-axis stride kind has been classified (`_array` gives the key and reports what is wrong)."""
        ndim = value.ndim
        if ndim == 1 and value._c_contiguous:
            # An unsupported dtype makes a new key, and the signature check on that miss rejects it.
            data = value.data
            return value.dtype.num, (data.ptr, value.size), launcher.CUPY, data.device_id if self._read_devices else 0
        shape, strides, itemsize = value.shape, value.strides, value.itemsize
        unit = ndim > 0 and (shape[-1] <= 1 or strides[-1] == itemsize)
        num = value.dtype.num
        kind = (num, ndim, unit)
        key = self.learnt_keys.get(kind)
        if key is None or num >= 256 or any(s % itemsize for s in strides):  # (user dtypes' numbers are not unique)
            return self._learn(kind, value, name)
        data = value.data
        extents = arguments.launch_extents(shape, tuple(s // itemsize for s in strides), unit)
        return key, (data.ptr, extents), launcher.CUPY, data.device_id if self._read_devices else 0

    def _learn(self, kind: tuple, value: Any, name: str) -> Classified:
        """`value` classified through `_array` (which reports what is wrong with it), its key remembered for the
        arrays of its `kind`."""
        classified = self._array(value, name)
        self.learnt_keys[kind] = classified[0]
        return classified
