"""`@ct.jit`: a tile program that compiles per signature and launches with `kernel[grid](...)`."""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from .errors import LaunchError, TileError
from .lang import interpreter
from .lang.source import parse_function
from .lang.types import ArrayType, ScalarType
from .runtime import arguments, launcher
from .runtime.cache import DiskCache
from .runtime.compiler import CompiledKernel, Signature, compile_kernel


def _interpret_env() -> bool:
    return os.environ.get("COOP_TILES_INTERPRET", "").strip().lower() not in ("", "0", "false", "no")


class JITFunction:
    """A compiled-on-demand tile program. Launch with ``kernel[grid](*args, **constexprs)``."""

    def __init__(self, fn: Callable, *, block_threads: int | None = None, interpret: bool | None = None):
        self.fn = fn
        self.block_threads = block_threads
        self.interpret = interpret
        self.parsed = parse_function(fn)
        self._kernels: dict[tuple, tuple[CompiledKernel, list]] = {}
        self._cache: DiskCache | None = None
        self.__doc__ = fn.__doc__
        self.__name__ = fn.__name__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<coop_tiles kernel {self.fn.__qualname__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        raise LaunchError(f"launch a tile program with a grid: {self.__name__}[grid](...)")

    def __getitem__(self, launch: Any) -> Callable[..., None]:
        if isinstance(launch, tuple) and len(launch) == 2 and (
            isinstance(launch[0], tuple) or callable(launch[0])
        ):
            grid, stream = launch
        elif isinstance(launch, tuple) and len(launch) == 2 and not isinstance(launch[1], int):
            grid, stream = launch
        else:
            grid, stream = launch, None
        return lambda *args, **kwargs: self.run(grid, stream, args, kwargs)

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
        for name, value in constexprs.items():
            try:
                hash(value)
            except TypeError:
                raise LaunchError(f"constexpr {name!r} must be hashable, got {type(value).__name__}") from None
        return Signature(types, tuple(sorted(constexprs.items())), self.block_threads, arch)

    # ----- compiling -----------------------------------------------------------------------------
    def compile(self, *args: Any, arch: str | None = None, **kwargs: Any) -> CompiledKernel:
        """Compile for these arguments without launching. NumPy arrays stand for device arrays of
        their dtype; with an explicit `arch` (``"sm_90"``) no GPU is needed."""
        runtime, constexprs = self._bind(args, kwargs)
        names = [p for p in self.parsed.params if p not in self.parsed.constexprs]
        types = []
        for name, value in zip(names, runtime):
            if isinstance(value, np.ndarray):
                types.append((name, ArrayType(np.dtype(value.dtype))))
            elif isinstance(value, (ArrayType, ScalarType)):
                types.append((name, value))
            else:
                types.append((name, arguments.arg_type(value, name)))
        if arch is None:
            arch = launcher.device_arch(launcher.current_device().device_id)
        sig = Signature(tuple(types), tuple(sorted(constexprs.items())), self.block_threads, arch)
        return self._compile(sig)

    def _compile(self, sig: Signature) -> CompiledKernel:
        if self._cache is None:
            self._cache = DiskCache()
        return compile_kernel(self.fn, sig, self._cache)

    # ----- launching -----------------------------------------------------------------------------
    def run(self, grid: Any, stream: Any, args: tuple, kwargs: dict) -> None:
        interpret = self.interpret if self.interpret is not None else _interpret_env()
        try:
            runtime, constexprs = self._bind(args, kwargs)
            grid3 = launcher.normalize_grid(grid, constexprs)
            if interpret:
                interpreter.run(self.fn, grid3, tuple(args), kwargs)
                return
            self._launch(grid3, stream, runtime, constexprs)
        except TileError as e:
            raise e.with_traceback(None) from None

    def _launch(self, grid: tuple[int, int, int], stream: Any, runtime: list[Any], constexprs: dict) -> None:
        names = [p for p in self.parsed.params if p not in self.parsed.constexprs]
        keys, raw, libraries = [], [], set()
        for name, value in zip(names, runtime):
            key, item, library = _classify(value, name)
            keys.append(key)
            raw.append(item)
            if library:
                libraries.add(library)
        key = (tuple(keys), tuple(constexprs.values()))
        entry = self._kernels.get(key)
        if entry is None:
            device = launcher.current_device()
            sig = self._signature(runtime, constexprs, launcher.device_arch(device.device_id))
            kernel = self._compile(sig)
            entry = self._kernels[key] = (kernel, [arguments.packer(t) for _, t in sig.params], device.device_id)
        kernel, packers, device_id = entry
        compiled = launcher.load(kernel, device_id)
        if 0 in grid:
            return
        packed = [pack(item) for pack, item in zip(packers, raw)]
        launcher.launch(kernel, compiled, grid, launcher.stream_handle(stream, libraries), packed)


def _classify(value: Any, name: str) -> tuple[Any, Any, str | None]:
    """(cheap type key, pointer or scalar value, array library) of one launch argument."""
    cls = type(value)
    if cls is int or cls is float or cls is bool:
        return cls, value, None
    if isinstance(value, np.generic):
        return ("scalar", value.dtype), value, None
    arr = arguments.device_array(value, name)
    if arr is None:
        arguments.arg_type(value, name)  # raises a LaunchError naming the argument
        return cls, value, None
    return arr.dtype, arr.ptr, arr.library if arr.library != "other" else None


def jit(fn: Callable | None = None, *, block_threads: int | None = None,
        interpret: bool | None = None) -> JITFunction | Callable[[Callable], JITFunction]:
    """Make a tile program: ``@ct.jit`` or ``@ct.jit(block_threads=256)``.

    `block_threads=None` lets the runtime choose threads per block; `interpret=True` (or
    ``COOP_TILES_INTERPRET=1``) runs the program with NumPy on the CPU.
    """
    if fn is None:
        return lambda f: JITFunction(f, block_threads=block_threads, interpret=interpret)
    return JITFunction(fn, block_threads=block_threads, interpret=interpret)
