"""The kernel's parameter list, defined once: the C++ entry, the body's signature and the
launchers' packing all derive from `kernel_params`, and the shims' array parameters from `ArrayParts`.

An array is its data pointer, its shape, and its strides in elements (the last stride is left
out when the kernel is specialised on unit stride, so a contiguous 1-D array is exactly
`(pointer, length)`); a scalar is one parameter of its dtype (bool as a byte, 16-bit floats as
their bits). Every parameter occupies one 8-byte slot in the launch buffer. A shim takes an array
(or a view of one) the same way, with its first element's offset after the pointer.
"""

from __future__ import annotations

from collections.abc import Sequence
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


@dataclass(frozen=True)
class ArrayParts:
    """An array of any rank by the names of its parts, as the kernel, the body and the shims pass it:
    its data pointer, its first element's offset, then each axis's length and stride (in elements), the
    last stride the literal "1" when the kernel is specialised on unit stride (then not passed)."""

    ptr: str
    off: str
    shapes: tuple[str, ...]
    strides: tuple[str, ...]

    @classmethod
    def named(cls, name: str, t: ArrayType, off: str | None = None) -> ArrayParts:
        """The parts of array `name` of type `t`: `name`, `name_off` (or `off`), `name_shape0` ...,
        `name_stride0` ..."""
        strides = [f"{name}_stride{k}" for k in range(t.ndim)]
        if t.unit_stride:
            strides[-1] = "1"
        shapes = tuple(f"{name}_shape{k}" for k in range(t.ndim))
        return cls(name, f"{name}_off" if off is None else off, shapes, tuple(strides))

    @property
    def sizes(self) -> tuple[str, ...]:
        """The lengths and strides passed after the pointer (and offset), in order: a unit stride is not."""
        return (*self.shapes, *(s for s in self.strides if s != "1"))

    def offset(self, indices: Sequence[str]) -> str:
        """The offset of the element at `indices` of the leading axes (an expression of C++ and Python
        alike): a unit stride multiplies nothing, so a contiguous 1-D array's is `off + index`."""
        terms = (i if s == "1" else f"{f'({i})' if ' ' in i else i} * {s}" for i, s in zip(indices, self.strides))
        return " + ".join([self.off, *terms])


def kernel_params(name: str, t: ArrayType | ScalarType) -> list[KernelParam]:
    """The parameters of argument `name` of type `t`, in order."""
    if isinstance(t, ArrayType):
        sizes = ArrayParts.named(name, t).sizes
        out = [KernelParam(name, f"{cxx_name(t.dtype)}*", f"CPointer({numba_storage(t.dtype)})", "P")]
        return out + [KernelParam(n, "long long", "int64", "q") for n in sizes]
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
