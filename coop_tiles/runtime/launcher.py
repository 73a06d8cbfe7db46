"""Loading cubins (cuda.core) and launching them (cuLaunchKernel) on the caller's stream."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator
from typing import Any

from ..codegen.params import kernel_params
from ..errors import LaunchError, SharedMemoryError, TileError
from ..lang.types import ArrayType, ScalarType
from ..ops.base import launch_checks
from . import chain as chain_states
from . import launch_state
from .arch import arch_number
from .kernel import CompiledKernel

STATIC_SHARED_LIMIT = 48 * 1024


@functools.cache
def _core():
    import cuda.core as core

    return core


@functools.cache
def no_gpu_reason() -> str | None:
    """Why no GPU can be used ("no NVIDIA driver", "cuInit: CUDA_ERROR_NO_DEVICE"), or None when
    a CUDA driver with at least one device is present (no context is created)."""
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return f"cuInit: {err.name}"
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS:
            return f"cuDeviceGetCount: {err.name}"
        return None if count > 0 else "the driver lists no device"
    except Exception as e:  # the driver library is missing (cuda.pathfinder's DynamicLibNotFoundError)
        return "no NVIDIA driver" if "driver" in str(e) else f"{type(e).__name__}: {e}"


def gpu_available() -> bool:
    """Whether a CUDA driver with at least one device is present (no context is created)."""
    return no_gpu_reason() is None


def _check(result: Any) -> Any:
    """The value of a cuda.bindings driver call, raising a LaunchError naming a failure."""
    from cuda.bindings import driver

    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise LaunchError(f"CUDA driver call failed: {err.name}")
    return rest[0] if rest else None


@functools.cache
def device_count() -> int:
    """How many GPUs this process sees (0 without a driver); with one, no launch reads devices."""
    if not gpu_available():
        return 0
    from cuda.bindings import driver

    return int(_check(driver.cuDeviceGetCount()))


@functools.cache
def primary_context(device_id: int) -> int:
    """The handle of `device_id`'s primary context (retained for the life of the process):
    the context CuPy, PyTorch and cuda.core allocate in, so the one its launches run in."""
    from cuda.bindings import driver

    return int(_check(driver.cuDevicePrimaryCtxRetain(_check(driver.cuDeviceGet(device_id)))))


def current_context() -> int:
    """The handle of the context current on this thread (0: none)."""
    from cuda.bindings import driver

    return int(_check(driver.cuCtxGetCurrent()))


def current_device_id() -> int:
    """The device of this thread's current context; device 0 when none is current."""
    from cuda.bindings import driver

    require_gpu(
        "to launch on; run programs in the NumPy interpreter with COOP_TILES_INTERPRET=1 or @ct.jit(interpret=True)"
    )
    if not current_context():
        return 0
    return int(_check(driver.cuCtxGetDevice()))


@contextlib.contextmanager
def on_device(device_id: int) -> Iterator[None]:
    """Make `device_id`'s primary context current for a block, restoring the caller's context after
    (a thread with none keeps this one, as the CUDA runtime would have made it current)."""
    from cuda.bindings import driver

    wanted, previous = primary_context(device_id), current_context()
    if previous == wanted:
        yield
        return
    _check(driver.cuCtxSetCurrent(wanted))
    try:
        yield
    finally:
        if previous:
            _check(driver.cuCtxSetCurrent(previous))


def stream_device(handle: int) -> int | None:
    """The device of a stream handle; None for the special handles (0, 1, 2: the null, legacy and
    per-thread default streams), which belong to whichever device is current."""
    if handle in (0, 1, 2):
        return None
    from cuda.bindings import driver

    context = int(_check(driver.cuStreamGetCtx(handle)))
    return next((d for d in range(device_count()) if primary_context(d) == context), None)


def current_device() -> Any:
    """The cuda.core Device of this thread's current context (device 0 when none is current)."""
    return device(current_device_id())


