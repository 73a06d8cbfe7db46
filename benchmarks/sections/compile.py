"""Compile time by stage, cold and warm, in fresh processes (benchmarks/compile_profile.py; issue 11)."""

from __future__ import annotations

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


SECTION = Section("compile", key="compiles", needs=(), run=run, lines=compile_lines, guarded=False)
