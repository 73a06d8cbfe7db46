"""Drives both launch paths with stand-in PyTorch tensors and a stand-in CUDA driver (tests/fake_libcuda.c), with
no GPU, and prints as JSON what each call launched and through which path; tests/test_claunch_torch.py runs it in a
process of its own (the stand-ins are that process's `torch` and `libcuda.so.1`) and checks what it prints.

Usage: python tests/claunch_torch_probe.py FAKE_LIBCUDA_SO
"""

import ctypes
import json
import struct
import sys
import types
from types import SimpleNamespace

DRIVER = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # first, so that it is the libcuda.so.1 _claunch opens


class Launch(ctypes.Structure):
    """fake_libcuda.c's record of its last cuLaunchKernel or cuLaunchKernelEx."""

    _fields_ = [
        ("count", ctypes.c_longlong),
        ("function", ctypes.c_void_p),
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("params", ctypes.c_void_p),
        ("extra", ctypes.c_void_p),
        ("programmatic", ctypes.c_int),
    ]


LAST = Launch.in_dll(DRIVER, "last_launch")
CURRENT_CONTEXT = ctypes.c_void_p.in_dll(DRIVER, "current_context")
CONTEXT = 0x1000  # the context the fake driver reports current, and the prepared launches' context
RAW_STREAM = 0x5000  # PyTorch's current stream on device d is RAW_STREAM + d


def fake_torch() -> types.ModuleType:
    """A `torch` module with what coop_tiles reads of it: dtypes, Tensor, nn.Parameter, the raw current stream."""
    torch = types.ModuleType("torch")

    class dtype:
        def __init__(self, name):
            self.name = name

        def __repr__(self):
            return f"torch.{self.name}"

    for name in "int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 bfloat16 float32 float64 bool".split():
        setattr(torch, name, dtype(name))
    torch.complex64 = dtype("complex64")

    class Size(tuple):
        pass

    class Tensor:
        """A tensor of `shape` and element `strides` (C order when left out) at `ptr` on GPU `device` (-1: the
        CPU)."""

        def __init__(self, shape, strides=None, dtype="float32", ptr=0x10000, device=0):
            if strides is None:
                strides, step = [], 1
                for extent in reversed(shape):
                    strides.insert(0, step)
                    step *= extent
            self._shape, self._strides = Size(shape), tuple(strides)
            self.dtype, self._ptr, self._device = getattr(torch, dtype), ptr, device

        @property
        def shape(self):
            return self._shape

        @property
        def is_cuda(self):
            return self._device >= 0

        def stride(self, dim=None):
            return self._strides if dim is None else self._strides[dim]

        def data_ptr(self):
            return self._ptr

        def get_device(self):
            return self._device

    class Parameter(Tensor):
        pass

    class OtherSubclass(Tensor):
        pass

    Tensor.__module__ = OtherSubclass.__module__ = "torch"
    Parameter.__module__ = "torch.nn.parameter"
    torch.Tensor, torch.OtherSubclass = Tensor, OtherSubclass
    torch.nn = SimpleNamespace(Parameter=Parameter)
    torch._C = SimpleNamespace(_cuda_getCurrentRawStream=lambda device: RAW_STREAM + device)
    return torch


torch = sys.modules["torch"] = fake_torch()

import coop_tiles as ct  # noqa: E402
from coop_tiles.runtime import arguments, launcher  # noqa: E402

GPUS = [1]
launcher.device_count = lambda: GPUS[0]


