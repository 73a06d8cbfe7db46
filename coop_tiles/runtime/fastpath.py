"""The launch fast paths: `kernel[grid]`, and the call that launches a prepared specialisation.

Launch overhead is Python overhead, so the common call (runtime arguments positional,
constexprs by keyword, an int grid or a tuple of 1 to 3 ints) runs through a function generated
for the kernel's parameter list, with CuPy arrays and Python scalars classified inline (a CuPy array's key is
its `dtype.num`: CuPy arrays are always native byte order, and NumPy dtype hashing is slow).
When the optional C extension `_claunch` is built, `KernelBase` (JITFunction's base class)
does the same in C, including `kernel[grid]` itself, for CuPy 1-D arrays and PyTorch tensors of
any rank (whose keys it takes from the kernel's `Classifier.learnt_keys`). Anything unusual takes
the general path, which handles (and reports) every case.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .._log import get_logger
from ..errors import LaunchError, TileError


class _NeverMatches:
    pass


def _cupy_current_stream() -> Any:
    """CuPy's current stream, for a fast path generated before CuPy was imported."""
    import cupy

    return cupy.cuda.get_current_stream()


def generate_source(runtime_names: list[str], constexpr_names: list[str], many_devices: bool) -> str:
    """Source of `fast(jit, grid, stream, args, kwargs) -> bool` for this parameter list.

    The launch runs on its arrays' device (`dev`; the current one without arrays). With several
    GPUs in the process it reads each CuPy array's device, and leaves to the general path a
    launch whose arrays are on different devices, whose device's context is not current, or
    that names a stream (whose device the general path checks)."""
    n = len(runtime_names)
    lines = ["def fast(jit, grid, stream, args, kwargs):"]
    lines.append(f"    if len(kwargs) != {len(constexpr_names)}:")
    lines.append("        return False")
    # an int or a tuple of 1 to 3 ints (Triton's `kernel[(n,)]`), each > 0; anything else (a callable, a zero
    # extent, a bool) the general path handles or reports
    lines += [
        "    if type(grid) is int:",
        "        if grid <= 0:",
        "            return False",
        "        g0 = grid; g1 = g2 = 1",
        "    elif type(grid) is tuple and 1 <= len(grid) <= 3:",
        "        g0, g1, g2 = grid + (1, 1)[: 3 - len(grid)]",
        "        if type(g0) is not int or type(g1) is not int or type(g2) is not int or min(grid) <= 0:",
        "            return False",
        "    else:",
        "        return False",
    ]
    if many_devices:
        lines += ["    if stream is not None:", "        return False"]
    lines.append("    try:")
    if n:
        lines.append(f"        {''.join(f'v{i}, ' for i in range(n))}= args")
    else:
        lines.append("        if args: return False")
    for j, name in enumerate(constexpr_names):
        lines.append(f"        c{j} = kwargs[{name!r}]")
    lines.append("    except (ValueError, KeyError):")
    lines.append("        return False")
    lines.append("    libs = 0")
    lines.append("    dev = -1")
    for i, name in enumerate(runtime_names):
        lines += [
            f"    t{i} = type(v{i})",
            f"    if t{i} is CUPY_ARRAY and v{i}._c_contiguous and v{i}.ndim == 1:",
            f"        d{i} = v{i}.data; k{i} = v{i}.dtype.num; p{i} = d{i}.ptr; q{i} = v{i}.size; libs |= CUPY",
        ]
        if many_devices:
            lines += [
                f"        if d{i}.device_id != dev:",
                "            if dev >= 0: return False",
                f"            dev = d{i}.device_id",
            ]
        else:
            lines.append("        dev = 0")
        lines += [
            f"    elif t{i} is int or t{i} is float:",
            f"        k{i} = t{i}; p{i} = v{i}; q{i} = 0",
            "    else:",
            f"        k{i}, (p{i}, q{i}), l{i}, e{i} = classify(v{i}, {name!r}); libs |= l{i}",
            f"        if e{i} != dev and e{i} >= 0:",
            "            if dev >= 0: return False",
            f"            dev = e{i}",
        ]
    lines.append("    if dev < 0:")
    lines.append("        dev = current_device_id()" if many_devices else "        dev = 0")
    key = ", ".join([f"k{i}" for i in range(n)] + [f"c{j}" for j in range(len(constexpr_names))] + ["dev"])
    lines.append(f"    key = ({key},)")
    lines.append("    prepared = jit._kernels.get(key)")
    lines.append("    if prepared is None:")
    lines.append("        prepared = jit._prepared(key, args, kwargs, dev)")
    if many_devices:
        lines += ["    if current_context() != prepared.context:", "        return False"]
    lines.append("    if stream is None:")
    lines.append("        handle = cupy_stream().ptr if libs == CUPY else (current_stream(libs, dev) if libs else 0)")
    lines.append("    else:")
    lines.append("        handle = stream_handle(stream, libs, dev)")
    launch = f"prepared.launch(g0, g1, g2, handle{''.join(f', p{i}, q{i}' for i in range(n))})"
    if many_devices:
        lines.append(f"    {launch}")
    else:  # with one GPU, a thread with no current context fails to launch: the general path sets it
        lines += ["    try:", f"        {launch}", "    except LAUNCH_ERROR:", "        return False"]
    lines.append("    return True")
    return "\n".join(lines) + "\n"


