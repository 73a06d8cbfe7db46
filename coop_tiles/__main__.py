"""`python -m coop_tiles`: run a tile program on the GPU, or, without one, in the NumPy interpreter
(then print its plan and compile it for sm_90 to show the whole toolchain works without a GPU)."""

from __future__ import annotations

import sys
import time

import numpy as np

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.runtime.launcher import gpu_available


@ct.jit
def scaled_cumsum(x, y, n, alpha, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    s = tile.scan(t * alpha, op="add")
    tile.store(y, base, s, valid=n - base)


def reference(x: np.ndarray, alpha: float, tile_size: int) -> np.ndarray:
    chunks = [np.cumsum(x[i : i + tile_size] * np.float32(alpha)) for i in range(0, len(x), tile_size)]
    return np.concatenate(chunks)


def main() -> int:
    n, tile_size, alpha = 1_000_003, 4096, 0.5
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    grid = ct.cdiv(n, tile_size)
    if gpu_available():
        import cupy as cp

        xd, yd = cp.asarray(x), cp.zeros(n, cp.float32)
        t0 = time.perf_counter()
        scaled_cumsum[grid](xd, yd, n, alpha, TILE=tile_size)
        cp.cuda.runtime.deviceSynchronize()
        y = cp.asnumpy(yd)
        print(
            f"Ran scaled_cumsum on the GPU ({cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}): "
            f"{n} float32 in {grid} programs, first call (compile + launch) {time.perf_counter() - t0:.2f} s"
        )
    else:
        y = np.zeros(n, np.float32)
        ct.jit(scaled_cumsum.fn, interpret=True)[grid](x, y, n, alpha, TILE=tile_size)
        print(f"No GPU found: ran scaled_cumsum in the NumPy interpreter ({n} float32, {grid} programs).")
        t0 = time.perf_counter()
        kernel = scaled_cumsum.compile(x, y, n, alpha, TILE=tile_size, arch="sm_90")
        print(
            f"Compiled it for sm_90 without a GPU in {time.perf_counter() - t0:.2f} s: "
            f"{len(kernel.cubin)} bytes of cubin, {kernel.local_memory_bytes()} bytes of local memory.\n"
        )
        print(kernel.plan)
    error = float(np.max(np.abs(y - reference(x, alpha, tile_size))))
    print(f"max |error| against NumPy: {error:.2e}")
    return 0 if error < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
