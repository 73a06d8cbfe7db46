"""Tutorial 12: a tiled matrix product, `c = a @ b`, K-looped, with ragged edges, autotuned.

Triton's matmul tutorial (03) gives each program one (BM, BN) block of `c` and walks the K axis in
steps of BK: load a (BM, BK) block of `a` and a (BK, BN) block of `b`, multiply them, add into an
accumulator, then store the block. The tile program is the same loop:

    Triton (per program)                                 the tile program (per program)
    acc = tl.zeros((BM, BN), tl.float32)                 acc = tile.zeros((BM, BN), np.float32)
    a = tl.load(a_ptrs, mask=..., other=0.0)             x = tile.load(a, (r, k), (BM, BK),
                                                                   valid=(m - r, kk - k), other=0)
    acc = tl.dot(a, b, acc)                              acc = tile.dot(x, y, acc)
    tl.store(c_ptrs, acc, mask=...)                      tile.store(c, (r, col), acc, valid=(m - r, n - col))

Ragged edges need no special case: `valid` counts the rows and columns that exist (clamped to the
block), the loads give 0 past them (zeros add nothing to the product) and the store writes only
them, so M, N and K need not be multiples of the block. `acc` never leaves registers: the planner keeps
it as cuBLASDx's accumulator fragment, since the loop only adds into it and stores it. `tile.dot` of
bfloat16 or float16 blocks accumulates in float32 (the result is float32); float32 blocks multiply in
float32, or on tensor cores in tf32 with `allow_tf32=True` (`TF32`). On the GPU each `tile.dot` is a block GEMM of
cuBLASDx (`docs/language.md`, "Matrix products").

On an H100 or H200 the tutorial compiles for `arch="sm_90a"` (Hopper's arch-specific code, which no other GPU
runs): there the whole K loop becomes one pipelined cuBLASDx GEMM, its operand blocks brought into shared memory by
TMA while the tensor cores (WGMMA) work on the blocks already there, and the store of `acc` is fused into it (the plan:
`K loop pipelined`). It runs where its conditions hold (16-byte aligned operands with rows of whole 16 bytes, the
block at a whole tile); elsewhere the loop as written runs, with the same result (`docs/language.md`, "Matrix
products").

The programs are numbered in groups of GROUP_M rows of blocks, as Triton's tutorial does: the
programs that run together share the blocks of `b` they read, so they come from L2 rather than
from memory. `@ct.autotune` times the block shapes in CONFIGS on the first call for each (m, n, k)
and keeps the fastest on disk (tutorial 06).

    python tutorials/12_matmul.py          # on a GPU: checked against NumPy, timed against torch.matmul
"""

import numpy as np
from _runner import ON_GPU, hopper, kernel, to_device, to_host, where

import coop_tiles as ct
from coop_tiles import tile

#: the block shapes the tuner tries on a GPU (each is a new cuBLASDx GEMM: ~20 s of NVRTC, once): for the loop as
#: written, whose accumulator stays in registers as cuBLASDx's fragment (the plan: `GEMM fragment`), one barrier per
#: K step; and for the pipelined K loop (sm_90a: 3 or 4 stages of the operand blocks in shared memory, two
#: warpgroups; 0.64-0.73x cuBLAS at 4096^3 in bfloat16 on an H200 for the larger two, 0.5x for 128x128)
LOOP_CONFIGS = [
    ct.Config(block_threads=256, BM=128, BN=128, BK=32),
    ct.Config(block_threads=256, BM=128, BN=128, BK=64),
    ct.Config(block_threads=128, BM=64, BN=64, BK=64),
    ct.Config(block_threads=128, BM=64, BN=128, BK=64),
]
PIPELINED_CONFIGS = [
    ct.Config(block_threads=256, BM=128, BN=128, BK=64),
    ct.Config(block_threads=256, BM=256, BN=128, BK=64),
    ct.Config(block_threads=256, BM=128, BN=256, BK=64),
]
GROUP_M = 8
#: Hopper's arch-specific code where the GPU is an H100 or H200 (the K loop pipelined), else the device's own
ARCH = "sm_90a" if hopper() else None
CONFIGS = PIPELINED_CONFIGS if ARCH else LOOP_CONFIGS


