"""The disk cache: round trips, corrupt and truncated entries, concurrent writers, and keys."""

import multiprocessing
import os
import time

import numpy as np
import pytest
from programs import scaled_cumsum

import coop_tiles as ct
from coop_tiles.runtime import toolchain
from coop_tiles.runtime.cache import MAGIC, DiskCache, cache_dir, make_key, max_bytes


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


def forbid_compilers(monkeypatch) -> None:
    """From here on, NVRTC, Numba and nvJitLink raise: what follows must come from the disk cache."""

    def forbidden(*args, **kwargs):
        raise AssertionError("a compiler ran on a warm start")

    for name in ("nvrtc_compile", "numba_compile", "link"):
        monkeypatch.setattr(toolchain, name, forbidden)


def test_warm_compile_skips_every_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("COOP_TILES_CACHE_DIR", str(tmp_path))
    x = np.zeros(1, np.float32)
    cold = ct.jit(scaled_cumsum.fn).compile(x, x, 1, 2.0, TILE=640, arch="sm_90")
    assert any((tmp_path / "kernel").iterdir()) and any((tmp_path / "shims").iterdir())

    forbid_compilers(monkeypatch)
    warm = ct.jit(scaled_cumsum.fn).compile(x, x, 1, 2.0, TILE=640, arch="sm_90")
    assert warm.cubin == cold.cubin
    with pytest.raises(AssertionError, match="a compiler ran"):  # a new specialisation must compile
        ct.jit(scaled_cumsum.fn).compile(x, x, 1, 2.0, TILE=768, arch="sm_90")


def test_a_kernels_ptx_is_cached_beside_its_cubin(monkeypatch, tmp_path):
    """`kernel.ptx` (and `local_memory_bytes`, which reads it) of a kernel loaded from the disk cache comes from the
    cache too, once made: no body is compiled again for it."""
    monkeypatch.setenv("COOP_TILES_CACHE_DIR", str(tmp_path))
    x = np.zeros(1, np.float32)
    cold = ct.jit(scaled_cumsum.fn).compile(x, x, 1, 2.0, TILE=640, arch="sm_90")
    assert not (tmp_path / "ptx").exists()  # made when first asked for
    ptx = cold.ptx
    assert ".entry" in ptx and any((tmp_path / "ptx").iterdir())

    forbid_compilers(monkeypatch)
    warm = ct.jit(scaled_cumsum.fn).compile(x, x, 1, 2.0, TILE=640, arch="sm_90")
    assert warm.ptx == ptx and warm.local_memory_bytes() == 0


def test_entry_format_starts_with_magic(tmp_path):
    DiskCache(tmp_path).put("storage", "k", 1)
    assert (tmp_path / "storage" / "k.bin").read_bytes().startswith(MAGIC)


# ----- size cap and least-recently-used eviction -------------------------------------------------
def key(i: int) -> str:
    return make_key("test entry", i)


def entry_size(cache: DiskCache, i: int) -> int:
    return (cache.root / "kernel" / f"{key(i)}.bin").stat().st_size


def age_entries(cache: DiskCache, ages: dict[int, float]) -> None:
    """Set each entry's last use to `ages[i]` seconds ago."""
    now = time.time()
    for i, seconds in ages.items():
        os.utime(cache.root / "kernel" / f"{key(i)}.bin", (now - seconds, now - seconds))


def kept(cache: DiskCache) -> set[int]:
    keys = {e.key for e in cache.entries("kernel")}
    return {i for i in range(100) if key(i) in keys}


def test_eviction_removes_the_least_recently_used_entries(tmp_path):
    probe = DiskCache(tmp_path / "probe")
    probe.put("kernel", key(0), b"x" * 1000)
    size = entry_size(probe, 0)  # every entry below has this size
    cache = DiskCache(tmp_path / "cache", max_bytes=int(5.5 * size))
    for i in range(5):
        cache.put("kernel", key(i), b"x" * 1000)
    assert kept(cache) == {0, 1, 2, 3, 4}  # 5 entries fit under the cap
    age_entries(cache, {0: 50, 1: 40, 2: 30, 3: 20, 4: 10})
    assert cache.get("kernel", key(0)) == b"x" * 1000  # a hit makes 0 the most recently used
    cache.put("kernel", key(5), b"x" * 1000)
    # 6 entries are over the cap; eviction goes down to 90% of it (4 entries), oldest use first
    assert kept(cache) == {0, 3, 4, 5}


def test_the_cap_comes_from_the_environment(tmp_path, monkeypatch):
    probe = DiskCache(tmp_path / "probe")
    probe.put("kernel", key(0), b"y" * 500)
    size = entry_size(probe, 0)
    monkeypatch.setenv("COOP_TILES_CACHE_MAX_BYTES", str(3 * size))
    cache = DiskCache(tmp_path / "cache")
    for i in range(3):
        cache.put("kernel", key(i), b"y" * 500)
        age_entries(cache, {i: 100 - i})
    cache.put("kernel", key(3), b"y" * 500)
    assert kept(cache) == {2, 3}  # down to 90% of 3 entries


