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
    assert choices == ["DIRECT_VECTORIZED", "BLOCK_SCAN_WARP_SCANS", "DIRECT_VECTORIZED"]  # (one word a thread)
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
        plan_layouts(program(load_scan_store, TILE=300000))
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
    needs = {0: StorageNeed(16896, 16), 1: StorageNeed(112, 16), 2: StorageNeed(16896, 16)}
    plan = finish_plan(p, layouts, needs, "sm_90")
    text = str(plan)
    assert "256 threads per block" in text and "17008 bytes of shared memory" in text
    assert "BLOCK_LOAD_WARP_TRANSPOSE" in text
    # the scan's own __syncthreads separates the load's shared-memory reads from the store's writes
    assert text.endswith("barriers (__syncthreads before):\n  none")
    assert plan.shared_bytes == 17008


# ----- the storage model: tiles in registers, shared or local memory; carve by live range -------------
def scan_plus_one(x, y, n, TILE: ct.constexpr):
    t = tile.load(x, 0, TILE, valid=n, other=0)
    s = tile.scan(t + 1)
    tile.store(y, 0, s, valid=n)


def needs_of(p: ir.Program, size: int = 5120) -> dict[int, StorageNeed]:
    return {s.cid: StorageNeed(size if isinstance(s, (TileLoad, TileStore)) else 208, 16) for s in collectives(p)}


def test_live_ranges_cover_loops_only_for_values_carried_or_read_inside():
    from coop_tiles.planner.liveness import liveness

    p = program(chunked, TILE=1024)
    live = liveness(p)
    loop = next(s for s in p.walk() if isinstance(s, ir.ForRange))
    load, scan, store = collectives(p)
    start, end = live.at(loop), live.at(store)
    assert live.ranges["v_carry"][0] <= start and live.ranges["v_carry"][1] >= end  # carried around the loop
    t = load.out.name  # made and used within one iteration
    assert start < live.ranges[t][0] and live.ranges[t][1] < end
    assert live.ranges["a_n"][1] >= end  # read in the loop, defined before it


def test_tiles_past_32_items_per_thread_live_in_shared_memory_and_share_bytes():
    p = program(scan_plus_one, TILE=40000)
    layouts = plan_layouts(p)
    assert layouts.block_threads == 1024
    assert {t.storage for t in layouts.tiles.values()} == {"shared"}
    assert {c.algorithm for c in layouts.collectives.values() if c.op in ("load", "store")} == {
        "BLOCK_LOAD_WARP_TRANSPOSE_TIMESLICED",
        "BLOCK_STORE_WARP_TRANSPOSE_TIMESLICED",
    }
    plan = finish_plan(p, layouts, needs_of(p), "sm_90")
    # the element-wise chain and the in-place scan write over their operands: one region of 1024 threads
    # x 41 words (40 items padded to an odd number of words, so a warp hits 32 banks)
    assert {(r.offset, r.size) for r in plan.carve.tiles.values()} == {(0, 1024 * 41 * 4)}
    loads = [c for c in collectives(p) if isinstance(c, TileLoad)]
    assert plan.carve.regions[loads[0].cid].offset >= 1024 * 41 * 4  # the load's exchange beside its tile
    assert plan.shared_bytes <= 232448
    text = str(plan)
    assert "shared" in text and "live (lines)" in text


def row_norm(x, y, n, TILE: ct.constexpr):
    t = tile.load(x, 0, TILE, valid=n, other=0)
    centered = t - tile.sum(t) // n
    tile.store(y, 0, centered * 2 - tile.sum(centered * centered), valid=n)


def test_striped_tiles_keep_up_to_64_items_per_thread_in_registers_within_half_the_register_budget():
    # 16384 int32 at 256 threads: 64 items, 64 words each, half of the 128-register budget: registers
    layouts = plan_layouts(program(row_norm, TILE=16384), 256)
    assert {t.arrangement for t in layouts.tiles.values()} == {"striped"}
    assert {t.items_per_thread for t in layouts.tiles.values()} == {64}
    assert {t.storage for t in layouts.tiles.values()} == {"registers"}
    # 65 items: past 64
    assert {t.storage for t in plan_layouts(program(row_norm, TILE=16640), 256).tiles.values()} == {"shared"}
    # 64 items at 512 threads (a budget of 96 registers): more than half of it
    assert {t.storage for t in plan_layouts(program(row_norm, TILE=32768), 512).tiles.values()} == {"shared"}
    # a scan's blocked tiles keep the limit of 32 (TILE 9000 at 256 threads: 36 items per thread)
    scanned = plan_layouts(program(scan_plus_one, TILE=9000), 256)
    assert {t.items_per_thread for t in scanned.tiles.values()} == {36}
    assert {t.storage for t in scanned.tiles.values()} == {"shared"}


