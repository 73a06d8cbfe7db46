"""Tutorial 06: autotuning a tile program, and reading what the tuner kept.

`@ct.autotune` over `@ct.jit` measures each `ct.Config` (threads per block plus constexpr
values) on the first call for each value of the `key` arguments, on the caller's stream
with CUDA events, and launches the best. `reset=` zeroes outputs before every trial, so
tuning never corrupts them: here each program writes one partial sum and the host adds
all of `out`, which is only right if no trial with a smaller TILE (more programs) left
partials behind. Timings are kept on disk per config: a new process does not retune, and
adding a config to the list measures only that one; `python -m coop_tiles tune list` lists
them. `COOP_TILES_LOG=info` logs every timing and the choice:

    COOP_TILES_LOG=info python tutorials/06_autotune.py
"""

import subprocess
import sys

import numpy as np
from _runner import ON_GPU, to_device, to_host

import coop_tiles as ct
from coop_tiles import tile

CONFIGS = [
    ct.Config(block_threads=128, TILE=2048),
    ct.Config(block_threads=256, TILE=2048),
    ct.Config(block_threads=256, TILE=4096),
    ct.Config(block_threads=512, TILE=8192),
]


@ct.autotune(configs=CONFIGS, key=["n"], reset=["out"])
@ct.jit
def sum_of_squares(x, out, n, TILE: ct.constexpr):
    pid = ct.program_id(0)
    base = pid * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    out[pid] = tile.sum(t * t)


def main() -> None:
    n = 1 << 22
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    if not ON_GPU:
        print("Autotuning measures on a GPU; none found, so here is what each config compiles to (sm_90):")
        # The autotuner wraps the @ct.jit kernel; `.kernel.fn` is the Python function.
        for config in CONFIGS:
            k = ct.jit(sum_of_squares.kernel.fn, block_threads=config.block_threads).compile(
                x, x, n, arch="sm_90", **config.kwargs
            )
            print(f"  {config}: {k.shared_bytes} bytes of TempStorage, {k.block_threads} threads")
        print("every config compiles; on a GPU the tuner times them and keeps the fastest")
        return
    xd, outd = to_device(x, np.zeros(n // 2048, np.float32))
    grid = lambda meta: ct.cdiv(n, meta["TILE"])  # noqa: E731 - the grid depends on the tuned TILE
    sum_of_squares[grid](xd, outd, n)
    best = sum_of_squares.best_config(grid, None, (xd, outd, n), {})  # from memory now
    total = to_host(outd).sum(dtype=np.float64)
    np.testing.assert_allclose(total, np.sum(x.astype(np.float64) ** 2), rtol=1e-4)
    print(f"best config for n={n}: {best}; the result matches NumPy")
    print("The timings kept on disk (python -m coop_tiles tune list):")
    subprocess.run([sys.executable, "-m", "coop_tiles", "tune", "list"], check=True)


if __name__ == "__main__":
    main()
