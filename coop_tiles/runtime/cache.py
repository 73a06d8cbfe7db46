"""The disk cache: compiled artefacts keyed by a hash of everything that changes them.

Entries are written to a temporary file in the same directory and renamed into place, so
concurrent processes never see a partial entry (the last writer wins; both wrote the same
bytes). Each entry starts with a magic string and the SHA-256 of its payload; a truncated
or corrupt entry is treated as a miss and replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

MAGIC = b"coop_tiles-cache-v1\n"
_DIGEST = 32


def cache_dir() -> Path:
    """`$COOP_TILES_CACHE_DIR`, or the platform's user cache directory for coop_tiles."""
    override = os.environ.get("COOP_TILES_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("coop_tiles", appauthor=False))


def make_key(*parts: Any) -> str:
    """A stable hex key for JSON-serialisable parts."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class DiskCache:
    """A directory of pickled entries in namespaces (`kind`), e.g. "ltoir", "storage", "kernel"."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_dir()

    def _path(self, kind: str, key: str) -> Path:
        return self.root / kind / f"{key}.bin"

    def get(self, kind: str, key: str) -> Any | None:
        path = self._path(kind, key)
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
            pass  # a read-only or full cache directory only costs a recompile

    @staticmethod
    def _discard(path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass
