"""`@ct.jit`: a tile program that compiles per signature and launches with `kernel[grid](...)`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from . import ops  # noqa: F401 - registers every tile op
from .dtypes import SUPPORTED, is_half
from .errors import LaunchError, SourceLocation, TileError
from .lang import interpreter
from .lang.frontend import build_program
from .lang.source import parse_function
from .lang.types import ArrayType, ScalarType
from .planner.layout import choose_block_threads
from .runtime import arguments, blockdims, launcher
from .runtime.cache import DiskCache
from .runtime.compiler import compile_kernel
from .runtime.fastpath import KernelBase, enable_c_launch, make_fast_path
from .runtime.kernel import CompiledKernel, Signature

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def caller_location() -> SourceLocation | None:
    """Where the user's code called into coop_tiles: the first frame outside this package."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return None
    import linecache

    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    indent = len(text) - len(text.lstrip())
    return SourceLocation(frame.f_code.co_filename, frame.f_lineno, indent, None, text)


def located_at_caller(e: TileError) -> TileError:
    """`e` with the user's calling line as its location when it has none (launch mistakes)."""
    if e.loc is None:
        loc = caller_location()
        if loc is not None:
            e.locate(loc)
    return e.with_traceback(None)


def _interpret_env() -> bool:
    return os.environ.get("COOP_TILES_INTERPRET", "").strip().lower() not in ("", "0", "false", "no")