def probe_kernel(arch: str = "sm_80"):
    """A fresh kernel for `arch` whose new specialisations are prepared (never compiled) with function handles
    0xF000, 0xF001, ... and whose Python launches are recorded in `kernel.python_launches`, the calls the C path
    hands to `run` in `kernel.runs`."""

    @ct.jit
    def probe(x, y, n, alpha, TILE: ct.constexpr):
        x[0] = y[0] * alpha + n  # never compiled: launches are recorded, not run

    handles = iter(range(0xF000, 0xF100))
    probe.python_launches, probe.runs = [], []

    def prepare(runtime, constexprs, device_id):
        params = [arguments.arg_type(v, name) for name, v in zip(probe._runtime_names, runtime)]
        kernel = SimpleNamespace(
            program=SimpleNamespace(name="probe", walk=lambda: iter(())), chain_bytes=None, launch_bytes=0,
            block_threads=128, shared_bytes=64, arch=arch,
        )  # fmt: skip
        prepared = launcher.PreparedLaunch(kernel, SimpleNamespace(handle=next(handles)), params, device_id, CONTEXT)

        def launch(f, g0, g1, g2, b0, b1, b2, shared, stream, params, extra):
            probe.python_launches.append(
                {"function": f, "grid": [g0, g1, g2], "block": b0, "shared": shared, "stream": stream,
                 "slots": list(prepared.slots)}
            )  # fmt: skip
            return ("ok",)

        def launch_ex(config, f, params, extra):
            allowed = [a.value.programmaticStreamSerializationAllowed for a in config.attrs[: config.numAttrs]]
            launch(
                f,
                config.gridDimX,
                config.gridDimY,
                config.gridDimZ,
                config.blockDimX,
                config.blockDimY,
                config.blockDimZ,
                config.sharedMemBytes,
                int(config.hStream),
                params,
                extra,
            )
            probe.python_launches[-1]["programmatic"] = allowed == [1]
            return ("ok",)

        prepared.launch.__globals__.update(LAUNCH=launch, LAUNCH_EX=launch_ex, OK="ok")
        return prepared

    def run(grid, stream, args, kwargs):
        probe.runs.append(grid)
        type(probe).run(probe, grid, stream, args, kwargs)

    probe._prepare, probe.run = prepare, run
    return probe


def c_launch(kernel) -> dict:
    """What the fake driver's last launch was, with the C buffer it was given (the prepared launch's `c_slots`)."""
    for prepared in kernel._kernels.values():
        slots, pointers = ctypes.addressof(prepared.c_slots), ctypes.addressof(prepared.c_pointers)
        extra = (ctypes.c_void_p * 2).from_address(LAST.extra)[1] if LAST.extra else None
        if extra == slots or LAST.params == pointers:
            return {
                "function": LAST.function, "grid": list(LAST.grid), "block": LAST.block[0], "shared": LAST.shared,
                "stream": LAST.stream or 0, "slots": list(prepared.c_slots), "whole_buffer": extra == slots,
                **({"programmatic": True} if LAST.programmatic else {}),
            }  # fmt: skip
    raise AssertionError("the C path launched a buffer of no prepared launch")


def call(kernel, launch, *args, **kwargs) -> dict:
    """`kernel[launch](*args, **kwargs)`: whether it went to `run`, what the C path and the Python path launched,
    the error it raised."""
    c_before, python_before, runs_before = LAST.count, len(kernel.python_launches), len(kernel.runs)
    out = {}
    try:
        kernel[launch](*args, **kwargs)
    except ct.TileError as e:
        out["error"] = [type(e).__name__, e.message]
    out["run"] = len(kernel.runs) - runs_before
    if LAST.count != c_before:
        out["c"] = c_launch(kernel)
    if len(kernel.python_launches) != python_before:
        out["python"] = kernel.python_launches[-1]
    return out


def python_path(kernel, grid, *args, **kwargs) -> dict:
    """What the Python path (the generated fast path, `run` entered directly) launches for the call."""
    type(kernel).run(kernel, grid, None, args, kwargs)
    return kernel.python_launches[-1]


def keys(kernel) -> dict:
    """Each prepared specialisation's function handle, by the repr of its key."""
    return {repr(key): int(prepared.c_info[0]) for key, prepared in kernel._kernels.items()}


