"""Histograms: `tile.histogram` in a persistent loop merged with `tile.atomic_add`, against CUB's HistogramEven, Triton
and torch.bincount (issue 8)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import coop_tiles as ct
from benchmarks.charts import declare, rate
from benchmarks.cub import cub_call, cub_library
from benchmarks.device import free_device_memory, sm_count, stream_handle, to_host
from benchmarks.report import config_times_cell, correct_cell, failed_row, gbs_cell, rate_cell, speedup_cell, table_row
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms, guarded, tune
from coop_tiles import tile

HIST_CASES = (  # dtype, log2 n (capped by the run's largest size), bins, values drawn uniformly from [low, high)
    ("uint8", 28, 256, (0, 256)),
    ("int32", 26, 1000, (-100, 1100)),
)
HIST_CHUNKS = (2048, 4096, 8192, 16384, 32768)  # (the runtime's block: 256, 256, 256, 512, 1024 threads for uint8)
HIST_WAVES = (2, 4, 8)  # programs per SM of the persistent grids
TRITON_HIST_BLOCKS = (1024, 4096)


# tile.histogram and tile.atomic_add (issue 8) are newer than the first sections: a library without them fails this
# section alone, not the import of the benchmarks.
try:

    @ct.jit
    def tile_histogram(x, out, n, BINS: ct.constexpr, CHUNK: ct.constexpr):
        """Persistent: each program strides over x a CHUNK at a time, adds each chunk's histogram to its own, and
        adds that to `out` (BINS int32 zeros) at the end."""
        h = tile.zeros(BINS, np.int32)
        for base in range(ct.program_id(0) * CHUNK, n, ct.num_programs(0) * CHUNK):
            t = tile.load(x, base, CHUNK, valid=n - base, other=0)
            h = h + tile.histogram(t, BINS, valid=n - base)
        tile.atomic_add(out, 0, h)

    ISSUE8_ERROR: Exception | None = None
except Exception as error:
    tile_histogram = None
    ISSUE8_ERROR = error


def histogram_rows(sizes: list[int], arch: str) -> list[dict]:
    """Each case of HIST_CASES (n capped at 2^max(sizes)): coop_tiles, CUB's DeviceHistogram::HistogramEven,
    Triton and torch.bincount, against the copy's read rate for the same bytes."""
    rows = []
    for dtype, log2n, bins, value_range in HIST_CASES:
        log2n = min(log2n, max(sizes))
        case = {"case": f"{dtype}, {bins} bins", "n": f"2^{log2n}", "elements": 1 << log2n, "range": value_range}
        rows.append({**case, **guarded(_histogram_row, dtype, 1 << log2n, bins, value_range, arch)})
        free_device_memory()
    return rows


def _histogram_data(dtype: str, n: int, value_range: tuple[int, int], bins: int) -> tuple[Any, np.ndarray]:
    """n values of `dtype` uniform in value_range on the device, and the NumPy counts of those in [0, bins)."""
    import cupy as cp

    x = cp.random.RandomState(8).randint(*value_range, size=n, dtype=cp.int32).astype(dtype)
    host = cp.asnumpy(x).astype(np.int64)
    return x, np.bincount(host[(host >= 0) & (host < bins)], minlength=bins)


def _read_limit_ms(x: Any) -> float:
    """Half the time of a device copy of x's bytes (viewed as int32, as the bandwidth section copies): the time
    a kernel that only reads x needs at the copy's read rate."""
    import cupy as cp

    words = x.view(cp.int32)
    dst = cp.empty_like(words)
    return cuda_time_ms(lambda: cp.copyto(dst, words)) / 2


def _histogram_row(dtype: str, n: int, bins: int, value_range: tuple[int, int], arch: str) -> dict:
    """One case: every implementation timed (output zeroed before each repetition, outside the timing) and its
    counts compared with NumPy's."""
    import cupy as cp

    x, expected = _histogram_data(dtype, n, value_range, bins)
    out = cp.zeros(bins, cp.int32)

    def reset() -> None:
        out.fill(0)

    def check(_config: Any = None) -> bool:
        return bool(np.array_equal(cp.asnumpy(out), expected))

    return {
        "read_ms": _read_limit_ms(x),
        "coop": guarded(_histogram_coop, x, out, n, bins, reset, check),
        "cub": guarded(_histogram_cub, x, out, n, bins, arch, reset, check),
        "triton": guarded(_histogram_triton, x, out, n, bins, reset, check),
        "torch": guarded(_histogram_torch, x, bins, expected),
    }


