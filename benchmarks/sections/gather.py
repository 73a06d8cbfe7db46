"""Gathers and scatters on index tiles (issue 19): `tile.gather` of random int32 indices into a float32 table and
`tile.scatter` of a permutation, against `torch.take` / `index_select` and `index_put_`."""

from __future__ import annotations

from typing import Any

import coop_tiles as ct
from benchmarks.charts import declare, rate
from benchmarks.device import free_device_memory
from benchmarks.report import config_times_cell, correct_cell, failed_row, gbs_cell, ms_cell, speedup_cell, table_row
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms, guarded, tune
from coop_tiles import tile

LOG2N = 26  # table, index and output elements (capped by the run's largest size)
TILES = (2048, 4096, 8192, 16384)

# tile.gather and tile.scatter (issue 19) are newer than the first sections: a library without them fails this
# section alone, not the import of the benchmarks.
try:

    @ct.jit
    def tile_gather(table, idx, out, n, TILE: ct.constexpr):
        """out[j] = table[idx[j]]."""
        base = ct.program_id(0) * TILE
        i = tile.load(idx, base, TILE, valid=n - base, other=0)
        tile.store(out, base, tile.gather(table, i), valid=n - base)

    @ct.jit
    def tile_scatter(x, idx, out, n, TILE: ct.constexpr):
        """out[idx[j]] = x[j]."""
        base = ct.program_id(0) * TILE
        i = tile.load(idx, base, TILE, valid=n - base, other=-1)
        tile.scatter(out, i, tile.load(x, base, TILE, valid=n - base))

    ISSUE19_ERROR: Exception | None = None
except Exception as error:
    tile_gather = tile_scatter = None
    ISSUE19_ERROR = error


def gather_rows(sizes: list[int]) -> list[dict]:
    """The gather and the scatter of 2^min(LOG2N, max(sizes)) elements, each against its PyTorch baselines and a
    device copy of the bytes it moves in order (index in, values out)."""
    log2n = min(LOG2N, max(sizes))
    n = 1 << log2n
    case = {"n": f"2^{log2n}", "elements": n}
    rows = [
        {"case": "gather", **case, **guarded(_gather_row, n)},
        {"case": "scatter", **case, **guarded(_scatter_row, n)},
    ]
    free_device_memory()
    return rows


def _copy_ms(n: int) -> float:
    """A device copy of 2n float32s: the in-order traffic of either kernel (n indices read, n values written; the
    random side comes on top)."""
    import torch

    src = torch.empty(2 * n, device="cuda")
    dst = torch.empty_like(src)
    return cuda_time_ms(lambda: dst.copy_(src))


def _gather_row(n: int) -> dict:
    import torch

    if tile_gather is None:
        raise ISSUE19_ERROR
    generator = torch.Generator(device="cuda").manual_seed(19)
    table = torch.rand(n, device="cuda", generator=generator)
    idx = torch.randint(0, n, (n,), device="cuda", dtype=torch.int32, generator=generator)
    idx64 = idx.long()  # torch.take takes int64 indices only (made outside the timing)
    expected = table[idx64]
    out = torch.empty_like(table)

    def reset() -> None:
        out.fill_(float("nan"))

    def check(_config: Any = None) -> bool:
        return bool(torch.equal(out, expected))

    coop = tune(TILES, lambda t: lambda: tile_gather[ct.cdiv(n, t)](table, idx, out, n, TILE=t), reset, check)
    take = _torch(lambda: torch.take(table, idx64), expected, "take (int64 index)")
    select = _torch(lambda: torch.index_select(table, 0, idx), expected, "index_select (int32 index)")
    return {"copy_ms": _copy_ms(n), "coop": coop, "torch": take, "torch2": select}


