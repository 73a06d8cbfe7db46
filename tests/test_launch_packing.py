"""The launch parameter buffer: every argument lands in its 8-byte slot, typed (no GPU needed)."""

import ctypes
import struct
from types import SimpleNamespace

import numpy as np

from coop_tiles.runtime.launcher import PreparedLaunch


def test_arguments_are_packed_into_typed_slots():
    kernel = SimpleNamespace(block_threads=128, shared_bytes=4096, program=SimpleNamespace(name="k"))
    dtypes = [None, np.dtype(np.float32), np.dtype(np.int16), np.dtype(np.bool_), np.dtype(np.float64), None]
    prepared = PreparedLaunch(kernel, SimpleNamespace(handle=0), dtypes)
    seen = {}

    def fake_launch(f, g0, g1, g2, b0, b1, b2, shared, stream, params, extra):
        pointers = (ctypes.c_void_p * 8).from_address(params)
        seen["slots"] = [ctypes.string_at(pointers[i], 8) for i in range(8)]
        seen["launch"] = (g0, g1, g2, b0, shared, stream)
        return (prepared.launch.__globals__.get("OK", None),)

    prepared.launch.__globals__["LAUNCH"] = fake_launch
    prepared.launch.__globals__["OK"] = "ok"
    prepared.launch(7, 2, 1, 99, 0x1000, 123, np.float32(1.5), 0, -300, 0, True, 0, -2.5, 0, 0x2000, 456)
    slots = seen["slots"]
    assert struct.unpack("<Q", slots[0])[0] == 0x1000 and struct.unpack("<q", slots[1])[0] == 123
    assert struct.unpack("<f", slots[2][:4])[0] == 1.5
    assert struct.unpack("<h", slots[3][:2])[0] == -300
    assert slots[4][0] == 1
    assert struct.unpack("<d", slots[5])[0] == -2.5
    assert struct.unpack("<Q", slots[6])[0] == 0x2000 and struct.unpack("<q", slots[7])[0] == 456
    assert seen["launch"] == (7, 2, 1, 128, 4096, 99)


def test_c_fast_path_declines_without_a_driver_or_a_match():
    import pytest

    claunch = pytest.importorskip("coop_tiles.runtime._claunch")
    # No prepared kernel for this key (and on a machine without a GPU, no driver): not launched.
    memo = [None, None, None]
    assert claunch.fast_launch({}, ("TILE",), list, object, 4, None, (1, 2.0), {"TILE": 8}, memo) is False
    assert claunch.fast_launch({}, (), list, object, 4, None, (), {}, memo) is False
