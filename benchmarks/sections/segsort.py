"""Segmented sort: `tile.sort`, one program per segment, against a hand-written CUB BlockRadixSort kernel, torch.sort
and Triton's tl.sort (issue 8)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import coop_tiles as ct
from benchmarks.charts import declare, rate
from benchmarks.cub import cub_call, cub_library
from benchmarks.device import free_device_memory, stream_handle, to_host
from benchmarks.report import correct_cell, failed_row, ms_cell, speedup_cell, table_row
from benchmarks.section import Section
from benchmarks.timing import guarded, tune
from coop_tiles import tile

SEGSORT_LOG2N = 24
SEGMENT = 2048
SEGSORT_KEY_RANGE = (-(1 << 20), 1 << 20)  # negative keys, and about one tied pair per segment
SEGSORT_TRITON_WARPS = (4, 8)


# tile.sort (issue 8) is newer than the first sections: a library without it fails this section alone, not the import
# of the benchmarks.
try:

    @ct.jit
    def tile_segment_sort(keys, keys_out, SEGMENT: ct.constexpr):
        """One program per segment: sort its keys."""
        base = ct.program_id(0) * SEGMENT
        k = tile.load(keys, base, SEGMENT)
        tile.store(keys_out, base, tile.sort(k))

    @ct.jit
    def tile_segment_sort_pairs(keys, keys_out, vals, vals_out, SEGMENT: ct.constexpr):
        """One program per segment: sort its keys, with the values as the payload."""
        base = ct.program_id(0) * SEGMENT
        k = tile.load(keys, base, SEGMENT)
        v = tile.load(vals, base, SEGMENT)
        sk, sv = tile.sort(k, v)
        tile.store(keys_out, base, sk)
        tile.store(vals_out, base, sv)

    ISSUE8_ERROR: Exception | None = None
except Exception as error:
    tile_segment_sort = tile_segment_sort_pairs = None
    ISSUE8_ERROR = error


def segsort_rows(arch: str) -> list[dict]:
    """Segmented sort of 2^24 int32 keys in segments of 2048, keys only and with an int32 payload: coop_tiles
    (one program per segment), a hand-written CUB BlockRadixSort kernel, torch.sort and Triton's tl.sort."""
    rows = []
    for payload in (False, True):
        name = "keys + int32 payload" if payload else "keys only"
        rows.append({"sort": name, "n": f"2^{SEGSORT_LOG2N}", **guarded(_segsort_row, payload, arch)})
        free_device_memory()
    return rows


def _segsort_data() -> dict:
    """Keys uniform in SEGSORT_KEY_RANGE, payload the element's index, their device copies and output arrays, and
    the expected outputs: np.sort per segment, and the payload gathered by a stable argsort."""
    import cupy as cp

    n = 1 << SEGSORT_LOG2N
    keys = np.random.default_rng(8).integers(*SEGSORT_KEY_RANGE, n).astype(np.int32)
    order = np.argsort(keys.reshape(-1, SEGMENT), axis=1, kind="stable")
    vals = np.arange(n, dtype=np.int32)
    return {
        "n": n,
        "keys": cp.asarray(keys),
        "vals": cp.asarray(vals),
        "keys_out": cp.empty(n, cp.int32),
        "vals_out": cp.empty(n, cp.int32),
        "host_keys": keys,
        "expected_keys": np.take_along_axis(keys.reshape(-1, SEGMENT), order, axis=1).ravel(),
        "expected_vals": np.take_along_axis(vals.reshape(-1, SEGMENT), order, axis=1).ravel(),
    }


def _segsort_correct(data: dict, keys_out: Any, vals_out: Any = None, *, stable: bool = True) -> bool:
    """Keys against np.sort per segment; the payload against the stable argsort gather, or (stable=False) as a
    permutation of each segment's own indices that carries the keys."""
    keys = to_host(keys_out).ravel()
    if not np.array_equal(keys, data["expected_keys"]):
        return False
    if vals_out is None:
        return True
    vals = to_host(vals_out).ravel()
    if stable:
        return bool(np.array_equal(vals, data["expected_vals"]))
    own = np.array_equal(np.sort(vals.reshape(-1, SEGMENT), axis=1).ravel(), np.arange(data["n"]))
    return bool(own and np.array_equal(data["host_keys"][vals], keys))


