"""The launch path without a GPU: the parameter buffer's typed slots, `kernel[grid]` binding,
and the C launch path falling back to `run`."""

import ctypes
import struct
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest
from programs import vector_add

from coop_tiles.codegen.params import ArrayParts, kernel_params
from coop_tiles.dtypes import bfloat16
from coop_tiles.jit import JITFunction
from coop_tiles.lang.types import ArrayType, ScalarType
from coop_tiles.runtime import fastpath
from coop_tiles.runtime.launcher import PreparedLaunch


def _fake_kernel(**fields) -> SimpleNamespace:
    """What PreparedLaunch reads of a CompiledKernel: a program without statements, no chained scan, no launch
    state unless `fields` say otherwise."""
    fields = {"chain_bytes": None, "launch_bytes": 0, "arch": "sm_80", **fields}
    return SimpleNamespace(program=SimpleNamespace(name="k", walk=lambda: iter(())), **fields)


def test_arguments_are_packed_into_typed_slots():
    kernel = _fake_kernel(block_threads=128, shared_bytes=4096)
    array = ArrayType(np.dtype(np.float32))
    scalars = [np.dtype(np.float32), np.dtype(np.int16), np.dtype(np.bool_), np.dtype(np.float64)]
    types = [array, *(ScalarType(d) for d in scalars), array]
    prepared = PreparedLaunch(kernel, SimpleNamespace(handle=0), types)
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
    assert prepared.c_info[6] == 0  # narrower parameters: the C path passes one pointer per parameter
    wide = PreparedLaunch(
        kernel,
        SimpleNamespace(handle=0),
        [array, ScalarType(np.dtype(np.int64)), ScalarType(np.dtype(np.float64)), array],
    )
    assert wide.c_info[6] == 8 * 6  # all 8 bytes wide: the slots are the kernel's parameter layout


@pytest.mark.parametrize("arch", [None, "sm_90a"])
def test_a_kernel_with_launch_state_runs_its_prepare_kernel_first(arch, monkeypatch):
    """A pipelined K loop's kernel (`launch_bytes`): the launch state of the stream goes in the last slot, the
    prepare kernel (one block of 32 threads, no shared memory) runs on the same stream and buffer just before the
    program, and the C path declines it. For sm_90a the program is launched allowing programmatic stream
    serialization (cuLaunchKernelEx), its prepare kernel plainly."""
    from coop_tiles.runtime import launch_state, launcher

    class Code:
        @staticmethod
        def from_cubin(cubin):
            return SimpleNamespace(get_kernel=lambda name: SimpleNamespace(handle=hash(name)))

    monkeypatch.setattr(launcher, "_core", lambda: SimpleNamespace(ObjectCode=Code))
    acquired = []
    monkeypatch.setattr(
        launch_state.STATES, "acquire", lambda stream, n: acquired.append((stream, n)) or (0xBEEF, False)
    )
    kernel = _fake_kernel(
        block_threads=256, shared_bytes=131200, launch_bytes=576, prepare_name="coop_prepare_k", cubin=b""
    )
    if arch is not None:
        kernel.arch = arch
    prepared = PreparedLaunch(kernel, SimpleNamespace(handle=7), [ArrayType(np.dtype(np.float32))])
    seen = []

    def fake_launch(f, g0, g1, g2, b0, b1, b2, shared, stream, params, extra):
        pointers = (ctypes.c_void_p * 3).from_address(params)
        seen.append((f, (g0, g1, g2), b0, shared, stream, struct.unpack("<Q", ctypes.string_at(pointers[2], 8))[0]))
        return ("ok",)

    def fake_launch_ex(config, f, params, extra):
        allowed = [a.value.programmaticStreamSerializationAllowed for a in config.attrs[: config.numAttrs]]
        fake_launch(f, config.gridDimX, config.gridDimY, config.gridDimZ, config.blockDimX, 1, 1,
                    config.sharedMemBytes, int(config.hStream), params, extra)  # fmt: skip
        seen[-1] += ("programmatic" if allowed == [1] else "plain",)
        return ("ok",)

    prepared.launch.__globals__.update(LAUNCH=fake_launch, LAUNCH_EX=fake_launch_ex, OK="ok")
    prepared.launch(4, 1, 1, 99, 0x1000, 64)
    assert acquired == [(99, 576)]
    program = (7, (4, 1, 1), 256, 131200, 99, 0xBEEF)
    assert seen == [
        (hash("coop_prepare_k"), (1, 1, 1), 32, 0, 99, 0xBEEF),
        program if arch is None else (*program, "programmatic"),
    ]
    assert prepared.programmatic == (arch is not None)
    assert prepared.c_info is None
    assert prepared.launch.__globals__["LOCK"] is launch_state.STATES.launching  # (pairs enqueued whole)


