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
    `__main__`, so its script part does not run; its directory is importable while it loads)."""
    file, _, name = target.rpartition(":")
    path = Path(file)
    if not file or not name or not path.is_file():
        raise ValueError(f"{target!r} is not FILE.py:KERNEL of an existing file")
    spec = importlib.util.spec_from_file_location(f"coop_tiles_plan_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    kernel = getattr(module, name, None)
    if not callable(getattr(kernel, "compile", None)):
        raise ValueError(f"{path} has no @ct.jit kernel {name!r}")
    return kernel


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