class JITFunction(KernelBase):
    """A compiled-on-demand tile program. Launch with ``kernel[grid](*args, **constexprs)``.

    ``kernel[grid]`` comes from `KernelBase`: the C launch path when it was built, else Python."""

    def __init__(
        self,
        fn: Callable,
        *,
        block_threads: int | None = None,
        interpret: bool | None = None,
        fastmath: bool = False,
        max_registers: int | None = None,
    ):
        self.fn = fn
        self.block_threads = block_threads
        self.fastmath = fastmath
        self.max_registers = max_registers
        if max_registers is not None and not (isinstance(max_registers, int) and 16 <= max_registers <= 255):
            raise LaunchError(f"max_registers must be an int from 16 to 255, got {max_registers!r}")
        self.interpret = interpret
        self.parsed = parse_function(fn)
        self._kernels: dict[tuple, launcher.PreparedLaunch] = {}
        self._programs: dict[tuple, Any] = {}  # typed IR per signature, for the interpreter
        self._interpreting: bool | None = None
        self._fast: Callable[..., bool] | None = None
        self._fast_knows_cupy = False
        self._hooks: list[Callable[[CompiledKernel, Any, int], None]] = []
        self._constexpr_names = [p for p in self.parsed.params if p in self.parsed.constexprs]
        self._constexpr_set = set(self._constexpr_names)
        self._runtime_names = [p for p in self.parsed.params if p not in self.parsed.constexprs]
        self._n_runtime = len(self._runtime_names)
        self._cache: DiskCache | None = None
        self.__doc__ = fn.__doc__
        self.__name__ = fn.__name__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<coop_tiles kernel {self.fn.__qualname__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        raise located_at_caller(LaunchError(f"launch a tile program with a grid: {self.__name__}[grid](...)"))

    @staticmethod
    def _split_launch(launch: Any) -> tuple[Any, Any]:
        """(grid, stream) of ``kernel[grid]`` or ``kernel[grid, stream]``; pass a raw int stream
        handle with a tuple or callable grid (``kernel[(n,), handle]``), since ``kernel[4, 2]``
        is a 2-D grid."""
        if isinstance(launch, tuple) and len(launch) == 2:
            first, second = launch
            if isinstance(first, tuple) or callable(first) or not isinstance(second, int) or second is None:
                return first, second
        return launch, None

    # ----- arguments -----------------------------------------------------------------------------
    def _bind(self, args: tuple, kwargs: dict) -> tuple[list[Any], dict[str, Any]]:
        """Split the call into runtime arguments (in parameter order) and constexpr values."""
        params = self.parsed.params
        if len(args) > len(params):
            raise LaunchError(f"{self.__name__} takes {len(params)} arguments, got {len(args)}")
        values = dict(zip(params, args))
        for name, value in kwargs.items():
            if name not in params:
                raise LaunchError(f"{self.__name__} has no parameter {name!r}")
            if name in values:
                raise LaunchError(f"{self.__name__} got two values for {name!r}")
            values[name] = value
        missing = [p for p in params if p not in values]
        if missing:
            raise LaunchError(f"{self.__name__} is missing arguments: {', '.join(missing)}")
        constexprs = {p: values[p] for p in params if p in self.parsed.constexprs}
        runtime = [values[p] for p in params if p not in self.parsed.constexprs]
        return runtime, constexprs

    def _signature(self, runtime: list[Any], constexprs: dict[str, Any], arch: str) -> Signature:
        names = [p for p in self.parsed.params if p not in self.parsed.constexprs]
        types = tuple((n, arguments.arg_type(v, n)) for n, v in zip(names, runtime))
        self._check_constexprs(constexprs)
        return Signature(*self._key(types, constexprs, arch))

    # ----- compiling -----------------------------------------------------------------------------
    def compile(self, *args: Any, arch: str | None = None, **kwargs: Any) -> CompiledKernel:
        """Compile for these arguments without launching. NumPy arrays stand for device arrays of
        their dtype; with an explicit `arch` (``"sm_90"``) no GPU is needed."""
        try:
            runtime, constexprs = self._bind(args, kwargs)
            names = [p for p in self.parsed.params if p not in self.parsed.constexprs]
            types = tuple(
                (n, v if isinstance(v, (ArrayType, ScalarType)) else host_arg_type(v, n))
                for n, v in zip(names, runtime)
            )
            if arch is None:
                arch = launcher.device_arch(launcher.current_device().device_id)
            self._check_constexprs(constexprs)
            sig = Signature(*self._key(types, constexprs, arch))
            return self._compile(sig)
        except TileError as e:
            raise located_at_caller(e) from None

    def _key(self, types: tuple, constexprs: dict[str, Any], arch: str) -> tuple:
        """The fields of this kernel's `Signature` for these argument types, constexprs and arch."""
        return types, tuple(sorted(constexprs.items())), self.block_threads, arch, self.fastmath, self.max_registers

    def _check_constexprs(self, constexprs: dict[str, Any]) -> None:
        for name, value in constexprs.items():
            try:
                hash(value)
            except TypeError:
                raise LaunchError(f"constexpr {name!r} must be hashable, got {type(value).__name__}") from None

    def _compile(self, sig: Signature) -> CompiledKernel:
        if self._cache is None:
            self._cache = DiskCache()
        kernel = compile_kernel(self.fn, sig, self._cache)
        kernel.add_pre_launch_hook(launcher.opt_in_dynamic_shared_memory)
        for hook in self._hooks:
            kernel.add_pre_launch_hook(hook)
        return kernel

    def add_pre_launch_hook(self, hook: Callable[[CompiledKernel, Any, int], None]) -> None:
        """Run `hook(kernel, function, device_id)` once per compiled kernel and device, before its
        first launch: for setting function attributes (cuKernelSetAttribute) and the like.
        Applies to kernels compiled after this call."""
        self._hooks.append(hook)

    # ----- launching -----------------------------------------------------------------------------
    def run(self, grid: Any, stream: Any, args: tuple, kwargs: dict) -> None:
        """Launch (or interpret) the program over `grid`; what ``kernel[grid, stream](...)`` calls."""
        try:
            if self._interpreting is None:  # COOP_TILES_INTERPRET is read at a kernel's first launch
                self._interpreting = self.interpret if self.interpret is not None else _interpret_env()
            if self._interpreting:
                self._interpret(grid, args, kwargs)
                return
            if self._fast is None or (not self._fast_knows_cupy and "cupy" in sys.modules):
                # (again once CuPy is imported: the fast paths read CuPy arrays inline)
                self._fast_knows_cupy = "cupy" in sys.modules
                self._fast = make_fast_path(self._runtime_names, self._constexpr_names, _classify)
                enable_c_launch(self)
            if self._fast(self, grid, stream, args, kwargs):
                return
            if len(args) == self._n_runtime and kwargs.keys() == self._constexpr_set:
                runtime, constexprs = args, kwargs  # the common call: runtime positional, constexprs by name
            else:
                runtime, constexprs = self._bind(args, kwargs)
            grid3 = (grid, 1, 1) if type(grid) is int and grid > 0 else launcher.normalize_grid(grid, constexprs)
            self._launch(grid3, stream, runtime, constexprs)
        except TileError as e:
            raise located_at_caller(e) from None

    def _interpret(self, grid: Any, args: tuple, kwargs: dict) -> None:
        """Run the program's typed IR with NumPy, one program instance at a time."""
        runtime, constexprs = self._bind(args, kwargs)
        names = [p for p in self.parsed.params if p not in self.parsed.constexprs]
        for name, value in zip(names, runtime):
            if not isinstance(value, np.ndarray) and arguments.device_array(value, name) is not None:
                raise LaunchError(
                    f"argument {name!r} is a device array; the interpreter runs on the CPU and takes NumPy arrays"
                )
        types = tuple((n, host_arg_type(v, n)) for n, v in zip(names, runtime))
        self._check_constexprs(constexprs)
        key = (types, tuple(sorted(constexprs.items())))
        program = self._programs.get(key)
        if program is None:
            program = build_program(self.fn, dict(types), constexprs)
            choose_block_threads(program, self.block_threads)  # the compiler's checks of block and tile size
            self._programs[key] = program
        interpreter.run(program, launcher.normalize_grid(grid, constexprs), list(runtime))

    def _launch(self, grid: tuple[int, int, int], stream: Any, runtime: Any, constexprs: dict) -> None:
        keys, values, libraries = [], [], 0
        for name, value in zip(self._runtime_names, runtime):
            key, item, library = _classify(value, name)
            keys.append(key)
            values += item
            libraries |= library
        for name in self._constexpr_names:
            keys.append(constexprs[name])
        key = tuple(keys)
        prepared = self._kernels.get(key)
        if prepared is None:
            prepared = self._kernels[key] = self._prepare(runtime, constexprs)
        if grid[0] and grid[1] and grid[2]:
            prepared.launch(grid[0], grid[1], grid[2], launcher.stream_handle(stream, libraries), *values)

    def _prepare(self, runtime: Any, constexprs: dict) -> launcher.PreparedLaunch:
        """Compile (or fetch) and load the kernel of a new signature, and prepare its launches."""
        device = launcher.current_device()
        sig = self._signature(list(runtime), constexprs, launcher.device_arch(device.device_id))
        kernel = self._compile(sig) if self.block_threads is not None else blockdims.select(self, sig, device)
        return launcher.PreparedLaunch(kernel, launcher.load(kernel, device.device_id), [t for _, t in sig.params])


def _scalar(value: Any, name: str) -> tuple[Any, tuple, int]:
    return type(value), (value, 0), 0


def _numpy_scalar(value: Any, name: str) -> tuple[Any, tuple, int]:
    if is_half(value.dtype):  # 16-bit floats travel as their bits
        return ("scalar", value.dtype), (int(np.asarray(value).view(np.uint16)), 0), 0
    if value.dtype == np.bool_:
        return ("scalar", value.dtype), (int(value), 0), 0
    return ("scalar", value.dtype), (value, 0), 0


def _array(value: Any, name: str) -> tuple[Any, tuple, int]:
    arr = arguments.device_array(value, name)
    if arr is None:
        arguments.arg_type(value, name)  # raises a LaunchError naming the argument
        return type(value), (value, 0), 0
    t = arr.type
    key = arr.dtype.num if t.ndim == 1 and t.unit_stride else (arr.dtype.num, t.ndim, t.unit_stride)
    if arr.dtype.num >= 256:  # a user-defined dtype (bfloat16): its num is not unique
        key = (arr.dtype, t.ndim, t.unit_stride)
    return key, arr.launch_values(), launcher.LIBRARY_BITS.get(arr.library, 0)


#: the key of a 1-D unit-stride PyTorch tensor, by torch dtype (the one `_array` gives it)
_torch_keys: dict[Any, Any] = {}


def _torch_tensor(value: Any, name: str) -> tuple[Any, tuple, int]:
    """A PyTorch tensor; a 1-D unit-stride one on the GPU without building a DeviceArray."""
    key = _torch_keys.get(value.dtype)
    if key is None or not value.is_cuda or value.dim() != 1 or (value.stride(0) != 1 and value.shape[0] > 1):
        key, values, library = _array(value, name)
        if value.dim() == 1 and isinstance(values[1], int):
            _torch_keys[value.dtype] = key
        return key, values, library
    return key, (value.data_ptr(), value.shape[0]), launcher.TORCH


def _cupy_array(value: Any, name: str) -> tuple[Any, tuple, int]:
    # An unsupported dtype makes a new key, and the signature check on that miss rejects it.
    if not value._c_contiguous or value.ndim != 1:
        return _array(value, name)
    return value.dtype.num, (value.data.ptr, value.size), launcher.CUPY


_classifiers: dict[type, Callable] = {int: _scalar, float: _scalar, bool: _scalar}


def _classify(value: Any, name: str) -> tuple[Any, tuple, int]:
    """(type key, (pointer, length) or (scalar, unused), array-library bit) of one launch argument."""
    classify = _classifiers.get(type(value)) or _classifier(type(value))
    return classify(value, name)


def _classifier(cls: type) -> Callable:
    """How to classify launch arguments of class `cls`, chosen once per class."""
    if issubclass(cls, np.generic):
        found = _numpy_scalar
    elif cls.__module__.split(".")[0] == "cupy" and cls.__name__ == "ndarray":
        found = _cupy_array
    elif cls.__module__.split(".")[0] == "torch" and hasattr(cls, "data_ptr"):
        found = _torch_tensor
    else:
        found = _array
    _classifiers[cls] = found
    return found


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
        return arguments.arg_type(value, name)
    return arguments.scalar_arg_type(value, name)


def jit(
    fn: Callable | None = None,
    *,
    block_threads: int | None = None,
    interpret: bool | None = None,
    fastmath: bool = False,
    max_registers: int | None = None,
) -> JITFunction | Callable[[Callable], JITFunction]:
    """Make a tile program: ``@ct.jit`` or ``@ct.jit(block_threads=256)``.

    `block_threads=None` lets the runtime choose threads per block; `interpret=True` (or
    ``COOP_TILES_INTERPRET=1``) runs the program with NumPy on the CPU; `fastmath=True` compiles
    its element-wise code as nvcc's ``--use_fast_math`` does, and `max_registers` caps the
    registers per thread (more resident blocks; docs/language.md, Code generation options).
    """
    options = dict(block_threads=block_threads, interpret=interpret, fastmath=fastmath, max_registers=max_registers)
    if fn is None:
        return lambda f: JITFunction(f, **options)
    return JITFunction(fn, **options)
