"""Top-k over a vocabulary and a top-p sampler (`coop_tiles.examples.topk` / `top_p_sample`, tutorial 14): against
`torch.topk`, a sort-based Triton top-k (benchmarks/_topk_triton.py), and PyTorch's top-k + softmax + cumsum +
multinomial sampler (issue 22)."""

from __future__ import annotations

from typing import Any

from benchmarks.charts import declare, ms
from benchmarks.device import free_device_memory
from benchmarks.report import config_times_cell, correct_cell, failed_row, ms_cell, speedup_cell, table_row
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms, guarded, tune, tune_working
from benchmarks.warm import warm_in_workers
from coop_tiles.examples.sampling import DIGITS

TOPK_ROWS, TOPK_VOCAB = 64, 128256
TOPK_DTYPES = ("float32", "bfloat16")
TOPK_KS = (1, 50, 1024)
TOPK_TILES = (4096, 2048, 8192)  # coop_tiles' elements per tile (a program loads a few)
TRITON_CHUNKS = (4096, 8192, 16384)  # the Triton baseline's elements per first-stage program
TOP_P = 0.9
#: the sampler is checked against a deterministic PyTorch sampler with the same numbers; float32 sums in another
#: order may pick a neighbouring token at the edge of a step of the distribution
SAMPLER_AGREEMENT = 0.95


def _tile_name(tile_size: int) -> str:
    return f"TILE {tile_size}"


def _chunk_name(chunk: int) -> str:
    return f"chunk {chunk}"


def _triton_chunks(k: int) -> list[int]:
    """The Triton chunks a k takes (a chunk keeps its first k)."""
    return [c for c in TRITON_CHUNKS if c >= k]


def _logits(dtype: str, k: int) -> tuple[Any, Any]:
    """The row's (TOPK_ROWS, TOPK_VOCAB) normal logits, and the generator that drew them (for the sampler's uniform
    numbers)."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(22 + k)
    return torch.randn(TOPK_ROWS, TOPK_VOCAB, device="cuda", generator=g).to(getattr(torch, dtype)), g


def warm_items() -> tuple[list[tuple], list[tuple]]:
    """`(first, then)` launches for `warm_in_workers`, `(what, dtype, k, config)`: every Triton launch, and per dtype
    and tile coop_tiles' top-k at k = 1 (its own 2 programs) and at the first k > 1 (the passes over whole rows,
    which the other ks and the sampler share, and its select); then coop_tiles' other top-k and the samplers."""
    first, then = [], []
    for dtype in TOPK_DTYPES:
        first += [("triton", dtype, k, chunk) for k in TOPK_KS for chunk in _triton_chunks(k)]
        shared = [k for k in TOPK_KS if k == 1] + [k for k in TOPK_KS if k > 1][:1]
        for tile_size in TOPK_TILES:
            first += [("coop", dtype, k, tile_size) for k in shared]
            then += [("coop", dtype, k, tile_size) for k in TOPK_KS if k not in shared]
            then += [("sampler", dtype, k, tile_size) for k in TOPK_KS if k > 1]
    return first, then


def warm_launch(item: tuple) -> None:
    """One of `warm_items` (in a worker process): the launch the timed row makes, on logits of the row's shape
    (the constexprs of coop_tiles' passes depend on it)."""
    import torch

    from benchmarks import _topk_triton
    from coop_tiles.examples import top_p_sample, topk

    what, dtype, k, config = item
    x, _ = _logits(dtype, k)
    if what == "coop":
        topk(x, k, tile_size=config)
    elif what == "sampler":
        top_p_sample(x, k, TOP_P, torch.rand(TOPK_ROWS, device="cuda"), tile_size=config)
    else:
        _topk_triton.topk(x, k, config)
    torch.cuda.synchronize()


