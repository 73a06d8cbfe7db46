"""The demo `python -m coop_tiles` runs: a tile program on the GPU with whichever array library is
installed (CuPy or PyTorch), or, without either or without a GPU, in the NumPy interpreter (then
it prints the plan and compiles the program anyway, to show the toolchain works without a GPU)."""

from __future__ import annotations

import importlib
import time
from types import ModuleType

import numpy as np

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.runtime import launcher

INSTALL_HINT = 'pip install "coop-tiles[cupy]" (or install PyTorch with CUDA)'


@ct.jit
def scaled_cumsum(x, y, n, alpha, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    s = tile.scan(t * alpha, op="add")
    tile.store(y, base, s, valid=n - base)


def reference(x: np.ndarray, alpha: float, tile_size: int) -> np.ndarray:
    chunks = [np.cumsum(x[i : i + tile_size] * np.float32(alpha)) for i in range(0, len(x), tile_size)]
    return np.concatenate(chunks)


def array_library() -> ModuleType | None:
    """CuPy, else PyTorch (when built with CUDA), else None."""
    for name in ("cupy", "torch"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if name == "cupy" or module.cuda.is_available():
            return module
    return None


def to_device(library: ModuleType, x: np.ndarray) -> tuple[object, object]:
    """`x` on the GPU and a zeroed output like it, as `library`'s arrays."""
    if library.__name__ == "cupy":
        return library.asarray(x), library.zeros(x.shape, x.dtype)
    xd = library.from_numpy(x).cuda()
    return xd, library.zeros_like(xd)


def main() -> int:
    n, tile_size, alpha = 1_000_003, 4096, 0.5
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    grid = ct.cdiv(n, tile_size)
    library = array_library() if launcher.gpu_available() else None
    if library is not None:
        device = launcher.current_device()
        device.set_current()
        xd, yd = to_device(library, x)
        t0 = time.perf_counter()
        scaled_cumsum[grid](xd, yd, n, alpha, TILE=tile_size)
        device.sync()
        y = ct.testing.to_numpy(yd)
        print(
            f"Ran scaled_cumsum on the GPU ({device.name}, {library.__name__} arrays): {n} float32 in {grid} "
            f"programs, first call (compile + launch) {time.perf_counter() - t0:.2f} s"
        )
    else:
        if launcher.gpu_available():
            arch = launcher.device_arch(launcher.current_device().device_id)
            print(
                f"A GPU is here but neither CuPy nor PyTorch with CUDA is installed, so there are no device arrays "
                f"to launch with; {INSTALL_HINT} to run on it. Meanwhile:"
            )
        else:
            arch = "sm_90"
            print(f"No GPU found ({launcher.no_gpu_reason()}).")
        y = np.zeros(n, np.float32)
        ct.jit(scaled_cumsum.fn, interpret=True)[grid](x, y, n, alpha, TILE=tile_size)
        print(f"Ran scaled_cumsum in the NumPy interpreter ({n} float32, {grid} programs).")
        t0 = time.perf_counter()
        kernel = scaled_cumsum.compile(x, y, n, alpha, TILE=tile_size, arch=arch)
        print(
            f"Compiled it for {arch} in {time.perf_counter() - t0:.2f} s: "
            f"{len(kernel.cubin)} bytes of cubin, {kernel.local_memory_bytes()} bytes of local memory.\n"
        )
        print(kernel.plan)
    error = float(np.max(np.abs(y - reference(x, alpha, tile_size))))
    print(f"max |error| against NumPy: {error:.2e}")
    return 0 if error < 1e-2 else 1
