"""Whole-array stream compaction in one pass (`tile.select(..., chained=True)`, `coop_tiles.examples.compact`): against
CUB's DeviceSelect::If / ::Flagged, torch.masked_select, torch.nonzero and the copy rate (issue 22)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import coop_tiles as ct
from benchmarks.charts import declare, rate
from benchmarks.cub import cub_call, cub_library
from benchmarks.device import free_device_memory, stream_handle
from benchmarks.kernels import with_threads
from benchmarks.report import (
    config_times_cell,
    correct_cell,
    failed_row,
    gbs_cell,
    ms_cell,
    rate_cell,
    speedup_cell,
    table_row,
)
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms, guarded, tune
from coop_tiles import tile

SELECT_CASES = tuple((dtype, fraction) for dtype in ("int32", "float32") for fraction in (0.5, 0.05))
SELECT_LOG2N = 28
SELECT_CONFIGS = ((4096, None), (4096, 256), (8192, None), (2048, None))  # TILE, threads (None: the default)


# The chained select (issue 22) is newer than the first sections: a library without it fails this section alone.
try:
    from coop_tiles.examples.compaction import compact_kernel, nonzero_kernel

    @ct.jit
    def select_nonzero(x, out, total, n, TILE: ct.constexpr):
        """`out[:total]` = the nonzero elements of x, in order (DeviceSelect::If's job, the predicate in the kernel)."""
        base = ct.program_id(0) * TILE
        t = tile.load(x, base, TILE, valid=n - base, other=0)
        s, count, offset = tile.select(t, t != 0, valid=n - base, chained=True)
        tile.store(out, offset, s, valid=count)
        if ct.program_id(0) == ct.num_programs(0) - 1:
            total[0] = offset + count

    SELECT_ERROR: Exception | None = None
except Exception as error:
    compact_kernel = nonzero_kernel = select_nonzero = None
    SELECT_ERROR = error


def _config_name(config: tuple[int, int | None]) -> str:
    tile_size, threads = config
    return f"TILE {tile_size}" + (f" × {threads} threads" if threads else "")


def select_rows(sizes: list[int], arch: str) -> list[dict]:
    """Each dtype and fraction selected of SELECT_CASES, at 2^min(SELECT_LOG2N, max(sizes)) elements."""
    if select_nonzero is None:
        raise SELECT_ERROR
    log2n = min(SELECT_LOG2N, max(sizes))
    rows = []
    for dtype, fraction in SELECT_CASES:
        row = {"n": f"2^{log2n}", "elements": 1 << log2n, "dtype": dtype, "fraction": fraction}
        rows.append({**row, **guarded(_select_row, 1 << log2n, dtype, fraction, arch)})
        free_device_memory()
    return rows


def _select_row(n: int, dtype: str, fraction: float, arch: str) -> dict:
    """One case: x nonzero with probability `fraction` (values 1..999, exact in float32), flags = x != 0; every
    implementation's output compared with the expected compaction."""
    import cupy as cp

    rng = cp.random.RandomState(22)
    x = cp.where(rng.random_sample(n, dtype=cp.float32) < fraction, rng.randint(1, 1000, n, dtype=cp.int32), 0)
    x = x.astype(dtype)
    flags = x != 0
    expected = x[flags]
    selected = int(expected.size)
    out, total = cp.empty(n, dtype), cp.zeros(1, cp.int64)
    copy_ms = _copy_ms(x)

    def reset() -> None:
        out.fill(-1)
        total.fill(-1)

    def check(_config: Any = None) -> bool:
        return int(total[0]) == selected and bool(cp.array_equal(out[:selected], expected))

    indices, where = cp.empty(n, cp.int64), cp.flatnonzero(flags)

    def reset_indices() -> None:
        indices.fill(-1)
        total.fill(-1)

    def check_indices(_config: Any = None) -> bool:
        return int(total[0]) == selected and bool(cp.array_equal(indices[:selected], where))

    return {
        "selected": selected,
        "copy_ms": copy_ms,
        "coop_if": guarded(_coop, select_nonzero, (x, out, total, n), n, reset, check),
        "coop_flagged": guarded(_coop, compact_kernel, (x, flags, out, total, n), n, reset, check),
        "coop_nonzero": guarded(_coop, nonzero_kernel, (x, indices, total, n), n, reset_indices, check_indices),
        "cub_if": guarded(_cub, "if", x, flags, out, total, n, arch, reset, check),
        "cub_flagged": guarded(_cub, "flagged", x, flags, out, total, n, arch, reset, check),
        "masked_select": guarded(_torch, "masked_select", x, flags, expected),
        "nonzero": guarded(_torch, "nonzero", x, flags, expected),
    }


def _copy_ms(x: Any) -> float:
    """The time of a device copy of x."""
    import cupy as cp

    dst = cp.empty_like(x)
    return cuda_time_ms(lambda: cp.copyto(dst, x))


def _coop(kernel: Any, args: tuple, n: int, reset: Callable, check: Callable) -> dict:
    """One launch of a chained-select kernel over the whole array, best of SELECT_CONFIGS."""
    return tune(
        SELECT_CONFIGS,
        lambda c: lambda: with_threads(kernel, c[1])[ct.cdiv(n, c[0])](*args, TILE=c[0]),
        reset,
        check,
    )


def _cub(kind: str, x: Any, flags: Any, out: Any, total: Any, n: int, arch: str, reset: Callable, check: Callable):
    """cub::DeviceSelect::If (x != 0) or ::Flagged (by `flags`), temporary storage sized and allocated once, outside
    the timing; the count (an int) is copied into `total` for the check, outside the timing."""
    import ctypes

    import cupy as cp

    lib = cub_library(arch)
    suffix = "i32" if x.dtype == cp.int32 else "f32"
    select = getattr(lib, f"cub_select_{kind}_{suffix}")
    count = cp.zeros(1, cp.int32)
    temp_bytes, stream = ctypes.c_size_t(0), stream_handle()
    operands = (x.data.ptr,) if kind == "if" else (x.data.ptr, flags.data.ptr)
    args = (*operands, out.data.ptr, count.data.ptr, n, stream)
    cub_call(lib, select(None, ctypes.byref(temp_bytes), *args), f"DeviceSelect::{kind} (size query)")
    temp = cp.empty(max(temp_bytes.value, 1), cp.uint8)

    def launch() -> None:
        cub_call(lib, select(temp.data.ptr, ctypes.byref(temp_bytes), *args), f"DeviceSelect::{kind}")

    def checked(config: Any) -> bool:
        total[0] = count[0]
        return check(config)

    return tune([kind], lambda _: launch, reset, checked)


def _torch(kind: str, x: Any, flags: Any, expected: Any) -> dict:
    """torch.masked_select(x, flags), or torch.nonzero(x) (the indices, compared with those of the flags)."""
    import cupy as cp
    import torch

    tx, tf = torch.as_tensor(x, device="cuda"), torch.as_tensor(flags, device="cuda")
    if kind == "masked_select":

        def run() -> Any:
            return torch.masked_select(tx, tf)

        want = expected
    else:

        def run() -> Any:
            return torch.nonzero(tx)

        want = cp.flatnonzero(flags)[:, None]
    ms = cuda_time_ms(run)
    got = cp.asarray(run())
    correct = got.shape == want.shape and bool(cp.array_equal(got, want))
    return {"best": kind, "ms": ms, "times": {kind: ms}, "correct": correct}


def select_lines(rows: list[dict]) -> list[str]:
    configs = ", ".join(_config_name(c) for c in SELECT_CONFIGS)
    lines = [
        "",
        "## Whole-array compaction: `tile.select(..., chained=True)`",
        "",
        "One launch over the whole array: each program selects its tile's elements (`tile.select`: a block scan of "
        "each thread's count of flags and a scatter through shared memory) and stores them at `offset`, the "
        "number selected by the programs before it (a chained scan of the counts, as `tile.scan(..., "
        "chained=True)`), then the last program writes the total. *If*: the nonzero elements, the predicate in "
        "the kernel (`select_nonzero` of benchmarks/sections/select.py); *Flagged*: by a bool array "
        "(`coop_tiles.examples.compact`); *nonzero*: "
        "the int64 indices of the nonzero elements (`coop_tiles.examples.nonzero`). Best of "
        f"{configs}. Baselines: `cub::DeviceSelect::If` (x != 0) and `::Flagged` (benchmarks/cub_baselines.cu, "
        "temporary storage allocated once, outside the timing), `torch.masked_select(x, flags)` and "
        "`torch.nonzero(x)` (indices: int64 per selected element). GB/s counts the bytes read and written "
        "(n × 4 read, n more for the flags, 4 per selected element written); the copy rate is a device copy's "
        "(2 × n × 4 bytes over its time), and *of copy* is coop_tiles' rate over it. *coop / X* is X's time over "
        "coop_tiles' (above 1: coop_tiles faster).",
        "Correct: the count and the compacted elements (or indices) equal CuPy's `x[x != 0]`.",
        "",
        "| dtype | n | selected | copy GB/s | coop If GB/s | of copy | CUB If GB/s | coop / CUB If | coop Flagged GB/s "
        "| of copy | CUB Flagged GB/s | coop / CUB Flagged | masked_select ms | coop / masked_select | coop nonzero ms "
        "| torch.nonzero ms | coop / torch.nonzero | correct (coop If / Flagged / nonzero, CUB If / Flagged, "
        "masked_select, torch.nonzero) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(failed_row(r, ("dtype", "n"), 18))
            continue
        n = r["elements"]
        copy_gbs = 2 * n * 4 / r["copy_ms"] / 1e6
        if_bytes, flagged_bytes = _if_bytes(r), _flagged_bytes(r)
        names = ("coop_if", "coop_flagged", "coop_nonzero", "cub_if", "cub_flagged", "masked_select", "nonzero")
        results = [r[name] for name in names]
        lines.append(
            table_row(
                r["dtype"],
                r["n"],
                f"{r['fraction']:.0%}",
                gbs_cell(2 * n * 4, r["copy_ms"]),
                rate_cell(r["coop_if"], if_bytes, _config_name),
                _of_copy(r["coop_if"], if_bytes, copy_gbs),
                rate_cell(r["cub_if"], if_bytes),
                speedup_cell(r["cub_if"], r["coop_if"]),
                rate_cell(r["coop_flagged"], flagged_bytes, _config_name),
                _of_copy(r["coop_flagged"], flagged_bytes, copy_gbs),
                rate_cell(r["cub_flagged"], flagged_bytes),
                speedup_cell(r["cub_flagged"], r["coop_flagged"]),
                ms_cell(r["masked_select"]),
                speedup_cell(r["masked_select"], r["coop_flagged"]),
                ms_cell(r["coop_nonzero"], _config_name),
                ms_cell(r["nonzero"]),
                speedup_cell(r["nonzero"], r["coop_nonzero"]),
                " / ".join(correct_cell(x) for x in results),
            )
        )
    measured = [r for r in rows if "error" not in r]
    if measured:
        lines += ["", "Every configuration, ms:", ""]
    for r in measured:
        lines.append(
            f"- {r['dtype']}, {r['fraction']:.0%}: If {config_times_cell(r['coop_if'], _config_name)}; "
            f"Flagged {config_times_cell(r['coop_flagged'], _config_name)}; "
            f"nonzero {config_times_cell(r['coop_nonzero'], _config_name)}"
        )
    bar = "Bar (issue 22): at least 1.1x CUB DeviceSelect, and at least 90% of the copy rate."
    return lines + ["", bar, ""]


def _of_copy(result: dict, nbytes: float, copy_gbs: float) -> str:
    if "error" in result:
        return "—"
    return f"**{nbytes / result['ms'] / 1e6 / copy_gbs:.1%}**"


def run(sizes: list[int], arch: str) -> list[dict]:
    return select_rows(sizes, arch)


def _if_bytes(row: dict) -> int:
    """x read, the selected elements written."""
    return 4 * row["elements"] + 4 * row["selected"]


def _flagged_bytes(row: dict) -> int:
    """x and the flags read, the selected elements written."""
    return 5 * row["elements"] + 4 * row["selected"]


SECTION = Section(
    "select",
    key="select",
    needs=("cupy", "cub", "torch"),
    run=run,
    lines=select_lines,
    guarded=True,
    chart=declare(
        "whole-array compaction, 2^28 elements",
        {
            "coop If": rate("coop_if", _if_bytes),
            "CUB If": rate("cub_if", _if_bytes),
            "coop Flagged": rate("coop_flagged", _flagged_bytes),
            "CUB Flagged": rate("cub_flagged", _flagged_bytes),
        },
        x=lambda r: f"{r['dtype']} {r['fraction']:.0%} selected",
        dashed={"copy": lambda r: 8 * r["elements"] / r["copy_ms"] / 1e6},
    ),
)