def _segsort_reset(data: dict) -> Callable[[], None]:
    """Poison both outputs (a key outside SEGSORT_KEY_RANGE, an index outside the array)."""

    def reset() -> None:
        data["keys_out"].fill(np.iinfo(np.int32).max)
        data["vals_out"].fill(-1)

    return reset


def _segsort_row(payload: bool, arch: str) -> dict:
    """One variant: every implementation timed and checked on the same keys."""
    data = _segsort_data()
    return {
        "coop": guarded(_segsort_coop, data, payload),
        "cub": guarded(_segsort_cub, data, payload, arch),
        "torch": guarded(_segsort_torch, data, payload, False),
        "torch_stable": guarded(_segsort_torch, data, payload, True),
        "triton": guarded(_segsort_triton, data, payload),
    }


def _segsort_check(data: dict, payload: bool, stable: bool = True) -> Callable[[Any], bool]:
    """check(config) for tune: the shared outputs checked as _segsort_correct does."""
    vals_out = data["vals_out"] if payload else None
    return lambda _config: _segsort_correct(data, data["keys_out"], vals_out, stable=stable)


def _segsort_coop(data: dict, payload: bool) -> dict:
    """tile_segment_sort(_pairs), one program per segment, block size chosen by the runtime."""
    if tile_segment_sort is None:
        raise ISSUE8_ERROR
    d, grid = data, data["n"] // SEGMENT
    if payload:
        launch = lambda: tile_segment_sort_pairs[grid](  # noqa: E731
            d["keys"], d["keys_out"], d["vals"], d["vals_out"], SEGMENT=SEGMENT
        )
    else:
        launch = lambda: tile_segment_sort[grid](d["keys"], d["keys_out"], SEGMENT=SEGMENT)  # noqa: E731
    return tune([SEGMENT], lambda _: launch, _segsort_reset(d), _segsort_check(d, payload))


def _segsort_cub(data: dict, payload: bool, arch: str) -> dict:
    """The hand-written kernel of benchmarks/cub_baselines.cu: BlockLoad (warp-transpose), BlockRadixSort<int,
    256, 8(, int)>::SortBlockedToStriped, striped stores; one block per segment."""
    lib, d = cub_library(arch), data
    if lib.cub_segment_sort_length() != SEGMENT:
        raise RuntimeError(f"cub_baselines.cu sorts segments of {lib.cub_segment_sort_length()}, not {SEGMENT}")
    segments, stream = d["n"] // SEGMENT, stream_handle()
    ptrs = {name: d[name].data.ptr for name in ("keys", "keys_out", "vals", "vals_out")}

    def launch() -> None:
        if payload:
            status = lib.cub_segment_sort_pairs(
                ptrs["keys"], ptrs["keys_out"], ptrs["vals"], ptrs["vals_out"], segments, stream
            )
        else:
            status = lib.cub_segment_sort_keys(ptrs["keys"], ptrs["keys_out"], segments, stream)
        cub_call(lib, status, "segment sort launch")

    return tune(["BlockRadixSort"], lambda _: launch, _segsort_reset(d), _segsort_check(d, payload))


def _segsort_torch(data: dict, payload: bool, stable: bool) -> dict:
    """torch.sort(keys.view(-1, 2048), dim=1, stable=...) into preallocated outputs (it always writes int64
    indices too); with the payload, torch.gather(vals, 1, indices) after it."""
    import torch

    keys = torch.as_tensor(data["keys"], device="cuda").view(-1, SEGMENT)
    vals = torch.as_tensor(data["vals"], device="cuda").view(-1, SEGMENT)
    keys_out, vals_out = torch.empty_like(keys), torch.empty_like(vals)
    indices = torch.empty(keys.shape, device=keys.device, dtype=torch.int64)

    def launch() -> None:
        torch.sort(keys, dim=1, stable=stable, out=(keys_out, indices))
        if payload:
            torch.gather(vals, 1, indices, out=vals_out)

    def reset() -> None:
        keys_out.fill_(np.iinfo(np.int32).max)
        vals_out.fill_(-1)

    def check(_config: Any) -> bool:
        return _segsort_correct(data, keys_out, vals_out if payload else None, stable=stable)

    return tune(["stable" if stable else "default"], lambda _: launch, reset, check)


