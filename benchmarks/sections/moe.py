"""MoE routing (`coop_tiles.examples.moe_align_block_size`, tutorial 15): against vLLM's CUDA `moe_align_block_size`
built from its sources (benchmarks/_vllm_moe.py), outputs compared in the same run (issue 22)."""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.charts import declare, ms
from benchmarks.kernels import tutorial
from benchmarks.report import correct_cell, failed_row, ms_cell, speedup_cell, table_row
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms, guarded, host_overheads_us
from benchmarks.warm import warm_in_workers

MOE_TOKENS = (256, 4096, 16384)
MOE_TOPK, MOE_EXPERTS, MOE_BLOCK = 8, 256, 64


def same_routing(got: tuple, want: tuple, block_size: int) -> bool:
    """Whether two `(sorted_token_ids, expert_ids, num_tokens_post_padded)` (NumPy) route alike, as vLLM's own test
    compares them: the same padded total, the same expert per block up to it, and in each expert's group of blocks
    the same routes and padding in any order (vLLM places a group's routes with atomics)."""
    (got_ids, got_experts, got_total), (want_ids, want_experts, want_total) = got, want
    total = int(want_total[0])
    blocks = total // block_size
    if int(got_total[0]) != total or not np.array_equal(got_experts[:blocks], want_experts[:blocks]):
        return False
    group = np.repeat(np.cumsum(np.r_[True, want_experts[1:blocks] != want_experts[: blocks - 1]]), block_size)
    got_sorted, want_sorted = (ids[:total][np.lexsort((ids[:total], group))] for ids in (got_ids, want_ids))
    return bool(np.array_equal(got_sorted, want_sorted))


def moe_rows() -> list[dict]:
    """Each num_tokens of MOE_TOKENS: coop_tiles and vLLM on the same top-k ids."""
    import torch  # noqa: F401 - the section needs PyTorch before anything is measured

    vllm = guarded(_vllm_extension)
    return [{"tokens": n, **guarded(_moe_row, n, vllm)} for n in MOE_TOKENS]


def _vllm_extension() -> dict:
    from benchmarks import _vllm_moe

    return {"ext": _vllm_moe.load()}


def _moe_row(tokens: int, vllm: dict) -> dict:
    """Both timed (each call with its allocations) and checked against tutorial 15's sequential reference (coop_tiles
    exactly, vLLM with `same_routing`), then against each other; the host time per call of both."""

    from benchmarks import _vllm_moe
    from coop_tiles.examples import moe_align_block_size

    ids = _topk_ids(tokens)
    want = tutorial("15_moe_routing").sequential(ids.cpu().numpy(), MOE_BLOCK, MOE_EXPERTS)

    def coop() -> Any:
        return moe_align_block_size(ids, MOE_BLOCK, MOE_EXPERTS)

    got = _host(coop())
    row: dict[str, Any] = {"coop": guarded(_timed, coop, all(np.array_equal(a, b) for a, b in zip(got, want)))}
    if "error" in vllm:
        return {**row, "vllm": vllm}

    def theirs() -> Any:
        return _vllm_moe.align(vllm["ext"], ids, MOE_BLOCK, MOE_EXPERTS)

    theirs_got = _host(theirs())
    row["vllm"] = guarded(_timed, theirs, same_routing(theirs_got, want, MOE_BLOCK))
    row["agree"] = same_routing(got, theirs_got, MOE_BLOCK)
    row["host_us"] = guarded(host_overheads_us, {"coop": coop, "vllm": theirs}, 200, 7)
    return row


def _topk_ids(tokens: int) -> Any:
    """(tokens, MOE_TOPK) int32 expert ids: each token's top MOE_TOPK of MOE_EXPERTS random logits."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(tokens)
    return torch.randn(tokens, MOE_EXPERTS, device="cuda", generator=g).topk(MOE_TOPK, dim=1).indices.int()


def warm_launch(tokens: int) -> None:
    """coop_tiles' routing of `tokens` tokens (in a worker process of `warm_in_workers`): its programs and their
    constexprs depend on the count."""
    import torch

    from coop_tiles.examples import moe_align_block_size

    moe_align_block_size(_topk_ids(tokens), MOE_BLOCK, MOE_EXPERTS)
    torch.cuda.synchronize()


def _host(outputs: tuple) -> tuple:
    return tuple(a.cpu().numpy() for a in outputs)


def _timed(run: Any, correct: bool) -> dict:
    median = cuda_time_ms(run)
    return {"best": None, "ms": median, "times": {None: median}, "correct": correct}


def moe_lines(rows: list[dict]) -> list[str]:
    lines = [
        "",
        "## MoE routing: `coop_tiles.examples.moe_align_block_size` against vLLM's CUDA kernel",
        "",
        f"`topk_ids` of (num_tokens, {MOE_TOPK}) int32, each token's top-{MOE_TOPK} of {MOE_EXPERTS} experts (random "
        f"logits), block size {MOE_BLOCK}: vLLM's `moe_align_block_size` outputs (tutorial 15). coop_tiles: one launch "
        "up to 4 chunks of 2048 routes (each program sorts a chunk by expert and scatters it, having histogrammed "
        "the ids itself), two above (a histogram per chunk into a table, then the sort and scatter). vLLM: its CUDA "
        "op from `csrc/moe/moe_align_sum_kernels.cu` (a counting and scan block beside a sentinel-filling block, "
        "then an atomic scatter), built for sm_90 with vLLM's flags by benchmarks/_vllm_moe.py, its outputs "
        "allocated with `torch.empty` as vLLM's wrapper does; each call times "
        "its allocations too. *coop / vLLM* is vLLM's time over coop_tiles' (above 1: coop_tiles faster). Host µs: "
        "the Python and launch time per call.",
        "Correct: coop_tiles equals the sequential reference exactly; vLLM routes as it (the same padded total and "
        "experts per block, each expert's group the same routes in any order: vLLM's atomics place them in any "
        "order), and *agree* compares coop_tiles' and vLLM's outputs in that way.",
        "",
        "| num_tokens | coop ms | vLLM ms | coop / vLLM | host µs (coop / vLLM) | agree | correct (coop / vLLM) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(failed_row(r, ("tokens",), 7))
            continue
        host = r.get("host_us") or {}
        host_cell = f"{host['coop']:.1f} / {host['vllm']:.1f}" if "coop" in host else host.get("error", "—")
        agree = {True: "yes", False: "NO"}.get(r.get("agree"), "—")
        lines.append(
            table_row(
                r["tokens"],
                ms_cell(r["coop"]),
                ms_cell(r["vllm"]),
                speedup_cell(r["vllm"], r["coop"]),
                host_cell,
                agree,
                " / ".join(correct_cell(r[k]) for k in ("coop", "vllm")),
            )
        )
    return lines + ["", "Bar (issue 22): at least 1.2x vLLM.", ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    warm_in_workers(warm_launch, MOE_TOKENS, label="moe")
    return moe_rows()


SECTION = Section(
    "moe",
    key="moe",
    needs=("torch", "cupy", "vllm"),
    run=run,
    lines=moe_lines,
    guarded=True,
    chart=declare(
        f"MoE align: top-{MOE_TOPK} of {MOE_EXPERTS} experts, block {MOE_BLOCK}",
        {"coop_tiles": ms("coop"), "vLLM CUDA": ms("vllm")},
        x=lambda r: f"{r['tokens']} tokens",
        ylabel="ms (lower is faster)",
    ),
)