def device(device_id: int) -> Any:
    """The cuda.core Device `device_id`."""
    return _core().Device(device_id)


def require_gpu(purpose: str) -> None:
    """A TileError (the caller locates it) when there is no GPU, saying why and what to do instead."""
    reason = no_gpu_reason()
    if reason is not None:
        raise TileError(f"no CUDA GPU found ({reason}) {purpose}")


@functools.cache
def device_arch(device_id: int) -> str:
    major, minor = device(device_id).compute_capability
    return f"sm_{major}{minor}"


@functools.cache
def max_shared_optin(device_id: int) -> int:
    from cuda.bindings import driver

    attr = driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    err, value = driver.cuDeviceGetAttribute(attr, device_id)
    return int(value)


_LOADING = threading.Lock()


def load(kernel: CompiledKernel, device_id: int) -> Any:
    """The cuda.core Kernel for `kernel` on `device_id`; runs its pre-launch hooks once first
    (under a lock, so two threads loading at once load and hook it once)."""
    loaded = kernel.loaded.get(device_id)
    if loaded is not None:
        return loaded
    with _LOADING, on_device(device_id):
        loaded = kernel.loaded.get(device_id)
        if loaded is None:
            loaded = _core().ObjectCode.from_cubin(kernel.cubin).get_kernel(kernel.kernel_name)
            for hook in kernel.pre_launch_hooks:
                hook(kernel, loaded, device_id)
            kernel.loaded[device_id] = loaded
    return loaded


def static_shared_bytes(compiled: Any, device_id: int) -> int:
    """Bytes of static shared memory of a loaded kernel, as the driver counts them."""
    from cuda.bindings import driver

    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
    err, value = driver.cuKernelGetAttribute(attr, compiled.handle, device_id)
    return int(value) if err == driver.CUresult.CUDA_SUCCESS else 0


def opt_in_dynamic_shared_memory(kernel: CompiledKernel, compiled: Any, device_id: int) -> None:
    """Pre-launch hook every kernel gets: when its dynamic shared memory and its static shared
    variables (a chained scan's block context) pass the 48 KiB a block gets without asking, opt
    the function into its dynamic shared memory (and the largest shared-memory carveout), up to
    the device's opt-in maximum; past it, a SharedMemoryError naming the tiles and collectives
    that need it."""
    shared = kernel.shared_bytes
    total = shared + static_shared_bytes(compiled, device_id)
    if total <= STATIC_SHARED_LIMIT:
        return
    limit = max_shared_optin(device_id)
    if total > limit:
        raise SharedMemoryError(
            f"{kernel.program.name} needs {total} bytes of shared memory per block, more than this device's "
            f"limit of {limit}; largest users: {kernel.plan.largest_users()}. Use smaller tiles or fewer threads "
            "per block"
        )
    from cuda.bindings import driver

    attrs = driver.CUfunction_attribute
    for attr, value in (
        (attrs.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared),
        (attrs.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100),
    ):
        (err,) = driver.cuKernelSetAttribute(attr, value, compiled.handle, device_id)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise SharedMemoryError(
                f"could not opt {kernel.program.name} into {shared} bytes of dynamic shared memory: {err.name}"
            )


CUPY, TORCH = 1, 2
LIBRARY_BITS = {"cupy": CUPY, "torch": TORCH}


def current_stream(libraries: int, device_id: int) -> int:
    """The current stream on `device_id` of the array library in use (PyTorch, else CuPy, whose
    current stream is the current device's: launches make the arrays' device current), else the
    legacy default."""
    if libraries & TORCH:
        torch = _torch()
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what Triton reads: no Stream object
        if raw is not None:
            return raw(device_id)
        return torch.cuda.current_stream(device_id).cuda_stream
    if libraries & CUPY:
        return _cupy().cuda.get_current_stream().ptr
    return 0


