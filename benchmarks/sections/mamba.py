"""Mamba's selective scan forward: `coop_tiles.examples.selective_scan_fwd` against Mamba's own CUDA kernel (built by
benchmarks/_mamba_cuda.py), a Triton version and PyTorch's sequential reference (issue 9)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.charts import declare, share
from benchmarks.device import fill_nan, free_device_memory, torch_copy_rate_gbs
from benchmarks.report import correct_cell, failed_row, ms_cell, speedup_cell, table_row
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms, guarded, tune

MAMBA_SHAPES = ((8, 1536, 2048, 16), (8, 4096, 2048, 16), (2, 2048, 8192, 16))  # batch, dim, L, dstate
MAMBA_DTYPES = ("float32", "bfloat16")
MAMBA_TOLERANCE = {"float32": (6e-4, 2e-3), "bfloat16": (3e-2, 5e-2)}  # Mamba's own tests' rtol, atol
MAMBA_TRITON = ((64, 4), (128, 4))  # BLOCK_L, warps
MAMBA_CHECK_DIMS = 64  # every implementation is checked on the first channels of each batch


def mamba_rows() -> list[dict]:
    """coop_tiles.examples.selective_scan_fwd, Mamba's CUDA kernel, the Triton version and (smallest shape) the
    PyTorch sequential reference, on variable B and C (one group) with z, D, delta_bias and softplus, against the
    time the bytes they must move take at the device copy rate."""
    import torch

    copy_gbs = torch_copy_rate_gbs(torch)
    mamba = guarded(_mamba_extension)
    rows = []
    for shape in MAMBA_SHAPES:
        for dtype in MAMBA_DTYPES:
            row = {"shape": shape, "dtype": dtype, **guarded(_mamba_row, shape, dtype, mamba, copy_gbs)}
            rows.append(row)
            free_device_memory()
    return rows


def _mamba_extension() -> dict:
    """Mamba's forward, built (or found built) by benchmarks/_mamba_cuda.py."""
    from benchmarks import _mamba_cuda

    return {"ext": _mamba_cuda.load()}


def _mamba_inputs(shape: tuple[int, ...], dtype: str) -> dict:
    """Inputs drawn as Mamba's tests draw them (B and C as (batch, 1, dstate, L)), contiguous PyTorch tensors."""
    import torch

    batch, dim, L, N = shape
    g = torch.Generator(device="cuda").manual_seed(9)
    t = getattr(torch, dtype)

    def randn(*s: int) -> Any:
        return torch.randn(*s, device="cuda", generator=g)

    def rand(*s: int) -> Any:
        return torch.rand(*s, device="cuda", generator=g)

    return {
        "u": randn(batch, dim, L).to(t),
        "delta": (0.5 * rand(batch, dim, L)).to(t),
        "A": -0.5 * rand(dim, N),
        "B": randn(batch, 1, N, L).to(t),
        "C": randn(batch, 1, N, L).to(t),
        "D": randn(dim),
        "z": randn(batch, dim, L).to(t),
        "delta_bias": 0.5 * rand(dim),
    }


def _mamba_bytes(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes a forward must move at least: u, delta and z read, out written, B and C read once, A, D, delta_bias
    read and last_state written (float32)."""
    batch, dim, L, N = shape
    item = np.dtype(dtype if dtype != "bfloat16" else "float16").itemsize
    return 4 * batch * dim * L * item + 2 * batch * N * L * item + 4 * (dim * N + 2 * dim + batch * dim * N)


def _mamba_row(shape: tuple[int, ...], dtype: str, mamba: dict, copy_gbs: float) -> dict:
    """One shape and dtype: every implementation timed, and checked on the first channels against the float64
    sequential reference with Mamba's tolerances (last_state with float32's)."""
    import torch

    from benchmarks._baselines import torch_selective_scan_ref
    from coop_tiles.examples import selective_scan_fwd

    x = _mamba_inputs(shape, dtype)
    args = [x[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
    head = [a[:, :MAMBA_CHECK_DIMS] if a.dim() == 3 else a for a in args]
    head[2], head[5], head[7] = (args[i][:MAMBA_CHECK_DIMS] for i in (2, 5, 7))
    ref_out, ref_last = torch_selective_scan_ref(*head, dtype=torch.float64)
    rtol, atol = MAMBA_TOLERANCE[dtype]

    def close(x: Any, ref: Any, rtol: float, atol: float) -> bool:
        return bool((x[:, :MAMBA_CHECK_DIMS].double() - ref).abs().max() <= atol + rtol * ref.abs().max())

    def correct(out: Any, last: Any) -> bool:
        return close(out, ref_out, rtol, atol) and close(last, ref_last, 1e-3, 1e-3)

    def run_coop() -> tuple[Any, Any]:
        return selective_scan_fwd(*args[:5], D=args[5], z=args[6], delta_bias=args[7], delta_softplus=True,
                                  return_last_state=True)  # fmt: skip

    row = {
        "elements": shape[0] * shape[1] * shape[2] * shape[3],
        "limit_ms": _mamba_bytes(shape, dtype) / 1e6 / copy_gbs,
        "coop": guarded(_single, run_coop, correct),
        "mamba": guarded(_mamba_cuda_result, mamba, args, correct),
        "triton": guarded(_mamba_triton, args, correct),
    }
    if shape == MAMBA_SHAPES[0]:
        row["torch"] = guarded(_single, lambda: torch_selective_scan_ref(*args), correct)
    return row


def _single(run: Callable[[], tuple[Any, Any]], correct: Callable) -> dict:
    """Time `run()` (returning (out, last_state)) and check what it returned."""
    ms = cuda_time_ms(run)
    return {"best": None, "ms": ms, "times": {None: ms}, "correct": correct(*run())}


def _mamba_cuda_result(mamba: dict, args: list, correct: Callable) -> dict:
    """Mamba's kernel through its forward binding (which also writes the chunk states and, with z, both out and
    out_z, as Mamba's forward does for its backward)."""
    from benchmarks import _mamba_cuda

    if "error" in mamba:
        raise RuntimeError(mamba["error"])
    return _single(lambda: _mamba_cuda.selective_scan(mamba["ext"], *args, delta_softplus=True), correct)


