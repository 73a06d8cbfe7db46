"""Planner unit tests: layouts, TempStorage offsets, alignment, reuse and barrier placement (no GPU)."""

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.lang import ir
from coop_tiles.lang.frontend import build_program
from coop_tiles.lang.types import WEAK_INT, ArrayType
from coop_tiles.ops.memory import TileLoad, TileStore  # noqa: F401
from coop_tiles.ops.reduce import TileReduce  # noqa: F401
from coop_tiles.ops.scan import TileScan  # noqa: F401
from coop_tiles.planner import StorageNeed, carve, finish_plan, plan_layouts

I32 = ArrayType(np.dtype(np.int32))


def program(fn, **constexprs) -> ir.Program:
    params = {}
    for name in fn.__code__.co_varnames[: fn.__code__.co_argcount]:
        if name not in constexprs:
            params[name] = WEAK_INT if name.startswith("n") else I32
    return build_program(fn, params, constexprs)


def collectives(p: ir.Program) -> list[ir.Collective]:
    return [s for s in p.walk() if isinstance(s, ir.Collective)]


def barrier_cids(p: ir.Program, plan) -> list[int]:
    return [s.cid for s in collectives(p) if s.sid in plan.barriers]


def load_scan_store(x, y, n, TILE: ct.constexpr):
    t = tile.load(x, 0, TILE, valid=n)
    tile.store(y, 0, tile.scan(t), valid=n)


def chunked(x, y, n, TILE: ct.constexpr):
    carry = 0
    for base in range(0, n, TILE):
        t = tile.load(x, base, TILE, valid=n - base)
        s, carry = tile.scan(t, initial=carry, return_total=True)
        tile.store(y, base, s, valid=n - base)


def two_reductions(x, y, n, TILE: ct.constexpr):
    t = tile.load(x, 0, TILE)
    y[0] = tile.sum(t) + tile.max(t)


def in_place(x, y, n, TILE: ct.constexpr):
    t = tile.load(x, 0, TILE)
    tile.store(x, 0, t + 1)
    y[0] = x[0]


def test_scan_group_is_blocked_and_elementwise_group_is_striped():
    p = program(load_scan_store, TILE=1000)
    layouts = plan_layouts(p)
    assert layouts.block_threads == 256
    assert {t.arrangement for t in layouts.tiles.values()} == {"blocked"}
    assert {t.items_per_thread for t in layouts.tiles.values()} == {4}
    choices = [c.algorithm for c in layouts.collectives.values()]
    assert choices == ["BLOCK_LOAD_WARP_TRANSPOSE", "BLOCK_SCAN_WARP_SCANS", "BLOCK_STORE_WARP_TRANSPOSE"]
    p2 = program(two_reductions, TILE=100)
    l2 = plan_layouts(p2)
    assert l2.block_threads == 128
    assert {t.arrangement for t in l2.tiles.values()} == {"striped"}
    assert not l2.collectives[0].needs_storage


def test_block_threads_rule():
    assert plan_layouts(program(load_scan_store, TILE=1)).block_threads == 32
    assert plan_layouts(program(load_scan_store, TILE=33)).block_threads == 64
    assert plan_layouts(program(load_scan_store, TILE=8192)).block_threads == 256
    big = plan_layouts(program(load_scan_store, TILE=20000))
    assert big.block_threads == 640 and max(t.items_per_thread for t in big.tiles.values()) <= 32
    with pytest.raises(ct.TileValueError, match="items per thread"):
        plan_layouts(program(load_scan_store, TILE=40000))
    with pytest.raises(ct.TileValueError, match="multiple of 32"):
        plan_layouts(program(load_scan_store, TILE=64), 100)


def test_large_storages_share_offset_zero_with_one_barrier_each():
    p = program(load_scan_store, TILE=4096)
    needs = {0: StorageNeed(16896, 16), 1: StorageNeed(112, 16), 2: StorageNeed(16896, 16)}
    plan = carve(p, needs)
    assert plan.regions[0].offset == 0
    assert plan.regions[1].offset == 16896  # small scan storage sits beside the load: no barrier
    assert plan.regions[2].offset == 0  # the store reuses the load's bytes...
    assert barrier_cids(p, plan) == [2]  # ...after exactly one barrier
    assert plan.total_bytes == 16896 + 112


def test_offsets_honour_alignment():
    p = program(two_reductions, TILE=100)
    t = [s for s in collectives(p)]
    needs = {t[1].cid: StorageNeed(4100, 4), t[2].cid: StorageNeed(20, 8)}
    plan = carve(p, needs)
    assert plan.regions[t[2].cid].offset % 8 == 0
    assert plan.regions[t[2].cid].offset >= 4100


def test_loop_back_edge_gets_a_barrier():
    p = program(chunked, TILE=1024)
    load, scan, store = collectives(p)
    needs = {load.cid: StorageNeed(4224, 16), scan.cid: StorageNeed(120, 16), store.cid: StorageNeed(4224, 16)}
    plan = carve(p, needs)
    # store reuses the load's bytes in the same iteration, and the next iteration's load reuses the store's.
    assert barrier_cids(p, plan) == [load.cid, store.cid]
    assert all(b.reason == "TempStorage reuse" for b in plan.barriers.values())


def test_global_memory_hazards_get_barriers():
    p = program(in_place, TILE=64)
    plan = carve(p, {})
    reasons = sorted(b.reason for b in plan.barriers.values())
    assert reasons == ["read after write of a_x", "write after read of a_x"]


def test_disjoint_small_storages_need_no_barrier():
    p = program(two_reductions, TILE=100)
    red = [s for s in collectives(p) if isinstance(s, TileReduce)]
    plan = carve(p, {s.cid: StorageNeed(48, 4) for s in red})
    assert plan.regions[red[0].cid].offset != plan.regions[red[1].cid].offset
    assert not plan.barriers


def test_plan_prints_a_table():
    p = program(load_scan_store, TILE=4096)
    layouts = plan_layouts(p)
    plan = finish_plan(p, layouts, {0: StorageNeed(16896, 16), 1: StorageNeed(112, 16), 2: StorageNeed(16896, 16)})
    text = str(plan)
    assert "256 threads per block" in text and "17008 bytes of TempStorage" in text
    assert "BLOCK_LOAD_WARP_TRANSPOSE" in text
    # the scan's own __syncthreads separates the load's shared-memory reads from the store's writes
    assert text.endswith("barriers (__syncthreads before):\n  none")
    assert plan.shared_bytes == 17008
