"""The disk cache: round trips, corrupt and truncated entries, concurrent writers, and keys."""

import multiprocessing
import os

import numpy as np
import pytest
from programs import scaled_cumsum

import coop_tiles as ct
from coop_tiles.runtime import toolchain
from coop_tiles.runtime.cache import MAGIC, DiskCache, cache_dir, make_key


def test_round_trip_and_miss(tmp_path):
    cache = DiskCache(tmp_path)
    assert cache.get("kernel", "abc") is None
    cache.put("kernel", "abc", {"cubin": b"\x7fELF" + bytes(100)})
    assert cache.get("kernel", "abc") == {"cubin": b"\x7fELF" + bytes(100)}


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_damaged_entries_are_misses_and_removed(tmp_path, damage):
    cache = DiskCache(tmp_path)
    cache.put("ltoir", "k", b"x" * 1000)
    path = tmp_path / "ltoir" / "k.bin"
    data = path.read_bytes()
    damaged = {
        "truncate": data[:-10],
        "flip": data[:-1] + bytes([data[-1] ^ 1]),
        "garbage": b"not a cache entry",
        "empty": b"",
    }[damage]
    path.write_bytes(damaged)
    assert cache.get("ltoir", "k") is None
    assert not path.exists()
    cache.put("ltoir", "k", b"y")
    assert cache.get("ltoir", "k") == b"y"


def _writer(root: str, seed: int) -> None:
    cache = DiskCache(root)
    rng = np.random.default_rng(seed)
    for _ in range(40):
        size = int(rng.integers(1, 200_000))
        cache.put("kernel", "shared", bytes([seed]) * size)


def test_concurrent_writers_never_expose_partial_entries(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), seed)) for seed in range(1, 5)]
    for p in procs:
        p.start()
    cache = DiskCache(tmp_path)
    seen = 0
    while any(p.is_alive() for p in procs):
        value = cache.get("kernel", "shared")
        if value is not None:
            assert len(set(value)) == 1 and value[0] in (1, 2, 3, 4)
            seen += 1
    for p in procs:
        p.join()
        assert p.exitcode == 0
    final = cache.get("kernel", "shared")
    assert final is not None and len(set(final)) == 1
    assert not [f for f in os.listdir(tmp_path / "kernel") if f.startswith(".tmp-")]


def test_cache_dir_override(monkeypatch, tmp_path):
    monkeypatch.setenv("COOP_TILES_CACHE_DIR", str(tmp_path / "here"))
    assert cache_dir() == tmp_path / "here"
    monkeypatch.delenv("COOP_TILES_CACHE_DIR")
    assert "coop_tiles" in str(cache_dir())


def test_keys_depend_on_every_part():
    base = make_key("kernel", "source", "sm_90", {"numba-cuda": "0.30.4"})
    assert base == make_key("kernel", "source", "sm_90", {"numba-cuda": "0.30.4"})
    assert base != make_key("kernel", "source2", "sm_90", {"numba-cuda": "0.30.4"})
    assert base != make_key("kernel", "source", "sm_80", {"numba-cuda": "0.30.4"})
    assert base != make_key("kernel", "source", "sm_90", {"numba-cuda": "0.30.5"})


def test_warm_compile_skips_every_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("COOP_TILES_CACHE_DIR", str(tmp_path))
    x = np.zeros(1, np.float32)
    cold = ct.jit(scaled_cumsum.fn).compile(x, x, 1, 2.0, TILE=640, arch="sm_90")
    assert any((tmp_path / "kernel").iterdir()) and any((tmp_path / "shims").iterdir())

    def forbidden(*args, **kwargs):
        raise AssertionError("a compiler ran on a warm start")

    monkeypatch.setattr(toolchain, "nvrtc_compile", forbidden)
    monkeypatch.setattr(toolchain, "numba_compile", forbidden)
    monkeypatch.setattr(toolchain, "link", forbidden)
    warm = ct.jit(scaled_cumsum.fn).compile(x, x, 1, 2.0, TILE=640, arch="sm_90")
    assert warm.cubin == cold.cubin
    with pytest.raises(AssertionError, match="a compiler ran"):  # a new specialisation must compile
        ct.jit(scaled_cumsum.fn).compile(x, x, 1, 2.0, TILE=768, arch="sm_90")


def test_entry_format_starts_with_magic(tmp_path):
    DiskCache(tmp_path).put("storage", "k", 1)
    assert (tmp_path / "storage" / "k.bin").read_bytes().startswith(MAGIC)
