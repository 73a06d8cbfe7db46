"""The registry of benchmark sections: one module per section, each declaring its `SECTION` (benchmarks/section.py).

To add a section: write `sections/<name>.py` with its measurements, its markdown and `SECTION = Section("<name>", ...)`,
then add its name to `NAMES` (where it runs) and to `DOCUMENT_ORDER` (where docs/benchmarks.md shows it)."""

from __future__ import annotations

import importlib

from benchmarks.section import Section

#: the sections, as `--only` names them and in the order a run measures them. Issues 7's, 8's, 11's and 19's
#: sections (the guarded ones) come last: each records its own failures, but a kernel that faults leaves the CUDA
#: context unusable for whatever follows.
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
    "gather",
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
    "gather",
)

SECTIONS: tuple[Section, ...] = tuple(importlib.import_module(f"{__name__}.{name}").SECTION for name in NAMES)


def by_name(name: str) -> Section:
    """The section `--only` calls `name`."""
    for section in SECTIONS:
        if section.name == name:
            return section
    raise KeyError(f"unknown section {name!r}: use {', '.join(NAMES)}")
