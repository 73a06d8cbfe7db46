"""Showing what a compile stage made: `COOP_TILES_DUMP=ir,plan,shims,body` (or `all`) prints those
stages' output for every kernel compiled, to stderr, or, with `COOP_TILES_DUMP_DIR=<dir>`, into one
file per kernel and stage there (docs/language.md, Inspecting)."""

from __future__ import annotations

import hashlib
import os
import sys

from ..errors import LaunchError


def requested(stages: tuple[str, ...]) -> frozenset[str]:
    """The stages `COOP_TILES_DUMP` names, out of `stages` (all of them for `all`); a LaunchError
    naming the stages for a name that is none of them."""
    names = {n.strip() for n in os.environ.get("COOP_TILES_DUMP", "").split(",") if n.strip()}
    if "all" in names:
        return frozenset(stages)
    unknown = sorted(names - set(stages))
    if unknown:
        raise LaunchError(
            f"COOP_TILES_DUMP names no stage {', '.join(unknown)}; the stages are {', '.join(stages)} (or all)"
        )
    return frozenset(names)


def write(kernel: str, key: object, stage: str, suffix: str, text: str) -> None:
    """Show `stage`'s output `text` for `kernel` specialised as `key` (its Signature): to stderr, or
    to `<COOP_TILES_DUMP_DIR>/<kernel>.<8 hex digits of key>.<stage><suffix>`."""
    tag = hashlib.sha1(repr(key).encode()).hexdigest()[:8]
    folder = os.environ.get("COOP_TILES_DUMP_DIR")
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{kernel}.{tag}.{stage}{suffix}"), "w") as f:
            f.write(text if text.endswith("\n") else text + "\n")
        return
    sys.stderr.write(f"===== coop_tiles: {kernel} ({tag}), stage {stage} =====\n{text.rstrip()}\n")
