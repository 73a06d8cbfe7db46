"""Scans along axis 1 of 2-D float32 tensors, inclusive and reverse, a block of rows per program (2-D tiles, reverse
scans), against Triton, PyTorch and the copy; and the reverse chained scan against the forward one (issue 19).

The coop_tiles programs are written against the contract (`tile.load(x, (r, 0), (BM, N), valid=(M - r, None))`,
`tile.scan(t, axis=1, reverse=...)`, `tile.scan(t, chained=True, reverse=True)`) and built inside the run, so that
a library without 2-D tiles or reverse scans imports this module and records "not available" cells while the
baselines are still measured.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import coop_tiles as ct
from benchmarks.charts import declare, rate
from benchmarks.device import fill_nan, free_device_memory
from benchmarks.kernels import tutorial, with_threads
from benchmarks.report import (
    config_times_cell,
    correct_cell,
    failed_row,
    gbs_cell,
    rate_cell,
    skipped_note,
    speedup_cell,
    table_row,
)
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms, guarded, tune_working

SCAN2D_SHAPES = ((4096, 256), (4096, 2048), (65536, 32))
SCAN2D_ELEMENTS = (2048, 4096, 8192)  # elements per program: BM = this / N rows (at least 1)
TRITON_WARPS = (4, 8)
REVERSE_CHAINED_CONFIGS = ((4096, None), (8192, None), (8192, 512), (16384, None))  # TILE, threads


def _rows_per_program(cols: int) -> tuple[int, ...]:
    return tuple(sorted({max(1, e // cols) for e in SCAN2D_ELEMENTS}))


_KERNELS: dict[str, Any] = {}


def coop_kernels() -> dict[str, Any]:
    """The coop_tiles programs, built on first use (decorating needs nothing new; compiling them needs 2-D tiles and
    reverse scans)."""
    if _KERNELS:
        return _KERNELS
    from coop_tiles import tile

    @ct.jit
    def rows_cumsum(x, y, BM: ct.constexpr, N: ct.constexpr):
        r = ct.program_id(0) * BM
        m = x.shape[0]
        t = tile.load(x, (r, 0), (BM, N), valid=(m - r, None), other=0)
        tile.store(y, (r, 0), tile.scan(t, axis=1), valid=(m - r, None))

    @ct.jit
    def rows_reverse_cumsum(x, y, BM: ct.constexpr, N: ct.constexpr):
        r = ct.program_id(0) * BM
        m = x.shape[0]
        t = tile.load(x, (r, 0), (BM, N), valid=(m - r, None), other=0)
        tile.store(y, (r, 0), tile.scan(t, axis=1, reverse=True), valid=(m - r, None))

    @ct.jit
    def reverse_chained_cumsum(x, y, n, TILE: ct.constexpr):
        base = ct.program_id(0) * TILE
        t = tile.load(x, base, TILE, valid=n - base, other=0)
        tile.store(y, base, tile.scan(t, chained=True, reverse=True), valid=n - base)

    _KERNELS.update(
        rows_cumsum=rows_cumsum, rows_reverse_cumsum=rows_reverse_cumsum, reverse_chained_cumsum=reverse_chained_cumsum
    )
    return _KERNELS


def scan2d_results(sizes: list[int]) -> dict:
    """The row scans of every shape, forward and reverse, and the whole-array reverse chained scan of each size."""
    import torch  # noqa: F401 - the section needs PyTorch before anything is measured

    rows = []
    for shape in SCAN2D_SHAPES:
        for reverse in (False, True):
            key = {"shape": shape, "dtype": "float32", "case": "reverse" if reverse else "inclusive"}
            rows.append({**key, **guarded(_scan2d_row, shape, reverse)})
            free_device_memory()
    chained = []
    for log2n in sizes:
        chained.append({"n": f"2^{log2n}", "dtype": "int32", "elements": 1 << log2n, **guarded(_chained_row, log2n)})
        free_device_memory()
    return {"rows": rows, "chained": chained}


def _scan2d_row(shape: tuple[int, int], reverse: bool) -> dict:
    """One shape and direction. Data: integers 0..3 as float32, so that every partial sum is exact and every
    implementation must equal the expected scan exactly, over the whole output."""
    import torch

    from benchmarks._baselines_rows import triton_rows_scan

    m, n = shape
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randint(0, 4, shape, device="cuda", generator=g, dtype=torch.int32).float()
    y = torch.empty_like(x)
    exact = x.double()
    expected = (exact.flip(1).cumsum(1).flip(1) if reverse else exact.cumsum(1)).float()  # exact in float32
    del exact
    copy_ms = cuda_time_ms(lambda: y.copy_(x))

    def reset() -> None:
        fill_nan(y)

    def check(_config: Any = None) -> bool:
        return bool(torch.equal(y, expected))

    configs = [(bm, None) for bm in _rows_per_program(n)]

    def coop(config: tuple[int, int | None]) -> Callable[[], None]:
        bm, threads = config
        name = "rows_reverse_cumsum" if reverse else "rows_cumsum"
        kernel = with_threads(coop_kernels()[name], threads)
        return lambda: kernel[ct.cdiv(m, bm)](x, y, BM=bm, N=n)

    triton_configs = [(bm, w) for bm in _rows_per_program(n) for w in TRITON_WARPS]
    out: list[Any] = [None]

    def torch_launch() -> None:
        out[0] = x.flip(1).cumsum(1).flip(1) if reverse else torch.cumsum(x, dim=1, out=y)

    return {
        "copy_ms": copy_ms,
        "elements": m * n,
        "coop": guarded(tune_working, configs, coop, reset, check),
        "triton": guarded(
            tune_working,
            triton_configs,
            lambda c: triton_rows_scan(x, y, rows_per_program=c[0], warps=c[1], reverse=reverse),
            reset,
            check,
        ),
        "torch": guarded(_torch_result, torch_launch, lambda: bool(torch.equal(out[0], expected))),
    }


def _torch_result(launch: Callable[[], None], check: Callable[[], bool]) -> dict:
    ms = cuda_time_ms(launch)
    launch()
    return {"best": None, "ms": ms, "times": {None: ms}, "correct": check()}


def _chained_row(log2n: int) -> dict:
    """The reverse chained cumsum of 2^log2n int32 (0 or 1, 1 with probability 1/32) against tutorial 02's forward
    chained cumsum and the copy, on the same arrays; each checked exactly over the whole output."""
    import torch

    n = 1 << log2n
    forward_kernel = tutorial("02_cumsum").chained_cumsum
    host = (np.random.default_rng(11).random(n, dtype=np.float32) < 1 / 32).astype(np.int32)
    x = torch.from_numpy(host).cuda()
    forward_expected = torch.from_numpy(np.cumsum(host, dtype=np.int64).astype(np.int32)).cuda()
    suffix = np.cumsum(host[::-1], dtype=np.int64)[::-1]  # a view with a negative stride: copied below
    reverse_expected = torch.from_numpy(np.ascontiguousarray(suffix, dtype=np.int32)).cuda()
    del suffix
    del host
    y = torch.empty_like(x)
    copy_ms = cuda_time_ms(lambda: y.copy_(x))

    def reset() -> None:
        y.fill_(-1)

    def launches(kernel: Callable[[], Any]) -> Callable[[tuple[int, int | None]], Callable[[], None]]:
        def launch(config: tuple[int, int | None]) -> Callable[[], None]:
            tile_size, threads = config
            return lambda: with_threads(kernel(), threads)[ct.cdiv(n, tile_size)](x, y, n, TILE=tile_size)

        return launch

    return {
        "copy_ms": copy_ms,
        "forward": guarded(
            tune_working,
            REVERSE_CHAINED_CONFIGS,
            launches(lambda: forward_kernel),
            reset,
            lambda c: bool(torch.equal(y, forward_expected)),
        ),
        "reverse": guarded(
            tune_working,
            REVERSE_CHAINED_CONFIGS,
            launches(lambda: coop_kernels()["reverse_chained_cumsum"]),
            reset,
            lambda c: bool(torch.equal(y, reverse_expected)),
        ),
    }


def _bm_name(config: tuple[int, int | None]) -> str:
    bm, threads = config
    return f"BM {bm}" + (f" × {threads} threads" if threads else "")


def _triton_name(config: tuple[int, int]) -> str:
    return f"BM {config[0]} × {config[1]} warps"


def _tile_name(config: tuple[int, int | None]) -> str:
    tile_size, threads = config
    return f"TILE {tile_size}" + (f" × {threads} threads" if threads else "")


def scan2d_lines(results: dict | list) -> list[str]:
    per_program = ", ".join(map(str, SCAN2D_ELEMENTS))
    lines = [
        "",
        "## Scans along axis 1: a block of rows per program, inclusive and reverse (issue 19)",
        "",
        "`tile.scan(t, axis=1)` and `tile.scan(t, axis=1, reverse=True)` (suffix sums) of a (BM, N) float32 tile "
        "loaded with `tile.load(x, (r, 0), (BM, N), valid=(M - r, None))`, BM = "
        f"{per_program} elements per program over N, best of those. Triton: `tl.cumsum(t, axis=1)` and "
        "`tl.associative_scan(t, 1, add, reverse=True)` over (BM, N) blocks (benchmarks/_baselines_rows.py), best "
        f"of the same BM × num_warps {'/'.join(map(str, TRITON_WARPS))}. PyTorch: `torch.cumsum(x, dim=1, out=y)`; "
        "reverse: `x.flip(1).cumsum(1).flip(1)` (three kernels, two temporaries). The copy is `y.copy_(x)`, 8 bytes "
        "per element as every scan here; *of copy* is its time over coop_tiles'; *coop / X* is X's time over "
        "coop_tiles' (above 1: coop_tiles faster); *rev / fwd* the reverse scan's coop_tiles time over the "
        "forward one's.",
        "Data: integers 0..3 as float32 (every partial sum exact). Correct: the whole output equals the expected "
        "scan exactly.",
        "",
        "| (M, N) | scan | copy GB/s | coop_tiles GB/s | of copy | rev / fwd | Triton GB/s | coop / Triton | "
        "PyTorch GB/s | coop / PyTorch | correct (coop / Triton / PyTorch) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if isinstance(results, list):  # the section failed before measuring anything
        return lines + [table_row(f"failed: {results[0]['error']}", *["—"] * 10), ""]
    forward = {r["shape"]: r for r in results["rows"] if r.get("case") == "inclusive" and "error" not in r}
    for r in results["rows"]:
        if "error" in r:
            lines.append(failed_row(r, ("shape", "case"), 11))
            continue
        nbytes = _bytes(r)
        coop = r["coop"]
        share = "—" if "error" in coop else f"**{r['copy_ms'] / coop['ms']:.1%}**"
        fwd = forward.get(r["shape"], {}).get("coop", {"error": "not measured"})
        ratio = "—"
        if r["case"] == "reverse" and "error" not in coop and "error" not in fwd:
            ratio = f"{coop['ms'] / fwd['ms']:.3f}"
        lines.append(
            table_row(
                str(r["shape"]),
                r["case"],
                gbs_cell(nbytes, r["copy_ms"]),
                rate_cell(coop, nbytes, _bm_name),
                share,
                ratio,
                rate_cell(r["triton"], nbytes, _triton_name),
                speedup_cell(r["triton"], coop),
                rate_cell(r["torch"], nbytes),
                speedup_cell(r["torch"], coop),
                " / ".join(correct_cell(v) for v in (coop, r["triton"], r["torch"])),
            )
        )
    measured = [r for r in results["rows"] if "error" not in r]
    if measured:
        lines += ["", "Every configuration, ms:", ""]
    for r in measured:
        lines.append(
            f"- {r['shape']} {r['case']}: coop_tiles {config_times_cell(r['coop'], _bm_name)}"
            f"{skipped_note(r['coop'], _bm_name)}; Triton {config_times_cell(r['triton'], _triton_name)}"
            f"{skipped_note(r['triton'], _triton_name)}"
        )
    lines += [
        "",
        "Bar (issue 19): at least 1.1x Triton and 90% of the copy rate; the reverse scan within 5% of the forward "
        "one (rev / fwd at most 1.05).",
        "",
        "### Reverse chained scan: `tile.scan(t, chained=True, reverse=True)`",
        "",
        "The whole array's suffix sums in one kernel (the grid scanned from the last program to the first), against "
        "tutorial 02's forward `chained_cumsum` and `y.copy_(x)` on the same int32 arrays (0 or 1, 1 with "
        "probability 1/32), each best of "
        f"{', '.join(_tile_name(c) for c in REVERSE_CHAINED_CONFIGS)}. Correct: the whole output equals NumPy's "
        "(reversed) cumsum.",
        "",
        "| n | copy GB/s | forward GB/s | forward of copy | reverse GB/s | reverse of copy | rev / fwd | "
        "correct (forward / reverse) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results["chained"]:
        if "error" in r:
            lines.append(failed_row(r, ("n",), 8))
            continue
        nbytes, fwd, rev = 8 * r["elements"], r["forward"], r["reverse"]
        shares = ["—" if "error" in v else f"**{r['copy_ms'] / v['ms']:.1%}**" for v in (fwd, rev)]
        ratio = "—" if "error" in fwd or "error" in rev else f"{rev['ms'] / fwd['ms']:.3f}"
        lines.append(
            table_row(
                r["n"],
                gbs_cell(nbytes, r["copy_ms"]),
                rate_cell(fwd, nbytes, _tile_name),
                shares[0],
                rate_cell(rev, nbytes, _tile_name),
                shares[1],
                ratio,
                f"{correct_cell(fwd)} / {correct_cell(rev)}",
            )
        )
    bar = "Bar (issue 19): the reverse chained scan at least 90% of the copy rate and within 5% of the forward one."
    return lines + ["", bar, ""]


def run(sizes: list[int], arch: str) -> dict:
    return scan2d_results(sizes)


def _bytes(row: dict) -> int:
    """float32 read and written."""
    return 8 * row["elements"]


SECTION = Section(
    "scan2d",
    key="scan2d",
    needs=("torch", "triton"),
    run=run,
    lines=scan2d_lines,
    guarded=True,
    chart=declare(
        "scans along axis 1, float32",
        {"coop_tiles": rate("coop", _bytes), "Triton": rate("triton", _bytes), "PyTorch": rate("torch", _bytes)},
        x=lambda r: f"{r['shape']} {r['case']}",
        dashed={"copy": lambda r: _bytes(r) / r["copy_ms"] / 1e6},
        rows=lambda results: results["rows"],
    ),
)
