"""The per-kernel launch fast path: a small function generated for one parameter list.

Launch overhead is Python overhead, so the common call (runtime arguments positional,
constexprs by keyword, an int grid) runs through a function unrolled over the kernel's
parameters, with CuPy arrays and Python scalars classified inline (a CuPy array's key is
its `dtype.num`: CuPy arrays are always native byte order, and NumPy dtype hashing is slow). Anything unusual returns
False and takes the general path, which handles (and reports) every case.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class _NeverMatches:
    pass


def generate_source(runtime_names: list[str], constexpr_names: list[str]) -> str:
    """Source of `fast(jit, grid, stream, args, kwargs) -> bool` for this parameter list."""
    n = len(runtime_names)
    lines = ["def fast(jit, grid, stream, args, kwargs):"]
    lines.append(f"    if len(kwargs) != {len(constexpr_names)} or type(grid) is not int or grid <= 0:")
    lines.append("        return False")
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
    for i, name in enumerate(runtime_names):
        lines += [
            f"    t{i} = type(v{i})",
            f"    if t{i} is CUPY_ARRAY and v{i}._c_contiguous:",
            f"        k{i} = v{i}.dtype.num; p{i} = v{i}.data.ptr; q{i} = v{i}.size; libs |= CUPY",
            f"    elif t{i} is int or t{i} is float:",
            f"        k{i} = t{i}; p{i} = v{i}; q{i} = 0",
            "    else:",
            f"        k{i}, (p{i}, q{i}), l{i} = classify(v{i}, {name!r}); libs |= l{i}",
        ]
    key = ", ".join([f"k{i}" for i in range(n)] + [f"c{j}" for j in range(len(constexpr_names))])
    lines.append(f"    key = ({key},)")
    lines.append("    prepared = jit._kernels.get(key)")
    lines.append("    if prepared is None:")
    lines.append("        prepared = jit._kernels[key] = jit._prepare(args, kwargs)")
    lines.append("    if stream is None:")
    lines.append("        handle = cupy_stream().ptr if libs == CUPY else (current_stream(libs) if libs else 0)")
    lines.append("    else:")
    lines.append("        handle = stream_handle(stream, libs)")
    lines.append(f"    prepared.launch(grid, 1, 1, handle{''.join(f', p{i}, q{i}' for i in range(n))})")
    lines.append("    return True")
    return "\n".join(lines) + "\n"


def make_fast_path(runtime_names: list[str], constexpr_names: list[str], classify: Callable) -> Callable[..., bool]:
    from . import launcher

    cupy = sys.modules.get("cupy")
    namespace: dict[str, Any] = {
        "CUPY_ARRAY": getattr(cupy, "ndarray", _NeverMatches),
        "cupy_stream": cupy.cuda.get_current_stream if cupy is not None else None,
        "CUPY": launcher.CUPY,
        "classify": classify,
        "current_stream": launcher.current_stream,
        "stream_handle": launcher.stream_handle,
    }
    exec(compile(generate_source(runtime_names, constexpr_names), "<coop_tiles launch fast path>", "exec"), namespace)
    return namespace["fast"]


def c_fast_path(runtime_names: list[str], constexpr_names: list[str]) -> Callable[..., bool] | None:
    """The C fast path (the optional `_claunch` extension) bound to this kernel, when it was built
    and CuPy is loaded; None otherwise (the generated Python fast path then does the work)."""
    cupy = sys.modules.get("cupy")
    if cupy is None or len(runtime_names) > 64:
        return None
    try:
        from ._claunch import fast_launch
    except ImportError:
        return None
    names, array_type, current = tuple(constexpr_names), cupy.ndarray, cupy.cuda.get_current_stream
    memo = [None, None, None]  # the last call's signature tokens and launch info (see _claunch.c)

    def fast(jit: Any, grid: Any, stream: Any, args: tuple, kwargs: dict) -> bool:
        return fast_launch(jit._kernels, names, array_type, current, grid, stream, args, kwargs, memo)

    return fast
