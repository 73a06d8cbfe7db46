"""The registry of benchmark sections: one module per section, each declaring its `SECTION` (benchmarks/section.py).

To add a section: write `sections/<name>.py` with its measurements, its markdown and `SECTION = Section("<name>", ...,
chart=charts.declare(...))` (its figure: benchmarks/charts.py), then add its name to `NAMES` (where it runs) and to
`DOCUMENT_ORDER` (where docs/benchmarks.md shows it)."""

from __future__ import annotations

import importlib

from benchmarks.section import Section

#: the sections, as `--only` names them and in the order a run measures them. The guarded sections (issues 7, 8, 9, 11,
#: 19 and 20) come last: each records its own failures, but a kernel that faults leaves the CUDA context unusable for
#: whatever follows. Issue 19's scan2d, whose whole-grid reverse chained scan could hang or fault where a look-back
#: goes wrong, runs last.
NAMES = (
    "bandwidth",
    "launch",
    "compile",
    "blocks",
    "linrec",
    "half",
    "rows2d",
    "histogram",
    "segsort",
    "chained",
    "mamba",
    "mamba_bwd",
    "gather",
    "softmax",
    "state_update",
    "ssd",
    "select",
    "matmul",
    "topk",
    "moe",
    "scan2d",
)
#: the order of the sections in docs/benchmarks.md
DOCUMENT_ORDER = (
    "bandwidth",
    "launch",
    "blocks",
    "compile",
    "linrec",
    "half",
    "rows2d",
    "histogram",
    "segsort",
    "chained",
    "mamba",
    "mamba_bwd",
    "softmax",
    "matmul",
    "scan2d",
    "gather",
    "select",
    "topk",
    "moe",
    "state_update",
    "ssd",
)

SECTIONS: tuple[Section, ...] = tuple(importlib.import_module(f"{__name__}.{name}").SECTION for name in NAMES)


def by_name(name: str) -> Section:
    """The section `--only` calls `name`."""
    for section in SECTIONS:
        if section.name == name:
            return section
    raise KeyError(f"unknown section {name!r}: use {', '.join(NAMES)}")