def test_an_entry_larger_than_the_cap_is_kept_until_the_next_put(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=100)
    cache.put("kernel", key(0), b"z" * 1000)
    assert kept(cache) == {0}
    cache.put("kernel", key(1), b"z" * 1000)
    assert kept(cache) == {1}


@pytest.mark.parametrize(
    "text, expected",
    [("", 4 << 30), ("1000", 1000), ("512M", 512 << 20), ("2g", 2 << 30), ("2GiB", 2 << 30), ("64 KB", 64 << 10)],
)
def test_max_bytes_setting(monkeypatch, text, expected):
    monkeypatch.setenv("COOP_TILES_CACHE_MAX_BYTES", text)
    assert max_bytes() == expected


@pytest.mark.parametrize("text", ["lots", "0", "-5", "1.5G"])
def test_a_bad_max_bytes_setting_is_logged_and_ignored(monkeypatch, caplog, text):
    monkeypatch.setenv("COOP_TILES_CACHE_MAX_BYTES", text)
    assert max_bytes() == 4 << 30
    assert caplog.messages == [
        f"COOP_TILES_CACHE_MAX_BYTES={text!r} is not a positive size (like 2G or 500000000); using 4G"
    ]


def test_gets_and_puts_under_the_cap_do_not_list_the_directory(tmp_path, monkeypatch):
    cache = DiskCache(tmp_path, max_bytes=1 << 30)
    cache.put("kernel", key(0), b"a")  # the first put of a process lists the directory once

    def forbidden(*args, **kwargs):
        raise AssertionError("listed the cache directory")

    monkeypatch.setattr(DiskCache, "entries", forbidden)
    for i in range(1, 20):
        cache.put("kernel", key(i), b"a")
        assert cache.get("kernel", key(i - 1)) == b"a"


def test_listing_and_eviction_leave_other_files_alone(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=100)
    cache.put("kernel", key(0), b"q" * 1000)
    foreign = tmp_path / "kernel" / "notes.bin"
    foreign.write_bytes(b"not ours")
    fresh_tmp = tmp_path / "kernel" / ".tmp-fresh.bin"
    fresh_tmp.write_bytes(b"being written")
    stale_tmp = tmp_path / "kernel" / ".tmp-stale.bin"
    stale_tmp.write_bytes(b"left by a writer that died")
    two_hours_ago = time.time() - 7200
    os.utime(stale_tmp, (two_hours_ago, two_hours_ago))
    assert [e.key for e in cache.entries()] == [key(0)]
    cache.put("kernel", key(1), b"q" * 1000)  # over the cap: evicts key(0) and sweeps the stale file
    assert kept(cache) == {1}
    assert foreign.exists() and fresh_tmp.exists() and not stale_tmp.exists()
    size = entry_size(cache, 1)
    assert cache.remove(cache.entries()) == (1, size)
    assert kept(cache) == set() and foreign.exists() and fresh_tmp.exists()


def _capped_writer(root: str, seed: int) -> None:
    cache = DiskCache(root, max_bytes=200_000)
    rng = np.random.default_rng(seed)
    for i in range(60):
        cache.put("kernel", key(1000 * seed + i), bytes([seed]) * int(rng.integers(1, 20_000)))
        cache.get("kernel", key(1000 * seed + int(rng.integers(0, i + 1))))


def test_concurrent_writers_under_a_cap(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_capped_writer, args=(str(tmp_path), seed)) for seed in range(1, 5)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    cache = DiskCache(tmp_path, max_bytes=200_000)
    for e in cache.entries():  # every surviving entry is whole
        value = cache.read(e)
        assert value is not None and len(set(value)) == 1
    assert not [f for f in os.listdir(tmp_path / "kernel") if f.startswith(".tmp-")]
    cache.put("kernel", key(0), b"last")  # this process lists the directory, and evicts if over the cap
    assert sum(e.size for e in cache.entries()) <= 200_000


def _generate_once(root: str, made: str) -> None:
    """`get_or_make` (what `mathdx.cached` calls) of a slow entry, each making of it counted in `made`."""

    def make() -> bytes:
        with open(made, "a") as f:
            f.write("x")
        time.sleep(0.5)  # (a slow generation: the others arrive meanwhile)
        return b"made once"

    DiskCache(root).get_or_make("gemm", key(7), make)


def test_processes_missing_the_same_entry_make_it_once(tmp_path):
    made = tmp_path / "made"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_generate_once, args=(str(tmp_path), str(made))) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert made.read_text() == "x" and DiskCache(tmp_path).get("gemm", key(7)) == b"made once"
    assert [e.key for e in DiskCache(tmp_path).entries()] == [key(7)]  # (its lock file is no entry)


def test_a_read_only_cache_generates_without_a_lock(tmp_path):
    cache = DiskCache(tmp_path / "file")
    (tmp_path / "file").write_text("not a directory")
    with cache.generating("gemm", key(1)):
        pass
