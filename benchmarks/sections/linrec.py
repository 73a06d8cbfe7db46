"""A per-tile linear recurrence (a tuple scan with a `@ct.combine` function, tutorial 04) against the copy rate and
Triton's `tl.associative_scan` (issue 7)."""

from __future__ import annotations

from typing import Any

import numpy as np

import coop_tiles as ct
from benchmarks.charts import declare, rate
from benchmarks.device import fill_nan, free_device_memory, to_host_f32
from benchmarks.kernels import CHECK_TILES, tutorial
from benchmarks.report import config_times_cell, correct_cell, failed_row, gbs_cell, table_row
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms, guarded, tune

LINREC_TILES = (4096, 2048)
TRITON_TILES = (1024, 2048, 4096)
TRITON_WARPS = (4, 8)


# Tutorial 04's per-tile linear recurrence (the benchmark times what the tutorial shows). A library that rejects it
# fails this section alone, not the import of the benchmarks (the compile section imports them).
try:
    tile_linrec = tutorial("04_linear_recurrence").tile_recurrence
    LINREC_ERROR: Exception | None = None
except Exception as error:
    tile_linrec, LINREC_ERROR = None, error


def _linrec_reference(a: np.ndarray, b: np.ndarray, tile_size: int) -> np.ndarray:
    """h_i = a_i * h_(i-1) + b_i in float64, one element after the other from h = 0 at each tile's start:
    what the per-tile tuple scan computes, for whole tiles of a and b."""
    a64 = a.reshape(-1, tile_size).astype(np.float64)
    b64 = b.reshape(-1, tile_size).astype(np.float64)
    h, out = np.zeros(len(a64)), np.empty_like(a64)
    for i in range(tile_size):
        h = a64[:, i] * h + b64[:, i]
        out[:, i] = h
    return out.ravel()


def _linrec_correct(a: Any, b: Any, h: Any, tile_size: int) -> bool:
    """The first tiles of h against the float64 recurrence: rtol 1e-4, and atol 1e-5 because |h| reaches about 4
    and float32 leaves about 1e-6 of absolute error, which a relative test alone rejects where h crosses zero."""
    count = CHECK_TILES * tile_size
    expected = _linrec_reference(to_host_f32(a, count), to_host_f32(b, count), tile_size)
    return bool(np.allclose(to_host_f32(h, count), expected, rtol=1e-4, atol=1e-5))


def linrec_rows(sizes: list[int]) -> list[dict]:
    """The per-tile linear recurrence (a tuple scan with a `@ct.combine` function) against the copy rate for
    its bytes and against Triton's `tl.associative_scan` of the same tiles."""
    rows = []
    for log2n in sizes:
        rows.append({"n": f"2^{log2n}", "elements": 1 << log2n, **guarded(_linrec_row, 1 << log2n)})
        free_device_memory()
    return rows


def _linrec_row(n: int) -> dict:
    """One size: a in [0.5, 1) (the recurrence forgets, so h stays of order 1), b in [-1, 1); the copy
    (8 bytes per element) is timed on the same arrays, and both kernels write h."""
    import cupy as cp

    rng = cp.random.RandomState(7)
    a = rng.random_sample(n, dtype=cp.float32) * 0.5 + 0.5
    b = rng.random_sample(n, dtype=cp.float32) * 2 - 1
    h = cp.empty_like(a)
    copy_ms = cuda_time_ms(lambda: cp.copyto(h, a))
    return {
        "copy_ms": copy_ms,
        "copy_gbs": 8 * n / copy_ms / 1e6,
        "coop": guarded(_linrec_coop, a, b, h, n),
        "triton": guarded(_linrec_triton, a, b, h, n),
    }


def _linrec_coop(a: Any, b: Any, h: Any, n: int) -> dict:
    """tile_linrec, best of LINREC_TILES (block size chosen by the runtime)."""
    if tile_linrec is None:
        raise LINREC_ERROR
    return tune(
        LINREC_TILES,
        lambda t: lambda: tile_linrec[ct.cdiv(n, t)](a, b, h, n, TILE=t),
        lambda: fill_nan(h),
        lambda t: _linrec_correct(a, b, h, t),
    )


