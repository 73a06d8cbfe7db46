"""Which device a launch runs on, read from its arrays without a GPU: fake DLPack arrays that say
they live on GPU 0 or GPU 1 (their data is host memory, which no test here dereferences)."""

from __future__ import annotations

import ctypes
import inspect

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.runtime import arguments, fastpath
from coop_tiles.runtime.classify import Classifier

KDL_CPU, KDL_CUDA = 1, 2

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class FakeDLPackArray:
    """A NumPy array exported through DLPack as if it lived on `device` (a DLPack device type and id)."""

    def __init__(self, array: np.ndarray, device_id: int, device_type: int = KDL_CUDA):
        self.array, self.device = array, (device_type, device_id)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        capsule = self.array.__dlpack__()
        tensor = _get_pointer(capsule, b"dltensor")  # DLManagedTensor: the DLTensor's data pointer, then its device
        device = (ctypes.c_int32 * 2).from_address(tensor + ctypes.sizeof(ctypes.c_void_p))
        device[0], device[1] = self.device
        return capsule


@ct.jit
def add_into(x, y, T: ct.constexpr):
    tile.store(y, 0, tile.load(x, 0, T) + tile.load(y, 0, T))


def test_dlpack_arrays_are_read_without_an_array_library():
    host = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    arr = arguments.device_array(FakeDLPackArray(host, 1), "x")
    assert arr.ptr == host.ctypes.data
    assert (arr.dtype, arr.shape, arr.strides, arr.device) == (np.float32, (4, 3), (6, 2), 1)
    contiguous = np.zeros(5, np.int16)
    key, values, library, device = Classifier().classify(FakeDLPackArray(contiguous, 0), "x")
    assert (key, values, library, device) == (np.dtype(np.int16).num, (contiguous.ctypes.data, 5), 0, 0)


def test_dlpack_array_in_host_memory_is_an_error():
    with pytest.raises(ct.LaunchError) as info:
        arguments.device_array(FakeDLPackArray(np.zeros(4, np.float32), 0, KDL_CPU), "x")
    assert info.value.message == "argument 'x' is a DLPack array in host memory; pass a device array"


def test_arrays_on_two_devices_are_a_located_launch_error():
    x, y = FakeDLPackArray(np.zeros(16, np.float32), 0), FakeDLPackArray(np.zeros(16, np.float32), 1)
    with pytest.raises(ct.LaunchError) as info:
        add_into[1](x, y, T=16)  # HERE
    here = inspect.currentframe().f_lineno - 1
    assert type(info.value) is ct.LaunchError
    assert info.value.message == (
        "arguments 'x' and 'y' are on different devices (GPU 0 and GPU 1); "
        "a launch runs on the device of its arrays, so move them to one device"
    )
    assert (info.value.loc.filename, info.value.loc.line) == (__file__, here)
    # The interpreter takes NumPy arrays only, so there the same call fails on its first device array.
    with pytest.raises(ct.LaunchError, match="argument 'x' is a device array; the interpreter runs on the CPU"):
        ct.jit(add_into.fn, interpret=True)[1](x, y, T=16)


@pytest.mark.parametrize("many_devices", [False, True])
def test_the_fast_path_leaves_mixed_devices_to_the_general_path(many_devices):
    """The generated fast path declines (the general path then reports the error) without preparing."""
    fast = fastpath.make_fast_path(["x", "y"], ["T"], Classifier().classify, many_devices)
    x, y = FakeDLPackArray(np.zeros(16, np.float32), 0), FakeDLPackArray(np.zeros(16, np.float32), 1)

    class NoKernels:
        _kernels: dict = {}

        def _prepared(self, *args):
            raise AssertionError("a launch on two devices must not be prepared")

    assert fast(NoKernels(), 1, None, (x, y), {"T": 16}) is False
    assert fast(NoKernels(), 1, None, (y, x), {"T": 16}) is False


