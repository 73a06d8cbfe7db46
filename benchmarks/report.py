"""The page docs/benchmarks.md: its header, the cells every section's table uses, and `render`, which writes the
sections that were run in the page's order."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any


def header_lines(device: str) -> list[str]:
    today = datetime.date.today().isoformat()
    return [
        "# Benchmarks",
        "",
        f"Written by `benchmarks/run.py` on **{device}**, {today}. Medians after warm-up; kernel times from",
        "`ct.testing.do_bench` (CUDA events, L2 cache flushed before each run), host overheads from perf_counter",
        "(medians of 15 rounds of 2,000 launches, the launch paths taking turns). Baselines were timed in the same "
        "run.",
        "Ratios are what to compare across machines; absolute times differ between GPUs.",
        "",
    ]


def table_row(*cells: Any) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def gbs_cell(nbytes: float, ms: float) -> str:
    return f"{nbytes / ms / 1e6:.0f}"


def correct_cell(result: dict) -> str:
    """yes / NO for a checked result, a dash for one that failed before it could be checked."""
    if "error" in result:
        return "—"
    return "yes" if result["correct"] else "NO"


def failed_row(r: dict, keys: tuple[str, ...], width: int) -> str:
    """A table row for a failed measurement: its key cells, the failure, dashes to the table's width."""
    lead = [r.get(k, "—") for k in keys]
    return table_row(*lead, f"failed: {r['error']}", *["—"] * (width - len(lead) - 1))


def config_times_cell(result: dict, name: Callable[[Any], str]) -> str:
    """Every config's time in ms, or the failure."""
    if "error" in result:
        return f"failed: {result['error']}"
    return ", ".join(f"{name(c)} {ms:.3f}" for c, ms in result["times"].items())


def skipped_note(result: dict, name: Callable[[Any], str]) -> str:
    """`; skipped: config (failure), ...` for the configs `timing.tune_working` could not launch, else nothing."""
    skipped = result.get("skipped") or {}
    return "".join(f"; skipped {name(c)} ({why})" for c, why in skipped.items())


def rate_cell(result: dict, nbytes: float, label: Callable[[Any], str] | None = None) -> str:
    """GB/s of a result (with its best config when `label` names it), or its failure."""
    if "error" in result:
        return f"failed: {result['error']}"
    cell = gbs_cell(nbytes, result["ms"])
    return f"{cell} ({label(result['best'])})" if label else cell


def ms_cell(result: dict, label: Callable[[Any], str] | None = None) -> str:
    """ms of a result (with its best config when `label` names it), or its failure."""
    if "error" in result:
        return f"failed: {result['error']}"
    return f"{result['ms']:.3f} ({label(result['best'])})" if label else f"{result['ms']:.3f}"


def speedup_cell(baseline: dict, coop: dict) -> str:
    """The baseline's time over coop_tiles' (above 1: coop_tiles faster), bold, or a dash if either failed."""
    if "error" in baseline or "error" in coop:
        return "—"
    return f"**{baseline['ms'] / coop['ms']:.2f}x**"


def render(
    device: str, results: dict[str, Any], figures: Path | None = None, provenance: list[str] | None = None
) -> str:
    """The markdown of docs/benchmarks.md: the header, then every section that was run (results keyed by
    `Section.key`; absent or None: not run), in the page's order (`sections.DOCUMENT_ORDER`). With `figures` (a
    folder beside the page), each section's chart is drawn there as `<section>.png` and shown under its heading.
    `provenance`: lines saying which command measured which sections, when the page merges several."""
    from benchmarks.charts import draw_charts
    from benchmarks.sections import DOCUMENT_ORDER, by_name

    run = [by_name(name) for name in DOCUMENT_ORDER if results.get(by_name(name).key) is not None]
    charts = {s.name: s.chart(results[s.key]) for s in run if s.chart is not None} if figures is not None else {}
    drawn = draw_charts({name: chart for name, chart in charts.items() if chart is not None}, figures) if charts else {}
    lines = header_lines(device) + ([""] + provenance + [""] if provenance else [])
    for section in run:
        text = section.lines(results[section.key])
        if section.name in drawn:
            at = next(i for i, line in enumerate(text) if line.startswith("## ")) + 1
            text = [*text[:at], "", f"![{section.name}]({figures.name}/{section.name}.png)", *text[at:]]
        lines += text
    return "\n".join(lines)