def main() -> None:
    T = torch.Tensor
    out: dict = {"bits_half": struct.unpack("<Q", struct.pack("<d", 0.5))[0]}
    k = probe_kernel()
    flat = (T((10,), ptr=0x10000), T((7,), ptr=0x20000))
    out["first_of_its_kind"] = call(k, 3, *flat, 5, 0.5, TILE=128)
    out["flat"] = call(k, 3, *flat, 5, 0.5, TILE=128)
    out["flat_python"] = python_path(k, 3, *flat, 5, 0.5, TILE=128)
    # 2-D unit last stride and 1-D strided, on a (2, 3) grid
    strided = (T((3, 5), ptr=0x30000), T((4,), (3,), ptr=0x40000))
    call(k, (2, 3), *strided, 6, 0.5, TILE=128)
    out["strided"] = call(k, (2, 3), *strided, 6, 0.5, TILE=128)
    out["strided_python"] = python_path(k, (2, 3), *strided, 6, 0.5, TILE=128)
    # 3-D bfloat16 without a unit last stride, and 1-D bfloat16 (whose key is a tuple: its dtype number is not
    # unique), on a (1, 2, 3) grid; then a Parameter of that kind
    halves = (T((2, 3, 4), (1, 2, 6), "bfloat16", ptr=0x50000), T((8,), dtype="bfloat16", ptr=0x60000))
    call(k, (1, 2, 3), *halves, 7, 0.5, TILE=128)
    out["bf16"] = call(k, (1, 2, 3), *halves, 7, 0.5, TILE=128)
    out["bf16_python"] = python_path(k, (1, 2, 3), *halves, 7, 0.5, TILE=128)
    weight = torch.nn.Parameter((3, 5), ptr=0x70000)
    call(k, (4,), weight, flat[1], 1, 0.5, TILE=128)
    out["parameter"] = call(k, (4,), weight, flat[1], 1, 0.5, TILE=128)
    out["last_axis_of_one"] = call(k, 2, T((3, 1), (2, 2), ptr=0x80000), flat[1], 1, 0.5, TILE=128)
    out["int_stream"] = call(k, ((2,), 0x777), *flat, 5, 0.5, TILE=128)

    out["other_subclass"] = call(k, 3, torch.OtherSubclass((10,)), flat[1], 5, 0.5, TILE=128)
    out["stream_object"] = call(k, ((3,), SimpleNamespace(cuda_stream=0x999)), *flat, 5, 0.5, TILE=128)
    out["bool_grid"] = call(k, (True,), *flat, 5, 0.5, TILE=128)
    out["zero_grid"] = call(k, (3, 0), *flat, 5, 0.5, TILE=128)
    out["cpu_tensor"] = call(k, 3, T((10,), device=-1), flat[1], 5, 0.5, TILE=128)
    out["zero_d"] = call(k, 3, T(()), flat[1], 5, 0.5, TILE=128)
    out["complex"] = call(k, 3, T((10,), dtype="complex64"), flat[1], 5, 0.5, TILE=128)
    out["constexpr_left_out"] = call(k, 3, *flat, 5, 0.5)
    CURRENT_CONTEXT.value = 0x2000  # another context is current: the Python path launches
    out["other_context"] = call(k, 3, *flat, 5, 0.5, TILE=128)
    CURRENT_CONTEXT.value = CONTEXT
    out["keys"] = keys(k)

    GPUS[0] = 2  # several GPUs: each tensor's device is read
    many = probe_kernel()
    call(many, 3, *flat, 5, 0.5, TILE=128)
    out["many_devices"] = call(many, 3, *flat, 5, 0.5, TILE=128)
    second = (T((10,), ptr=0x10000, device=1), T((7,), ptr=0x20000, device=1))
    call(many, 3, *second, 5, 0.5, TILE=128)
    out["device_1"] = call(many, 3, *second, 5, 0.5, TILE=128)
    out["mixed_devices"] = call(many, 3, flat[0], T((7,), device=1), 5, 0.5, TILE=128)
    out["many_keys"] = keys(many)

    GPUS[0] = 1  # sm_90: launched allowing programmatic stream serialization, by both paths
    hopper = probe_kernel("sm_90")
    call(hopper, 3, *flat, 5, 0.5, TILE=128)
    out["programmatic"] = call(hopper, 3, *flat, 5, 0.5, TILE=128)
    out["programmatic_python"] = python_path(hopper, (2, 3), *flat, 5, 0.5, TILE=128)
    out["programmatic_keys"] = keys(hopper)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
