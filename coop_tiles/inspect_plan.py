"""What `python -m coop_tiles plan` needs: a kernel from a file, and arguments from type names."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .dtypes import as_dtype
from .errors import TileError

ARRAY = re.compile(r"^(\w+)((?:\[\])+)$")


def load_kernel(target: str) -> Any:
    """The @ct.jit kernel `KERNEL` of `FILE.py:KERNEL`, importing the file as a module (not as
    `__main__`, so its script part does not run; its directory is importable while it loads). A file
    inside a package (folders with `__init__.py`) is imported by its dotted name, so that its relative
    imports work (`coop_tiles/examples/sampling.py:gather_pass`)."""
    file, _, name = target.rpartition(":")
    path = Path(file)
    if not file or not name or not path.is_file():
        raise ValueError(f"{target!r} is not FILE.py:KERNEL of an existing file")
    root, dotted = package_module(path)
    sys.path.insert(0, str(root))
    try:
        if dotted:
            module = importlib.import_module(dotted)
        else:
            spec = importlib.util.spec_from_file_location(f"coop_tiles_plan_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    kernel = getattr(module, name, None)
    if not callable(getattr(kernel, "compile", None)):
        raise ValueError(f"{path} has no @ct.jit kernel {name!r}")
    return kernel


def package_module(path: Path) -> tuple[Path, str]:
    """`(folder to import from, dotted module name)` of a file inside a package, or `(its folder, "")` of
    one that is not in a package."""
    parts, folder = [path.stem], path.parent.resolve()
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return (folder, ".".join(parts)) if len(parts) > 1 else (folder, "")


def parse_args(tokens: list[str]) -> tuple[list[Any], dict[str, Any]]:
    """(runtime arguments, constexprs) from type names and NAME=VALUE pairs: an array type
    (`float32[]`, one `[]` per dimension) becomes a NumPy array standing for a device array, a
    scalar type a NumPy scalar, and a VALUE a Python literal (else the string itself)."""
    runtime: list[Any] = []
    constexprs: dict[str, Any] = {}
    for token in tokens:
        name, eq, value = token.partition("=")
        if eq:
            try:
                constexprs[name] = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                constexprs[name] = value
            continue
        match = ARRAY.match(token)
        try:
            dtype = as_dtype(match.group(1) if match else token)
        except TileError as e:
            raise ValueError(f"argument type {token!r}: {e.message}") from None
        runtime.append(np.zeros((1,) * (len(match.group(2)) // 2), dtype) if match else dtype.type(0))
    return runtime, constexprs
