"""The TileError family: every user mistake is reported as one, located at the user's line."""

from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass, field

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class SourceLocation:
    """A span in the user's source: file, 1-based line, 0-based column, and the line's text."""

    filename: str
    line: int
    col: int = 0
    end_col: int | None = None
    text: str = ""

    def render(self) -> str:
        head = f"{self.filename}:{self.line}:{self.col + 1}"
        if not self.text:
            return head
        stripped = self.text.rstrip()
        width = max(1, (self.end_col or len(stripped)) - self.col)
        return f"{head}\n    {stripped}\n    {' ' * self.col}{'^' * width}"


def caller_location() -> SourceLocation | None:
    """Where the user's code called into coop_tiles: the first frame outside this package."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return None
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    indent = len(text) - len(text.lstrip())
    return SourceLocation(frame.f_code.co_filename, frame.f_lineno, indent, None, text)


@dataclass
class _Details:
    loc: SourceLocation | None = None
    inlined_from: list[SourceLocation] = field(default_factory=list)
    log: str | None = None


class TileError(Exception):
    """Base class of every error a user's tile program or launch can cause."""

    def __init__(self, message: str, *, loc: SourceLocation | None = None, log: str | None = None):
        super().__init__(message)
        self.message = message
        self.details = _Details(loc=loc, log=log)

    @property
    def loc(self) -> SourceLocation | None:
        return self.details.loc

    def locate(self, loc: SourceLocation) -> None:
        """Attach `loc` if no location is known yet."""
        if self.details.loc is None:
            self.details.loc = loc

    def add_call_site(self, loc: SourceLocation) -> None:
        """Record the call of a helper (or combine function) the error happened in, innermost first."""
        if self.details.loc is not None and loc not in self.details.inlined_from:
            self.details.inlined_from.append(loc)

    def __str__(self) -> str:
        parts = []
        if self.details.loc is not None:
            parts.append(self.details.loc.render())
        parts.append(f"{type(self).__name__}: {self.message}" if parts else self.message)
        for site in self.details.inlined_from:
            parts.append(f"  inlined from {site.render()}")
        if self.details.log:
            parts.append("--- backend log ---\n" + self.details.log.strip())
        return "\n".join(parts)


class TileSyntaxError(TileError):
    """A Python construct that tile programs do not support."""


class TileTypeError(TileError):
    """A type, dtype or shape mismatch, or a value of the wrong kind (tile vs scalar)."""


class TileValueError(TileError):
    """A value that is of the right kind but not allowed (a non-constexpr tile size, an unknown op)."""


class TileIndexError(TileError):
    """An index tile of `tile.gather` pointing outside the array, found by the interpreter (compiled code
    reads `other` there instead)."""


class DivergenceError(TileError):
    """A tile collective reached under control flow that is not block-uniform."""


class LaunchError(TileError):
    """A bad launch: host arrays, non-contiguous arrays, wrong dtypes, bad grids or streams."""


class SharedMemoryError(TileError):
    """The kernel's TempStorage plan needs more shared memory than the device allows."""


class TileAssertionError(TileError):
    """A `ct.static_assert` (when the program is built) or `ct.device_assert` (in the interpreter, or a
    debug launch) whose condition does not hold."""


class CompileError(TileError):
    """A backend (NVRTC, Numba, nvJitLink) rejected generated code; the raw log is attached."""


class InternalError(TileError):
    """A coop_tiles bug caught by its own checks (an ill-formed IR after some stage), not a user mistake."""
