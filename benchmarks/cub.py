"""The CUB baselines: benchmarks/cub_baselines.cu built with nvcc for the run's arch into the git-ignored
benchmarks/.build/ and loaded with ctypes, once per process."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
CUB_SOURCE = BENCH_DIR / "cub_baselines.cu"
BUILD_DIR = BENCH_DIR / ".build"  # git-ignored
_CUB_LIBRARY: dict[str, Any] = {}  # arch -> the loaded library, or the exception its build raised


def _nvcc() -> str:
    """The nvcc to build with: on PATH, else under $CUDA_HOME or /usr/local/cuda."""
    import shutil

    roots = [root for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if root]
    candidates = [shutil.which("nvcc"), *(str(Path(root) / "bin" / "nvcc") for root in roots)]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError("nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): CUB baselines not built")


def _build_cub_library(arch: str) -> Path:
    """benchmarks/cub_baselines.cu built with nvcc into a shared library under benchmarks/.build/, named by a
    hash of the source, the flags and nvcc's version, so that an edit or another toolkit rebuilds it."""
    import hashlib

    nvcc = _nvcc()
    flags = ["-O3", f"-arch={arch}", "-std=c++17", "-shared", "-Xcompiler", "-fPIC"]
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256("\0".join([CUB_SOURCE.read_text(), *flags, version]).encode()).hexdigest()[:16]
    library = BUILD_DIR / f"cub_baselines-{arch}-{key}.so"
    if library.exists():
        return library
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    partial = library.with_suffix(f".{os.getpid()}.tmp")
    done = subprocess.run([nvcc, *flags, "-o", str(partial), str(CUB_SOURCE)], capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error" in line] or done.stderr.splitlines() or ["?"]
        raise RuntimeError(f"nvcc failed on cub_baselines.cu: {errors[0].strip()}")
    os.replace(partial, library)
    return library


def _declare_cub(lib: Any) -> Any:
    """The ctypes signatures of cub_baselines.cu's extern "C" functions (each returns a cudaError_t as int)."""
    import ctypes

    p, i, size = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)
    histogram = [p, size, p, p, ctypes.c_longlong, i, i, i, p]
    signatures = {
        "cub_histogram_even_u8": histogram,
        "cub_histogram_even_i32": histogram,
        "cub_segment_sort_length": [],
        "cub_error_name": [i],
        "cub_segment_sort_keys": [p, p, i, p],
        "cub_segment_sort_pairs": [p, p, p, p, i, p],
        "cub_inclusive_sum_i32": [p, size, p, p, i, p],
        "cub_inclusive_sum_f32": [p, size, p, p, i, p],
        "cub_select_if_i32": [p, size, p, p, p, i, p],
        "cub_select_if_f32": [p, size, p, p, p, i, p],
        "cub_select_flagged_i32": [p, size, p, p, p, p, i, p],
        "cub_select_flagged_f32": [p, size, p, p, p, p, i, p],
    }
    for name, argtypes in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, ctypes.c_int
    lib.cub_error_name.restype = ctypes.c_char_p
    return lib


def cub_library(arch: str) -> Any:
    """The CUB baselines library for `arch` (built on first use, then loaded with ctypes), once per process; a
    failed build raises the same error for every section that asks again."""
    import ctypes

    if arch not in _CUB_LIBRARY:
        try:
            _CUB_LIBRARY[arch] = _declare_cub(ctypes.CDLL(str(_build_cub_library(arch))))
        except Exception as error:
            _CUB_LIBRARY[arch] = error
    if isinstance(_CUB_LIBRARY[arch], Exception):
        raise _CUB_LIBRARY[arch]
    return _CUB_LIBRARY[arch]


def cub_call(lib: Any, status: int, what: str) -> None:
    """Raise, naming the error, on a non-zero cudaError_t from the library."""
    if status != 0:
        raise RuntimeError(f"{what} failed: {lib.cub_error_name(status).decode()} ({status})")
