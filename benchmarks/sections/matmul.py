"""Matrix products (issue 21): tutorial 12's K-looped tile program against `torch.matmul` (cuBLAS), Triton's tutorial
matmul (benchmarks/_baselines_matmul.py) and the device's peak, in TFLOP/s."""

from __future__ import annotations

from typing import Any

from benchmarks.charts import declare
from benchmarks.device import fill_nan, free_device_memory
from benchmarks.kernels import tutorial, with_threads
from benchmarks.report import correct_cell, failed_row, table_row
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms, guarded, tune_working
from benchmarks.warm import one_triton_config, warm_in_workers

#: (M, N, K)
MATMUL_SHAPES = ((4096, 4096, 4096), (8192, 8192, 1024))
#: (operand dtype, tf32): the result is float32 in every case
MATMUL_CASES = (("bfloat16", False), ("float16", False), ("float32", False), ("float32", True))
#: dense (no sparsity) peak TFLOP/s by device name and by what the case runs on: NVIDIA's H100 datasheet (H100 SXM5:
#: 989 bf16/fp16 and 494 tf32 tensor-core TFLOP/s, 67 float32 non-tensor TFLOP/s; the datasheet's figures are with
#: sparsity, twice these); the H200 has the H100's SMs and clocks, hence its figures.
PEAK_TFLOPS = {
    "H100 80GB HBM3": {"16-bit": 989.0, "tf32": 494.0, "float32": 67.0},
    "H200": {"16-bit": 989.0, "tf32": 494.0, "float32": 67.0},
}
#: atol of the whole output against a float64 product of the same operands (data standard normal: entries of c are
#: about sqrt(K)); tf32 rounds each operand to 11 significant bits
MATMUL_ATOL = {False: 2e-2, True: 0.5}
BAR = 0.7  # coop_tiles / cuBLAS, bfloat16 at 4096^3 (issue 21)


def peak_kind(dtype: str, tf32: bool) -> str:
    """What the case's peak is: 16-bit tensor cores, tf32 tensor cores, or float32 without tensor cores."""
    return "16-bit" if dtype != "float32" else "tf32" if tf32 else "float32"


def peak_tflops(device: str, dtype: str, tf32: bool) -> float | None:
    """The device's dense peak for the case (PEAK_TFLOPS), None for a device not listed."""
    for name, peaks in PEAK_TFLOPS.items():
        if name in device:
            return peaks[peak_kind(dtype, tf32)]
    return None


def tflops(shape: tuple[int, int, int], ms: float) -> float:
    m, n, k = shape
    return 2 * m * n * k / ms * 1e-9


def config_key(config: Any) -> tuple[int, int, int, int]:
    """(BM, BN, BK, threads) of one of tutorial 12's `ct.Config`s: how the results name it."""
    kw = config.kwargs
    return kw["BM"], kw["BN"], kw["BK"], config.block_threads


def _config_name(key: tuple[int, int, int, int]) -> str:
    return f"{key[0]}x{key[1]}x{key[2]}, {key[3]} threads"


def matmul_rows() -> list[dict]:
    """Every shape and case: coop_tiles (tutorial 12's program, each of its CONFIGS), cuBLAS, Triton."""
    import torch

    device = torch.cuda.get_device_name()
    rows = []
    for shape in MATMUL_SHAPES:
        for dtype, tf32 in MATMUL_CASES:
            key = {"shape": shape, "dtype": dtype, "tf32": tf32, "peak": peak_tflops(device, dtype, tf32)}
            rows.append({**key, **guarded(_matmul_row, shape, dtype, tf32)})
            free_device_memory()
    return rows


def _matmul_row(shape: tuple[int, int, int], dtype: str, tf32: bool) -> dict:
    """One shape and case. Each implementation writes into an output poisoned with NaN before it runs, checked over
    the whole output against the float64 product of the same operands (MATMUL_ATOL)."""
    import torch

    ops = tutorial("12_matmul")
    a, b, c = _operands(shape, dtype)
    expected = a.double() @ b.double()
    atol = MATMUL_ATOL[tf32]

    def check(_config: Any = None, out: Any = c) -> bool:
        return bool(torch.allclose(out.double(), expected, rtol=0, atol=atol))

    def reset() -> None:
        fill_nan(c)

    def coop(key: tuple[int, int, int, int]) -> Any:
        return _coop_launch(ops, key, a, b, c, tf32)

    def triton() -> dict:
        from benchmarks._baselines_matmul import best_config, triton_matmul

        launch = triton_matmul(a, b, c, tf32=tf32)
        reset()
        launch()  # (Triton's autotuner times its configs here)
        reset()
        ms = cuda_time_ms(launch)
        return {"best": best_config(), "ms": ms, "times": {best_config(): ms}, "correct": check()}

    return {
        "coop": guarded(tune_working, [config_key(c) for c in ops.CONFIGS], coop, reset, check),
        "triton": guarded(triton),
        "torch": guarded(_cublas, a, b, tf32, check),
    }


