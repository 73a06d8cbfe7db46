"""The GPU architecture a kernel is compiled for, as a user names it in `kernel.compile(arch=...)`.

Checked before any compiler runs, so that a misspelt arch is a located `LaunchError` naming the
accepted forms rather than an NVRTC failure or an internal error later on.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from ..errors import LaunchError

ACCEPTED = '90, "sm_90", "sm_90a" or (9, 0)'
_SPELLING = re.compile(r"sm_(\d{2,3})a?")


def parse_arch(value: Any) -> str:
    """`value` (``90``, ``"sm_90"``, ``"sm_90a"``, ``(9, 0)``) spelt as NVRTC takes it (``"sm_90"``),
    or a LaunchError naming the accepted forms. Only the spelling: whether NVRTC compiles for it is
    asked when NVRTC is about to run (`check_supported`), not on every compile that the cache serves."""
    name = _spelling(value)
    if name is None:
        raise LaunchError(f"arch={value!r} is not a GPU architecture; pass it as {ACCEPTED}{_hint(value)}")
    return name


def arch_number(name: str) -> int:
    """The number of arch `name` as `parse_arch` spells it: "sm_90" and "sm_90a" are 90."""
    return int(_SPELLING.fullmatch(name).group(1))


def check_supported(name: str) -> None:
    """A LaunchError when NVRTC, as far as it can say, does not compile for arch `name` ("sm_90")."""
    number = arch_number(name)
    version, supported = nvrtc_archs()
    if supported and number not in supported:
        listed = ", ".join(f"sm_{n}" for n in supported)
        raise LaunchError(f"arch={name!r}: NVRTC {version} does not compile for {name}; it compiles for {listed}")


def _spelling(value: Any) -> str | None:
    """`value` as "sm_XY" or "sm_XYa", or None when it is none of the accepted forms."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return f"sm_{value}" if 10 <= value <= 999 else None
    if isinstance(value, str):
        return value if _SPELLING.fullmatch(value) else None
    if isinstance(value, tuple) and len(value) == 2 and all(type(v) is int for v in value):
        major, minor = value
        return f"sm_{major}{minor}" if 1 <= major <= 99 and 0 <= minor <= 9 else None
    return None


def _hint(value: Any) -> str:
    """A guess at what a near miss meant: "compute_90" and "SM_90" -> "sm_90"."""
    if isinstance(value, str):
        match = re.fullmatch(r"(?:compute|sm|arch)?_?(\d{2,3}a?)", value.strip().lower())
        if match:
            return f' (did you mean "sm_{match.group(1)}"?)'
    return ""


@functools.cache
def nvrtc_archs() -> tuple[str, tuple[int, ...]]:
    """NVRTC's version ("13.5") and the archs it compiles for (75, 80, ...); () when it can't be asked."""
    try:
        from cuda.bindings import nvrtc

        _, major, minor = nvrtc.nvrtcVersion()
        status, archs = nvrtc.nvrtcGetSupportedArchs()
    except Exception:  # no NVRTC to ask: the compile itself will say what is wrong
        return "", ()
    return f"{major}.{minor}", tuple(archs) if status == nvrtc.nvrtcResult.NVRTC_SUCCESS else ()
