"""The kernel's parameter list, defined once: the C++ entry, the body's signature and the
launchers' packing all derive from `kernel_params`.

An array is its data pointer, its shape, and its strides in elements (the last stride is left
out when the kernel is specialised on unit stride, so a contiguous 1-D array is exactly
`(pointer, length)`); a scalar is one parameter of its dtype (bool as a byte, 16-bit floats as
their bits). Every parameter occupies one 8-byte slot in the launch buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..dtypes import cxx_name, is_half
from ..lang.types import ArrayType, ScalarType


@dataclass(frozen=True)
class KernelParam:
    name: str
    cxx: str  # C++ type in the entry's parameter list
    numba: str  # Numba type name in the body's signature
    slot: str  # how the launchers pack it: P pointer, q int64, Q unsigned/bool/16-bit bits, d float64, f float32


def array_parts(name: str, t: ArrayType) -> tuple[list[str], list[str]]:
    """(shape names, stride names) of array parameter `name` (a stride of "1" is the literal)."""
    shapes = [f"{name}_shape{k}" for k in range(t.ndim)]
    strides = [f"{name}_stride{k}" for k in range(t.ndim)]
    if t.unit_stride:
        strides[-1] = "1"
    return shapes, strides


def kernel_params(name: str, t: ArrayType | ScalarType) -> list[KernelParam]:
    """The parameters of argument `name` of type `t`, in order."""
    if isinstance(t, ArrayType):
        shapes, strides = array_parts(name, t)
        out = [KernelParam(name, f"{cxx_name(t.dtype)}*", f"CPointer({numba_storage(t.dtype)})", "P")]
        out += [KernelParam(n, "long long", "int64", "q") for n in shapes]
        out += [KernelParam(n, "long long", "int64", "q") for n in strides if n != "1"]
        return out
    dt = t.dtype
    if dt == np.bool_ or is_half(dt):
        c = "cuda::std::uint8_t" if dt == np.bool_ else "cuda::std::uint16_t"
        return [KernelParam(name, c, "uint8" if dt == np.bool_ else "uint16", "Q")]
    slot = "Q" if dt.kind == "u" else ("q" if dt.kind == "i" else ("d" if dt.itemsize == 8 else "f"))
    return [KernelParam(name, cxx_name(dt), dt.name, slot)]


def numba_storage(dt: np.dtype) -> str:
    """The Numba type name of a value of `dt` in the body (16-bit floats as their uint16 bits)."""
    if dt == np.bool_:
        return "boolean"
    return "uint16" if is_half(dt) else dt.name
