"""Compile time by stage, cold and warm, in fresh processes (benchmarks/compile_profile.py; issue 11)."""

from __future__ import annotations

from benchmarks.charts import declare
from benchmarks.section import Section


def compile_rows(arch: str) -> dict:
    """Cold and warm compiles by stage, in fresh processes (benchmarks/compile_profile.py)."""
    from benchmarks import compile_profile

    return compile_profile.measure(arch)


def compile_lines(compiles: dict) -> list[str]:
    from benchmarks import compile_profile

    return compile_profile.render_lines(compiles)


def run(sizes: list[int], arch: str) -> dict:
    return compile_rows(arch)


def compile_times(compiles: dict) -> list[dict]:
    """The table's times, in seconds, with their bars (issue 11) where they have one, as rows for the chart."""
    cold, warm, process = compiles["cold"], compiles["warm"], compiles["process_s"]
    return [
        {"case": "cold compile", "s": cold["compile_s"], "bar": 1.5},
        {"case": "warm compile", "s": warm["compile_s"], "bar": 0.06},
        {"case": "warm start", "s": warm["start_s"]},
        {"case": "import coop_tiles", "s": warm["import_s"]},
        {"case": "2nd compile in a process", "s": process[1]},
        {"case": "3rd compile in a process", "s": process[2]},
        {"case": "autotuning 8 configs", "s": compiles["autotune_s"]},
    ]


SECTION = Section(
    "compile",
    key="compiles",
    needs=(),
    run=run,
    lines=compile_lines,
    guarded=False,
    chart=declare(
        "compile time (load → scan → store)",
        {"time": lambda r: r["s"]},
        x="case",
        dashed={"bar (issue 11)": lambda r: r.get("bar")},
        rows=compile_times,
        ylabel="seconds (lower is better)",
        y_log=True,
    ),
)