def _histogram_coop(x: Any, out: Any, n: int, bins: int, reset: Callable, check: Callable) -> dict:
    """tile_histogram on SMs x HIST_WAVES programs, best of HIST_CHUNKS x HIST_WAVES."""
    if tile_histogram is None:
        raise ISSUE8_ERROR
    sms = sm_count()
    return tune(
        [(chunk, waves) for chunk in HIST_CHUNKS for waves in HIST_WAVES],
        lambda c: lambda: tile_histogram[sms * c[1]](x, out, n, BINS=bins, CHUNK=c[0]),
        reset,
        check,
        reset_each_rep=True,
    )


def _histogram_cub(x: Any, out: Any, n: int, bins: int, arch: str, reset: Callable, check: Callable) -> dict:
    """cub::DeviceHistogram::HistogramEven over [0, bins), temporary storage sized and allocated once, outside
    the timing. CUB zeroes its output itself, inside its time; the reset before each repetition only keeps the
    timing the same as the others'."""
    import ctypes

    import cupy as cp

    lib = cub_library(arch)
    histogram = lib.cub_histogram_even_u8 if x.dtype == cp.uint8 else lib.cub_histogram_even_i32
    temp_bytes, stream = ctypes.c_size_t(0), stream_handle()
    args = (x.data.ptr, out.data.ptr, n, bins, 0, bins, stream)
    cub_call(lib, histogram(None, ctypes.byref(temp_bytes), *args), "HistogramEven (size query)")
    temp = cp.empty(max(temp_bytes.value, 1), cp.uint8)

    def launch() -> None:
        cub_call(lib, histogram(temp.data.ptr, ctypes.byref(temp_bytes), *args), "HistogramEven")

    return tune(["HistogramEven"], lambda _: launch, reset, check, reset_each_rep=True)


def _histogram_triton(x: Any, out: Any, n: int, bins: int, reset: Callable, check: Callable) -> dict:
    """The persistent tl.histogram + tl.atomic_add kernel of benchmarks/_baselines.py, best of
    TRITON_HIST_BLOCKS x HIST_WAVES."""
    from benchmarks._baselines import triton_histogram

    sms = sm_count()
    return tune(
        [(block, waves) for block in TRITON_HIST_BLOCKS for waves in HIST_WAVES],
        lambda c: triton_histogram(x, out, n, bins, block=c[0], programs=sms * c[1]),
        reset,
        check,
        reset_each_rep=True,
    )


def _histogram_torch(x: Any, bins: int, expected: np.ndarray) -> dict:
    """torch.bincount(x, minlength=bins) on a zero-copy view of x; when values can fall outside [0, bins), they
    are masked out first (`x[(x >= 0) & (x < bins)]`, inside the timing: bincount counts every value)."""
    import cupy as cp
    import torch

    tx = torch.as_tensor(x, device="cuda")
    if x.dtype == cp.uint8 and bins >= 256:

        def count() -> Any:
            return torch.bincount(tx, minlength=bins)
    else:

        def count() -> Any:
            return torch.bincount(tx[(tx >= 0) & (tx < bins)], minlength=bins)

    ms = cuda_time_ms(count)
    counts = to_host(count())
    correct = counts.shape == expected.shape and np.array_equal(counts, expected)
    return {"best": "bincount", "ms": ms, "times": {"bincount": ms}, "correct": bool(correct)}