def _scatter_row(n: int) -> dict:
    import torch

    if tile_scatter is None:
        raise ISSUE19_ERROR
    generator = torch.Generator(device="cuda").manual_seed(19)
    x = torch.rand(n, device="cuda", generator=generator)
    perm = torch.randperm(n, device="cuda", generator=generator)
    perm32 = perm.int()
    expected = torch.empty_like(x)
    expected[perm] = x
    out = torch.empty_like(x)

    def reset() -> None:
        out.fill_(float("nan"))

    def check(_config: Any = None) -> bool:
        return bool(torch.equal(out, expected))

    coop = tune(TILES, lambda t: lambda: tile_scatter[ct.cdiv(n, t)](x, perm32, out, n, TILE=t), reset, check)
    put = _torch(lambda: out.index_put_((perm,), x), expected, "index_put_ (int64 index)", out)
    put32 = _torch(lambda: out.index_put_((perm32,), x), expected, "index_put_ (int32 index)", out)
    return {"copy_ms": _copy_ms(n), "coop": coop, "torch": put, "torch2": put32}


def _torch(fn: Any, expected: Any, name: str, out: Any = None) -> dict:
    """A PyTorch baseline timed and checked (its result, or `out` it writes into); failures kept as the result."""
    import torch

    def measure() -> dict:
        ms = cuda_time_ms(fn)
        got = fn()
        correct = bool(torch.equal(out if out is not None else got, expected))
        return {"best": name, "ms": ms, "times": {name: ms}, "correct": correct}

    return guarded(measure)


def gather_lines(rows: list[dict]) -> list[str]:
    tiles = "/".join(map(str, TILES))
    lines = [
        "",
        "## Gathers and scatters on index tiles",
        "",
        "`tile_gather`: `out[j] = table[idx[j]]` for random int32 indices into a float32 table of the same length "
        "(`tile.load` of the indices, `tile.gather`, `tile.store`); `tile_scatter`: `out[perm[j]] = x[j]` for a "
        f"random permutation (int32), each best of TILE {tiles}. Baselines on the same arrays: `torch.take(table, "
        "idx)` (int64 indices: it takes no other) and `torch.index_select(table, 0, idx)` (int32) for the gather, "
        "`out.index_put_((perm,), x)` with int64 and int32 indices for the scatter. The copy column is a device "
        "copy of the in-order bytes (indices in, values out: 8 bytes per element); the random side comes on top. "
        "*torch / coop* is the faster PyTorch baseline's time over coop_tiles' (above 1: coop_tiles faster).",
        "",
        "| case | n | copy of the in-order bytes, GB/s | coop_tiles ms | torch ms | torch ms (2) | torch / coop | "
        "correct (coop / torch / torch 2) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(failed_row(r, ("case", "n"), 8))
            continue
        coop, first, second = r["coop"], r["torch"], r["torch2"]
        measured = [b for b in (first, second) if "error" not in b]
        best = min(measured, key=lambda b: b["ms"]) if measured else first
        lines.append(
            table_row(
                r["case"],
                r["n"],
                gbs_cell(_bytes(r), r["copy_ms"]),
                ms_cell(coop, lambda t: f"TILE {t}"),
                ms_cell(first, str),
                ms_cell(second, str),
                speedup_cell(best, coop),
                " / ".join(correct_cell(x) for x in (coop, first, second)),
            )
        )
    measured = [r for r in rows if "error" not in r]
    if measured:
        lines += ["", "Every configuration, ms:", ""]
    for r in measured:
        lines.append(f"- {r['case']}: coop_tiles {config_times_cell(r['coop'], lambda t: f'TILE {t}')}")
    return lines + ["", "Bar (issue 19): at least 1.0x PyTorch (`torch.take`/`index_select`, `index_put_`).", ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    return gather_rows(sizes)


def _bytes(row: dict) -> int:
    """The in-order bytes: 4-byte indices in, 4-byte values out."""
    return 8 * row["elements"]


SECTION = Section(
    "gather",
    key="gather",
    needs=("torch",),
    run=run,
    lines=gather_lines,
    guarded=True,
    chart=declare(
        "gathers and scatters, float32",
        {
            "coop_tiles": rate("coop", _bytes),
            "PyTorch (int64 index)": rate("torch", _bytes),
            "PyTorch (int32 index)": rate("torch2", _bytes),
        },
        x=lambda r: f"{r['case']} {r['n']}",
        dashed={"copy of the in-order bytes": lambda r: _bytes(r) / r["copy_ms"] / 1e6},
        ylabel="GB/s (in-order bytes)",
    ),
)