def topk_rows() -> list[dict]:
    """Each dtype and k of TOPK_DTYPES x TOPK_KS on (TOPK_ROWS, TOPK_VOCAB) normal logits."""
    import torch  # noqa: F401 - the section needs PyTorch before anything is measured

    rows = []
    for dtype in TOPK_DTYPES:
        for k in TOPK_KS:
            rows.append({"dtype": dtype, "k": k, **guarded(_topk_row, dtype, k)})
            free_device_memory()
    return rows


def _topk_row(dtype: str, k: int) -> dict:
    """coop_tiles' top-k (best of TOPK_TILES), the Triton top-k (best of TRITON_CHUNKS), torch.topk, and for k > 1
    both samplers; each result checked: the values equal torch.topk's and the indices point at them."""
    import torch

    from coop_tiles.examples import top_p_sample, topk

    x, g = _logits(dtype, k)
    want = torch.topk(x, k).values
    got: dict[str, Any] = {}

    def reset() -> None:
        got.clear()

    def check(_config: Any = None) -> bool:
        vals, idx = got["out"]
        return bool(torch.equal(vals, want)) and bool(torch.equal(x.gather(1, idx), want))

    def keep(fn: Any) -> Any:
        def run() -> None:
            got["out"] = fn()

        return run

    row: dict[str, Any] = {
        "coop": guarded(tune, TOPK_TILES, lambda t: keep(lambda: topk(x, k, tile_size=t)), reset, check),
        "triton": guarded(_triton, x, k, keep, reset, check),
        "torch": guarded(tune, ["torch.topk"], lambda _: keep(lambda: torch.topk(x, k)), reset, check),
    }
    if k > 1:
        uniform = torch.rand(TOPK_ROWS, device="cuda", generator=g)
        expected = _torch_sample(x, k, uniform)

        def sample_check(_config: Any = None) -> bool:
            return float((got["out"] == expected).float().mean()) >= SAMPLER_AGREEMENT

        def ours(t: int) -> Any:
            return keep(lambda: top_p_sample(x, k, TOP_P, uniform, tile_size=t))

        row["coop_sampler"] = guarded(tune, TOPK_TILES, ours, reset, sample_check)
        row["torch_sampler"] = guarded(_torch_multinomial_ms, x, k)
    return row


def _triton(x: Any, k: int, keep: Any, reset: Any, check: Any) -> dict:
    from benchmarks import _topk_triton

    return tune_working(_triton_chunks(k), lambda c: keep(lambda: _topk_triton.topk(x, k, c)), reset, check)


def _torch_sample(x: Any, k: int, uniform: Any) -> Any:
    """The nucleus sampler with given uniform numbers (the check of coop_tiles' sampler), in float32."""
    import torch

    values, indices = torch.topk(x, k)
    p = torch.softmax(values.float(), dim=-1)
    cdf = torch.cumsum(p, dim=-1)
    kept = ((cdf - p) < TOP_P * cdf[:, -1:]).sum(dim=-1, keepdim=True).clamp(min=1)
    nucleus = cdf.gather(1, kept - 1)
    chosen = torch.minimum((cdf <= uniform[:, None] * nucleus).sum(dim=-1, keepdim=True), kept - 1)
    return indices.gather(1, chosen)[:, 0]


def _torch_multinomial_ms(x: Any, k: int) -> dict:
    """How PyTorch users sample: torch.topk, softmax, cumsum, the nucleus masked, torch.multinomial."""
    import torch

    def run() -> Any:
        values, indices = torch.topk(x, k)
        p = torch.softmax(values.float(), dim=-1)
        cdf = torch.cumsum(p, dim=-1)
        p = p.masked_fill(cdf - p >= TOP_P, 0.0)
        return indices.gather(1, torch.multinomial(p, 1))[:, 0]

    ms = cuda_time_ms(run)
    return {"best": "multinomial", "ms": ms, "times": {"multinomial": ms}, "correct": True}


