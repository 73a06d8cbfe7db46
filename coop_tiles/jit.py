"""`@ct.jit`: a tile program that compiles per signature and launches with `kernel[grid](...)`."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from . import ops  # noqa: F401 - registers every tile op
from .errors import LaunchError, TileError, caller_location
from .lang import interpreter
from .lang.frontend import build_program
from .lang.source import parse_function
from .lang.types import ArrayType, ScalarType
from .ops.debug import check_debug_launch
from .planner.layout import choose_block_threads
from .runtime import arguments, blockdims, launcher
from .runtime.arch import parse_arch
from .runtime.arguments import host_arg_type
from .runtime.cache import DiskCache
from .runtime.classify import Classifier, launch_device, many_devices
from .runtime.compiler import compile_kernel, show_interpreted_ir
from .runtime.fastpath import KernelBase, enable_c_launch, make_fast_path
from .runtime.kernel import CompiledKernel, Signature


def located_at_caller(e: TileError) -> TileError:
    """`e` with the user's calling line as its location when it has none (launch mistakes)."""
    if e.loc is None:
        loc = caller_location()
        if loc is not None:
            e.locate(loc)
    return e.with_traceback(None)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


class JITFunction(KernelBase):
    """A compiled-on-demand tile program. Launch with ``kernel[grid](*args, **constexprs)``.

    ``kernel[grid]`` comes from `KernelBase`: the C launch path when it was built, else Python."""

    def __init__(
        self,
        fn: Callable,
        *,
        block_threads: int | None = None,
        interpret: bool | None = None,
        debug: bool | None = None,
        fastmath: bool = False,
        max_registers: int | None = None,
        arch: str | int | tuple[int, int] | None = None,
    ):
        self.fn = fn
        #: the arch launches compile for (None: the device's); only the device's own or its arch-specific variant
        self.arch = None if arch is None else parse_arch(arch)
        self.block_threads = block_threads
        self.fastmath = fastmath
        self.max_registers = max_registers
        if max_registers is not None and not (isinstance(max_registers, int) and 16 <= max_registers <= 255):
            raise LaunchError(f"max_registers must be an int from 16 to 255, got {max_registers!r}")
        self.interpret = interpret
        self.debug = debug
        self._debug: bool | None = None  # `debug`, or COOP_TILES_DEBUG read at the first compile or launch
        self._static_printed: set[tuple] = set()  # specialisations whose ct.static_print lines were shown
        self.parsed = parse_function(fn)
        self._kernels: dict[tuple, launcher.PreparedLaunch] = {}  # by argument keys, constexprs, device
        self._preparing = threading.RLock()  # one thread compiles and loads a new specialisation
        self._programs: dict[tuple, Any] = {}  # typed IR per signature, for the interpreter
        self._interpreting: bool | None = None
        self._fast: Callable[..., bool] | None = None
        self._fast_libraries = (False, False)  # whether CuPy and PyTorch were loaded when `_fast` was made
        self._hooks: list[Callable[[CompiledKernel, Any, int], None]] = []
        self._classifier = Classifier()
        self._classify = self._classifier.classify  # launch arguments: type key, values, array library, device
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
        """Split the call into runtime arguments (in parameter order) and constexpr values; a parameter left
        out takes its default."""
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
        values |= {p: v for p, v in self.parsed.defaults.items() if p not in values}
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
    def compile(self, *args: Any, arch: str | int | tuple[int, int] | None = None, **kwargs: Any) -> CompiledKernel:
        """Compile for these arguments without launching. NumPy arrays stand for device arrays of
        their dtype; with an explicit `arch` (``"sm_90"``, ``"sm_90a"``, ``90`` or ``(9, 0)``) no GPU
        is needed."""
        try:
            runtime, constexprs = self._bind(args, kwargs)
            names = [p for p in self.parsed.params if p not in self.parsed.constexprs]
            types = tuple(
                (n, v if isinstance(v, (ArrayType, ScalarType)) else host_arg_type(v, n))
                for n, v in zip(names, runtime)
            )
            if arch is None:
                launcher.require_gpu(
                    "to compile for; pass the target arch to compile without one: "
                    f'{self.__name__}.compile(..., arch="sm_90")'
                )
                arch = self.launch_arch(self.launch_device(dict(zip(names, runtime))))
            else:
                arch = parse_arch(arch)
            self._check_constexprs(constexprs)
            sig = Signature(*self._key(types, constexprs, arch))
            return self._compile(sig)
        except TileError as e:
            raise located_at_caller(e) from None

    def launch_arch(self, device_id: int) -> str:
        """The arch this kernel compiles for to run on `device_id`: the device's ("sm_90"), or `arch` where it names
        the device's arch-specific variant ("sm_90a" on a 9.0 device: TMA and WGMMA, see docs/language.md, Matrix
        products); a LaunchError for any other arch."""
        native = launcher.device_arch(device_id)
        if self.arch is None or self.arch == native:
            return native
        if self.arch == native + "a":
            return self.arch
        raise LaunchError(f"{self.__name__} is made for arch={self.arch!r}: GPU {device_id} ({native}) cannot run it")

    def _key(self, types: tuple, constexprs: dict[str, Any], arch: str) -> tuple:
        """The fields of this kernel's `Signature` for these argument types, constexprs and arch."""
        return (
            types,
            tuple(sorted(constexprs.items())),
            self.block_threads,
            arch,
            self._debugging(),
            self.fastmath,
            self.max_registers,
        )

    def _check_constexprs(self, constexprs: dict[str, Any]) -> None:
        for name, value in constexprs.items():
            try:
                hash(value)
            except TypeError:
                raise LaunchError(f"constexpr {name!r} must be hashable, got {type(value).__name__}") from None

    def _compile(self, sig: Signature) -> CompiledKernel:
        if self._cache is None:
            self._cache = DiskCache()
        kernel = compile_kernel(
            self.fn, sig, self._cache, lambda program: self._show_static_prints((sig.params, sig.constexprs), program)
        )
        kernel.add_pre_launch_hook(launcher.opt_in_dynamic_shared_memory)
        for hook in self._hooks:
            kernel.add_pre_launch_hook(hook)
        return kernel

    def interpreting(self) -> bool:
        """Whether launches run in the interpreter: `interpret`, or COOP_TILES_INTERPRET read at the first launch."""
        if self._interpreting is None:
            self._interpreting = self.interpret if self.interpret is not None else _env_flag("COOP_TILES_INTERPRET")
        return self._interpreting

    def _debugging(self) -> bool:
        """Whether compiled kernels check `ct.device_assert` (and launches synchronise to report it)."""
        if self._debug is None:
            self._debug = self.debug if self.debug is not None else _env_flag("COOP_TILES_DEBUG")
        return self._debug

    def _show_static_prints(self, key: tuple, program: Any) -> None:
        """Print the program's `ct.static_print` lines, once per specialisation (argument types and
        constexprs): the front end runs again for other block sizes, archs and `.compile()` calls."""
        if key not in self._static_printed:
            self._static_printed.add(key)
            for line in program.static_prints:
                print(line)

    def add_pre_launch_hook(self, hook: Callable[[CompiledKernel, Any, int], None]) -> None:
        """Run `hook(kernel, function, device_id)` once per compiled kernel and device, before its
        first launch: for setting function attributes (cuKernelSetAttribute) and the like.
        Applies to kernels compiled after this call."""
        self._hooks.append(hook)

    # ----- launching -----------------------------------------------------------------------------
    def run(self, grid: Any, stream: Any, args: tuple, kwargs: dict) -> None:
        """Launch (or interpret) the program over `grid`; what ``kernel[grid, stream](...)`` calls."""
        try:
            if self.interpreting():
                self._interpret(grid, args, kwargs)
                return
            if not self._debugging() and self._launch_fast(grid, stream, args, kwargs):
                return
            if len(args) == self._n_runtime and kwargs.keys() == self._constexpr_set:
                runtime, constexprs = args, kwargs  # the common call: runtime positional, constexprs by name
            else:
                runtime, constexprs = self._bind(args, kwargs)
            grid3 = (grid, 1, 1) if type(grid) is int and grid > 0 else launcher.normalize_grid(grid, constexprs)
            self._launch(grid3, stream, runtime, constexprs)
        except TileError as e:
            raise located_at_caller(e) from None

    def _launch_fast(self, grid: Any, stream: Any, args: tuple, kwargs: dict) -> bool:
        """Launch through the fast paths (the C one when built) if the call is a common one.
        Debug launches take the general path, which synchronises after each launch."""
        libraries = ("cupy" in sys.modules, "torch" in sys.modules)
        if self._fast is None or libraries != self._fast_libraries:
            # (again once CuPy or PyTorch is imported: the fast paths read CuPy arrays, and the C one tensors, inline)
            self._fast_libraries = libraries
            many = many_devices()
            self._fast = make_fast_path(self._runtime_names, self._constexpr_names, self._classify, many)
            enable_c_launch(self, many)
        return self._fast(self, grid, stream, args, kwargs)

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
            self._show_static_prints(key, program)
            show_interpreted_ir(self.__name__, key, program)
            choose_block_threads(program, self.block_threads)  # the compiler's checks of block and tile size
            self._programs[key] = program
        interpreter.run(program, launcher.normalize_grid(grid, constexprs), list(runtime))

    def launch_device(self, values: dict[str, Any]) -> int:
        """The device a launch with these arguments (by parameter name) runs on; NumPy arrays and
        types (which stand for arrays in `compile`) and constexprs hold no device."""
        devices = [
            (name, self._classify(values[name], name)[3])
            for name in self._runtime_names
            if name in values and not isinstance(values[name], (np.ndarray, ArrayType, ScalarType))
        ]
        return launch_device(devices)

    def _launch(self, grid: tuple[int, int, int], stream: Any, runtime: Any, constexprs: dict) -> None:
        keys, values, libraries, devices = [], [], 0, []
        for name, value in zip(self._runtime_names, runtime):
            key, item, library, device = self._classify(value, name)
            keys.append(key)
            values += item
            libraries |= library
            devices.append((name, device))
        device = launch_device(devices)
        for name in self._constexpr_names:
            keys.append(constexprs[name])
        keys.append(device)
        key = tuple(keys)
        prepared = self._kernels.get(key) or self._prepared(key, runtime, constexprs, device)
        if grid[0] and grid[1] and grid[2]:
            with launcher.on_device(device):
                handle = launcher.stream_handle(stream, libraries, device)
                if stream is not None:
                    _check_stream(handle, device)
                prepared.launch(grid[0], grid[1], grid[2], handle, *values)
                if self._debugging():
                    check_debug_launch(handle, prepared.kernel.program.name)

    def _prepared(self, key: tuple, runtime: Any, constexprs: dict, device_id: int) -> launcher.PreparedLaunch:
        """The prepared launch for `key`, made once even when several threads launch it at once."""
        with self._preparing:
            prepared = self._kernels.get(key)
            if prepared is None:
                prepared = self._kernels[key] = self._prepare(runtime, constexprs, device_id)
            return prepared

    def _prepare(self, runtime: Any, constexprs: dict, device_id: int) -> launcher.PreparedLaunch:
        """Compile (or fetch) and load the kernel of a new signature on `device_id`, choosing its
        block size there, and prepare its launches."""
        with launcher.on_device(device_id):
            device = launcher.device(device_id)
            sig = self._signature(list(runtime), constexprs, self.launch_arch(device_id))
            kernel = self._compile(sig) if self.block_threads is not None else blockdims.select(self, sig, device)
            compiled = launcher.load(kernel, device_id)
            context = launcher.primary_context(device_id)
            return launcher.PreparedLaunch(kernel, compiled, [t for _, t in sig.params], device_id, context)


