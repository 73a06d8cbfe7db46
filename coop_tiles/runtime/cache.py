"""The disk cache: compiled artefacts keyed by a hash of everything that changes them.

Entries are written to a temporary file in the same directory and renamed into place, so
concurrent processes never see a partial entry (the last writer wins; both wrote the same
bytes). Each entry starts with a magic string and the SHA-256 of its payload; a truncated
or corrupt entry is treated as a miss and replaced.

The cache is capped at `COOP_TILES_CACHE_MAX_BYTES` (default 4 GiB) by least-recent use: a
hit sets the entry's modification time to now, and a put that takes the process's running
total over the cap lists the directory once and removes the least recently used entries
until the total is under 90% of the cap. The running total starts from one listing at the
first put of a process and is corrected at every eviction, so other processes' writes are
counted late but never lost; a get never lists the directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._log import get_logger

MAGIC = b"coop_tiles-cache-v1\n"
_DIGEST = 32
MAX_BYTES_ENV = "COOP_TILES_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 4 << 30
#: eviction brings the total down to this fraction of the cap, so it does not run at every put
LOW_WATER = 0.9
#: a temporary file older than this was left by a writer that died
STALE_TMP_SECONDS = 3600
_ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.bin")  # what `make_key` names; nothing else is listed or removed
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

log = get_logger("cache")

#: the kinds of entry coop_tiles writes, with what each holds (`python -m coop_tiles cache` lists them)
KINDS = {
    "kernel": "compiled kernels (cubins)",
    "shims": "NVRTC output of the CUB shims, with their TempStorage sizes",
    "autotune": "autotuning timings, one per kernel, key, device and config",
}

# Running byte total of each cache directory, per process (None: not listed yet).
_totals: dict[Path, int] = {}
_totals_lock = threading.Lock()


def cache_dir() -> Path:
    """`$COOP_TILES_CACHE_DIR`, or the platform's user cache directory for coop_tiles."""
    override = os.environ.get("COOP_TILES_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("coop_tiles", appauthor=False))


def max_bytes() -> int:
    """The size cap: `$COOP_TILES_CACHE_MAX_BYTES` (bytes, or with a K/M/G/T suffix in powers of
    1024, e.g. ``512M``), else 4 GiB. A value that is not a positive size is logged and ignored."""
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    match = re.fullmatch(r"(\d+)\s*([kmgt]?)(?:i?b)?", text.lower())
    value = int(match.group(1)) * _UNITS[match.group(2)] if match else 0
    if value <= 0:
        log.warning("%s=%r is not a positive size (like 2G or 500000000); using 4G", MAX_BYTES_ENV, text)
        return DEFAULT_MAX_BYTES
    return value


def make_key(*parts: Any) -> str:
    """A stable hex key for JSON-serialisable parts."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Entry:
    """One cache file: its kind, key, size in bytes and last use (a Unix time: written or hit)."""

    kind: str
    key: str
    path: Path
    size: int
    last_used: float


class DiskCache:
    """A directory of pickled entries in namespaces (`kind`), e.g. "ltoir", "storage", "kernel"."""

    def __init__(self, root: Path | None = None, max_bytes: int | None = None):
        self.root = Path(root) if root is not None else cache_dir()
        self.max_bytes = max_bytes

    def _path(self, kind: str, key: str) -> Path:
        return self.root / kind / f"{key}.bin"

    def get(self, kind: str, key: str) -> Any | None:
        """The value stored under (kind, key), or None; a hit counts as a use for eviction."""
        path = self._path(kind, key)
        value = self._load(path)
        if value is None:
            log.debug("miss %s/%s", kind, key[:16])
            return None
        log.debug("hit %s/%s", kind, key[:16])
        try:
            os.utime(path)  # the last use, for least-recently-used eviction
        except OSError:
            pass  # evicted by another process since, or a read-only cache
        return value

    def read(self, entry: Entry) -> Any | None:
        """The value of a listed entry, without counting it as a use (for listings)."""
        return self._load(entry.path)

    def _load(self, path: Path) -> Any | None:
        try:
            data = path.read_bytes()
        except OSError:
            return None
        payload = data[len(MAGIC) + _DIGEST :]
        if not data.startswith(MAGIC) or data[len(MAGIC) : len(MAGIC) + _DIGEST] != hashlib.sha256(payload).digest():
            self._discard(path)
            return None
        try:
            return pickle.loads(payload)
        except Exception:
            self._discard(path)
            return None

    def put(self, kind: str, key: str, value: Any) -> None:
        """Store `value` under (kind, key), then evict least recently used entries if over the cap."""
        path = self._path(kind, key)
        payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        blob = MAGIC + hashlib.sha256(payload).digest() + payload
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".bin")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            return  # a read-only or full cache directory only costs a recompile
        self._account(len(blob), path)

    # ----- size cap ------------------------------------------------------------------------------
    def _account(self, added: int, written: Path) -> None:
        cap = self.max_bytes if self.max_bytes is not None else max_bytes()
        with _totals_lock:
            total = _totals.get(self.root)
            total = sum(e.size for e in self.entries()) if total is None else total + added
            if total > cap:
                total = self._evict(int(cap * LOW_WATER), keep=written)
            _totals[self.root] = total

    def _evict(self, target: int, keep: Path) -> int:
        """Remove the least recently used entries (never `keep`, just written) until at most
        `target` bytes remain; returns the bytes that remain."""
        self._sweep_stale_tmp()
        entries = sorted(self.entries(), key=lambda e: (e.last_used, e.key))
        total = sum(e.size for e in entries)
        removed = []
        for e in entries:
            if total <= target:
                break
            if e.path != keep:
                removed.append(e)
                total -= e.size
        count, freed = self._unlink(removed)
        log.info("evicted %d least recently used entries (%s) from %s", count, format_bytes(freed), self.root)
        return total

    def _sweep_stale_tmp(self) -> None:
        cutoff = time.time() - STALE_TMP_SECONDS
        for kind_dir in self._kind_dirs():
            for tmp in kind_dir.glob(".tmp-*"):
                try:
                    if tmp.stat().st_mtime < cutoff:
                        tmp.unlink()
                except OSError:
                    pass

    # ----- listing and clearing ------------------------------------------------------------------
    def _kind_dirs(self) -> list[Path]:
        try:
            return sorted(p for p in self.root.iterdir() if p.is_dir())
        except OSError:
            return []

    def kinds(self) -> list[str]:
        """The kinds `KINDS` names, then those of any other directory here (left by another version)."""
        return [*KINDS, *sorted(p.name for p in self._kind_dirs() if p.name not in KINDS)]

    def entries(self, kind: str | None = None) -> list[Entry]:
        """Every entry (of one kind, if given), in no particular order."""
        dirs = [self.root / kind] if kind is not None else self._kind_dirs()
        found = []
        for kind_dir in dirs:
            try:
                with os.scandir(kind_dir) as it:
                    for f in it:
                        if not _ENTRY_NAME.fullmatch(f.name):
                            continue
                        try:
                            st = f.stat()
                        except OSError:
                            continue  # removed meanwhile
                        found.append(Entry(kind_dir.name, f.name[:-4], Path(f.path), st.st_size, st.st_mtime))
            except OSError:
                continue
        return found

    def remove(self, entries: Iterable[Entry]) -> tuple[int, int]:
        """Delete these entries; returns how many, and their bytes, this call deleted."""
        count, freed = self._unlink(entries)
        with _totals_lock:
            if self.root in _totals:
                _totals[self.root] = max(0, _totals[self.root] - freed)
        return count, freed

    @staticmethod
    def _unlink(entries: Iterable[Entry]) -> tuple[int, int]:
        count = freed = 0
        for e in entries:
            try:
                e.path.unlink()
            except OSError:
                continue  # removed by another process meanwhile
            count, freed = count + 1, freed + e.size
        return count, freed

    @staticmethod
    def _discard(path: Path) -> None:
        log.warning("discarded a damaged cache entry: %s", path)
        try:
            path.unlink()
        except OSError:
            pass


def format_bytes(n: int) -> str:
    """`n` bytes for people: "512 B", "3.2 MiB"."""
    if n < 1024:
        return f"{n} B"
    value, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"