def stream_handle(stream: Any, libraries: int, device_id: int) -> int:
    """The raw handle of `stream`; `None` means `current_stream(libraries, device_id)`."""
    if stream is None:
        return current_stream(libraries, device_id)
    if type(stream) is int:
        return stream
    for attr in ("cuda_stream", "ptr"):
        handle = getattr(stream, attr, None)
        if isinstance(handle, int):
            return handle
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    handle = getattr(stream, "handle", None)
    if handle is not None:
        return int(handle)
    raise LaunchError(f"can't use {type(stream).__name__} as a stream; pass a CuPy/PyTorch stream or a raw handle")


@functools.cache
def _cupy():
    import cupy

    return cupy


@functools.cache
def _torch():
    import torch

    return torch


def normalize_grid(grid: Any, constexprs: dict[str, Any]) -> tuple[int, int, int]:
    if callable(grid):
        grid = grid(constexprs)
    if isinstance(grid, int) and not isinstance(grid, bool):
        grid = (grid,)
    if (
        not isinstance(grid, tuple)
        or not 1 <= len(grid) <= 3
        or not all(isinstance(g, int) and not isinstance(g, bool) for g in grid)
    ):
        raise LaunchError(f"grid must be an int or a tuple of 1 to 3 ints (or a callable returning one), got {grid!r}")
    if any(g < 0 for g in grid):
        raise LaunchError(f"grid dimensions must be non-negative, got {grid}")
    return tuple(grid) + (1,) * (3 - len(grid))  # type: ignore[return-value]


#: struct codes of each parameter slot (`KernelParam.slot`): a pointer, a signed 64-bit
#: integer, unsigned/bool/16-bit bits, float64, float32 (padded to its 8-byte slot).
SLOT_CODES = {"P": "Q", "Q": "Q", "q": "q", "d": "d", "f": "f4x"}
#: bytes of the C types that fill a whole 8-byte slot
_WIDE = {"long long", "double", "cuda::std::int64_t", "cuda::std::uint64_t"}


def argument_kind(t: ArrayType | ScalarType) -> str:
    """How a launcher packs one argument: "A" a 1-D unit-stride array (pointer and length), "V" any
    other array (pointer, then its shape-and-strides tuple, `arguments.launch_extents`), or the
    scalar's slot code. _claunch.c packs both array kinds and the "q", "d" and "f" slots."""
    if isinstance(t, ArrayType):
        return "A" if t.ndim == 1 and t.unit_stride else "V"
    return kernel_params("x", t)[0].slot


def programmatic_enabled() -> bool:
    """Whether programmatic dependent launch is on (it is unless `COOP_TILES_PDL=0`; read at each kernel's first
    launch on a device)."""
    return os.environ.get("COOP_TILES_PDL", "1") != "0"


def programmatic(arch: str) -> bool:
    """Whether kernels for `arch` are launched with programmatic stream serialization (programmatic dependent
    launch): on sm_90 and later, unless `COOP_TILES_PDL=0`. Such a kernel's launch is prepared while the kernel ahead
    of it in the stream runs, and it waits for that one in its entry (`codegen/shims.py::GRID_DEPENDENCY`): on an
    H200, about 3 us less per top-k call (three launches), 1 us per MoE align (two)."""
    return arch_number(arch) >= 90 and programmatic_enabled()


def _programmatic_config(block_threads: int, shared_bytes: int) -> Any:
    """A cuda.bindings launch configuration of `block_threads` threads and `shared_bytes` of dynamic shared memory
    that allows programmatic stream serialization; each launch sets its grid and stream."""
    from cuda.bindings import driver

    allow = driver.CUlaunchAttribute()
    allow.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    allow.value.programmaticStreamSerializationAllowed = 1
    config = driver.CUlaunchConfig()
    config.blockDimX, config.blockDimY, config.blockDimZ = block_threads, 1, 1
    config.sharedMemBytes = shared_bytes
    config.attrs, config.numAttrs = [allow], 1
    return config


