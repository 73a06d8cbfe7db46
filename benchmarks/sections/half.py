"""16-bit floats (float16, bfloat16): load -> scan -> store and load -> `tile.sum`, accumulating in float32, against the
copy rate for their bytes (issue 7)."""

from __future__ import annotations

from typing import Any

import numpy as np

import coop_tiles as ct
from benchmarks.charts import declare, gbs
from benchmarks.device import fill_nan, free_device_memory, to_host_f32
from benchmarks.kernels import CHECK_TILES, TILE, tile_cumsum, tile_sum
from benchmarks.report import correct_cell, failed_row, gbs_cell, table_row
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms, guarded, tune

HALF_DTYPES = ("float16", "bfloat16")
#: `tile.sum`'s tiles: TILE; twice TILE, the same bytes per program as a float32 tile of TILE elements (a program
#: that reads 8 KB spends a larger share of its time on its reduction, its store and its start than one reading 16 KB);
#: and 4 TILE (on the H100, 2 TILE read 2^26 16-bit floats at 94.9-95.4% of the copy's read rate, TILE at 93-95%)
SUM_TILES = (TILE, 2 * TILE, 4 * TILE)


def _copy16_ms(n: int) -> float:
    """`cupy.copyto` between two n-element float16 arrays, 4 bytes moved per element; the callers scale it to
    the bytes of each kernel (a bfloat16 copy moves the same bytes, so it stands for both dtypes)."""
    import cupy as cp

    src, dst = cp.zeros(n, cp.float16), cp.empty(n, cp.float16)
    return cuda_time_ms(lambda: cp.copyto(dst, src))


def half_rows(sizes: list[int]) -> list[dict]:
    """tile_cumsum and tile_sum on 16-bit floats, which accumulate in and return float32 (the contract),
    against the copy rate for the bytes each moves."""
    rows = []
    for log2n in sizes:
        n = 1 << log2n
        copy_ms = _copy16_ms(n)
        for dtype in HALF_DTYPES:
            row = {"n": f"2^{log2n}", "dtype": dtype, "elements": n, "copy_ms": copy_ms}
            rows.append({**row, "copy_gbs": 4 * n / copy_ms / 1e6, **guarded(_half_row, n, dtype)})
            free_device_memory()
    return rows


def _half_arrays(n: int, dtype: str) -> tuple[Any, Any, Any]:
    """x: n 16-bit floats uniform in [0, 1); y: n float32 (the scan's output); partial: a float32 per tile.
    float16 in CuPy; bfloat16 in PyTorch, which the contract names for bfloat16 on the GPU (CuPy has none)."""
    grid = ct.cdiv(n, TILE)
    if dtype == "float16":
        import cupy as cp

        x = cp.random.RandomState(0).random_sample(n, dtype=cp.float32).astype(cp.float16)
        return x, cp.empty(n, cp.float32), cp.empty(grid, cp.float32)
    import torch

    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(n, generator=generator, device="cuda", dtype=torch.bfloat16)
    return x, torch.empty(n, device="cuda", dtype=torch.float32), torch.empty(grid, device="cuda", dtype=torch.float32)


def _half_row(n: int, dtype: str) -> dict:
    """Scan (TILE) and sum (the faster of SUM_TILES) of one size and dtype, each timed and checked on its own (rtol
    1e-3 against float32 NumPy over the first CHECK_TILES tiles)."""
    x, y, partial = _half_arrays(n, dtype)
    head = to_host_f32(x, CHECK_TILES * max(SUM_TILES))

    def sums_agree(t: int) -> bool:
        want = head[: CHECK_TILES * t].reshape(CHECK_TILES, t).sum(axis=1, dtype=np.float32)
        return np.allclose(to_host_f32(partial, CHECK_TILES), want, rtol=1e-3)

    scanned = np.cumsum(head[: CHECK_TILES * TILE].reshape(CHECK_TILES, TILE), axis=1, dtype=np.float32)
    return {
        "scan": guarded(
            tune,
            [TILE],
            lambda t: lambda: tile_cumsum[ct.cdiv(n, t)](x, y, n, TILE=t),
            lambda: fill_nan(y),
            lambda t: np.allclose(to_host_f32(y, scanned.size).reshape(scanned.shape), scanned, rtol=1e-3),
        ),
        "sum": guarded(
            tune,
            SUM_TILES,
            lambda t: lambda: tile_sum[ct.cdiv(n, t)](x, partial, n, TILE=t),
            lambda: fill_nan(partial),
            sums_agree,
        ),
    }


def half_lines(rows: list[dict]) -> list[str]:
    lines = [
        "",
        "## 16-bit floats: load → scan → store, and load → `tile.sum` (float32 results)",
        "",
        "float16 data are CuPy arrays, bfloat16 data PyTorch tensors. Both accumulate in float32 and return "
        "float32 (the contract), so the scan reads 2 bytes and writes 4 per element and `tile.sum` reads 2.",
        "The copy rate is `cupy.copyto` between two n-element float16 arrays (4 bytes moved per element); *scan / "
        "copy* is that copy's time scaled by 6/4 over the scan's time, *sum / copy read* the copy's time scaled "
        "by 2/4 (its read rate, as above) over the sum's.",
        f"The scan's tiles are {TILE} elements; the sum's the faster of {', '.join(map(str, SUM_TILES))} (in "
        f"brackets): {2 * TILE} 16-bit elements are the bytes of a float32 tile of {TILE}, and a program that reads "
        "half of that spends a larger share of its time on its reduction, its store and its start.",
        f"Correct: the first {CHECK_TILES} tiles against a float32 NumPy cumsum and sum, rtol 1e-3; data uniform in "
        "[0, 1).",
        "",
        "| n | dtype | copy GB/s | scan GB/s | scan / copy | sum GB/s | sum / copy read | correct (scan / sum) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(failed_row(r, ("n", "dtype"), 8))
            continue
        n, copy_ms = r["elements"], r["copy_ms"]
        cells = [r["n"], r["dtype"], f"{r['copy_gbs']:.0f}"]
        for kind, nbytes, copy_scale in (("scan", 6 * n, 6 / 4), ("sum", 2 * n, 2 / 4)):
            result = r[kind]
            if "error" in result:
                cells += [f"failed: {result['error']}", "—"]
            else:
                rate = gbs_cell(nbytes, result["ms"]) + (f" (TILE {result['best']})" if kind == "sum" else "")
                cells += [rate, f"**{copy_ms * copy_scale / result['ms']:.1%}**"]
        lines.append(table_row(*cells, f"{correct_cell(r['scan'])} / {correct_cell(r['sum'])}"))
    return lines + ["", "Bar (issue 7): at least 90% of the copy rate for their bytes.", ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    return half_rows(sizes)


SECTION = Section(
    "half",
    key="half",
    needs=("cupy", "torch"),
    run=run,
    lines=half_lines,
    guarded=True,
    chart=declare(
        "16-bit floats: scan and tile.sum",
        {"scan": lambda r: gbs(6 * r["elements"], r["scan"]), "sum": lambda r: gbs(2 * r["elements"], r["sum"])},
        dashed={"copy": lambda r: r["copy_gbs"]},
        plot="lines",
        group="dtype",
    ),
)
