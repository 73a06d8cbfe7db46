"""Load -> inclusive scan -> store and load -> `tile.sum` (int32, float32) against the device copy (issue 2)."""

from __future__ import annotations

import numpy as np

import coop_tiles as ct
from benchmarks.charts import declare
from benchmarks.kernels import TILE, tile_cumsum, tile_sum
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms


def bandwidth_rows(sizes: list[int]) -> list[dict]:
    import cupy as cp

    rows = []
    for log2n in sizes:
        n = 1 << log2n
        for dtype in (np.int32, np.float32):
            x = cp.asarray(np.random.default_rng(0).integers(0, 8, n).astype(dtype))
            y = cp.empty_like(x)
            grid = ct.cdiv(n, TILE)
            partial = cp.empty(grid, dtype)
            copy_ms = cuda_time_ms(lambda: cp.copyto(y, x))
            scan_ms = cuda_time_ms(lambda: tile_cumsum[grid](x, y, n, TILE=TILE))
            head = cp.asnumpy(y[: 4 * TILE]).reshape(4, TILE)
            ok_scan = np.allclose(head, np.cumsum(cp.asnumpy(x[: 4 * TILE]).reshape(4, TILE), axis=1))
            sum_ms = cuda_time_ms(lambda: tile_sum[grid](x, partial, n, TILE=TILE))
            ok_sum = np.allclose(cp.asnumpy(partial[:4]), cp.asnumpy(x[: 4 * TILE]).reshape(4, TILE).sum(1))
            cupy_sum_ms = cuda_time_ms(lambda: x.sum())
            nbytes = n * np.dtype(dtype).itemsize
            rows.append(
                {
                    "n": f"2^{log2n}",
                    "dtype": np.dtype(dtype).name,
                    "copy_ms": copy_ms,
                    "copy_gbs": 2 * nbytes / copy_ms / 1e6,
                    "scan_ms": scan_ms,
                    "scan_gbs": 2 * nbytes / scan_ms / 1e6,
                    "scan_ratio": copy_ms / scan_ms,
                    "sum_ms": sum_ms,
                    "sum_gbs": nbytes / sum_ms / 1e6,
                    "sum_ratio": (copy_ms / 2) / sum_ms,
                    "cupy_sum_ms": cupy_sum_ms,
                    "correct": bool(ok_scan and ok_sum),
                }
            )
            x = y = partial = None
            cp.get_default_memory_pool().free_all_blocks()
    return rows


def bandwidth_lines(bandwidth: list[dict]) -> list[str]:
    lines = [
        f"## Load → inclusive scan → store, and load → `tile.sum` (TILE={TILE}, block size chosen by the runtime)",
        "",
        "Scan bandwidth counts bytes read and written, as the copy does; `tile.sum` reads only, so its ratio is "
        "against half the copy time (the copy's read rate).",
        "",
        "| n | dtype | copy GB/s | scan GB/s | scan / copy | sum GB/s | sum / copy read | cupy.sum ms | "
        "tile.sum ms | correct |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in bandwidth:
        lines.append(
            f"| {r['n']} | {r['dtype']} | {r['copy_gbs']:.0f} | {r['scan_gbs']:.0f} | "
            f"**{r['scan_ratio']:.1%}** | {r['sum_gbs']:.0f} | **{r['sum_ratio']:.1%}** | "
            f"{r['cupy_sum_ms']:.3f} | {r['sum_ms']:.3f} | {'yes' if r['correct'] else 'NO'} |"
        )
    return lines + ["", "Bar (issue 2): at least 90% of the copy bandwidth.", ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    return bandwidth_rows(sizes)


SECTION = Section(
    "bandwidth",
    key="bandwidth",
    needs=("cupy",),
    run=run,
    lines=bandwidth_lines,
    guarded=False,
    chart=declare(
        "load → scan → store and load → tile.sum",
        {"scan": lambda r: r["scan_gbs"], "sum": lambda r: r["sum_gbs"]},
        dashed={"copy": lambda r: r["copy_gbs"]},
        plot="lines",
        group="dtype",
    ),
)
