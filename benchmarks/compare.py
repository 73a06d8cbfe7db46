"""Two runs of the benchmarks side by side: every time one measured (kernel and baseline times, host times per launch,
compile times), the other's, and their ratio, with a summary per section. `run.py --baseline-tree DIR` measures an old
tree and this one in one sitting and writes this; `run.py --compare OLD.pkl NEW.pkl` writes it from two `--save` files.

The results are walked generically (they are the dicts and lists each section's `run` returns, as `--save` keeps them),
so that an old tree's results compare with no code of its own: a number is a time when its key ends in `ms`, `_us` or
`_s` (or it is one of a block-size table's or a compile's stage times); rows of a table are named by their leading cells
(n, dtype, case, ...); every configuration's time (`times`) is left out, its best is kept (`ms`)."""

from __future__ import annotations

import math
import statistics
from typing import Any

#: the cells that name a row of a section's table, in the order they name it
LABEL_KEYS = ("kernel", "case", "sort", "input", "shape", "n", "tokens", "dtype", "arrays", "path")
#: keys whose numbers are times whatever their names (a block-size table's fixed choices, the compile's stages)
TIME_TABLES = ("fixed", "stages", "process_s")
#: a ratio further than this from 1 is marked in the table
MARK = 0.05


def _is_time(path: list[str]) -> bool:
    keys = [key for key in path if not key.startswith("[")]
    if not keys:
        return False
    last = keys[-1]
    return last.endswith(("ms", "_us", "_s")) or any(key in TIME_TABLES for key in keys)


def _label(row: dict, index: int) -> str:
    cells = [str(row[key]) for key in LABEL_KEYS if key in row]
    if "arrays" in row and len(cells) == 1:
        cells = [f"{row['arrays']} arrays"]
    return "[" + (" ".join(cells) if cells else str(index)) + "]"


def flatten(results: Any) -> tuple[dict[str, float], dict[str, str]]:
    """One section's results as ({measurement: time}, {place: problem}): the problems are failures (`error`) and
    results that were not correct."""
    times: dict[str, float] = {}
    problems: dict[str, str] = {}

    def walk(value: Any, path: list[str]) -> None:
        where = " ".join(path) or "(section)"
        if isinstance(value, dict):
            if "error" in value:
                problems[where] = f"failed: {value['error']}"
            if value.get("correct") is False:
                problems[where] = "NOT correct"
            for key, item in value.items():
                if key != "times":
                    walk(item, [*path, str(key)])
        elif isinstance(value, list):
            labels: dict[str, int] = {}
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    label = _label(item, index)
                    labels[label] = labels.get(label, 0) + 1
                    if labels[label] > 1:
                        label = f"{label}#{labels[label]}"
                else:
                    label = f"[{index}]"
                walk(item, [*path, label])
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and _is_time(path):
            times[where] = float(value)

    walk(results, [])
    return times, problems


def _median_times(runs: list[Any]) -> tuple[dict[str, float], dict[str, str]]:
    """The median of each time over several rounds of one section (problems from every round)."""
    flat = [flatten(results) for results in runs]
    keys = [key for key in flat[0][0]]
    for times, _ in flat[1:]:
        keys += [key for key in times if key not in keys]
    times = {key: statistics.median(t[key] for t, _ in flat if key in t) for key in keys}
    problems: dict[str, str] = {}
    for _, found in flat:
        problems.update(found)
    return times, problems


def _named(key: str) -> str:
    """The measurement's name, with its unit when its last key does not say it."""
    last = key.split()[-1]
    if last.endswith(("ms", "_us", "_s")):
        return key
    return f"{key} ({'s' if 'stages' in key or 'process_s' in key else 'ms'})"


def _number(value: float) -> str:
    return f"{value:.4g}"


def compare_lines(
    baseline: dict[str, list[Any]],
    current: dict[str, list[Any]],
    order: tuple[str, ...],
    names: dict[str, str] | None = None,
    titles: tuple[str, str] = ("baseline", "current"),
) -> list[str]:
    """Markdown: a summary table (per section: how many times were compared, the geometric mean of current / baseline,
    the smallest and largest ratio, problems), then one table per section. `baseline` and `current` map a section's
    results key to the results of each round (lists, for medians over rounds); `order` gives the keys' order and
    `names` their section names."""
    names = names or {}
    old_title, new_title = titles
    summary = [
        f"| section | times compared | {new_title} / {old_title} (geometric mean) | smallest | largest | problems |",
        "|---|---|---|---|---|---|",
    ]
    details: list[str] = []
    for key in order:
        if key not in baseline and key not in current:
            continue
        name = names.get(key, key)
        old, old_problems = _median_times(baseline[key]) if key in baseline else ({}, {"(section)": "not run"})
        new, new_problems = _median_times(current[key]) if key in current else ({}, {"(section)": "not run"})
        shared = [k for k in old if k in new and old[k] > 0 and new[k] > 0]
        ratios = {k: new[k] / old[k] for k in shared}
        problems = [f"{old_title} {where}: {what}" for where, what in old_problems.items()]
        problems += [f"{new_title} {where}: {what}" for where, what in new_problems.items()]
        only = [k for k in old if k not in new] + [k for k in new if k not in old]
        if ratios:
            mean = math.exp(statistics.fmean(math.log(r) for r in ratios.values()))
            low, high = min(ratios.values()), max(ratios.values())
            summary.append(
                f"| {name} | {len(ratios)} | **{mean:.3f}** | {low:.3f} | {high:.3f} | {len(problems) or ''} |"
            )
        else:
            summary.append(f"| {name} | 0 | — | — | — | {len(problems) or ''} |")
        details += ["", f"### {name}", ""]
        details += [f"| measurement | {old_title} | {new_title} | {new_title} / {old_title} |", "|---|---|---|---|"]
        for k in [*shared, *only]:
            cells = [_number(old[k]) if k in old else "—", _number(new[k]) if k in new else "—"]
            ratio = "—"
            if k in ratios:
                ratio = f"{ratios[k]:.3f}"
                if abs(ratios[k] - 1) > MARK:
                    ratio = f"**{ratio}**"
            details.append(f"| {_named(k)} | {cells[0]} | {cells[1]} | {ratio} |")
        if problems:
            details += ["", *(f"- {problem}" for problem in problems)]
    head = [
        f"# Benchmarks: {new_title} against {old_title}",
        "",
        f"Every time measured in both runs (kernels, baselines timed beside them, host times, compile times; lower is "
        f"faster), and {new_title} / {old_title}: above 1, {new_title} is slower. Ratios further than {MARK:.0%} from "
        "1 are bold; the baselines' own ratios (copies, CuPy, PyTorch, CUB, Triton) show the noise between the runs.",
        "",
    ]
    return head + summary + details + [""]
