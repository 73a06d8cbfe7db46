"""The block size the runtime chooses (`block_threads=None`) against every fixed choice, for the bandwidth kernels
(issue 3)."""

from __future__ import annotations

import numpy as np

import coop_tiles as ct
from benchmarks.charts import declare
from benchmarks.kernels import TILE, tile_cumsum, tile_sum
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms

FIXED_BLOCKS = (128, 256, 512, 1024)


def block_size_rows(log2n: int) -> list[dict]:
    """Each bandwidth kernel with the runtime's block size against every fixed choice."""
    import cupy as cp

    n = 1 << log2n
    rows = []
    for dtype in (np.int32, np.float32):
        x = cp.asarray(np.random.default_rng(0).integers(0, 8, n).astype(dtype))
        y = cp.empty_like(x)
        grid = ct.cdiv(n, TILE)
        partial = cp.empty(grid, dtype)
        for name, kernel, out in (("scan", tile_cumsum, y), ("sum", tile_sum, partial)):
            auto_ms = cuda_time_ms(lambda: kernel[grid](x, out, n, TILE=TILE))
            fixed = {}
            for threads in FIXED_BLOCKS:
                pinned = ct.jit(kernel.fn, block_threads=threads)
                fixed[threads] = cuda_time_ms(lambda: pinned[grid](x, out, n, TILE=TILE))
            chosen = next(
                p.kernel for p in kernel._kernels.values() if p.kernel.signature.params[0][1].dtype == np.dtype(dtype)
            )
            best = min(fixed, key=fixed.get)
            rows.append(
                {
                    "kernel": name,
                    "n": f"2^{log2n}",
                    "dtype": np.dtype(dtype).name,
                    "chosen": chosen.block_threads,
                    "choice": str(chosen.block_choice),
                    "auto_ms": auto_ms,
                    "fixed": fixed,
                    "best": best,
                    "ratio": fixed[best] / auto_ms,
                }
            )
        x = y = partial = None
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def blocks_lines(blocks: list[dict]) -> list[str]:
    lines = [
        "",
        "## Block size chosen by the runtime (`block_threads=None`) against fixed choices",
        "",
        "Times in ms; the ratio is the best fixed time over the runtime's (100% = as fast as the best).",
        "",
        "| kernel | n | dtype | chosen | runtime ms | "
        + " | ".join(f"{b} threads" for b in FIXED_BLOCKS)
        + " | best fixed / runtime |",
        "|---|---|---|---|---|" + "---|" * len(FIXED_BLOCKS) + "---|",
    ]
    for r in blocks:
        fixed = " | ".join(f"{r['fixed'][b]:.3f}" for b in FIXED_BLOCKS)
        lines.append(
            f"| {r['kernel']} | {r['n']} | {r['dtype']} | {r['chosen']} | {r['auto_ms']:.3f} | {fixed} | "
            f"**{r['ratio']:.1%}** |"
        )
    if blocks:
        lines += ["", f"How the first was chosen: {blocks[0]['choice']}."]
    return lines + ["", "Bar (issue 3): the runtime's choice within 10% of the best fixed choice.", ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    return [row for log2n in sizes for row in block_size_rows(log2n)]


def _speed(row: dict, ms: float) -> float:
    """The best fixed choice's time over `ms`: 1 is as fast as the best."""
    return min(row["fixed"].values()) / ms


SECTION = Section(
    "blocks",
    key="blocks",
    needs=("cupy",),
    run=run,
    lines=blocks_lines,
    guarded=False,
    chart=declare(
        "block size: the runtime's choice against fixed ones",
        {
            "runtime's choice": lambda r: _speed(r, r["auto_ms"]),
            **{f"{b} threads": lambda r, b=b: _speed(r, r["fixed"][b]) for b in FIXED_BLOCKS},
        },
        x=lambda r: f"{r['kernel']} {r['n']} {r['dtype']}",
        ylabel="best fixed time / time",
    ),
)
