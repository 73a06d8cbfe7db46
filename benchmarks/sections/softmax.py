"""Row softmax and layer-norm forward (tutorial 09: one row per program, a block of rows per program, and the layer
norm in chunks re-read per pass), against Triton's tutorial kernels (benchmarks/_baselines_rows.py), PyTorch and the
copy rate for their bytes (issue 19)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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

SOFTMAX_ROWS = 4096
SOFTMAX_COLS = (1024, 4096, 16384)
SOFTMAX_DTYPES = ("float32", "bfloat16")
SOFTMAX_KERNELS = ("softmax", "layer_norm")
SOFTMAX_THREADS = (None, 128, 256, 512, 1024)  # threads per block tried for coop_tiles (None: the runtime's choice)
SOFTMAX_MAX_ITEMS = 64  # ... keeping at most this many items per thread
#: and (threads, register cap) pairs: two blocks per SM of 512 threads, or of 256 threads holding 64 items each
SOFTMAX_CAPPED = ((512, 64), (256, 128))
#: (rows per program, threads) of the block-of-rows programs (`softmax_rows_fwd`, `layer_norm_rows_fwd`), where a
#: thread holds at most ROWS_MAX_ITEMS of the block: 32 * BM threads give each row a warp
ROWS_CONFIGS = ((1, 32), (2, 64), (4, 128), (8, 256), (16, 512), (4, 256), (8, 512), (2, 256), (4, 512))
ROWS_MAX_ITEMS = 32
#: (columns per chunk, threads) of `layer_norm_fwd_chunked` (the row re-read from global memory in each pass), at
#: most ROWS_MAX_ITEMS items of a chunk per thread
CHUNKED_CONFIGS = ((4096, 256), (8192, 256), (8192, 512), (16384, 1024))
#: the first item of the config tuples of those programs (one-row configs are SOFTMAX_THREADS or SOFTMAX_CAPPED)
ROWS, CHUNKS = "rows", "chunks"
TRITON_WARPS = (4, 8, 16)  # Triton's num_warps tried (the tutorials' heuristics pick one of them)
EPS = 1e-5
#: float32 reference, largest difference at most atol + rtol * |reference| element-wise (torch.allclose)
SOFTMAX_TOLERANCE = {
    ("softmax", "float32"): (1e-4, 1e-7),
    ("softmax", "bfloat16"): (1e-2, 1e-6),
    ("layer_norm", "float32"): (1e-4, 1e-4),
    ("layer_norm", "bfloat16"): (1e-2, 2e-2),
}


def _threads_name(config: Any) -> str:
    """A coop_tiles config: one row per program at a thread count (and register cap), a block of rows, or chunks."""
    if isinstance(config, tuple) and config[0] == ROWS:
        return f"{config[1]} rows × {config[2]} threads"
    if isinstance(config, tuple) and config[0] == CHUNKS:
        return f"chunks of {config[1]} × {config[2]} threads"
    if isinstance(config, tuple):
        return f"{config[0]} threads × {config[1]} registers"
    return "auto threads" if config is None else f"{config} threads"


def _pinned(kernel: Any, config: int | tuple[int, int] | None) -> Any:
    """The kernel with a config of SOFTMAX_THREADS or SOFTMAX_CAPPED pinned."""
    return with_threads(kernel, *config) if isinstance(config, tuple) else with_threads(kernel, config)


def coop_configs(kernel: str, cols: int) -> list:
    """The coop_tiles configs tried for a kernel and row length: one row per program (SOFTMAX_THREADS within
    SOFTMAX_MAX_ITEMS, SOFTMAX_CAPPED), blocks of rows (ROWS_CONFIGS), and for the layer norm chunks
    (CHUNKED_CONFIGS of at most `cols` columns), the last two within ROWS_MAX_ITEMS items per thread."""
    one_row = [n for n in SOFTMAX_THREADS if n is None or cols <= SOFTMAX_MAX_ITEMS * n] + list(SOFTMAX_CAPPED)
    rows = [(ROWS, bm, n) for bm, n in ROWS_CONFIGS if bm * cols <= ROWS_MAX_ITEMS * n]
    chunks = [(CHUNKS, c, n) for c, n in CHUNKED_CONFIGS if c <= cols and c <= ROWS_MAX_ITEMS * n]
    return one_row + rows + (chunks if kernel == "layer_norm" else [])


def _coop_launch(ops: Any, kernel: str, config: Any, args: tuple, rows: int, cols: int) -> Callable[[], None]:
    """A launch of tutorial 09's program for `config` (`coop_configs`); `args` are the kernel's array arguments (x, y
    for softmax; x, y, w, b, mean, rstd for layer norm)."""
    extra = () if kernel == "softmax" else (EPS,)
    if isinstance(config, tuple) and config[0] == ROWS:
        _, bm, threads = config
        program = with_threads(ops.softmax_rows_fwd if kernel == "softmax" else ops.layer_norm_rows_fwd, threads)
        return lambda: program[-(-rows // bm)](*args, rows, cols, *extra, BM=bm, BLOCK=cols)
    if isinstance(config, tuple) and config[0] == CHUNKS:
        _, chunk, threads = config
        program = with_threads(ops.layer_norm_fwd_chunked, threads)
        return lambda: program[rows](*args, cols, *extra, BLOCK=chunk)
    program = _pinned(ops.softmax_fwd if kernel == "softmax" else ops.layer_norm_fwd, config)
    return lambda: program[rows](*args, cols, *extra, BLOCK=cols)


def _warps_name(warps: int) -> str:
    return f"{warps} warps"


def softmax_rows() -> list[dict]:
    """Every kernel, row length and dtype: coop_tiles (tutorial 09's programs, best of SOFTMAX_THREADS), Triton
    (best of TRITON_WARPS), PyTorch, and a same-sized copy."""
    import torch  # noqa: F401 - the section needs PyTorch before anything is measured

    rows = []
    for kernel in SOFTMAX_KERNELS:
        for cols in SOFTMAX_COLS:
            for dtype in SOFTMAX_DTYPES:
                key = {"kernel": kernel, "shape": (SOFTMAX_ROWS, cols), "dtype": dtype}
                rows.append({**key, **guarded(_softmax_row, kernel, cols, dtype)})
                free_device_memory()
    return rows


def _bytes(kernel: str, rows: int, cols: int, itemsize: int) -> int:
    """What a kernel must move: the rows read and written; layer norm also reads w and b (in the rows' dtype) and
    writes each row's mean and 1/std (float32)."""
    moved = 2 * rows * cols * itemsize
    return moved if kernel == "softmax" else moved + 2 * cols * itemsize + 2 * rows * 4


def _softmax_row(kernel: str, cols: int, dtype: str) -> dict:
    """One kernel, row length and dtype. Every implementation writes into an output poisoned with NaN before it
    runs, and is checked against PyTorch in float32 on the same input over the whole output (and the mean and
    1/std for layer norm), with SOFTMAX_TOLERANCE."""
    import torch

    from benchmarks._baselines_rows import triton_layer_norm, triton_softmax

    ops = tutorial("09_softmax_layernorm")
    rows = SOFTMAX_ROWS
    t = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(19)
    x = torch.randn(rows, cols, device="cuda", generator=g).to(t)
    y = torch.empty_like(x)
    copy_ms = cuda_time_ms(lambda: y.copy_(x))
    rtol, atol = SOFTMAX_TOLERANCE[kernel, dtype]

    def close(out: Any, expected: Any) -> bool:
        return bool(torch.allclose(out.float(), expected, rtol=rtol, atol=atol))

    if kernel == "softmax":
        expected = torch.softmax(x.float(), dim=1)
        args: tuple = (x, y)
        triton_launch: Callable[[int], Callable[[], None]] = lambda w: triton_softmax(x, y, warps=w)  # noqa: E731

        def check(_config: Any = None) -> bool:
            return close(y, expected)

        def reset() -> None:
            fill_nan(y)

        torch_launch: Callable[[], Any] = lambda: torch.softmax(x, dim=1)  # noqa: E731
        torch_check: Callable[[Any], bool] = lambda out: close(out, expected)  # noqa: E731
    else:
        w = (1 + 0.1 * torch.randn(cols, device="cuda", generator=g)).to(t)
        b = (0.1 * torch.randn(cols, device="cuda", generator=g)).to(t)
        mean, rstd = torch.empty(rows, device="cuda"), torch.empty(rows, device="cuda")
        xf = x.float()
        expected = torch.nn.functional.layer_norm(xf, (cols,), w.float(), b.float(), EPS)
        expected_mean = xf.mean(dim=1)
        expected_rstd = torch.rsqrt(xf.var(dim=1, unbiased=False) + EPS)
        args = (x, y, w, b, mean, rstd)
        triton_launch = lambda warps: triton_layer_norm(x, y, w, b, mean, rstd, EPS, warps=warps)  # noqa: E731

        def check(_config: Any = None) -> bool:
            stats = torch.allclose(mean, expected_mean, rtol=1e-4, atol=1e-5)
            return close(y, expected) and stats and bool(torch.allclose(rstd, expected_rstd, rtol=1e-4))

        def reset() -> None:
            for out in (y, mean, rstd):
                fill_nan(out)

        torch_launch = lambda: torch.nn.functional.layer_norm(x, (cols,), w, b, EPS)  # noqa: E731
        torch_check = lambda out: close(out, expected)  # noqa: E731

    def coop_launch(config: Any) -> Callable[[], None]:
        return _coop_launch(ops, kernel, config, args, rows, cols)

    return {
        "copy_ms": copy_ms,
        "bytes": _bytes(kernel, rows, cols, x.element_size()),
        "copy_bytes": 2 * x.numel() * x.element_size(),
        "coop": guarded(tune_working, coop_configs(kernel, cols), coop_launch, reset, check),
        "triton": guarded(tune_working, TRITON_WARPS, triton_launch, reset, check),
        "torch": guarded(_torch_result, torch_launch, torch_check),
    }


def _torch_result(launch: Callable[[], Any], check: Callable[[Any], bool]) -> dict:
    """PyTorch's function (allocating its output, as it does), timed, and its result checked."""
    ms = cuda_time_ms(launch)
    return {"best": None, "ms": ms, "times": {None: ms}, "correct": check(launch())}


def softmax_lines(rows: list[dict]) -> list[str]:
    threads = ", ".join(_threads_name(n) for n in (*SOFTMAX_THREADS, *SOFTMAX_CAPPED))
    blocks = ", ".join(f"{bm} × {n}" for bm, n in ROWS_CONFIGS)
    chunks = ", ".join(f"{c} × {n}" for c, n in CHUNKED_CONFIGS)
    tols = "; ".join(f"{k} {d}: rtol {r:g}, atol {a:g}" for (k, d), (r, a) in SOFTMAX_TOLERANCE.items())
    lines = [
        "",
        "## Row softmax and layer-norm forward: one row or a block of rows per program (tutorial 09)",
        "",
        f"A ({SOFTMAX_ROWS}, N) PyTorch tensor, N in {', '.join(map(str, SOFTMAX_COLS))}, float32 and bfloat16 "
        "(computed in float32, written in the input's dtype); layer norm with w and b in the input's dtype, writing "
        "each row's mean and 1/std (float32), eps 1e-5. coop_tiles: the best of tutorial 09's `softmax_fwd` and "
        f"`layer_norm_fwd` (one row per program, the whole row as one tile, BLOCK = N) at {threads} (at most "
        f"{SOFTMAX_MAX_ITEMS} items per thread); `softmax_rows_fwd` and `layer_norm_rows_fwd` (a (BM, N) block of "
        f"rows per program, axis-1 reductions) at BM rows × threads {blocks}; and for the layer norm "
        "`layer_norm_fwd_chunked` (Triton's three passes over the row in chunks, the row re-read for each) at "
        f"columns per chunk × threads {chunks} (these two at most {ROWS_MAX_ITEMS} items per thread). "
        "Triton: the kernels of Triton's tutorials 02 and 05 "
        "(benchmarks/_baselines_rows.py: one row per program, BLOCK_SIZE the next power of two of N, layer norm in "
        f"its three passes over the row), best of num_warps {'/'.join(map(str, TRITON_WARPS))}. PyTorch: "
        "`torch.softmax(x, dim=1)` and `torch.nn.functional.layer_norm` (allocating their outputs).",
        "*of copy* is the time of `y.copy_(x)` on the same tensor, scaled to the kernel's bytes (rows read and "
        "written; layer norm also w and b read and mean and 1/std written), over coop_tiles' time; *coop / X* is "
        "X's time over coop_tiles' (above 1: coop_tiles faster).",
        f"Correct: the whole output against PyTorch in float32 on the same input (`torch.allclose`: {tols}; layer "
        "norm's mean and 1/std too, rtol 1e-4); data standard normal.",
        "",
        "| kernel | (M, N) | dtype | copy GB/s | coop_tiles GB/s | of copy | Triton GB/s | coop / Triton "
        "| PyTorch GB/s | coop / PyTorch | correct (coop / Triton / PyTorch) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(failed_row(r, ("kernel", "shape", "dtype"), 11))
            continue
        coop, triton, torch_ = r["coop"], r["triton"], r["torch"]
        nbytes = r["bytes"]
        share = "—" if "error" in coop else f"**{r['copy_ms'] * nbytes / r['copy_bytes'] / coop['ms']:.1%}**"
        lines.append(
            table_row(
                r["kernel"],
                str(r["shape"]),
                r["dtype"],
                gbs_cell(r["copy_bytes"], r["copy_ms"]),
                rate_cell(coop, nbytes, _threads_name),
                share,
                rate_cell(triton, nbytes, _warps_name),
                speedup_cell(triton, coop),
                rate_cell(torch_, nbytes),
                speedup_cell(torch_, coop),
                " / ".join(correct_cell(v) for v in (coop, triton, torch_)),
            )
        )
    measured = [r for r in rows if "error" not in r]
    if measured:
        lines += ["", "Every configuration, ms:", ""]
    for r in measured:
        name = f"{r['kernel']} {r['shape']} {r['dtype']}"
        lines.append(
            f"- {name}: coop_tiles {config_times_cell(r['coop'], _threads_name)}"
            f"{skipped_note(r['coop'], _threads_name)}; Triton {config_times_cell(r['triton'], _warps_name)}"
            f"{skipped_note(r['triton'], _warps_name)}"
        )
    bar = "Bar (issue 19): at least 1.0x Triton on every row, and at least 90% of the copy rate for their bytes."
    return lines + ["", bar, ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    return softmax_rows()


SECTION = Section(
    "softmax",
    key="softmax",
    needs=("torch", "triton"),
    run=run,
    lines=softmax_lines,
    guarded=True,
    chart=declare(
        "row softmax and layer norm, forward",
        {"coop_tiles": rate("coop", "bytes"), "Triton": rate("triton", "bytes"), "PyTorch": rate("torch", "bytes")},
        x=lambda r: f"{r['kernel']} {r['shape']} {r['dtype']}",
        dashed={"copy": lambda r: r["copy_bytes"] / r["copy_ms"] / 1e6},
    ),
)
