"""A section's figure for docs/benchmarks.md, drawn (matplotlib) from the same results as the section's table.

A section declares its chart with `declare`: what to plot of each row of its results, one bar or line per
implementation, e.g. (sections/softmax.py)::

    SECTION = Section(
        ...,
        chart=declare(
            "row softmax and layer norm",
            {"coop_tiles": rate("coop", "bytes"), "Triton": rate("triton", "bytes"), "PyTorch": rate("torch", "bytes")},
            x=lambda r: f"{r['kernel']} {r['shape']} {r['dtype']}",
            dashed={"copy": lambda r: r["copy_bytes"] / r["copy_ms"] / 1e6},
        ),
    )

draws, for every row of the results, a group of bars (one per implementation: its GB/s, from the row's result under
that key, a dict with "ms") labelled by `x`, with the copy rate as a dashed line across the group. Sections measured at
sizes ("2^26", "2^28") draw lines against them instead (``plot="lines"``, `group` splitting the lines by another key,
e.g. the dtype). `rate` (GB/s), `share` (a time limit over the implementation's time: 1 = at the limit) and any
function of the row (None, or a failed result, is a gap) give the values; `rows` picks the rows out of results that
are not a list of them. Failures are gaps, and results with nothing to draw (a section that failed) have no figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coop_tiles.testing import draw_lines

#: a value of a row: a number, or None where there is none (an implementation that failed)
Value = Callable[[dict], "float | None"]


@dataclass(frozen=True)
class Chart:
    """What to draw: a value per x label (in the table's order) for each series; NaN where a run failed. `dashed`
    series are limits (the copy rate); `plot` is "lines" (against sizes) or "bars" (a group per label)."""

    title: str
    ylabel: str
    x: list[str]
    series: dict[str, list[float]]
    dashed: dict[str, list[float]]
    xlabel: str = "elements"
    plot: str = "lines"
    y_log: bool = False

    def draw(self, path: Path) -> None:
        if self.plot == "lines":
            draw_lines(path, self.title, self.xlabel, self.ylabel, self.x, self.series, dashed=self.dashed,
                       y_log=self.y_log)  # fmt: skip
        else:
            draw_bars(path, self)


def declare(
    title: str,
    series: dict[str, Value],
    *,
    x: str | Callable[[dict], Any] = "n",
    dashed: dict[str, Value] | None = None,
    plot: str = "bars",
    group: str | None = None,
    rows: Callable[[Any], list[dict]] | None = None,
    ylabel: str = "GB/s",
    xlabel: str = "",
    y_log: bool = False,
) -> Callable[[Any], Chart | None]:
    """A section's `chart`: from its results (`rows(results)`, or the results themselves), each of `series` and
    `dashed` (a name and the row's value) against the rows' `x` (a key or a function of the row), once per value of
    the rows' `group` key where given; None when no value could be drawn."""
    if plot not in ("bars", "lines"):
        raise ValueError(f"plot must be 'bars' or 'lines', not {plot!r}")
    label = (lambda r: r.get(x)) if isinstance(x, str) else x

    def chart(results: Any) -> Chart | None:
        try:
            mine = [r for r in (rows(results) if rows else results) if isinstance(r, dict)]
        except (KeyError, TypeError, IndexError):  # results that failed before measuring anything
            return None
        labelled = [(str(_label(label, r)), r) for r in mine if _label(label, r) is not None]  # failed rows too
        xs = list(dict.fromkeys(x for x, _ in labelled))
        groups = list(dict.fromkeys(r.get(group) for _, r in labelled)) if group else [None]

        def values(of: dict[str, Value]) -> dict[str, list[float]]:
            out = {}
            for g in groups:
                by_x = {x: r for x, r in labelled if group is None or r.get(group) == g}
                for name, value in of.items():
                    out[name if g is None else f"{name} {g}"] = [_value(value, by_x.get(v)) for v in xs]
            return out

        lines, limits = values(series), values(dashed or {})
        if all(math.isnan(v) for vs in lines.values() for v in vs):
            return None
        limits = {name: vs for name, vs in limits.items() if not all(math.isnan(v) for v in vs)}
        xlabel_ = xlabel or ("elements" if plot == "lines" else "")
        return Chart(title, ylabel, xs, lines, limits, xlabel_, plot, y_log)

    return chart


def rate(key: str, nbytes: str | Callable[[dict], float]) -> Value:
    """GB/s of the row's result under `key` moving `nbytes` (a key of the row, or a function of it) bytes."""
    size = (lambda r: r[nbytes]) if isinstance(nbytes, str) else nbytes
    return lambda r: gbs(size(r), r[key])


def share(key: str, limit: str = "limit_ms") -> Value:
    """The row's time limit (`limit`, ms) over the time of its result under `key`: 1 is at the limit."""
    return lambda r: None if "error" in r[key] else r[limit] / r[key]["ms"]


def ms(key: str) -> Value:
    """The time (ms) of the row's result under `key`, for sections without a byte count (lower is faster)."""
    return lambda r: None if "error" in r[key] else r[key]["ms"]


def gbs(nbytes: float, result: dict) -> float | None:
    """GB/s of a timed result (None if it failed)."""
    return None if "error" in result else nbytes / result["ms"] / 1e6


def _label(label: Callable[[dict], Any], row: dict) -> Any:
    """The row's x label; None where it has none (a section's failure, before any row was measured)."""
    try:
        return label(row)
    except (KeyError, TypeError):
        return None


def _value(value: Value, row: dict | None) -> float:
    if row is None or "error" in row:
        return math.nan
    try:
        v = value(row)
    except (KeyError, TypeError, ZeroDivisionError):  # a failed implementation: its result holds an error
        return math.nan
    return math.nan if v is None else float(v)


def draw_bars(path: Path, chart: Chart) -> None:
    """A group of bars per x label, one bar per series (a gap where NaN), each dashed series a dashed segment
    across its group."""
    from matplotlib.figure import Figure  # not pyplot: no backend or global state

    groups, k = len(chart.x), max(1, len(chart.series))
    fig = Figure(figsize=(min(14.0, max(7.0, 1.5 + 0.3 * groups * (k + 1))), 4.8))
    ax = fig.add_subplot()
    width = 0.8 / k
    for i, (name, values) in enumerate(chart.series.items()):
        ax.bar([g - 0.4 + (i + 0.5) * width for g in range(groups)], values, width, label=name)
    for j, (name, values) in enumerate(chart.dashed.items()):
        drawn = [(g, v) for g, v in enumerate(values) if not math.isnan(v)]
        for g, v in drawn:  # the legend names the first segment only
            ax.plot([g - 0.45, g + 0.45], [v, v], linestyle="--", color=("#333333", "#999999")[j % 2],
                    label=name if (g, v) == drawn[0] else None)  # fmt: skip
    long = groups > 4 or any(len(label) > 14 for label in chart.x)
    ax.set_xticks(range(groups), chart.x, rotation=25 if long else 0, ha="right" if long else "center")
    if chart.y_log:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel(chart.xlabel)
    ax.set_ylabel(chart.ylabel)
    ax.set_title(chart.title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.savefig(path, dpi=110, bbox_inches="tight")


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