def _check_stream(handle: int, device: int) -> None:
    """A LaunchError when the launch's stream belongs to another device than its arrays."""
    if launcher.device_count() > 1:
        where = launcher.stream_device(handle)
        if where is not None and where != device:
            raise LaunchError(
                f"the stream is on GPU {where} but the launch runs on GPU {device} (the device of its arrays); "
                f"pass a stream of GPU {device}, or none for the current stream there"
            )


def jit(
    fn: Callable | None = None,
    *,
    block_threads: int | None = None,
    interpret: bool | None = None,
    debug: bool | None = None,
    fastmath: bool = False,
    max_registers: int | None = None,
    arch: str | int | tuple[int, int] | None = None,
) -> JITFunction | Callable[[Callable], JITFunction]:
    """Make a tile program: ``@ct.jit`` or ``@ct.jit(block_threads=256)``.

    `block_threads=None` lets the runtime choose threads per block; `interpret=True` (or
    ``COOP_TILES_INTERPRET=1``) runs the program with NumPy on the CPU; `debug=True` (or
    ``COOP_TILES_DEBUG=1``) makes compiled kernels check `ct.device_assert`, and each launch
    wait for the kernel to report a failed one; `fastmath=True` compiles its element-wise code
    as nvcc's ``--use_fast_math`` does, and `max_registers` caps the registers per thread (more
    resident blocks; docs/language.md, Code generation options); `arch="sm_90a"` compiles launches on a 9.0 GPU
    for its arch-specific features (a K loop of `tile.dot` pipelined with TMA and WGMMA: docs/language.md, Matrix
    products), None for the device's own arch.
    """
    options = dict(
        block_threads=block_threads,
        interpret=interpret,
        debug=debug,
        fastmath=fastmath,
        max_registers=max_registers,
        arch=arch,
    )
    if fn is None:
        return lambda f: JITFunction(f, **options)
    return JITFunction(fn, **options)
