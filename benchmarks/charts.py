"""A section's figure for docs/benchmarks.md: throughput against size, one line per implementation, the copy rate as
a dashed line; drawn with `ct.testing.draw_lines` (matplotlib) from the same results as the section's table."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coop_tiles.testing import draw_lines


@dataclass(frozen=True)
class Chart:
    """What to draw: a value per size label (`x`, in the table's order) for each line; NaN where a run failed."""

    title: str
    ylabel: str
    x: list[str]
    series: dict[str, list[float]]
    dashed: dict[str, list[float]]

    def draw(self, path: Path) -> None:
        draw_lines(path, self.title, "elements", self.ylabel, self.x, self.series, dashed=self.dashed)


def by_size(
    rows: list[dict],
    title: str,
    lines: dict[str, Callable[[dict], float | None]],
    dashed: dict[str, Callable[[dict], float | None]],
    group: str | None = None,
    ylabel: str = "GB/s",
) -> Chart:
    """A chart of `rows` (each with its size label under "n"): each of `lines` and `dashed` (a name and the row's
    value, None for a failure) once per value of the rows' `group` key (e.g. the dtype), against the sizes."""
    sizes = list(dict.fromkeys(r["n"] for r in rows))
    groups = list(dict.fromkeys(r.get(group) for r in rows)) if group else [None]

    def series(of: dict[str, Callable[[dict], float | None]]) -> dict[str, list[float]]:
        out = {}
        for g in groups:
            for name, value in of.items():
                label = f"{name} {g}" if g is not None else name
                mine = {r["n"]: r for r in rows if group is None or r.get(group) == g}
                out[label] = [_value(value, mine.get(n)) for n in sizes]
        return out

    return Chart(title, ylabel, sizes, series(lines), series(dashed))


def _value(value: Callable[[dict], float | None], row: dict | None) -> float:
    if row is None or "error" in row:
        return math.nan
    try:
        v = value(row)
    except (KeyError, TypeError, ZeroDivisionError):  # a failed implementation: its result holds an error
        return math.nan
    return math.nan if v is None else float(v)


def gbs(nbytes: float, result: dict) -> float | None:
    """GB/s of a timed result (None if it failed)."""
    return None if "error" in result else nbytes / result["ms"] / 1e6


def draw_charts(charts: dict[str, Any], folder: Path) -> dict[str, Path]:
    """Each chart drawn to `folder/<section>.png`: the paths written (none without matplotlib, said once)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not installed (pip install coop-tiles[plot]): the page has no figures", flush=True)
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, chart in charts.items():
        written[name] = folder / f"{name}.png"
        chart.draw(written[name])
    return written
