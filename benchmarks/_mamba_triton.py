"""Mamba's own Triton `selective_state_update` (its decode step), as a baseline for benchmarks/run.py.

Mamba's code (state-spaces/mamba) is third-party and never committed: `prepare` copies
`mamba_ssm/ops/triton/selective_state_update.py` and what it imports from Mamba (`softplus.py`) from a
Mamba checkout into the git-ignored `benchmarks/.mamba/triton/mamba_ssm/ops/triton/`; `load` imports it
from there without `mamba_ssm/__init__.py` (which imports Mamba's compiled extension): the parent
packages are stand-in modules whose search path is the copied folder. It needs PyTorch, Triton,
`einops` (the `.whl/` wheel on the GPU machines, docs/gpu.md) and `packaging`.

    python benchmarks/_mamba_triton.py PATH    # PATH: a Mamba work tree, or its git directory
                                               # (benchmarks/_mamba_cuda.py PATH prepares this too)
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT_DIR = BENCH_DIR / ".mamba" / "triton"  # git-ignored (benchmarks/.mamba/)
PACKAGE = "mamba_ssm.ops.triton"
FILES = ("selective_state_update.py", "softplus.py")  # the module and the Mamba modules it imports
MODULE = f"{PACKAGE}.selective_state_update"


def package_dir() -> Path:
    return ROOT_DIR.joinpath(*PACKAGE.split("."))


def prepare(checkout: str | Path) -> Path:
    """Copy FILES from a Mamba checkout (a work tree, or a git directory: its HEAD) into the git-ignored folder."""
    checkout, target = Path(checkout), package_dir()
    target.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        path = f"{PACKAGE.replace('.', '/')}/{name}"
        if (checkout / path).is_file():
            shutil.copyfile(checkout / path, target / name)
        else:
            text = subprocess.run(
                ["git", f"--git-dir={checkout}", "show", f"HEAD:{path}"], capture_output=True, check=True
            ).stdout
            (target / name).write_bytes(text)
    return target


def load() -> Any:
    """Mamba's `selective_state_update` module, imported from the prepared copy (its `selective_state_update` is
    the function; `selective_state_update_ref` its PyTorch reference)."""
    missing = [name for name in FILES if not (package_dir() / name).is_file()]
    if missing:
        raise RuntimeError(
            f"Mamba's Triton sources are missing from {package_dir()} ({', '.join(missing)}): "
            "run `python benchmarks/_mamba_triton.py PATH-TO-MAMBA` first"
        )
    if MODULE in sys.modules:
        return sys.modules[MODULE]
    parts = PACKAGE.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        existing = sys.modules.get(name)
        if existing is not None and not getattr(existing, "_coop_tiles_stand_in", False):
            raise RuntimeError(f"a real {name} is imported already; the prepared copy would not load beside it")
        if existing is None:
            stand_in = types.ModuleType(name)
            stand_in.__path__ = [str(ROOT_DIR.joinpath(*parts[:depth]))]  # a package: its submodules load from there
            stand_in._coop_tiles_stand_in = True  # type: ignore[attr-defined]
            sys.modules[name] = stand_in
    return importlib.import_module(MODULE)


if __name__ == "__main__":
    print(f"copied to {prepare(sys.argv[1])}")