def test_strided_arrays_and_half_scalars_are_packed():
    """A (rows, cols) view with strides (1, rows) packs pointer, both extents and both strides; a
    transposed-contiguous 2-D array leaves out its unit last stride; 16-bit floats go as bits."""
    kernel = _fake_kernel(block_threads=32, shared_bytes=0)
    types = [ArrayType(np.dtype(np.float32), 2, False), ScalarType(bfloat16), ArrayType(np.dtype(np.int8), 2, True)]
    prepared = PreparedLaunch(kernel, SimpleNamespace(handle=0), types)
    seen = {}

    def fake_launch(f, g0, g1, g2, b0, b1, b2, shared, stream, params, extra):
        pointers = (ctypes.c_void_p * 10).from_address(params)
        seen["slots"] = [struct.unpack("<q", ctypes.string_at(pointers[i], 8))[0] for i in range(10)]
        return ("ok",)

    prepared.launch.__globals__["LAUNCH"] = fake_launch
    prepared.launch.__globals__["OK"] = "ok"
    bits = int(np.asarray(1.5, bfloat16).view(np.uint16))
    prepared.launch(1, 1, 1, 0, 0x1000, (3, 5, 1, 3), bits, 0, 0x2000, (4, 7, 7))
    assert seen["slots"] == [0x1000, 3, 5, 1, 3, bits, 0x2000, 4, 7, 7]


def test_an_array_of_any_rank_is_one_abi_and_a_unit_stride_multiplies_nothing():
    """`ArrayParts` names an array's parameters for the entry, the body and the shims alike: a contiguous
    1-D array is (pointer, length) and its element offset a plain sum; a strided axis multiplies its index."""
    contiguous = ArrayParts.named("a", ArrayType(np.dtype(np.float32)))
    assert contiguous.sizes == ("a_shape0",)
    assert contiguous.offset(["offset + e"]) == "a_off + offset + e"
    assert [p.name for p in kernel_params("a", ArrayType(np.dtype(np.float32)))] == ["a", "a_shape0"]
    strided = ArrayParts.named("a", ArrayType(np.dtype(np.float32), 1, False))
    assert strided.sizes == ("a_shape0", "a_stride0")
    assert strided.offset(["offset + e"]) == "a_off + (offset + e) * a_stride0"
    rows = ArrayParts.named("x", ArrayType(np.dtype(np.int8), 3, True), off="0")
    assert rows.sizes == ("x_shape0", "x_shape1", "x_shape2", "x_stride0", "x_stride1")
    assert rows.offset(["i", "j", "k"]) == "0 + i * x_stride0 + j * x_stride1 + k"


def _recording_kernel(base: type) -> type:
    """A KernelBase subclass whose `run` (what the launch path falls back to) records its call."""

    class Recorder(base):
        def __init__(self):
            self.calls = []

        _split_launch = staticmethod(JITFunction._split_launch)

        def run(self, grid, stream, args, kwargs):
            self.calls.append((grid, stream, args, kwargs))

    return Recorder


@pytest.mark.parametrize("base", ["c", "python"])
def test_kernel_subscript_binds_grid_and_stream_and_falls_back_to_run(base):
    if base == "c":
        base_class = pytest.importorskip("coop_tiles.runtime._claunch").KernelBase
    else:
        base_class = fastpath._PythonKernelBase
    kernel = _recording_kernel(base_class)()
    bound = kernel[4]
    assert (bound.kernel, bound.grid, bound.stream) == (kernel, 4, None)
    assert (kernel[(2, 3), 7].grid, kernel[(2, 3), 7].stream) == ((2, 3), 7)
    assert (kernel[4, 2].grid, kernel[4, 2].stream) == ((4, 2), None)  # a 2-D grid, not a stream
    kernel._fast = None
    # Nothing prepared (and on a machine without a GPU, no driver): the call goes to run() whole.
    kernel[4](1, 2.0, TILE=8)
    kernel[(2, 3), 7]()
    assert kernel.calls == [(4, None, (1, 2.0), {"TILE": 8}), ((2, 3), 7, (), {})]


