"""Why the optional C launch path (`coop_tiles.runtime._claunch`) did not load, said exactly:
which coop_tiles was imported, where the extension was looked for, and what builds it.

The usual cause is a source checkout on the path first (`python -m coop_tiles` run from the
repository root imports the checkout, not the installed package), whose extension was never
built in place; an installed coop_tiles elsewhere may have it.
"""

from __future__ import annotations

import sys
from importlib.machinery import EXTENSION_SUFFIXES, PathFinder
from pathlib import Path

NAME = "_claunch"
BUILD_IN_PLACE = "`pip install -e .` (or `python setup.py build_ext --inplace`)"


def built_extension(package_dir: Path) -> Path | None:
    """The compiled C launch path inside the coop_tiles package at `package_dir`, if there is one."""
    for suffix in EXTENSION_SUFFIXES:
        path = package_dir / "runtime" / f"{NAME}{suffix}"
        if path.is_file():
            return path
    return None


def other_packages(package_dir: Path) -> list[Path]:
    """Other coop_tiles packages Python could import: those it would find were `package_dir` (a
    checkout on the path first) not there, as installed (editable installs included)."""
    here = package_dir.resolve()
    path = [p for p in sys.path if Path(p or ".").resolve() != here.parent]
    found: list[Path] = []
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        try:
            spec = find("coop_tiles", path if finder is PathFinder else None) if find else None
        except Exception:  # a finder that can't answer for this name
            continue
        origin = Path(spec.origin).parent.resolve() if spec is not None and spec.origin else None
        if origin is not None and origin != here and origin not in found:
            found.append(origin)
    return found


def missing_reason(error: str, package_dir: Path, others: list[Path]) -> str:
    """What happened when `_claunch` failed to import with `error` from the coop_tiles at
    `package_dir`, other coop_tiles packages being at `others`, and what to do about it."""
    looked = package_dir / "runtime"
    built = built_extension(package_dir)
    if built is not None:
        return f"{built} did not load: {error}; rebuild it with {BUILD_IN_PLACE} in {package_dir.parent}"
    checkout = package_dir.parent
    if not ((checkout / "setup.py").is_file() and (checkout / "pyproject.toml").is_file()):
        return f"no {NAME} extension in {looked}; reinstall coop_tiles with a C compiler present to build it"
    said = f"coop_tiles was imported from the source checkout {checkout}, which has no {NAME} extension in {looked}"
    having = [p for p in others if built_extension(p) is not None]
    if having:
        said += (
            f"; the checkout comes first on sys.path (as the current directory does with `python -m`), before "
            f"the installed coop_tiles at {having[0]}, which has one: run from another directory, or build it "
            f"in the checkout with {BUILD_IN_PLACE}"
        )
    else:
        said += f"; build it there with {BUILD_IN_PLACE}, which needs a C compiler"
    return said