def topk_lines(rows: list[dict]) -> list[str]:
    lines = [
        "",
        "## Top-k over a vocabulary, and top-p sampling: `coop_tiles.examples.topk` / `top_p_sample`",
        "",
        f"({TOPK_ROWS}, {TOPK_VOCAB}) normal logits. coop_tiles: a radix select on `tile.sort_key`, several programs "
        f"per row: each program's histogram of the keys' top {DIGITS[32][0]} bits (`tile.histogram`), then each row's "
        "candidates "
        "(the indices of the keys with the k-th key's top bits or larger) gathered in row order (`tile.scan`, "
        "`tile.scatter`), then one program per row: the other digits over the candidates, their compaction and the "
        "sort of the k survivors (`tile.topk`); 3 launches, 2 reads of the rows, 3 allocations. For k = 1 each "
        "chunk's max and first index, then the row's (2 launches); tutorial 14. Every call is timed whole, its "
        "allocations and launches included, as `torch.topk`'s. "
        f"Best of {', '.join(map(_tile_name, TOPK_TILES))}. Triton: each chunk of a row "
        "sorted with `tl.sort` (value bits and index packed into a uint64), its first k kept, then the row's "
        f"candidates sorted (benchmarks/_topk_triton.py), best of {', '.join(map(_chunk_name, TRITON_CHUNKS))}. "
        f"Sampler (k > 1, top-p {TOP_P}): coop_tiles' `top_p_sample` (the select, then softmax, cumulative sum and "
        "the draw in the sorting program) against `torch.topk` + `softmax` + `cumsum` + `multinomial`. "
        "*coop / X* is X's time over coop_tiles' (above 1: coop_tiles faster).",
        "Correct: values equal `torch.topk`'s and the indices point at them (ties may pick other indices); the "
        f"sampler agrees with a PyTorch nucleus sampler given the same uniform numbers on {SAMPLER_AGREEMENT:.0%} of "
        "rows or more.",
        "",
        "| dtype | k | coop ms | Triton ms | coop / Triton | torch.topk ms | coop / torch.topk | coop sampler ms "
        "| torch sampler ms | coop / torch sampler | correct (coop / Triton / torch / coop sampler) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(failed_row(r, ("dtype", "k"), 11))
            continue
        sampler = r.get("coop_sampler"), r.get("torch_sampler")
        lines.append(
            table_row(
                r["dtype"],
                r["k"],
                ms_cell(r["coop"], _tile_name),
                ms_cell(r["triton"], _chunk_name),
                speedup_cell(r["triton"], r["coop"]),
                ms_cell(r["torch"]),
                speedup_cell(r["torch"], r["coop"]),
                ms_cell(sampler[0], _tile_name) if sampler[0] else "—",
                ms_cell(sampler[1]) if sampler[1] else "—",
                speedup_cell(sampler[1], sampler[0]) if sampler[0] else "—",
                " / ".join(correct_cell(v) for v in (r["coop"], r["triton"], r["torch"], *sampler[:1]) if v),
            )
        )
    measured = [r for r in rows if "error" not in r]
    if measured:
        lines += ["", "Every configuration, ms:", ""]
    for r in measured:
        lines.append(
            f"- {r['dtype']}, k {r['k']}: coop {config_times_cell(r['coop'], _tile_name)}; "
            f"Triton {config_times_cell(r['triton'], _chunk_name)}"
        )
    return lines + ["", "Bar (issue 22): at least 3x `torch.topk` on every row.", ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    first, then = warm_items()
    warm_in_workers(warm_launch, first, then=then, label="topk")
    return topk_rows()


SECTION = Section(
    "topk",
    key="topk",
    needs=("torch", "triton"),
    run=run,
    lines=topk_lines,
    guarded=True,
    chart=declare(
        f"top-k of ({TOPK_ROWS}, {TOPK_VOCAB}) rows",
        {
            "coop_tiles": ms("coop"),
            "torch.topk": ms("torch"),
            "Triton": ms("triton"),
            "coop_tiles sampler": ms("coop_sampler"),
            "torch sampler": ms("torch_sampler"),
        },
        x=lambda r: f"{r['dtype']} k={r['k']}",
        ylabel="ms (lower is faster)",
    ),
)