def _operands(shape: tuple[int, int, int], dtype: str) -> tuple[Any, Any, Any]:
    """a and b, standard normal in `dtype`, and c (float32, not written)."""
    import torch

    m, n, k = shape
    t = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(21)
    a = torch.randn(m, k, device="cuda", generator=g).to(t)
    b = torch.randn(k, n, device="cuda", generator=g).to(t)
    return a, b, torch.empty(m, n, device="cuda", dtype=torch.float32)


def _coop_launch(ops: Any, key: tuple[int, int, int, int], a: Any, b: Any, c: Any, tf32: bool) -> Any:
    """A launch of tutorial 12's program at config `key` (config_key), its threads pinned (with_threads)."""
    (m, k), n = a.shape, b.shape[1]
    bm, bn, bk, threads = key
    program = with_threads(ops.matmul.kernel, threads)
    grid = ops.grid(m, n)({"BM": bm, "BN": bn})
    return lambda: program[grid](a, b, c, m, n, k, BM=bm, BN=bn, BK=bk, TF32=tf32)


def warm_items() -> list[tuple]:
    """The launches for `warm_in_workers`, `(what, dtype, tf32, config)`: each case of MATMUL_CASES with each of
    tutorial 12's configs (coop_tiles: a cuBLASDx GEMM each, the longest compiles, first) and each of the Triton
    autotuner's configs by index (where Triton imports; else the timed run reports it). One shape serves both:
    coop_tiles' kernels are specialised on dtypes and constexprs, not sizes, and Triton's on sizes' divisibility by
    16, which every MATMUL_SHAPES size has."""
    ops = tutorial("12_matmul")
    items = [("coop", d, tf32, config_key(c)) for d, tf32 in MATMUL_CASES for c in ops.CONFIGS]
    try:
        from benchmarks._baselines_matmul import CONFIGS
    except Exception:  # noqa: BLE001 (no Triton: the timed run reports it)
        return items
    return items + [("triton", d, tf32, i) for d, tf32 in MATMUL_CASES for i in range(len(CONFIGS))]


def warm_launch(item: tuple) -> None:
    """One of `warm_items` (in a worker process): the launch the timed row makes, at the first shape; Triton's with
    its autotuner left that one config (so it compiles it alone)."""
    import torch

    what, dtype, tf32, config = item
    a, b, c = _operands(MATMUL_SHAPES[0], dtype)
    if what == "coop":
        _coop_launch(tutorial("12_matmul"), config, a, b, c, tf32)()
    else:
        from benchmarks import _baselines_matmul

        with one_triton_config([_baselines_matmul], "_matmul", config):
            _baselines_matmul.triton_matmul(a, b, c, tf32=tf32)()
    torch.cuda.synchronize()


