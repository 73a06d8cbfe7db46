"""Planner unit tests: layouts, TempStorage offsets, alignment, reuse and barrier placement (no GPU)."""

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.codegen.shims import generate_shims
from coop_tiles.lang import ir
from coop_tiles.lang.frontend import build_program
from coop_tiles.lang.types import WEAK_INT, ArrayType
from coop_tiles.ops.memory import TileLoad, TileStore, load_converted  # noqa: F401
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


@ct.combine
def _affine(a_l, b_l, a_r, b_r):
    return a_r * a_l, a_r * b_l + b_r


def carried_through_an_array(x, h, last, n, TILE: ct.constexpr):
    for base in range(0, n, TILE):
        a = tile.load(x, base, TILE, valid=n - base, other=1)
        carry = 0
        if base > 0:
            carry = last[0]
        (_, hs), total = tile.scan((a, a), op=_affine, initial=(1, carry), return_total=True)
        last[0] = total[1]
        tile.store(h, base, hs, valid=n - base)


def total_feeds_the_next_chunk(x, h, n, TILE: ct.constexpr):
    carry = (1, 0)
    for base in range(0, n, TILE):
        a = tile.load(x, base, TILE, valid=n - base, other=1)
        (_, hs), carry = tile.scan((a, a), op=_affine, initial=carry, return_total=True)
        tile.store(h, base, hs, valid=n - base)


def total_used_by_every_thread(x, h, n, TILE: ct.constexpr):
    carry = (1, 0)
    for base in range(0, n, TILE):
        a = tile.load(x, base, TILE, valid=n - base, other=1)
        (_, hs), carry = tile.scan((a, a), op=_affine, initial=carry, return_total=True)
        tile.store(h, base, hs - carry[1], valid=n - base)


def nested_loads(x, y, n, TILE: ct.constexpr):
    for base in range(0, n, TILE):
        t = tile.load(x, base, TILE)
        for k in range(4):
            t = t + tile.load(y, k * TILE, TILE)
        tile.store(x, base, tile.scan(t))


def plan_of(fn, **constexprs):
    """The program, its layouts, and its plan with TempStorage sizes like the real ones (a scan's is small)."""
    p = program(fn, **constexprs)
    layouts = plan_layouts(p)
    needs = {
        s.cid: StorageNeed(112 if isinstance(s, TileScan) else 4224, 16)
        for s in collectives(p)
        if layouts.collectives[s.cid].needs_storage
    }
    return p, layouts, finish_plan(p, layouts, needs)


def test_scans_order_the_block_and_carried_scans_rerun_without_a_barrier():
    """A scan's own __syncthreads completes every earlier access: the store after it needs no barrier, and a
    scan carrying its total in CUB's prefix callback runs again in its region without one; the next
    iteration's load still waits for the store's shared memory."""
    p, layouts, plan = plan_of(total_feeds_the_next_chunk, TILE=1024)
    load, scan, store = collectives(p)
    assert layouts.collectives[scan.cid].sync == "reentrant"
    assert barrier_cids(p, plan.carve) == [load.cid]


def test_a_total_only_written_to_an_element_stays_in_thread_0():
    """Thread 0 writes array elements; a total only written there, and a seed only CUB's prefix callback reads
    (from thread 0), need no broadcast: no __syncthreads after the scan, and the carry written to `last` and
    read back in the next chunk (by thread 0 alone) needs no barrier either."""
    p, layouts, plan = plan_of(carried_through_an_array, TILE=1024)
    scan = next(s for s in collectives(p) if isinstance(s, TileScan))
    assert layouts.collectives[scan.cid].op.endswith(", total in thread 0")
    assert not [b for b in plan.carve.barriers.values() if "a_last" in b.reason]
    shim = generate_shims(p, layouts).source
    scan_shim = shim[shim.index(f"coop_scan_{scan.cid}(") :]
    assert "if (threadIdx.x == 0) { *total0 = c.running.f0; *total1 = c.running.f1; }" in scan_shim
    assert "__syncthreads" not in scan_shim[: scan_shim.index("\n}\n")]
    read = next(s for s in p.walk() if isinstance(s, ir.ArrayRead))
    assert read.out.name not in layouts.block_values
    # the plain chunked loop: the total only seeds the next chunk's scan, so it stays in thread 0 too
    _, chunked_layouts, _ = plan_of(total_feeds_the_next_chunk, TILE=1024)
    assert any(c.op.endswith("total in thread 0") for c in chunked_layouts.collectives.values())
    _, broadcast, _ = plan_of(total_used_by_every_thread, TILE=1024)
    assert not any(c.op.endswith("thread 0") for c in broadcast.collectives.values())


def test_four_byte_tiles_move_in_words_inside_an_inner_loop():
    """A blocked int32 tile loaded once per tile goes through a warp transpose; one loaded in a loop within a
    loop moves in 16-byte words (no shared memory, no barrier)."""
    _, layouts, _ = plan_of(nested_loads, TILE=1024)
    loads = [c.algorithm for c in layouts.collectives.values() if c.op == "load"]
    assert loads == ["BLOCK_LOAD_WARP_TRANSPOSE", "DIRECT_VECTORIZED"]


def test_16_bit_loads_convert_to_float32_as_they_arrive():
    """On the GPU a load of a float16 row cast to float32 is one load into a float32 tile (the interpreter
    runs the program as written)."""

    def half_sum(x, y, TILE: ct.constexpr):
        y[0] = tile.sum(tile.load(x, 0, TILE).astype(np.float32) * 2)

    p = build_program(
        half_sum, {"x": ArrayType(np.dtype(np.float16)), "y": ArrayType(np.dtype(np.float32))}, {"TILE": 4096}
    )
    load_converted(p)
    load = next(s for s in p.walk() if isinstance(s, TileLoad))
    assert load.out.type.dtype == np.float32
    assert not [
        s for s in p.walk() if isinstance(s, ir.TileMap) and s.op == "cast" and s.args[0].type.dtype == np.float16
    ]
    shim = generate_shims(p, plan_layouts(p)).source
    assert "coop_f16x2_to_f32x2(u[k])" in shim