def test_c_launch_path_is_only_enabled_for_array_classes_it_can_read():
    claunch = pytest.importorskip("coop_tiles.runtime._claunch")
    kernel = _recording_kernel(claunch.KernelBase)()
    # NumPy arrays have no C-level `_c_contiguous`: the C path stays off and calls go to run().
    assert kernel._enable_c_launch({}, ("TILE",), (np.ndarray, None, None), None, False) is False
    for cupy, torch in [(np.ndarray, None), (None, (object, None, {}))]:  # not the tuples it takes
        with pytest.raises(TypeError):
            kernel._enable_c_launch({}, ("TILE",), cupy, torch, False)
    with pytest.raises(TypeError):
        kernel._enable_c_launch([], ("TILE",), None, None, False)
    kernel[1](np.zeros(3), TILE=2)
    assert len(kernel.calls) == 1


def test_the_c_path_is_enabled_with_neither_cupy_nor_a_usable_torch_loaded(monkeypatch):
    """A `torch` module without the functions the C path reads (a stand-in) leaves its tensors to the Python path
    and the C path on for the rest."""
    pytest.importorskip("coop_tiles.runtime._claunch")
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    assert fastpath._torch_launch(sys.modules["torch"], {}) is None
    assert fastpath.enable_c_launch(JITFunction(vector_add.fn), False) is True


def test_a_kernel_with_the_c_base_is_garbage_collected():
    import gc
    import weakref

    kernel = JITFunction(vector_add.fn)
    kernel._self = kernel  # a reference cycle through the instance dict
    ref = weakref.ref(kernel)
    del kernel
    gc.collect()
    assert ref() is None


def test_static_shared_memory_counts_toward_the_48_kib_a_block_gets_without_asking(monkeypatch):
    """A chained scan's static block context and the dynamic carve together decide the opt-in: 48 KiB of carve
    alone needs none, with 64 static bytes it does, and past the device's maximum it is a SharedMemoryError
    counting both."""
    from types import SimpleNamespace

    import coop_tiles as ct
    from coop_tiles.runtime import launcher

    plan = SimpleNamespace(largest_users=lambda: "tile t (49152 bytes)")
    kernel = SimpleNamespace(shared_bytes=48 * 1024, program=SimpleNamespace(name="k"), plan=plan)
    monkeypatch.setattr(launcher, "max_shared_optin", lambda device_id: 48 * 1024 + 32)
    monkeypatch.setattr(launcher, "static_shared_bytes", lambda compiled, device_id: 0)
    launcher.opt_in_dynamic_shared_memory(kernel, None, 0)  # within 48 KiB: returns before any driver call
    monkeypatch.setattr(launcher, "static_shared_bytes", lambda compiled, device_id: 64)
    with pytest.raises(ct.SharedMemoryError, match=r"^k needs 49216 bytes of shared memory per block, more than this "):
        launcher.opt_in_dynamic_shared_memory(kernel, None, 0)


def test_jit_arch_picks_the_devices_arch_specific_variant_only(monkeypatch):
    """`ct.jit(arch="sm_90a")` launches on a 9.0 GPU compile for sm_90a; without it, for the device's arch; an arch
    the device cannot run is a LaunchError."""
    from coop_tiles.errors import LaunchError
    from coop_tiles.runtime import launcher

    monkeypatch.setattr(launcher, "device_arch", lambda device_id: "sm_90")
    assert JITFunction(vector_add.fn).launch_arch(0) == "sm_90"
    assert JITFunction(vector_add.fn, arch="sm_90a").launch_arch(0) == "sm_90a"
    assert JITFunction(vector_add.fn, arch=90).launch_arch(0) == "sm_90"
    with pytest.raises(LaunchError, match="cannot run it"):
        JITFunction(vector_add.fn, arch="sm_100a").launch_arch(0)