def _linrec_triton(a: Any, b: Any, h: Any, n: int) -> dict:
    """The same per-tile scan in Triton (benchmarks/_baselines.py), on zero-copy PyTorch views of the same
    arrays, best of TRITON_TILES x TRITON_WARPS."""
    from benchmarks._baselines import triton_linrec

    return tune(
        [(t, w) for t in TRITON_TILES for w in TRITON_WARPS],
        lambda c: triton_linrec(a, b, h, n, tile=c[0], warps=c[1]),
        lambda: fill_nan(h),
        lambda c: _linrec_correct(a, b, h, c[0]),
    )


def linrec_lines(rows: list[dict]) -> list[str]:
    tiles = "/".join(map(str, TRITON_TILES))
    warps = "/".join(map(str, TRITON_WARPS))
    lines = [
        "",
        "## Linear recurrence: a per-tile tuple scan with a `@ct.combine` function (float32)",
        "",
        "`h_i = a_i * h_(i-1) + b_i` from h = 0 at each tile's start, `tile.scan((a, b), op=linrec)`: it reads a "
        "and b and writes h, 12 bytes per element. The copy rate is `cupy.copyto` of n float32 elements (8 bytes "
        "per element) in the same run; *of copy rate* is the copy's time scaled by 12/8 over the kernel's time.",
        "Triton runs the same per-tile scan, `tl.associative_scan((a, b), axis=0, combine_fn=...)`, on the same "
        f"arrays, best of TILE {tiles} × num_warps {warps}; coop_tiles best of TILE "
        f"{'/'.join(map(str, LINREC_TILES))}, block size chosen by the runtime. *coop / Triton* is Triton's time "
        "over coop_tiles' (above 1: coop_tiles faster).",
        f"Correct: the first {CHECK_TILES} tiles of every configuration's output against a sequential float64 "
        "recurrence, rtol 1e-4 and atol 1e-5 (|h| reaches about 4, and float32 leaves about 1e-6 of absolute "
        "error, which a relative test alone rejects where h crosses zero); a in [0.5, 1), b in [-1, 1).",
        "",
        "| n | copy GB/s | coop_tiles GB/s | of copy rate | Triton GB/s | coop / Triton | "
        "correct (coop_tiles / Triton) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(failed_row(r, ("n",), 7))
            continue
        coop, triton, nbytes = r["coop"], r["triton"], 12 * r["elements"]
        if "error" in coop:
            coop_cells = [f"failed: {coop['error']}", "—"]
        else:
            rate = r["copy_ms"] * 12 / 8 / coop["ms"]
            coop_cells = [f"{gbs_cell(nbytes, coop['ms'])} (TILE {coop['best']})", f"**{rate:.1%}**"]
        if "error" in triton:
            triton_cell = f"failed: {triton['error']}"
        else:
            tile_size, warps_used = triton["best"]
            triton_cell = f"{gbs_cell(nbytes, triton['ms'])} (TILE {tile_size}, {warps_used} warps)"
        both = "error" not in coop and "error" not in triton
        speed = f"**{triton['ms'] / coop['ms']:.2f}x**" if both else "—"
        verdict = f"{correct_cell(coop)} / {correct_cell(triton)}"
        lines.append(table_row(r["n"], f"{r['copy_gbs']:.0f}", *coop_cells, triton_cell, speed, verdict))
    measured = [r for r in rows if "error" not in r]
    if measured:
        lines += ["", "Every configuration, ms:", ""]
    for r in measured:
        coop = config_times_cell(r["coop"], lambda t: f"TILE {t}")
        triton = config_times_cell(r["triton"], lambda c: f"TILE {c[0]} × {c[1]} warps")
        lines.append(f"- {r['n']}: coop_tiles {coop}; Triton {triton}")
    bar = "Bar (issue 7): faster than Triton (coop / Triton above 1) and at least 90% of the copy rate for its bytes."
    return lines + ["", bar, ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    return linrec_rows(sizes)


SECTION = Section(
    "linrec",
    key="linrec",
    needs=("cupy", "torch", "triton"),
    run=run,
    lines=linrec_lines,
    guarded=True,
    chart=declare(
        "linear recurrence (float32)",
        {
            "coop_tiles": rate("coop", lambda r: 12 * r["elements"]),
            "Triton": rate("triton", lambda r: 12 * r["elements"]),
        },
        dashed={"copy": lambda r: r["copy_gbs"]},
        plot="lines",
    ),
)
