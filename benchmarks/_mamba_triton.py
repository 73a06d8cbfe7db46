"""Mamba's own Triton `selective_state_update` (its decode step) and `mamba_chunk_scan_combined` (Mamba-2's SSD
chunked scan), as baselines for benchmarks/run.py.

Mamba's code (state-spaces/mamba) is third-party and never committed: `prepare` copies
`mamba_ssm/ops/triton/selective_state_update.py`, `ssd_combined.py` and what they import from Mamba (`FILES`)
from a Mamba checkout into the git-ignored `benchmarks/.mamba/triton/`; `load` imports one of them from there
without `mamba_ssm/__init__.py` (which imports Mamba's compiled extension): the parent packages are stand-in
modules whose search path is the copied folder (`mamba_ssm/utils/` loads as a namespace package). It needs
PyTorch, Triton, `einops` (the `.whl/` wheel on the GPU machines, docs/gpu.md) and `packaging`.

    python benchmarks/_mamba_triton.py PATH    # PATH: a Mamba work tree, or its git directory
                                               # (benchmarks/_mamba_cuda.py PATH prepares this too)
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT_DIR = BENCH_DIR / ".mamba" / "triton"  # git-ignored (benchmarks/.mamba/)
PACKAGE = "mamba_ssm.ops.triton"
MODULE = f"{PACKAGE}.selective_state_update"
SSD_MODULE = f"{PACKAGE}.ssd_combined"
#: each module and the Mamba files it imports (paths in the checkout); a checkout without the SSD files (an old
#: Mamba) still prepares the decode step's
FILES = {
    MODULE: ("mamba_ssm/ops/triton/selective_state_update.py", "mamba_ssm/ops/triton/softplus.py"),
    SSD_MODULE: tuple(
        f"mamba_ssm/{name}.py"
        for name in (
            "ops/triton/ssd_combined", "ops/triton/ssd_bmm", "ops/triton/ssd_chunk_state", "ops/triton/ssd_chunk_scan",
            "ops/triton/ssd_state_passing", "ops/triton/layernorm_gated", "ops/triton/k_activations",
            "ops/triton/softplus", "utils/torch", "utils/determinism",
        )
    ),
}  # fmt: skip


def package_dir() -> Path:
    return ROOT_DIR.joinpath(*PACKAGE.split("."))


def prepare(checkout: str | Path) -> Path:
    """Copy FILES from a Mamba checkout (a work tree, or a git directory: its HEAD) into the git-ignored folder: all
    of the decode step's, the SSD's where the checkout has them all."""
    checkout = Path(checkout)
    texts = {path: _read(checkout, path) for path in dict.fromkeys(p for paths in FILES.values() for p in paths)}
    for module, paths in FILES.items():
        if module == MODULE or all(texts[p] is not None for p in paths):
            for path in paths:
                if texts[path] is None:
                    raise FileNotFoundError(f"{path} is not in the Mamba checkout {checkout}")
                (ROOT_DIR / path).parent.mkdir(parents=True, exist_ok=True)
                (ROOT_DIR / path).write_bytes(texts[path])
    return package_dir()


def _read(checkout: Path, path: str) -> bytes | None:
    """The file at `path` of a work tree or of a git directory's HEAD; None where it has none."""
    if (checkout / path).is_file():
        return (checkout / path).read_bytes()
    if not (checkout / "HEAD").is_file():
        return None
    done = subprocess.run(["git", f"--git-dir={checkout}", "show", f"HEAD:{path}"], capture_output=True)
    return done.stdout if done.returncode == 0 else None


def load(module: str = MODULE) -> Any:
    """Mamba's `selective_state_update` module (its `selective_state_update` is the function;
    `selective_state_update_ref` its PyTorch reference), or `SSD_MODULE` (`mamba_chunk_scan_combined`), imported
    from the prepared copy."""
    missing = [path for path in FILES[module] if not (ROOT_DIR / path).is_file()]
    if missing:
        raise RuntimeError(
            f"Mamba's Triton sources are missing from {package_dir()} ({', '.join(missing)}): "
            "run `python benchmarks/_mamba_triton.py PATH-TO-MAMBA` first"
        )
    if module in sys.modules:
        return sys.modules[module]
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
    return importlib.import_module(module)


if __name__ == "__main__":
    print(f"copied to {prepare(sys.argv[1])}")