def _segsort_triton(data: dict, payload: bool) -> dict:
    """tl.sort per segment (benchmarks/_baselines.py; the payload through a packed 64-bit key), best of
    SEGSORT_TRITON_WARPS."""
    from benchmarks._baselines import triton_segment_sort

    d = data
    vals = (d["vals"], d["vals_out"]) if payload else (None, None)
    return tune(
        SEGSORT_TRITON_WARPS,
        lambda warps: triton_segment_sort(d["keys"], d["keys_out"], *vals, segment=SEGMENT, warps=warps),
        _segsort_reset(d),
        _segsort_check(d, payload),
    )


def _faster(a: dict, b: dict) -> dict:
    """The faster of two results (the one that did not fail, if one did)."""
    if "error" in a:
        return b
    if "error" in b:
        return a
    return a if a["ms"] <= b["ms"] else b


def segsort_lines(rows: list[dict]) -> list[str]:
    lo, hi = SEGSORT_KEY_RANGE
    lines = [
        "",
        f"## Segmented sort: `tile.sort`, one program per segment of {SEGMENT} int32 keys",
        "",
        f"`k = tile.load(keys, base, {SEGMENT})`, `tile.sort(k)` (payload: `sk, sv = tile.sort(k, v)`), stores; "
        "block size chosen by the runtime. Baselines on the same arrays: a hand-written CUB kernel "
        "(benchmarks/cub_baselines.cu: `BlockLoad` warp-transpose, `BlockRadixSort<int, 256, 8(, int)>::"
        "SortBlockedToStriped`, striped stores, one block per segment), "
        f"`torch.sort(x.view(-1, {SEGMENT}), dim=1)` into preallocated outputs (it writes int64 indices too; "
        "with the payload, `torch.gather(v, 1, indices)` after it), default and `stable=True`, and Triton "
        "`tl.sort` per segment (payload: sorting `key << 32 | position` as int64, then gathering the payload "
        f"by position), best of {'/'.join(map(str, SEGSORT_TRITON_WARPS))} warps.",
        f"Keys uniform in [{lo}, {hi}) (negative keys, and about one tied pair per segment); the payload is the "
        "element's index. *coop / X* is X's time over coop_tiles' (above 1: coop_tiles faster); *coop / torch* "
        "takes the faster torch.sort variant.",
        "Correct: keys equal `np.sort` per segment; the payload equals the stable-argsort gather, except for "
        "torch.sort's default (unstable) variant, where it must be a permutation of the segment's indices that "
        "carries the keys.",
        "",
        "| sort | n | coop_tiles ms | CUB kernel ms | coop / CUB | torch.sort ms | torch.sort stable ms | "
        "coop / torch | Triton ms | correct (coop / CUB / torch / torch stable / Triton) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(failed_row(r, ("sort", "n"), 10))
            continue
        coop, cub, triton = r["coop"], r["cub"], r["triton"]
        torch_, stable = r["torch"], r["torch_stable"]
        verdict = " / ".join(correct_cell(x) for x in (coop, cub, torch_, stable, triton))
        lines.append(
            table_row(
                r["sort"],
                r["n"],
                ms_cell(coop),
                ms_cell(cub),
                speedup_cell(cub, coop),
                ms_cell(torch_),
                ms_cell(stable),
                speedup_cell(_faster(torch_, stable), coop),
                ms_cell(triton, lambda warps: f"{warps} warps"),
                verdict,
            )
        )
    bar = "Bar (issue 8): at least 0.95x the hand-written CUB kernel, and at least 2x torch.sort."
    return lines + ["", bar, ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    return segsort_rows(arch)


SECTION = Section(
    "segsort",
    key="segsort",
    needs=("cupy", "cub", "torch", "triton"),
    run=run,
    lines=segsort_lines,
    guarded=True,
    chart=declare(
        f"segmented sort, segments of {SEGMENT} int32 keys, 2^{SEGSORT_LOG2N} keys",
        {
            name: rate(key, lambda r: 1 << SEGSORT_LOG2N)
            for name, key in (
                ("coop_tiles", "coop"),
                ("CUB kernel", "cub"),
                ("torch.sort", "torch"),
                ("torch.sort stable", "torch_stable"),
                ("Triton", "triton"),
            )
        },
        x="sort",
        ylabel="G keys/s",
    ),
)
