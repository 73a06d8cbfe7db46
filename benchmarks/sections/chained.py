"""Whole-array scans in one pass (`tile.scan(t, chained=True)`, tutorial 02): cumsum and linear recurrence against the
copy, CUB's DeviceScan, torch.cumsum and the three-kernel cumsum, and what chaining costs (issue 11)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import coop_tiles as ct
from benchmarks.charts import declare, rate
from benchmarks.cub import cub_call, cub_library
from benchmarks.device import fill_nan, free_device_memory, stream_handle
from benchmarks.kernels import tile_cumsum, tile_sum, tutorial, with_threads
from benchmarks.report import config_times_cell, correct_cell, failed_row, gbs_cell, rate_cell, speedup_cell, table_row
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms, guarded, host_overheads_us, tune

CHAINED_CONFIGS = ((4096, None), (4096, 256), (8192, None), (8192, 512), (16384, None))  # TILE, threads
THREE_KERNEL_TILES = (4096,)
OFFSETS_CHUNK = 1024
CHAINED_LINREC_CONFIGS = ((4096, None), (4096, 256), (8192, None), (8192, 512))
LINREC_CHECKS = 8  # tile starts at which the recurrence is checked
LINREC_WARMUP = 1000  # elements run before each checked start (a in [0.5, 1) forgets h within a few hundred)


# Chained scans (issue 11) are newer than the first sections: a library without them fails this section alone, not
# the import of the benchmarks. Tutorial 02's kernels (the benchmark times what the tutorial shows):
# the whole-array cumsum and linear recurrence in one kernel and the three-kernel cumsum they replace.
try:
    _cumsum_tutorial = tutorial("02_cumsum")
    chained_cumsum = _cumsum_tutorial.chained_cumsum
    chained_linrec = _cumsum_tutorial.whole_array_recurrence
    offsets_of_sums = _cumsum_tutorial.exclusive_scan_one_program
    seeded_cumsum = _cumsum_tutorial.seeded_cumsum
    CHAINED_ERROR: Exception | None = None
except Exception as error:
    chained_cumsum = chained_linrec = offsets_of_sums = seeded_cumsum = None
    CHAINED_ERROR = error


def _config_name(config: tuple[int, int | None]) -> str:
    tile_size, threads = config
    return f"TILE {tile_size}" + (f" × {threads} threads" if threads else "")


def chained_results(sizes: list[int], arch: str) -> dict:
    """The whole-array cumsum of each size and dtype, the whole-array linear recurrence of each size, and what a
    chained launch costs over a plain one."""
    if chained_cumsum is None:
        raise CHAINED_ERROR
    scans = []
    for log2n in sizes:
        for dtype in ("int32", "float32"):
            row = {"n": f"2^{log2n}", "dtype": dtype, "elements": 1 << log2n}
            scans.append({**row, **guarded(_chained_scan_row, 1 << log2n, dtype, arch)})
            free_device_memory()
    linrec = []
    for log2n in sizes:
        linrec.append({"n": f"2^{log2n}", "elements": 1 << log2n, **guarded(_chained_linrec_row, 1 << log2n)})
        free_device_memory()
    return {"scans": scans, "linrec": linrec, "costs": guarded(_chained_costs)}


def _chained_scan_row(n: int, dtype: str, arch: str) -> dict:
    """One size and dtype: x is 0 or 1 (1 with probability 1/32), so that every partial sum stays below 2^24 and
    is exact in float32 too: every implementation must equal numpy.cumsum exactly, over the whole output."""
    import cupy as cp

    host = (np.random.default_rng(11).random(n, dtype=np.float32) < 1 / 32).astype(dtype)
    expected = cp.asarray(np.cumsum(host, dtype=np.int64).astype(dtype))
    x, y = cp.asarray(host), cp.empty(n, dtype)
    del host
    copy_ms = cuda_time_ms(lambda: cp.copyto(y, x))

    def reset() -> None:
        y.fill(-1)

    def check(_config: Any = None) -> bool:
        return bool(cp.array_equal(y, expected))

    return {
        "copy_ms": copy_ms,
        "chained": guarded(
            tune,
            CHAINED_CONFIGS,
            lambda c: lambda: with_threads(chained_cumsum, c[1])[ct.cdiv(n, c[0])](x, y, n, TILE=c[0]),
            reset,
            check,
        ),
        "three": guarded(_three_kernel, x, y, n, reset, check),
        "cub": guarded(_inclusive_sum_cub, x, y, n, arch, reset, check),
        "torch": guarded(_cumsum_torch, x, y, reset, check),
    }


def _three_kernel(x: Any, y: Any, n: int, reset: Callable, check: Callable) -> dict:
    """Tutorial 02's whole-array cumsum before chained scans: tile sums, one program's exclusive scan of them (in
    chunks of OFFSETS_CHUNK, carrying the total), and a rescan of each tile seeded with its offset."""
    import cupy as cp

    def launch(t: int) -> Callable[[], None]:
        grid = ct.cdiv(n, t)
        sums, offsets = cp.empty(grid, x.dtype), cp.empty(grid, x.dtype)

        def three() -> None:
            tile_sum[grid](x, sums, n, TILE=t)
            offsets_of_sums[1](sums, offsets, grid, CHUNK=OFFSETS_CHUNK)
            seeded_cumsum[grid](x, offsets, y, n, TILE=t)

        return three

    return tune(THREE_KERNEL_TILES, launch, reset, check)


def _inclusive_sum_cub(x: Any, y: Any, n: int, arch: str, reset: Callable, check: Callable) -> dict:
    """cub::DeviceScan::InclusiveSum (benchmarks/cub_baselines.cu), temporary storage sized and allocated once,
    outside the timing."""
    import ctypes

    import cupy as cp

    lib = cub_library(arch)
    scan = lib.cub_inclusive_sum_i32 if x.dtype == cp.int32 else lib.cub_inclusive_sum_f32
    temp_bytes, stream = ctypes.c_size_t(0), stream_handle()
    args = (x.data.ptr, y.data.ptr, n, stream)
    cub_call(lib, scan(None, ctypes.byref(temp_bytes), *args), "InclusiveSum (size query)")
    temp = cp.empty(max(temp_bytes.value, 1), cp.uint8)

    def launch() -> None:
        cub_call(lib, scan(temp.data.ptr, ctypes.byref(temp_bytes), *args), "InclusiveSum")

    return tune(["InclusiveSum"], lambda _: launch, reset, check)


def _cumsum_torch(x: Any, y: Any, reset: Callable, check: Callable) -> dict:
    """torch.cumsum into y, on zero-copy PyTorch views of the CuPy arrays (in their dtype: dtype= keeps int32)."""
    import torch

    tx, ty = torch.as_tensor(x, device="cuda"), torch.as_tensor(y, device="cuda")
    return tune(["cumsum"], lambda _: lambda: torch.cumsum(tx, 0, dtype=tx.dtype, out=ty), reset, check)


def _chained_linrec_row(n: int) -> dict:
    """h_i = a_i * h_(i-1) + b_i over the whole array from h = 0 (a in [0.5, 1), b in [-1, 1), float32): 12 bytes
    per element. Checked at LINREC_CHECKS tile starts, the carried state's hardest places: 64 elements from
    each against a float64 recurrence started LINREC_WARMUP elements earlier (by then h has forgotten its start)."""
    import cupy as cp

    rng = cp.random.RandomState(5)
    a = rng.random_sample(n, dtype=cp.float32) * 0.5 + 0.5
    b = rng.random_sample(n, dtype=cp.float32) * 2 - 1
    h = cp.empty_like(a)
    copy_ms = cuda_time_ms(lambda: cp.copyto(h, a))

    def check(t: int) -> bool:
        starts = np.linspace(0, n // t - 1, LINREC_CHECKS).astype(np.int64) * t
        for start in starts:
            lo = max(0, int(start) - LINREC_WARMUP)
            ha = cp.asnumpy(a[lo : start + 64]).astype(np.float64)
            hb = cp.asnumpy(b[lo : start + 64]).astype(np.float64)
            state, expected = 0.0, np.empty(len(ha))
            for i in range(len(ha)):
                state = ha[i] * state + hb[i]
                expected[i] = state
            if not np.allclose(cp.asnumpy(h[start : start + 64]), expected[start - lo :], rtol=1e-4, atol=1e-5):
                return False
        return True

    coop = guarded(
        tune,
        CHAINED_LINREC_CONFIGS,
        lambda c: lambda: with_threads(chained_linrec, c[1])[ct.cdiv(n, c[0])](a, b, h, n, TILE=c[0]),
        lambda: fill_nan(h),
        lambda c: check(c[0]),
    )
    return {"copy_ms": copy_ms, "coop": coop}


def _chained_costs() -> dict:
    """A chained launch against a plain one (tile_cumsum): host time per launch of one 4096-element program (the
    runtime's per-launch steps: capture query, stream id, state lookup), and the event time around one 2^20-element
    launch (the ticket and look-back, and the launch's host time when that is the longer); and a CUDA graph of the
    chained launch (its own zeroed state: allocation, memset and free nodes) replayed, against the direct launch."""
    import cupy as cp

    small, mid = cp.ones(4096, cp.int32), cp.ones(1 << 20, cp.int32)
    out_small, out_mid = cp.empty_like(small), cp.empty_like(mid)
    host = host_overheads_us(
        {
            "plain_us": lambda: tile_cumsum[1](small, out_small, 4096, TILE=4096),
            "chained_us": lambda: chained_cumsum[1](small, out_small, 4096, TILE=4096),
        }
    )  # (the default rounds: 7 of 500 launches gave 3.9-6.5 µs for one plain launch in one sitting)
    grid = (1 << 20) // 4096
    plain_ms = cuda_time_ms(lambda: tile_cumsum[grid](mid, out_mid, 1 << 20, TILE=4096))
    chained_ms = cuda_time_ms(lambda: chained_cumsum[grid](mid, out_mid, 1 << 20, TILE=4096))
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        chained_cumsum[grid, stream](mid, out_mid, 1 << 20, TILE=4096)
        stream.begin_capture()
        chained_cumsum[grid, stream](mid, out_mid, 1 << 20, TILE=4096)
        graph = stream.end_capture()
        graph_ms = cuda_time_ms(lambda: graph.launch(stream))
        direct_ms = cuda_time_ms(lambda: chained_cumsum[grid, stream](mid, out_mid, 1 << 20, TILE=4096))
        ok = bool(cp.array_equal(out_mid, cp.arange(1, (1 << 20) + 1, dtype=cp.int32)))
    return {
        **host,
        "plain_ms": plain_ms,
        "chained_ms": chained_ms,
        "graph_ms": graph_ms,
        "direct_ms": direct_ms,
        "correct": ok,
    }


def chained_lines(results: dict | list) -> list[str]:
    configs = ", ".join(_config_name(c) for c in CHAINED_CONFIGS)
    lines = [
        "",
        "## Whole-array scans in one pass: `tile.scan(t, chained=True)` (issue 11)",
        "",
        "`chained_cumsum`: `tile.store(y, base, tile.scan(t, chained=True), valid=n - base)`, one kernel, best of "
        f"{configs} (threads per block chosen by the runtime unless given). Baselines on the same arrays: "
        "`cupy.copyto` (the copy "
        "rate, 8 bytes per element), `cub::DeviceScan::InclusiveSum` (benchmarks/cub_baselines.cu, built with nvcc "
        "for the run; temporary storage allocated once, outside the timing; it launches its own init kernel each "
        "time), `torch.cumsum(x, 0, out=y)` on zero-copy views, and tutorial 02's three kernels (tile sums, one "
        f"program's exclusive scan of them, a seeded rescan; TILE {'/'.join(map(str, THREE_KERNEL_TILES))}).",
        "Data: 0 or 1 (1 with probability 1/32), so that every partial sum is exact in float32 too. Correct: the "
        "whole output equals `numpy.cumsum`. *of copy* is the copy's time over the scan's; *coop / X* is X's time "
        "over coop_tiles' (above 1: coop_tiles faster).",
        "",
        "| n | dtype | copy GB/s | chained GB/s | of copy | CUB GB/s | coop / CUB | torch.cumsum GB/s | coop / torch "
        "| three kernels GB/s | coop / three | correct (chained / CUB / torch / three) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if isinstance(results, list):  # the section failed before measuring anything
        return lines + [table_row(f"failed: {results[0]['error']}", *["—"] * 11), ""]
    for r in results["scans"]:
        if "error" in r:
            lines.append(failed_row(r, ("n", "dtype"), 12))
            continue
        nbytes = _bytes(r)
        chained, cub, torch_, three = r["chained"], r["cub"], r["torch"], r["three"]
        rate = "—" if "error" in chained else f"**{r['copy_ms'] / chained['ms']:.1%}**"
        lines.append(
            table_row(
                r["n"],
                r["dtype"],
                gbs_cell(nbytes, r["copy_ms"]),
                rate_cell(chained, nbytes, _config_name),
                rate,
                rate_cell(cub, nbytes),
                speedup_cell(cub, chained),
                rate_cell(torch_, nbytes),
                speedup_cell(torch_, chained),
                rate_cell(three, nbytes, lambda c: f"TILE {c}"),
                speedup_cell(three, chained),
                " / ".join(correct_cell(v) for v in (chained, cub, torch_, three)),
            )
        )
    measured = [r for r in results["scans"] if "error" not in r]
    if measured:
        lines += ["", "Every configuration of the chained scan, ms:", ""]
    for r in measured:
        lines.append(f"- {r['n']} {r['dtype']}: {config_times_cell(r['chained'], _config_name)}")
    lines += [
        "",
        "Bar (issue 11): at least 90% of the copy bandwidth and at least 0.95x CUB's device scan.",
        "",
        "### Whole-array linear recurrence (float32 pairs, `@ct.combine`)",
        "",
        "`_, h = tile.scan((a, b), op=linrec, chained=True)`: `h_i = a_i * h_(i-1) + b_i` over the whole array, "
        "reading a and b and writing h, 12 bytes per element; the memory-traffic limit is the copy's rate for those "
        f"bytes (its time scaled by 12/8). Best of {', '.join(_config_name(c) for c in CHAINED_LINREC_CONFIGS)}. "
        "Correct: at "
        f"{LINREC_CHECKS} tile starts, 64 elements against a float64 recurrence (rtol 1e-4, atol 1e-5).",
        "",
        "| n | copy GB/s | chained GB/s | of the limit | correct |",
        "|---|---|---|---|---|",
    ]
    for r in results["linrec"]:
        if "error" in r:
            lines.append(failed_row(r, ("n",), 5))
            continue
        coop, nbytes = r["coop"], 12 * r["elements"]
        rate = "—" if "error" in coop else f"**{r['copy_ms'] * 12 / 8 / coop['ms']:.1%}**"
        lines.append(
            table_row(
                r["n"],
                gbs_cell(8 * r["elements"], r["copy_ms"]),
                rate_cell(coop, nbytes, _config_name),
                rate,
                correct_cell(coop),
            )
        )
    costs = results["costs"]
    lines += ["", "### What chaining costs", ""]
    if "error" in costs:
        return lines + [f"failed: {costs['error']}", ""]
    return lines + [
        "Host time per launch (one 4096-element program; the chained launch also asks the driver whether the "
        "stream is capturing and for its id): "
        f"plain {costs['plain_us']:.2f} µs, chained {costs['chained_us']:.2f} µs. Event time around one launch of "
        f"a 2^20-element cumsum (256 programs; it includes the launch's host time where that is the longer): plain "
        f"per-tile scan {costs['plain_ms'] * 1e3:.1f} µs, chained "
        f"{costs['chained_ms'] * 1e3:.1f} µs. The chained launch captured in a CUDA graph (allocation, memset and "
        f"free nodes around the kernel) and replayed: {costs['graph_ms'] * 1e3:.1f} µs per replay, against "
        f"{costs['direct_ms'] * 1e3:.1f} µs for the direct launch on the same stream; correct: "
        f"{'yes' if costs['correct'] else 'NO'}.",
        "",
    ]


def run(sizes: list[int], arch: str) -> dict:
    return chained_results(sizes, arch)


def _bytes(row: dict) -> int:
    """Read and written, 4-byte elements."""
    return 8 * row["elements"]


SECTION = Section(
    "chained",
    key="chained",
    needs=("cupy", "cub", "torch"),
    run=run,
    lines=chained_lines,
    guarded=True,
    chart=declare(
        "whole-array scans in one pass",
        {
            name: rate(key, _bytes)
            for name, key in (
                ("chained", "chained"),
                ("CUB", "cub"),
                ("torch.cumsum", "torch"),
                ("three kernels", "three"),
            )
        },
        x=lambda r: f"{r['n']} {r['dtype']}",
        dashed={"copy": lambda r: _bytes(r) / r["copy_ms"] / 1e6},
        rows=lambda results: results["scans"],
    ),
)
