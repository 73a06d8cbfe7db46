"""Triton's matrix product as Triton's tutorial 03 writes it (one (BLOCK_M, BLOCK_N) block of c per program, program ids
grouped by GROUP_SIZE_M rows of blocks for L2 reuse, a K loop of masked loads and `tl.dot` into a float32 accumulator,
`triton.autotune` over block shapes keyed on M, N, K), for the matmul section. Written here for the benchmark, not
copied; kept apart so that a machine without Triton runs every other section.

No `from __future__ import annotations` here: Triton reads the `tl.constexpr` annotations at run time.
"""

from collections.abc import Callable
from typing import Any

import triton
import triton.language as tl


def _config(bm: int, bn: int, bk: int, stages: int, warps: int) -> triton.Config:
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_SIZE_M": 8}, num_stages=stages,
                         num_warps=warps)  # fmt: skip


#: block shapes, pipeline stages and warps tried, as the tutorial's list for CUDA GPUs
CONFIGS = [
    _config(128, 256, 64, 3, 8),
    _config(64, 256, 32, 4, 4),
    _config(128, 128, 32, 4, 4),
    _config(128, 64, 32, 4, 4),
    _config(64, 128, 32, 4, 4),
    _config(128, 32, 32, 4, 4),
    _config(128, 256, 128, 3, 8),
    _config(256, 128, 128, 3, 8),
    _config(256, 64, 128, 4, 4),
    _config(128, 128, 128, 4, 4),
    _config(128, 128, 64, 4, 4),
]


@triton.autotune(configs=CONFIGS, key=["M", "N", "K", "PRECISION"])
@triton.jit
def _matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, PRECISION: tl.constexpr, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    blocks_m, blocks_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    per_group = GROUP_SIZE_M * blocks_n
    first_m = (pid // per_group) * GROUP_SIZE_M
    group_m = min(blocks_m - first_m, GROUP_SIZE_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M  # wrapped: the loads stay in bounds, the store masks
    cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    ks = tl.arange(0, BLOCK_K)
    a_at = a + rows[:, None] * sam + ks[None, :] * sak
    b_at = b + ks[:, None] * sbk + cols[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - k * BLOCK_K
        x = tl.load(a_at, mask=ks[None, :] < left, other=0.0)
        y = tl.load(b_at, mask=ks[:, None] < left, other=0.0)
        acc = tl.dot(x, y, acc, input_precision=PRECISION)
        a_at += BLOCK_K * sak
        b_at += BLOCK_K * sbk
    out_rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    out_cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    at = c + out_rows[:, None] * scm + out_cols[None, :] * scn
    tl.store(at, acc.to(c.dtype.element_ty), mask=(out_rows[:, None] < M) & (out_cols[None, :] < N))


def triton_matmul(a: Any, b: Any, c: Any, *, tf32: bool = False) -> Callable[[], None]:
    """A launch of c = a @ b (2-D tensors; float32 operands multiplied in tf32 with `tf32`, else in IEEE float32;
    16-bit operands on tensor cores, `tl.dot`'s default precision)."""
    (m, k), n = a.shape, b.shape[1]
    precision = "ieee" if a.element_size() == 4 and not tf32 else "tf32"

    def grid(meta: dict) -> tuple[int]:
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

    def launch() -> None:
        _matmul[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                      PRECISION=precision)  # fmt: skip

    return launch


def best_config() -> str:
    """The autotuner's choice for the last key it tuned, as `BMxBNxBK, S stages, W warps`."""
    config = _matmul.best_config
    kw = config.kwargs
    return f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']}, {config.num_stages} stages, {config.num_warps} warps"