def test_tiles_that_do_not_fit_shared_memory_go_to_local_memory():
    p = program(scan_plus_one, TILE=40000)
    plan = finish_plan(p, plan_layouts(p), needs_of(p), "sm_80")  # 163 KiB: the 164 KiB tile does not fit
    assert {t.storage for t in plan.tiles.values()} == {"local"} and not plan.carve.tiles
    p = program(scan_plus_one, TILE=65536)  # 64 items per thread at 1024 threads: 260 KiB
    plan = finish_plan(p, plan_layouts(p), needs_of(p, 8448), "sm_90")
    assert {t.storage for t in plan.tiles.values()} == {"local"}


def test_shared_memory_past_the_limit_names_tiles_and_collectives():
    p = program(scan_plus_one, TILE=4096)
    needs = needs_of(p)
    scan = next(c for c in collectives(p) if isinstance(c, TileScan))
    needs[scan.cid] = StorageNeed(300000, 16)
    with pytest.raises(ct.SharedMemoryError) as e:
        finish_plan(p, plan_layouts(p), needs, "sm_90")
    assert e.value.message == (
        # the load and the store reuse the scan's bytes (a barrier each): the scan's 300000 is the total
        "scan_plus_one needs 300000 bytes of shared memory per block, more than sm_90's limit of 232448; "
        "largest users: scan[add] (BlockScan, line 148): 300000 bytes, load (BlockLoad, line 147): 5120 bytes, "
        "store (BlockStore, line 149): 5120 bytes. Use smaller tiles or fewer threads per block"
    )


def many_live(x, y, n, TILE: ct.constexpr):
    a = tile.load(x, 0, TILE)
    b = tile.load(x, TILE, TILE)
    c = tile.load(x, 2 * TILE, TILE)
    d = tile.load(x, 3 * TILE, TILE)
    e = tile.scan(a)
    f = tile.scan(e)
    tile.store(y, 0, a + b + c + d + e + f)


def test_register_pressure_moves_tiles_alive_across_collectives_to_shared_memory():
    p = program(many_live, TILE=32 * 1024)  # 32 items per thread at 1024 threads: 32 registers each
    layouts = plan_layouts(p)
    shared = {n for n, t in layouts.tiles.items() if t.storage == "shared"}
    # b, c, d (and a) stay alive across both scans; the budget at 1024 threads is 32 registers
    assert {"v_b", "v_c", "v_d"} <= shared
    small = plan_layouts(program(many_live, TILE=256))  # 1 item per thread: everything fits
    assert {t.storage for t in small.tiles.values()} == {"registers"}


def test_counts_kept_through_a_loop_live_from_begin_to_end_and_their_bytes_are_reused_after():
    from coop_tiles.ops.histogram import HistogramBegin, HistogramEnd, accumulate_in_shared_memory

    def counts_then_scan(x, out, n, BINS: ct.constexpr, CHUNK: ct.constexpr):
        h = tile.zeros(BINS, np.int32)
        for base in range(0, n, CHUNK):
            h = h + tile.histogram(tile.load(x, base, CHUNK, valid=n - base), BINS)
        tile.store(out, 0, tile.scan(h))

    p = program(counts_then_scan, BINS=256, CHUNK=1024)
    accumulate_in_shared_memory(p)
    layouts = plan_layouts(p)
    cs = collectives(p)
    begin = next(c for c in cs if isinstance(c, HistogramBegin))
    end = next(c for c in cs if isinstance(c, HistogramEnd))
    scan = next(c for c in cs if isinstance(c, TileScan))
    owners = [c for c in cs if c.cid != end.cid and not type(c).__name__.endswith("Composite")]
    needs = {c.cid: StorageNeed(4096, 16) for c in owners}
    plan = finish_plan(p, layouts, needs, "sm_90")
    counts = plan.carve.regions[begin.cid]
    assert plan.carve.regions[end.cid] is counts  # the loop's collectives all work in the one region
    load = next(c for c in cs if isinstance(c, TileLoad))
    assert plan.carve.regions[load.cid].offset >= counts.end  # alive during the loop: not overlapped
    assert plan.carve.regions[scan.cid].offset == counts.offset  # dead after it: reused...
    assert scan.sid in plan.carve.barriers  # ...after one barrier


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
    return p, layouts, finish_plan(p, layouts, needs, "sm_90")