def make_fast_path(
    runtime_names: list[str], constexpr_names: list[str], classify: Callable, many_devices: bool
) -> Callable[..., bool]:
    """The generated fast path for this parameter list (see `generate_source`)."""
    from . import launcher

    cupy = sys.modules.get("cupy")
    namespace: dict[str, Any] = {
        "CUPY_ARRAY": getattr(cupy, "ndarray", _NeverMatches),
        "cupy_stream": cupy.cuda.get_current_stream if cupy is not None else _cupy_current_stream,
        "CUPY": launcher.CUPY,
        "LAUNCH_ERROR": LaunchError,
        "classify": classify,
        "current_context": current_context,
        "current_device_id": launcher.current_device_id,
        "current_stream": launcher.current_stream,
        "stream_handle": launcher.stream_handle,
    }
    source = generate_source(runtime_names, constexpr_names, many_devices)
    exec(compile(source, "<coop_tiles launch fast path>", "exec"), namespace)
    return namespace["fast"]


def _cupy_stream_capi() -> Any:
    """CuPy's C function for the current stream's handle (a Cython capsule), or None."""
    try:
        from cupy_backends.cuda import stream
    except ImportError:
        return None
    return getattr(stream, "__pyx_capi__", {}).get("get_current_stream_ptr")


def _torch_launch(torch: Any, learnt_keys: dict) -> tuple | None:
    """What the C path needs to read PyTorch tensors: the tensor classes it reads (torch.Tensor and nn.Parameter,
    whose attributes are torch's own), the function giving PyTorch's current raw stream (what
    `launcher.current_stream` calls), and the classifier's learnt keys; None for a `torch` module without them (a
    stand-in, an old torch), whose tensors the Python path reads."""
    raw_stream = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
    parameter = getattr(getattr(torch, "nn", None), "Parameter", None)
    classes = tuple(c for c in (getattr(torch, "Tensor", None), parameter) if isinstance(c, type))
    return (classes, raw_stream, learnt_keys) if raw_stream is not None and classes else None


def enable_c_launch(jit: Any, many_devices: bool) -> bool:
    """Let the C launch path (the optional `_claunch` extension) launch `jit`'s common calls, when the extension
    was built: CuPy arrays when CuPy is loaded, PyTorch tensors when PyTorch is; otherwise (and for every other
    call) the generated Python fast path does."""
    if not hasattr(jit, "_enable_c_launch") or len(jit._runtime_names) > 64:
        return False
    names = tuple(sys.intern(name) for name in jit._constexpr_names)
    cupy, torch = sys.modules.get("cupy"), sys.modules.get("torch")
    cupy_launch = (cupy.ndarray, cupy.cuda.get_current_stream, _cupy_stream_capi()) if cupy is not None else None
    torch_launch = _torch_launch(torch, jit._classifier.learnt_keys) if torch is not None else None
    return jit._enable_c_launch(jit._kernels, names, cupy_launch, torch_launch, many_devices)


class _Launch:
    """A kernel bound to a grid and stream; calling it launches (the Python `kernel[grid]`)."""

    __slots__ = ("kernel", "grid", "stream")

    def __init__(self, kernel: Any, grid: Any, stream: Any):
        self.kernel, self.grid, self.stream = kernel, grid, stream

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        kernel = self.kernel
        if kernel._fast is not None:
            try:
                if kernel._fast(kernel, self.grid, self.stream, args, kwargs):
                    return
            except TileError as e:
                raise e.with_traceback(None) from None
        kernel.run(self.grid, self.stream, args, kwargs)


class _PythonKernelBase:
    """`kernel[grid]` without the C extension."""

    def __getitem__(self, launch: Any) -> _Launch:
        grid, stream = (launch, None) if type(launch) is int else self._split_launch(launch)
        return _Launch(self, grid, stream)


#: why the C launch path is not available (None when it is), for the log and `--version`
C_LAUNCH_MISSING: str | None = None
#: the file the C launch path was loaded from (None when it was not)
C_LAUNCH_FILE: str | None = None
try:
    from ._claunch import KernelBase
    from ._claunch import current_context as current_context

    C_LAUNCH_FILE = sys.modules[KernelBase.__module__].__file__
except ImportError as e:  # not built (no C compiler, or a checkout never built in place): kernel[grid] is Python
    from pathlib import Path

    from .extension import missing_reason, other_packages
    from .launcher import current_context

    KernelBase = _PythonKernelBase
    _package = Path(__file__).resolve().parent.parent
    C_LAUNCH_MISSING = missing_reason(str(e), _package, other_packages(_package))
    get_logger("launch").warning(
        "the C launch path (coop_tiles.runtime._claunch) is not built: %s. Launches go through the Python "
        "fast path, which costs more host time per launch",
        C_LAUNCH_MISSING,
    )