def _mamba_triton(args: list, correct: Callable) -> dict:
    """The Triton version (benchmarks/_baselines.py), best of MAMBA_TRITON, into preallocated outputs."""
    import torch

    from benchmarks._baselines import triton_selective_scan

    u, A = args[0], args[2]
    out = torch.empty_like(u)
    last = torch.empty(u.shape[0], u.shape[1], A.shape[1], device=u.device)
    return tune(
        MAMBA_TRITON,
        lambda c: triton_selective_scan(*args[:5], args[5], args[6], args[7], out, last, block_l=c[0], warps=c[1]),
        lambda: fill_nan(out),
        lambda c: correct(out, last),
    )


def mamba_lines(rows: list[dict]) -> list[str]:
    tols = "; ".join(f"{d} rtol {r:g}, atol {a:g}" for d, (r, a) in MAMBA_TOLERANCE.items())
    lines = [
        "",
        "## Mamba's selective scan forward: `coop_tiles.examples.selective_scan_fwd` against Mamba's CUDA kernel",
        "",
        "Variable B and C (one group), with z, D, delta_bias and softplus; contiguous PyTorch tensors drawn as Mamba's "
        "tests draw them. Baselines in the same run: Mamba's own kernel (`csrc/selective_scan`, built for sm_90 by "
        "benchmarks/_mamba_cuda.py with Mamba's flags; through its forward binding, which allocates its outputs as "
        "coop_tiles' does, and also writes the per-chunk states and, with z, `out` beside `out_z` for its backward), "
        "a Triton version of the same chunked algorithm (`tl.associative_scan` over (a, b) pairs of a (dstate, "
        f"BLOCK_L) tile, best of BLOCK_L x warps {', '.join(f'{b}x{w}' for b, w in MAMBA_TRITON)}, into "
        "preallocated outputs), and on the first shape the PyTorch sequential reference (Mamba's "
        "`selective_scan_ref` equations, float32).",
        "The memory limit is the bytes a forward must move (u, delta, z read, out written, B and C read once, "
        "last_state written) at the device copy rate of the run. *X / coop* is X's time over coop_tiles' (above 1: "
        "coop_tiles faster); *of limit* is the limit's time over coop_tiles'; states/s counts batch × dim × L × "
        "dstate.",
        f"Correct: out and last_state of the first {MAMBA_CHECK_DIMS} channels against the float64 sequential "
        f"reference: the largest difference at most atol + rtol × the largest value, with Mamba's tolerances "
        f"({tols}; last_state 1e-3). (Element by element, at L = 8192 in float32 every implementation, Mamba's "
        "own kernel included, misses them where the output cancels to near zero.)",
        "",
        "| (batch, dim, L, dstate) | dtype | coop_tiles ms | G states/s | Mamba CUDA ms | Mamba / coop | Triton ms | "
        "Triton / coop | torch sequential ms | torch / coop | memory limit ms | of limit | "
        "correct (coop / Mamba / Triton / torch) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(failed_row(r, ("shape", "dtype"), 13))
            continue
        coop, mamba, triton = r["coop"], r["mamba"], r["triton"]
        torch_ = r.get("torch", {"error": "not run (first shape only)"})
        states = "—" if "error" in coop else f"{r['elements'] / coop['ms'] / 1e6:.0f}"
        limit = "—" if "error" in coop else f"**{r['limit_ms'] / coop['ms']:.0%}**"
        verdict = " / ".join(correct_cell(x) for x in (coop, mamba, triton)) + (
            f" / {correct_cell(torch_)}" if "torch" in r else " / —"
        )
        lines.append(
            table_row(
                str(r["shape"]),
                r["dtype"],
                ms_cell(coop),
                states,
                ms_cell(mamba),
                speedup_cell(mamba, coop),
                ms_cell(triton, lambda c: f"{c[0]}x{c[1]}"),
                speedup_cell(triton, coop),
                ms_cell(torch_) if "torch" in r else "—",
                speedup_cell(torch_, coop) if "torch" in r else "—",
                f"{r['limit_ms']:.3f}",
                limit,
                verdict,
            )
        )
    bar = (
        "Bar (issue 9): at least 1.0x Mamba's CUDA kernel at every shape and dtype, and faster than the Triton version."
    )
    return lines + ["", bar, ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    return mamba_rows()


SECTION = Section(
    "mamba",
    key="mamba",
    needs=("cupy", "torch", "triton", "mamba"),
    run=run,
    lines=mamba_lines,
    guarded=True,
    chart=declare(
        "Mamba's selective scan forward",
        {
            name: share(key)
            for name, key in (
                ("coop_tiles", "coop"),
                ("Mamba CUDA", "mamba"),
                ("Triton", "triton"),
                ("PyTorch reference", "torch"),
            )
        },
        x=lambda r: f"{r['shape']} {r['dtype']}",
        dashed={"memory limit": lambda r: 1.0},
        ylabel="memory-traffic limit / time",
    ),
)
