"""Row-wise cumsum of a 2-D float32 tensor (one program per row, a chunked loop with a carry), contiguous and
transposed, against torch.cumsum (issue 7)."""

from __future__ import annotations

from typing import Any

import coop_tiles as ct
from benchmarks.charts import declare, rate
from benchmarks.device import fill_nan
from benchmarks.report import config_times_cell, correct_cell, failed_row, table_row
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms, guarded, tune
from coop_tiles import tile

ROWS2D_SHAPE = (4096, 8192)
ROWS2D_CHUNKS = (1024, 2048, 4096)


@ct.jit
def row_cumsum(x, y, CHUNK: ct.constexpr):
    r = ct.program_id(0)
    row, out = x[r], y[r]  # 1-D views (N-D strided arrays per the contract)
    n = x.shape[1]
    carry = 0.0
    for base in range(0, n, CHUNK):
        t = tile.load(row, base, CHUNK, valid=n - base, other=0)
        s, carry = tile.scan(t, initial=carry, return_total=True)
        tile.store(out, base, s, valid=n - base)


def rows2d_rows() -> list[dict]:
    """row_cumsum over a contiguous (4096, 8192) float32 PyTorch tensor and over its transpose (a strided view,
    read in place), against torch.cumsum on the same input. CuPy's events time PyTorch's work too: PyTorch's
    current stream is the legacy default stream, as is CuPy's null stream."""
    import torch

    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(ROWS2D_SHAPE, generator=generator, device="cuda", dtype=torch.float32)
    rows = []
    for name, view in (("contiguous", x), ("transposed", x.t())):
        layout = {"input": name, "shape": tuple(view.shape), "strides": tuple(view.stride())}
        rows.append({**layout, **guarded(_rows2d_row, view)})
    return rows


def _rows2d_row(x: Any) -> dict:
    """One input layout: torch.cumsum(x, dim=1, out=y) against row_cumsum, best of ROWS2D_CHUNKS, both writing
    the same fresh contiguous y; correct is torch.allclose over the whole output (rtol 1e-4, atol 1e-2)."""
    import torch

    y = torch.empty(x.shape, device=x.device, dtype=torch.float32)
    expected = torch.cumsum(x, dim=1)
    torch_ms = cuda_time_ms(lambda: torch.cumsum(x, dim=1, out=y))
    coop = guarded(
        tune,
        ROWS2D_CHUNKS,
        lambda c: lambda: row_cumsum[x.shape[0]](x, y, CHUNK=c),
        lambda: fill_nan(y),
        lambda c: torch.allclose(y, expected, rtol=1e-4, atol=1e-2),
    )
    return {"torch_ms": torch_ms, "coop": coop}


def rows2d_lines(rows: list[dict]) -> list[str]:
    rows_n, cols_n = ROWS2D_SHAPE
    lines = [
        "",
        "## Row-wise cumsum of a 2-D float32 tensor: one program per row, a chunked loop with a carry",
        "",
        f"`row_cumsum` over a ({rows_n}, {cols_n}) contiguous PyTorch tensor and over its transpose (a view with "
        f"strides (1, {cols_n}), read in place), writing a fresh contiguous output, against "
        "`torch.cumsum(x, dim=1, out=y)` on the same input. coop_tiles best of CHUNK "
        f"{'/'.join(map(str, ROWS2D_CHUNKS))}; *torch / coop* above 1: coop_tiles faster.",
        "Correct: `torch.allclose` with `torch.cumsum` over the whole output, rtol 1e-4, atol 1e-2; data uniform "
        "in [0, 1).",
        "",
        "| input | shape, strides | coop_tiles ms | torch.cumsum ms | torch / coop | correct |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(failed_row(r, ("input",), 6))
            continue
        coop = r["coop"]
        layout = f"{r['shape']}, {r['strides']}"
        if "error" in coop:
            coop_cell, ratio = f"failed: {coop['error']}", "—"
        else:
            coop_cell, ratio = f"{coop['ms']:.3f} (CHUNK {coop['best']})", f"**{r['torch_ms'] / coop['ms']:.2f}x**"
        lines.append(table_row(r["input"], layout, coop_cell, f"{r['torch_ms']:.3f}", ratio, correct_cell(coop)))
    measured = [r for r in rows if "error" not in r]
    if measured:
        lines += ["", "Every CHUNK, ms:", ""]
    for r in measured:
        lines.append(f"- {r['input']}: {config_times_cell(r['coop'], lambda c: f'CHUNK {c}')}")
    bar = (
        "Bar (issue 7): contiguous rows at least as fast as `torch.cumsum` (torch / coop at least 1); "
        "the transposed view's ratio is reported, with no bar."
    )
    return lines + ["", bar, ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    return rows2d_rows()


def _bytes(row: dict) -> int:
    """float32 read and written."""
    return 8 * row["shape"][0] * row["shape"][1]


SECTION = Section(
    "rows2d",
    key="rows2d",
    needs=("torch",),
    run=run,
    lines=rows2d_lines,
    guarded=True,
    chart=declare(
        "row-wise cumsum, float32 (4096, 8192)",
        {"coop_tiles": rate("coop", _bytes), "torch.cumsum": lambda r: _bytes(r) / r["torch_ms"] / 1e6},
        x="input",
    ),
)