def test_scans_order_the_block_and_carried_scans_rerun_without_a_barrier():
    """A scan's own __syncthreads completes every earlier access: the store after it needs no barrier, and a
    carried scan (two TempStorage, used in turn) runs again in its region without one; the next
    iteration's load still waits for the store's shared memory."""
    p, layouts, plan = plan_of(total_feeds_the_next_chunk, TILE=4096)
    load, scan, store = collectives(p)
    assert layouts.collectives[scan.cid].sync == "reentrant"
    assert barrier_cids(p, plan.carve) == [load.cid]


def test_a_carried_scan_has_one_barrier_and_its_seed_stays_in_thread_0():
    """A seeded scan that returns its total over a tile filling the block synchronises once: thread 0 shares the
    seed through the scan's own barrier, which also gives every thread the block's fold, so the total needs no
    broadcast; consecutive runs alternate between two TempStorage. The seed, read back from `last` by thread 0
    alone after thread 0 wrote it, needs no barrier either."""
    p, layouts, plan = plan_of(carried_through_an_array, TILE=4096)
    scan = next(s for s in collectives(p) if isinstance(s, TileScan))
    assert layouts.collectives[scan.cid].op == "scan[combine0__affine], carried"
    assert not [b for b in plan.carve.barriers.values() if "a_last" in b.reason]
    shim = generate_shims(p, layouts).source
    scan_shim = shim[shim.index(f"coop_scan_{scan.cid}(") :]
    scan_shim = scan_shim[: scan_shim.index("\n}\n")]
    assert "const int run = *parity;\n  *parity = run ^ 1;" in scan_shim and "(s.temp[run]).ExclusiveScan(" in scan_shim
    assert "if (threadIdx.x == 0) s.seed[run] = init;" in scan_shim
    assert "__syncthreads" not in scan_shim
    read = next(s for s in p.walk() if isinstance(s, ir.ArrayRead))
    assert read.out.name not in layouts.block_values
    # a total every thread uses: the same scan, and no barrier after it
    p, broadcast, plan = plan_of(total_used_by_every_thread, TILE=4096)
    load, scan, store = collectives(p)
    assert broadcast.collectives[scan.cid].op == "scan[combine0__affine], carried"
    assert barrier_cids(p, plan.carve) == [load.cid]