def _cublas(a: Any, b: Any, tf32: bool, check: Any) -> dict:
    """`torch.matmul` (cuBLAS), float32 out: 16-bit operands through `torch.mm(..., out_dtype=torch.float32)` where
    this PyTorch has it, else a 16-bit product (what is timed is named); float32 with tf32 allowed or not."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        launch, how = (lambda: torch.matmul(a, b)), "torch.matmul"
        if a.element_size() == 2:
            try:
                torch.mm(a[:16, :16], b[:16, :16], out_dtype=torch.float32)
                launch, how = (lambda: torch.mm(a, b, out_dtype=torch.float32)), "torch.mm(out_dtype=float32)"
            except (TypeError, RuntimeError):
                how = f"torch.matmul ({a.dtype} out)"
        ms = cuda_time_ms(launch)
        return {"best": how, "ms": ms, "times": {how: ms}, "correct": check(out=launch())}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def _rate(result: dict, shape: tuple[int, int, int], peak: float | None, label: bool = True) -> str:
    if "error" in result:
        return f"failed: {result['error']}"
    rate = tflops(shape, result["ms"])
    share = f", {rate / peak:.0%} of peak" if peak else ""
    return f"{rate:.0f}{share}" + (f" ({result['best']})" if label and result.get("best") is not None else "")


def _ratio(coop: dict, other: dict) -> str:
    if "error" in coop or "error" in other:
        return "—"
    return f"**{other['ms'] / coop['ms']:.2f}x**"


def _case(r: dict) -> str:
    return f"{r['dtype']}{' (tf32)' if r.get('tf32') else ''}"


def matmul_lines(rows: list[dict]) -> list[str]:
    # (the configs the run timed: tutorial 12's CONFIGS on its device, which depend on the arch)
    timed = [c for r in rows if "error" not in r and "error" not in r["coop"] for c in r["coop"]["times"]]
    configs = "; ".join(_config_name(c) for c in dict.fromkeys(timed)) or "none ran"
    lines = [
        "",
        "## Matrix products: tutorial 12's K-looped tile program (issue 21)",
        "",
        "c (M, N) = a (M, K) @ b (K, N), row-major PyTorch tensors, c float32 in every case (16-bit operands "
        "accumulate in float32). coop_tiles: tutorial 12's `matmul` (one (BM, BN) block of c per program, a K loop of "
        "`tile.load`s and `tile.dot` into a float32 accumulator, programs grouped by 8 rows of blocks), best of "
        f"its configs ({configs}); on an H100 or H200 compiled for sm_90a (the tutorial's ARCH), where a bfloat16 or "
        "float16 K loop and its store run as one pipelined cuBLASDx GEMM (TMA + WGMMA; float32 operands run the loop "
        "as written, a cuBLASDx GEMM per K step). Triton: Triton's tutorial 03 matmul "
        "(benchmarks/_baselines_matmul.py), `triton.autotune` over the tutorial's block shapes. cuBLAS: "
        "`torch.mm(a, b, out_dtype=torch.float32)` for "
        "16-bit operands (or `torch.matmul` with a 16-bit result where this PyTorch lacks it, as named), "
        "`torch.matmul` for float32 with `torch.backends.cuda.matmul.allow_tf32` set as the row says.",
        "TFLOP/s = 2MNK / time. *Peak*: the device's dense peak for what the row runs on (16-bit or tf32 tensor cores, "
        "or float32 without them), from NVIDIA's H100 datasheet (H100 SXM5: 989 bf16/fp16 and 494 tf32 tensor-core "
        "TFLOP/s, 67 float32 TFLOP/s; the datasheet's tensor-core figures with sparsity are twice these; the H200 has "
        "the same SMs and clocks). *coop / X* is X's time over coop_tiles' (above 1: coop_tiles faster).",
        "Correct: the whole output against the float64 product of the same operands (atol "
        f"{MATMUL_ATOL[False]:g}, tf32 {MATMUL_ATOL[True]:g}); data standard normal.",
        "",
        "| (M, N, K) | operands | peak TFLOP/s | coop_tiles TFLOP/s | cuBLAS TFLOP/s | coop / cuBLAS | Triton TFLOP/s "
        "| coop / Triton | correct (coop / cuBLAS / Triton) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(failed_row({**r, "case": _case(r)} if "dtype" in r else r, ("shape", "case"), 9))
            continue
        coop, cublas, triton = r["coop"], r["torch"], r["triton"]
        peak = r["peak"]
        lines.append(
            table_row(
                str(r["shape"]),
                _case(r),
                f"{peak:.0f}" if peak else "—",
                _rate(coop, r["shape"], peak, label=False)
                + ("" if "error" in coop else f" ({_config_name(coop['best'])})"),
                _rate(cublas, r["shape"], peak),
                _ratio(coop, cublas),
                _rate(triton, r["shape"], peak),
                _ratio(coop, triton),
                " / ".join(correct_cell(v) for v in (coop, cublas, triton)),
            )
        )
    measured = [r for r in rows if "error" not in r and "error" not in r["coop"]]
    if measured:
        lines += ["", "Every coop_tiles config, ms:", ""]
    for r in measured:
        times = ", ".join(f"{_config_name(c)} {ms:.3f}" for c, ms in r["coop"]["times"].items())
        skipped = "".join(f"; skipped {_config_name(c)} ({why})" for c, why in r["coop"].get("skipped", {}).items())
        lines.append(f"- {r['shape']} {_case(r)}: {times}{skipped}")
    bar = f"Bar (issue 21): at least {BAR}x cuBLAS in bfloat16 at (4096, 4096, 4096)."
    return lines + ["", bar, ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    warm_in_workers(warm_launch, warm_items(), label="matmul")
    return matmul_rows()


def _tflops_of(key: str) -> Any:
    """TFLOP/s of the row's result under `key` (None where it failed)."""
    return lambda r: None if "error" in r[key] else tflops(r["shape"], r[key]["ms"])


SECTION = Section(
    "matmul",
    key="matmul",
    needs=("torch", "triton"),
    run=run,
    lines=matmul_lines,
    guarded=True,
    chart=declare(
        "matrix products",
        {"coop_tiles": _tflops_of("coop"), "cuBLAS": _tflops_of("torch"), "Triton": _tflops_of("triton")},
        x=lambda r: f"{'x'.join(map(str, r['shape']))} {_case(r)}",
        dashed={"peak": lambda r: r["peak"]},
        ylabel="TFLOP/s",
    ),
)