def histogram_lines(rows: list[dict]) -> list[str]:
    chunks, waves = "/".join(map(str, HIST_CHUNKS)), "/".join(map(str, HIST_WAVES))
    lines = [
        "",
        "## Histograms: `tile.histogram` in a persistent loop, merged with `tile.atomic_add`",
        "",
        "`tile_histogram` runs SMs × k programs, each striding over the array a CHUNK at a time, "
        "`h = h + tile.histogram(t, BINS, valid=n - base)` from `h = tile.zeros(BINS, np.int32)`, then "
        f"`tile.atomic_add(out, 0, h)`; best of CHUNK {chunks} × k {waves}. Baselines on the same array: "
        "`cub::DeviceHistogram::HistogramEven` over [0, BINS) (benchmarks/cub_baselines.cu, built with nvcc for "
        "the run; temporary storage allocated once, outside the timing), a persistent Triton kernel "
        f"(`tl.histogram` + `tl.atomic_add`, best of BLOCK {'/'.join(map(str, TRITON_HIST_BLOCKS))} × k {waves}, "
        "4 warps), and `torch.bincount(x, minlength=BINS)`; for int32, whose values fall outside [0, BINS), "
        "torch first masks them out (`x[(x >= 0) & (x < BINS)]`, inside its time: bincount counts every value).",
        "The output (BINS int32) is zeroed before every repetition, outside the timing; CUB zeroes its output "
        "itself, inside its time. GB/s counts the bytes read (n × itemsize); the read limit is half the time of "
        "a device copy of the same bytes (the copy's read rate, as for `tile.sum`), and *of read rate* is that "
        "limit over coop_tiles' time. *coop / X* is X's time over coop_tiles' (above 1: coop_tiles faster).",
        "Correct: every implementation's counts equal `np.bincount` of the values in [0, BINS).",
        "",
        "| case | n | values | read limit GB/s | coop_tiles GB/s | of read rate | CUB GB/s | coop / CUB | "
        "Triton GB/s | coop / Triton | torch.bincount GB/s | correct (coop / CUB / Triton / torch) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(failed_row(r, ("case", "n"), 12))
            continue
        coop, cub, triton, torch_ = r["coop"], r["cub"], r["triton"], r["torch"]
        nbytes = _bytes(r)
        rate = "—" if "error" in coop else f"**{r['read_ms'] / coop['ms']:.1%}**"
        verdict = " / ".join(correct_cell(x) for x in (coop, cub, triton, torch_))
        lines.append(
            table_row(
                r["case"],
                r["n"],
                f"[{r['range'][0]}, {r['range'][1]})",
                gbs_cell(nbytes, r["read_ms"]),
                rate_cell(coop, nbytes, lambda c: f"CHUNK {c[0]}, k {c[1]}"),
                rate,
                rate_cell(cub, nbytes),
                speedup_cell(cub, coop),
                rate_cell(triton, nbytes, lambda c: f"BLOCK {c[0]}, k {c[1]}"),
                speedup_cell(triton, coop),
                rate_cell(torch_, nbytes),
                verdict,
            )
        )
    measured = [r for r in rows if "error" not in r]
    if measured:
        lines += ["", "Every configuration, ms:", ""]
    for r in measured:
        coop = config_times_cell(r["coop"], lambda c: f"CHUNK {c[0]} k {c[1]}")
        triton = config_times_cell(r["triton"], lambda c: f"BLOCK {c[0]} k {c[1]}")
        lines.append(f"- {r['case']}: coop_tiles {coop}; Triton {triton}")
    bar = (
        "Bar (issue 8): at least 0.9x CUB DeviceHistogram's throughput, and at least 4x Triton's. "
        "Bar (issue 22): at least 85% of the read rate, for both cases."
    )
    return lines + ["", bar, ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    return histogram_rows(sizes, arch)


def _bytes(row: dict) -> int:
    """The bytes read."""
    return row["elements"] * (1 if row["case"].startswith("uint8") else 4)


SECTION = Section(
    "histogram",
    key="histogram",
    needs=("cupy", "cub", "triton", "torch"),
    run=run,
    lines=histogram_lines,
    guarded=True,
    chart=declare(
        "histograms",
        {
            name: rate(key, _bytes)
            for name, key in (("coop_tiles", "coop"), ("CUB", "cub"), ("Triton", "triton"), ("torch.bincount", "torch"))
        },
        x=lambda r: f"{r['case']}, {r['n']}",
        dashed={"read limit": lambda r: _bytes(r) / r["read_ms"] / 1e6},
    ),
)