def sum_per_program(x, partial, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    partial[ct.program_id(0)] = tile.sum(tile.load(x, base, TILE, valid=n - base, other=0))


def sum_used_by_every_thread(x, y, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, t - tile.sum(t), valid=n - base)


def sums_of_squares_in_a_loop(x, y, n_cols, CHUNK: ct.constexpr):
    start = ct.program_id(0) * n_cols
    acc = 0.0
    for base in range(0, n_cols, CHUNK):
        t = tile.load(x, start + base, CHUNK, valid=n_cols - base, other=0)
        acc = acc + tile.sum(t * t)
    tile.store(y, start, tile.load(x, start, CHUNK, valid=n_cols) / acc, valid=n_cols)


def test_a_reduction_only_written_to_an_element_stays_in_thread_0_and_one_in_a_loop_is_an_all_reduce():
    """CUB's block reduction leaves its result in thread 0: when only an element write (thread 0's) uses it, the
    shim has no broadcast and no __syncthreads of its own; when every thread uses it, thread 0 shares it. In a
    loop, every thread folds the warps' totals after one barrier instead, alternating between two sets of them,
    so the next iteration's reduction needs no barrier before it."""
    p, layouts, _ = plan_of(sum_per_program, TILE=1024)
    (reduce,) = [s for s in collectives(p) if isinstance(s, TileReduce)]
    assert layouts.collectives[reduce.cid].op == "reduce[add], result in thread 0"
    shim = generate_shims(p, layouts).source
    reduce_shim = shim[shim.index(f"coop_reduce_{reduce.cid}(") :]
    reduce_shim = reduce_shim[: reduce_shim.index("\n}\n")]
    assert "*result0 = r;" in reduce_shim and "__syncthreads" not in reduce_shim
    p, layouts, _ = plan_of(sum_used_by_every_thread, TILE=1024)
    (reduce,) = [s for s in collectives(p) if isinstance(s, TileReduce)]
    assert layouts.collectives[reduce.cid].op == "reduce[add]"
    shim = generate_shims(p, layouts).source
    reduce_shim = shim[shim.index(f"coop_reduce_{reduce.cid}(") :]
    assert "if (threadIdx.x == 0) s.result = r;\n  __syncthreads();\n  *result0 = s.result;" in reduce_shim
    p, layouts, plan = plan_of(sums_of_squares_in_a_loop, CHUNK=1024)
    load, reduce, *_ = collectives(p)
    assert layouts.collectives[reduce.cid].op == "reduce[add], all-reduce"
    assert layouts.collectives[reduce.cid].sync == "reentrant" and reduce.cid not in barrier_cids(p, plan.carve)
    shim = generate_shims(p, layouts).source
    reduce_shim = shim[shim.index(f"coop_reduce_{reduce.cid}(") :]
    reduce_shim = reduce_shim[: reduce_shim.index("\n}\n")]
    assert "if (threadIdx.x % 32 == 0) s.totals[run][threadIdx.x / 32] = warp_total;" in reduce_shim
    assert reduce_shim.count("__syncthreads();") == 1
    assert "for (int i = 1; i < 8; ++i) r = coop::add{}(r, t[i]);\n  *result0 = r;" in reduce_shim


def test_four_byte_tiles_move_in_words_inside_an_inner_loop():
    """A blocked int32 tile loaded once per tile goes through a warp transpose; one loaded in a loop within a
    loop moves in 16-byte words (no shared memory, no barrier)."""
    _, layouts, _ = plan_of(nested_loads, TILE=4096)
    loads = [c.algorithm for c in layouts.collectives.values() if c.op == "load"]
    assert loads == ["BLOCK_LOAD_WARP_TRANSPOSE", "DIRECT_VECTORIZED"]


def test_a_tile_of_one_word_a_thread_moves_in_words_outside_loops():
    """A blocked tile whose thread holds exactly one 16-byte word (4 int32 of 1024 at 256 threads) loads and
    stores it directly at any depth: consecutive threads' words are consecutive, as coalesced as a striped
    transfer, with no warp transpose; at 16 items a thread the warp transpose stays."""
    for size, transfer in ((1024, "DIRECT_VECTORIZED"), (4096, "BLOCK_LOAD_WARP_TRANSPOSE")):
        layouts = plan_layouts(program(load_scan_store, TILE=size))
        assert [c.algorithm for c in layouts.collectives.values()][0] == transfer


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


def load_exp_sum_store(x, y, n, TILE: ct.constexpr):
    t = tile.load(x, 0, TILE, valid=n)
    e = t * 2
    tile.store(y, 0, e + tile.sum(e), valid=n)


@pytest.mark.parametrize(
    "dtype,size,threads,vector",
    [
        (np.float32, 4096, 256, 4),  # 16 items per thread: 16-byte vectors of 4 float32
        (np.float16, 4096, 256, 8),  # 8 half-precision items per 16-byte vector
        (np.float16, 1024, 256, 4),  # 4 items per thread: one 8-byte vector
        (np.float32, 1000, 256, 1),  # a padded tile is never whole: plain striped
        (np.float32, 256, 256, 1),  # one item per thread: plain striped
    ],
)
def test_striped_groups_take_vectors_of_their_arrays_items(dtype, size, threads, vector):
    a = ArrayType(np.dtype(dtype))
    p = build_program(load_exp_sum_store, {"x": a, "y": a, "n": WEAK_INT}, {"TILE": size})
    lay = plan_layouts(p, threads)
    assert {(t.arrangement, t.vector) for t in lay.tiles.values()} == {("striped", vector)}
    algorithm = "STRIPED_VECTORIZED" if vector > 1 else "DIRECT"
    assert [c.algorithm for c in lay.collectives.values() if c.op in ("load", "store")] == [algorithm] * 2
    if vector > 1:
        source = generate_shims(p, lay).source
        word = {16: "uint4", 8: "uint2"}[vector * np.dtype(dtype).itemsize]
        assert f"{word} w[" in source and "LoadDirectStriped<" not in source


def test_a_scanned_group_stays_blocked_without_vectors():
    p = program(load_scan_store, TILE=4096)
    lay = plan_layouts(p, 256)
    assert {(t.arrangement, t.vector) for t in lay.tiles.values()} == {("blocked", 1)}