def test_the_fast_path_launches_int_and_tuple_grids_and_declines_the_rest():
    """An int grid or a tuple of 1 to 3 positive ints (Triton's `kernel[(n,)]`) launches through the generated
    fast path with the grid's three extents; a zero extent, a bool, a float, a callable or four extents decline
    (the general path launches nothing or reports them)."""
    fast = fastpath.make_fast_path(["x"], ["T"], Classifier().classify, False)
    x = FakeDLPackArray(np.zeros(16, np.float32), 0)
    launched = []

    class Prepared:
        def launch(self, g0, g1, g2, stream, *values):
            launched.append((g0, g1, g2))

    class AnyKey(dict):
        def get(self, key, default=None):
            return Prepared()

    class Jit:
        _kernels = AnyKey()

    for grid, extents in [(5, (5, 1, 1)), ((5,), (5, 1, 1)), ((2, 3), (2, 3, 1)), ((2, 3, 4), (2, 3, 4))]:
        assert fast(Jit(), grid, None, (x,), {"T": 16}) is True, grid
        assert launched.pop() == extents
    for grid in [0, (0,), (2, 0), (True,), (2, True), 2.0, (2.0,), (1, 2, 3, 4), (), lambda meta: (1,)]:
        assert fast(Jit(), grid, None, (x,), {"T": 16}) is False, grid
    assert not launched


class _Memory:
    def __init__(self, ptr: int, device_id: int):
        self.ptr, self.device_id = ptr, device_id


class ndarray:  # noqa: N801 (named as CuPy's: the launch paths recognise CuPy arrays by module and class name)
    """A NumPy array dressed as a CuPy array on GPU `device_id` (the attributes the launch paths read)."""

    __module__ = "cupy"

    def __init__(self, array: np.ndarray, device_id: int):
        self.array, self.data = array, _Memory(array.ctypes.data, device_id)
        self.ndim, self.shape, self.strides, self.size = array.ndim, array.shape, array.strides, array.size
        self.dtype, self.itemsize, self._c_contiguous = array.dtype, array.itemsize, array.flags.c_contiguous


@pytest.mark.parametrize("read_devices", [False, True])
def test_cupy_arrays_of_any_rank_classify_as_their_device_arrays_do(monkeypatch, read_devices):
    """The classifier's CuPy path (from the second array of a dtype, rank and stride kind on: no DeviceArray built)
    gives the key and launch values that reading the array as a DeviceArray gives, and each array's device."""
    monkeypatch.setattr("coop_tiles.runtime.launcher.device_count", lambda: 2 if read_devices else 1)
    base = np.arange(2 * 3 * 8, dtype=np.float32).reshape(2, 3, 8)
    arrays = [base[0, 0], base[0, :, 1], base[0], base[0].T, base, base.transpose(2, 0, 1), base[:, :, :1]]
    arrays += [base.astype(np.int64)[:, 1:, ::2], base[0, :, ::-2], base.astype(np.int16)[1]]
    device = 1 if read_devices else 0
    fresh, warm = Classifier(), Classifier()
    for a in arrays:  # the first of each kind takes the general path in `warm` and teaches it the key
        warm.classify(ndarray(a, device), "x")
    for a in arrays:
        got = warm.classify(ndarray(a, device), "x")
        assert got == fresh._array(ndarray(a, device), "x")
        assert got[3] == device
    rows = base[1, :, :6]  # (3, 6) rows 8 apart: the key names dtype, rank and a unit last stride
    assert warm.classify(ndarray(rows, device), "x") == (
        (np.dtype(np.float32).num, 2, True),
        (rows.ctypes.data, (3, 6, 8)),
        arguments.launcher.CUPY,
        device,
    )


def test_cupy_array_of_an_unsupported_dtype_is_an_error_after_a_supported_one():
    warm = Classifier()
    warm.classify(ndarray(np.zeros((2, 3), np.float32), 0), "x")
    with pytest.raises(ct.LaunchError) as info:
        warm.classify(ndarray(np.zeros((2, 3), np.complex64), 0), "y")
    assert info.value.message.startswith("argument 'y' has dtype complex64, which is not supported; use one of")