@ct.autotune(configs=CONFIGS, key=["m", "n", "k", "TF32"])
@ct.jit(arch=ARCH)
def matmul(a, b, c, m, n, k, BM: ct.constexpr, BN: ct.constexpr, BK: ct.constexpr, TF32: ct.constexpr):
    # program id -> (row block, column block), in groups of GROUP_M row blocks (L2 reuse of b)
    pid = ct.program_id(0)
    blocks_m, blocks_n = ct.cdiv(m, BM), ct.cdiv(n, BN)
    per_group = GROUP_M * blocks_n
    first_m = (pid // per_group) * GROUP_M
    group_m = ct.minimum(blocks_m - first_m, GROUP_M)
    r = (first_m + (pid % per_group) % group_m) * BM
    col = ((pid % per_group) // group_m) * BN
    acc = tile.zeros((BM, BN), np.float32)
    for kk in range(0, k, BK):
        x = tile.load(a, (r, kk), (BM, BK), valid=(m - r, k - kk), other=0)
        y = tile.load(b, (kk, col), (BK, BN), valid=(k - kk, n - col), other=0)
        acc = tile.dot(x, y, acc, allow_tf32=TF32)
    tile.store(c, (r, col), acc, valid=(m - r, n - col))


def grid(m: int, n: int):
    """One program per (BM, BN) block of c, for the tuned block shape."""
    return lambda meta: ct.cdiv(m, meta["BM"]) * ct.cdiv(n, meta["BN"])


def run(a: np.ndarray, b: np.ndarray, **blocks) -> np.ndarray:
    """`a @ b` (float32, without tf32) by the tile program: tuned on a GPU, in the interpreter at `blocks`
    without one."""
    (m, k), n = a.shape, b.shape[1]
    ad, bd, cd = to_device(a, b, np.zeros((m, n), np.float32))
    if ON_GPU:
        matmul[grid(m, n)](ad, bd, cd, m, n, k, TF32=False)
    else:
        kernel(matmul.kernel)[grid(m, n)(blocks)](ad, bd, cd, m, n, k, TF32=False, **blocks)
    return to_host(cd)


def against_torch() -> None:
    """On a GPU: the tuned program against torch.matmul (cuBLAS) in TFLOP/s, as Triton's tutorial plots it."""
    try:
        import torch
    except ImportError:
        print("(no PyTorch: the comparison with torch.matmul is skipped)")
        return

    @ct.testing.perf_report(
        ct.testing.Benchmark(
            x_names=["size"],
            x_vals=[1024, 2048, 4096],
            line_arg="provider",
            line_vals=["torch", "coop_tiles"],
            line_names=["torch.matmul (cuBLAS)", "coop_tiles"],
            plot_name="matmul-bfloat16-tflops",
            xlabel="M = N = K",
            ylabel="TFLOP/s",
        )
    )
    def bench(size: int, provider: str) -> float:
        a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(size, size, device="cuda", dtype=torch.float32)
        if provider == "torch":  # cuBLAS's bfloat16 product (float32 accumulation, bfloat16 out)
            fn = lambda: torch.matmul(a, b)  # noqa: E731
        else:
            fn = lambda: matmul[grid(size, size)](a, b, c, size, size, size, TF32=False)  # noqa: E731
        return 2 * size**3 / ct.testing.do_bench(fn) * 1e-9  # do_bench: milliseconds

    bench.run(print_data=True)


def main() -> None:
    rng = np.random.default_rng(0)
    # ragged in every axis: no extent is a multiple of its block
    m, n, k = (1000, 777, 515) if ON_GPU else (45, 37, 29)
    blocks = {"BM": 16, "BN": 16, "BK": 8}  # the interpreter's blocks (the GPU uses the tuned ones)
    for dt in (ct.bfloat16, np.float16, np.float32):
        a = rng.standard_normal((m, k)).astype(dt)
        b = rng.standard_normal((k, n)).astype(dt)
        expected = a.astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_allclose(run(a, b, **blocks), expected, rtol=1e-3, atol=1e-3 * np.sqrt(k))
    print(f"a ({m}, {k}) @ ({k}, {n}) matmul in bfloat16, float16 and float32 ran {where()}: matches NumPy")
    if ON_GPU:
        against_torch()


if __name__ == "__main__":
    main()