class PreparedLaunch:
    """Everything a launch of one specialisation needs, prepared once.

    Arguments are packed into a preallocated buffer of 8-byte slots (one per parameter,
    little-endian, so a narrower parameter reads the low bytes of its slot), and the kernel
    is launched with `cuLaunchKernel` on that buffer. `launch(g0, g1, g2, stream, ...)`
    is generated for the parameter list, so a launch is one pack and one driver call.
    Each argument arrives as two values: (pointer, length) for an array, (value, 0) for a scalar.
    A prepared launch belongs to one device (`device_id`, whose primary context handle is
    `context`); the launch paths call it only while that context is current.
    When CuPy is loaded its thin `cupy.cuda.driver.launchKernel` wrapper is used (about
    0.6 us cheaper per launch than cuda.bindings'); otherwise cuda.bindings'. A kernel for sm_90
    or later (`programmatic`) is launched with cuda.bindings' `cuLaunchKernelEx` and a launch
    configuration made once, whose grid and stream each launch sets.
    """

    def __init__(
        self,
        kernel: CompiledKernel,
        compiled: Any,
        param_types: list[ArrayType | ScalarType],
        device_id: int = 0,
        context: int = 0,
    ):
        import ctypes
        import struct
        import sys
        import threading

        self.kernel = kernel
        self.device_id, self.context = device_id, context
        params = [kernel_params("x", t) for t in param_types]
        chain = kernel.chain_bytes  # a chained scan's grid-wide state: one more pointer, after the arguments
        own_state = kernel.launch_bytes  # the launch's own state (device pipelines): one more pointer, last
        count = max(1, sum(len(p) for p in params) + (chain is not None) + bool(own_state))
        self.slots = (ctypes.c_uint64 * count)()
        self.pointers = (ctypes.c_void_p * count)(*(ctypes.addressof(self.slots) + 8 * i for i in range(count)))
        # One struct.pack_into writes every argument, each parameter into its 8-byte slot.
        kinds = [argument_kind(t) for t in param_types]
        codes = ["".join(SLOT_CODES[p.slot] for p in ps) for ps in params]
        packed = [f"p{i}, q{i}" if k == "A" else (f"p{i}, *q{i}" if k == "V" else f"p{i}") for i, k in enumerate(kinds)]
        namespace: dict[str, Any] = {
            # (kernels with launch state share one: a prepare kernel and its program are enqueued with no other
            # such pair between them, whichever host threads launch on one stream)
            "LOCK": launch_state.STATES.launching if own_state else threading.Lock(),
            "P": ctypes.addressof(self.pointers),
            "B": kernel.block_threads,
            "S": kernel.shared_bytes,
            "fail": self._fail,
            "PACK": struct.Struct("<" + "".join(codes)).pack_into,
            "SLOTS": self.slots,
        }
        # launch() takes two values per argument (an array's pointer and length; a scalar and an
        # unused 0), so the per-kernel fast path passes them without building tuples.
        names = "".join(f", p{i}, q{i}" for i in range(len(param_types)))
        body = [f"def launch(g0, g1, g2, stream{names}):", "    with LOCK:"]
        checks = launch_checks(kernel.program)
        if checks:
            namespace["CHECKS"] = checks
            body += ["        for check in CHECKS:", "            check((g0, g1, g2))"]
        if param_types:
            namespace["PACK_ERROR"] = struct.error
            body += [
                "        try:",
                f"            PACK(SLOTS, 0, {', '.join(packed)})",
                "        except PACK_ERROR as e:",
                "            fail(f'an argument does not fit its parameter type ({e})')",
            ]
        if chain is not None:  # (packed after the arguments, so a bad argument leaves no state behind)
            namespace.update(STATES=chain_states.STATES, CHAIN=chain)
            body += [
                "        state, own = STATES.acquire(stream, g0, CHAIN)",
                f"        SLOTS[{count - 1 - bool(own_state)}] = state",
            ]
        if own_state:  # filled by the prepare kernel, from the same parameters, just before the program
            prepare = _core().ObjectCode.from_cubin(kernel.cubin).get_kernel(kernel.prepare_name)
            namespace.update(STATES_OWN=launch_state.STATES, OWN=own_state)
            body += [
                "        pipelines, own_pipelines = STATES_OWN.acquire(stream, OWN)",
                f"        SLOTS[{count - 1}] = pipelines",
            ]
        self.programmatic = programmatic(kernel.arch)
        cupy = sys.modules.get("cupy")
        if cupy is not None and hasattr(cupy.cuda.driver, "launchKernel") and not self.programmatic:
            namespace.update(
                LAUNCH=cupy.cuda.driver.launchKernel, F=int(compiled.handle), ERROR=cupy.cuda.driver.CUDADriverError
            )
            if own_state:
                namespace["PF"] = int(prepare.handle)
            body += [
                "        try:",
                *(["            LAUNCH(PF, 1, 1, 1, 32, 1, 1, 0, stream, P, 0)"] if own_state else []),
                "            LAUNCH(F, g0, g1, g2, B, 1, 1, S, stream, P, 0)",
                "        except ERROR as e:",
                "            fail(e)",
            ]
        else:
            from cuda.bindings import driver

            namespace.update(LAUNCH=driver.cuLaunchKernel, F=compiled.handle, OK=driver.CUresult.CUDA_SUCCESS)
            if own_state:
                namespace["PF"] = prepare.handle
                body += [
                    "        (err,) = LAUNCH(PF, 1, 1, 1, 32, 1, 1, 0, stream, P, 0)",
                    "        if err != OK:",
                    "            fail(err)",
                ]
            if self.programmatic:
                namespace.update(
                    CONFIG=_programmatic_config(kernel.block_threads, kernel.shared_bytes),
                    LAUNCH_EX=driver.cuLaunchKernelEx,
                )
                body += [
                    "        CONFIG.gridDimX, CONFIG.gridDimY, CONFIG.gridDimZ, CONFIG.hStream = g0, g1, g2, stream",
                    "        (err,) = LAUNCH_EX(CONFIG, F, P, 0)",
                ]
            else:
                body.append("        (err,) = LAUNCH(F, g0, g1, g2, B, 1, 1, S, stream, P, 0)")
            body += ["    if err != OK:", "        fail(err)"]
        if chain is not None:
            body += ["    if own:", "        STATES.release(state, stream)"]
        if own_state:
            body += ["    if own_pipelines:", "        STATES_OWN.release(pipelines, stream)"]
        exec(compile("\n".join(body) + "\n", f"<coop_tiles launch of {kernel.program.name}>", "exec"), namespace)
        self.launch = namespace["launch"]
        # The C launch path (_claunch.c) packs into its own buffer while holding the GIL.
        self.c_slots = (ctypes.c_uint64 * count)()
        self.c_pointers = (ctypes.c_void_p * count)(*(ctypes.addressof(self.c_slots) + 8 * i for i in range(count)))
        # When every parameter is 8 bytes wide, the slots are laid out exactly as the kernel's
        # parameters, and the C path hands the driver the whole buffer (CU_LAUNCH_PARAM_BUFFER_*),
        # which is cheaper than one pointer per parameter; otherwise (0) it passes the pointers.
        whole_buffer = bool(param_types) and all(p.cxx in _WIDE or p.slot == "P" for ps in params for p in ps)
        self.c_info = (
            int(compiled.handle),
            kernel.block_threads,
            kernel.shared_bytes,
            ctypes.addressof(self.c_slots),
            ctypes.addressof(self.c_pointers),
            "".join(kinds).encode(),
            8 * count if whole_buffer else 0,
            context,
            device_id,
            int(self.programmatic),
        )
        if chain is not None or own_state or checks:
            self.c_info = None  # the C path declines: its launches take the Python path, which has these steps

    def _fail(self, err: Any) -> None:
        raise LaunchError(f"launching {self.kernel.program.name} failed: {getattr(err, 'name', err)}")
