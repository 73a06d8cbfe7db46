"""The shared-memory carve: one buffer holding every tile kept in shared memory and every
collective's TempStorage, byte offsets reused by live range, and the barriers between them.

Two kinds of regions share the buffer:

- *long-lived* regions: tiles in shared memory, and TempStorage that several collectives work in
  (a histogram's counts through a loop). Each lives over a range of statements (`liveness`) and
  gets a fixed offset first: the lowest one no region alive at the same time overlaps.
- *short* regions: the TempStorage of one collective, live only while it runs. Walking the
  program in order (loops twice, to see the back edge), each is placed at the lowest aligned
  offset that neither a long-lived region alive there nor a "dirty" region overlaps, within a
  budget of the long-lived regions plus the largest storage plus the small (< 1 KiB) ones.

A region's bytes stay dirty after it is used until the next `__syncthreads()`: a slow thread
may still be reading them. When nothing free fits, the region takes bytes that are dead but
dirty, and a barrier goes before it; a long-lived region whose bytes are dirty when it starts
gets one too. So small scans sit beside large loads without a barrier, and regions that reuse
bytes are separated by exactly one. Collectives that share one region synchronise among
themselves (their shims do).

The same walk places barriers for global-memory hazards inside a block: a read of an array
written earlier in the block (or a write after a read) by another thread.

A collective whose shim has a `__syncthreads()` of its own (`CollectiveChoice.sync`) orders
everything before it: after it, only what it touches itself (its TempStorage, its tiles, its
array) is dirty. A REENTRANT one (a carried scan, whose runs use two TempStorage in turn) may also
run again in its own dirty region without a barrier.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..lang import ir
from ..ops.base import op_of
from .layout import REENTRANT, SHARED, TileLayout
from .liveness import Liveness, liveness

SMALL_STORAGE_BYTES = 1024
#: Dynamic shared memory is aligned to 16 bytes; offsets are relative to it.
BASE_ALIGNMENT = 16


@dataclass(frozen=True)
class StorageNeed:
    size: int
    align: int


@dataclass(frozen=True)
class Region:
    """Bytes [offset, offset + size) of the buffer, holding `key`: a collective's id (its
    TempStorage) or a tile's name; alive from line `first` to line `last`."""

    key: int | str
    offset: int
    size: int
    align: int
    first: int | None = None
    last: int | None = None

    @property
    def end(self) -> int:
        return self.offset + self.size


@dataclass(frozen=True)
class Barrier:
    """A `__syncthreads()` placed before the statement whose `sid` is `before`, and why."""

    before: int
    line: int | None
    reason: str


@dataclass
class CarvePlan:
    #: collective id -> its TempStorage region (collectives sharing a region map to the same one)
    regions: dict[int, Region]
    total_bytes: int
    barriers: dict[int, Barrier] = field(default_factory=dict)
    #: tile name -> its region, for the tiles kept in shared memory
    tiles: dict[str, Region] = field(default_factory=dict)


def tile_stride(layout: TileLayout) -> int:
    """Bytes between consecutive threads' items of a tile in shared memory: each thread's items
    are contiguous (CUB takes them as its item array), padded to an odd number of words so a
    warp's threads hit different banks."""
    unit = max(4, layout.itemsize)
    units = -(-layout.items_per_thread * layout.itemsize // unit)
    return (units + 1 - units % 2) * unit


@dataclass
class _Dirty:
    """What the block may still be touching: TempStorage regions, and the arrays read and written
    since the last barrier, by any thread or (`solo_*`) by thread 0 alone."""

    regions: list[Region] = field(default_factory=list)
    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    solo_reads: set[str] = field(default_factory=set)
    solo_writes: set[str] = field(default_factory=set)

    def sets(self) -> tuple[set[str], ...]:
        return self.reads, self.writes, self.solo_reads, self.solo_writes

    def merged(self, other: _Dirty) -> _Dirty:
        regions = self.regions + [r for r in other.regions if r not in self.regions]
        return _Dirty(regions, *(a | b for a, b in zip(self.sets(), other.sets())))

    def covers(self, other: _Dirty) -> bool:
        return all(r in self.regions for r in other.regions) and all(b <= a for a, b in zip(self.sets(), other.sets()))

    def add(self, region: Region) -> _Dirty:
        return self if region in self.regions else _Dirty([*self.regions, region], *self.sets())


@dataclass(frozen=True)
class _LongLived:
    region: Region
    start: int  # positions (see `Liveness`)
    stop: int


class _Carver:
    def __init__(
        self,
        needs: dict[int, StorageNeed],
        roots: dict[str, str],
        live: Liveness,
        syncs: dict[int, str],
        block_values: frozenset[str],
    ):
        self.needs = needs
        self.roots = roots  # view -> the array parameter it views (views of one array may overlap)
        self.live = live
        self.syncs = syncs  # collective id -> its `CollectiveChoice.sync`
        self.block_values = block_values
        self.long: dict[int | str, _LongLived] = {}
        self.owners: dict[int, int] = {}
        self.regions: dict[int, Region] = {}
        self.barriers: dict[int, Barrier] = {}
        self.budget = 0

    # ----- long-lived regions: fixed offsets by live range ----------------------------------------
    def place_long(self, items: list[tuple[int | str, StorageNeed, int, int]]) -> None:
        for key, need, start, stop in sorted(items, key=lambda x: (x[2], -x[1].size)):
            alive = [g.region for g in self.long.values() if g.start <= stop and start <= g.stop]
            offset = self.lowest(need, alive)
            first, last = self.live.line(start), self.live.line(stop)
            self.long[key] = _LongLived(Region(key, offset, need.size, need.align, first, last), start, stop)
        top = max((g.region.end for g in self.long.values()), default=0)
        short = [n for cid, n in self.needs.items() if cid not in self.long and self.owners.get(cid, cid) == cid]
        largest = max((n.size for n in short), default=0)
        small = sum(_round_up(n.size, n.align) for n in short if n.size < SMALL_STORAGE_BYTES)
        self.budget = top + (largest + small if largest >= SMALL_STORAGE_BYTES else max(largest, small))

    @staticmethod
    def lowest(need: StorageNeed, taken: list[Region]) -> int:
        align = max(1, min(need.align, BASE_ALIGNMENT))
        offset = 0
        for r in sorted(taken, key=lambda r: r.offset):
            if offset + need.size <= r.offset:
                break
            offset = max(offset, _round_up(r.end, align))
        return offset

    def reserved(self, position: int) -> list[Region]:
        return [g.region for g in self.long.values() if g.start <= position <= g.stop]

    # ----- the walk -------------------------------------------------------------------------------
    def barrier(self, stmt: ir.Stmt, reason: str) -> _Dirty:
        if stmt.sid not in self.barriers:
            self.barriers[stmt.sid] = Barrier(stmt.sid, stmt.loc.line if stmt.loc else None, reason)
        return _Dirty()

    def collective(self, s: ir.Collective, dirty: _Dirty) -> _Dirty:
        dirty = self.memory(s, dirty)
        owner = self.owners.get(s.cid, s.cid)
        if owner in self.long:
            return self.synced(s, self.enter(s, self.long[owner].region, dirty, "TempStorage reuse"))
        if s.cid not in self.needs:
            return dirty
        sync = self.syncs.get(s.cid, "")
        others = [r for r in dirty.regions if not (sync == REENTRANT and r.key == s.cid)]
        region = self.regions.get(s.cid)
        reserved = self.reserved(self.live.at(s))
        if region is None:
            need = self.needs[s.cid]
            offset = self.lowest(need, reserved + others)
            if offset + need.size > self.budget:
                dirty = self.barrier(s, "TempStorage reuse")
                offset = self.lowest(need, reserved)
            region = Region(s.cid, offset, need.size, need.align, *([s.loc.line if s.loc else None] * 2))
            self.regions[s.cid] = region
        elif _overlaps(region, others) and s.sid not in self.barriers:
            dirty = self.barrier(s, "TempStorage reuse")
        elif s.sid in self.barriers:
            dirty = _Dirty()
        return self.synced(s, dirty.add(region))

    def synced(self, s: ir.Collective, dirty: _Dirty) -> _Dirty:
        """After a collective with its own `__syncthreads()`: every access before it is complete,
        but for its own (it may touch its tiles, storage and array after its barrier)."""
        if not self.syncs.get(s.cid):
            return dirty
        keys = {s.cid, self.owners.get(s.cid, s.cid), *(v.name for v in (*ir.outputs(s), *ir.inputs(s)))}
        access = _global_access(s)
        array = {self.roots.get(access[0], access[0])} if access is not None else set()
        return _Dirty([r for r in dirty.regions if r.key in keys], *(x & array for x in dirty.sets()))

    def enter(self, s: ir.Stmt, region: Region, dirty: _Dirty, reason: str) -> _Dirty:
        """An access to long-lived `region`: a barrier first if its bytes are dirty from another
        region (a tile's bytes belong to their thread: a tile with the same bytes is no hazard)."""

        def same_bytes(r: Region) -> bool:
            return isinstance(r.key, str) and isinstance(region.key, str) and r.offset == region.offset

        others = [r for r in dirty.regions if r.key != region.key and not (same_bytes(r) and r.size == region.size)]
        if s.sid in self.barriers or _overlaps(region, others):
            dirty = self.barrier(s, reason)
        return dirty.add(region)

    def tiles(self, s: ir.Stmt, dirty: _Dirty) -> _Dirty:
        """Accesses to tiles kept in shared memory."""
        for v in (*ir.outputs(s), *ir.inputs(s)):
            if v.name in self.long:
                dirty = self.enter(s, self.long[v.name].region, dirty, f"shared memory of {_shown(v.name)} reused")
        return dirty

    def memory(self, s: ir.Stmt, dirty: _Dirty) -> _Dirty:
        """Barriers for global-memory hazards between threads of the block. Element writes, and
        element reads whose value only thread 0 needs, are thread 0's alone: they conflict with
        other threads' accesses, not with each other."""
        access = _global_access(s)
        if access is None:
            return dirty
        array, is_write = access
        array = self.roots.get(array, array)
        solo = isinstance(s, ir.ArrayWrite) or (isinstance(s, ir.ArrayRead) and s.out.name not in self.block_values)
        others_wrote = array in dirty.writes or (not solo and array in dirty.solo_writes)
        others_read = array in dirty.reads or (not solo and array in dirty.solo_reads)
        hazard = others_wrote or (is_write and others_read)
        if hazard or s.sid in self.barriers:
            if hazard:
                kind = ("write after " + ("write" if others_wrote else "read")) if is_write else "read after write"
                dirty = self.barrier(s, f"{kind} of {array}")
            else:
                dirty = _Dirty()
        if solo:
            (dirty.solo_writes if is_write else dirty.solo_reads).add(array)
        else:
            (dirty.writes if is_write else dirty.reads).add(array)
        return dirty

    def walk(self, body: list[ir.Stmt], dirty: _Dirty) -> _Dirty:
        for s in body:
            dirty = self.tiles(s, dirty)
            if isinstance(s, ir.Collective):
                dirty = self.collective(s, dirty)
            elif isinstance(s, (ir.ArrayRead, ir.ArrayWrite)):
                dirty = self.memory(s, dirty)
            elif isinstance(s, ir.If):
                dirty = self.walk(s.then, _copy(dirty)).merged(self.walk(s.orelse, _copy(dirty)))
            elif isinstance(s, (ir.ForRange, ir.While)):
                dirty = self.loop(s, dirty)
        return dirty

    def loop(self, s: ir.ForRange | ir.While, dirty: _Dirty) -> _Dirty:
        parts = [s.body] if isinstance(s, ir.ForRange) else [s.cond_body, s.body]
        entry = dirty
        for _ in range(4):  # the back edge: iteration k+1 starts with what iteration k left dirty
            end = entry
            for part in parts:
                end = self.walk(part, _copy(end))
            if entry.covers(end):
                break
            entry = entry.merged(end)
        return entry


def _shown(name: str) -> str:
    return name.removeprefix("v_") if name.startswith("v_") else f"({name})"


def _copy(d: _Dirty) -> _Dirty:
    return _Dirty(list(d.regions), *(set(x) for x in d.sets()))


def _global_access(s: ir.Stmt) -> tuple[str, bool] | None:
    """(the array, is a write) of a statement that touches global memory."""
    if isinstance(s, ir.ArrayRead):
        return s.array.name, False
    if isinstance(s, ir.ArrayWrite):
        return s.array.name, True
    op = op_of(s)
    access = op.global_access(s) if op is not None else None
    return (access[0].name, access[1]) if access is not None else None


def _overlaps(region: Region, regions: list[Region]) -> bool:
    return any(region.offset < r.end and r.offset < region.end for r in regions)


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def carve(
    program: ir.Program,
    needs: dict[int, StorageNeed],
    tiles: dict[str, TileLayout] | None = None,
    live: Liveness | None = None,
    threads: int = 0,
    syncs: dict[int, str] | None = None,
    block_values: frozenset[str] | None = None,
) -> CarvePlan:
    """Offsets for every tile in shared memory (`tiles` kept there, `threads` per block) and every
    collective's TempStorage, and the barriers between them. `syncs` is each collective's
    `CollectiveChoice.sync`; `block_values` the variables threads other than thread 0 need
    (`planner.layout.block_values`; None: all)."""
    tiles = tiles or {}
    live = live if live is not None else liveness(program)
    if block_values is None:
        block_values = frozenset(v.name for s in program.walk() for v in ir.outputs(s))
    roots: dict[str, str] = {}
    owners: dict[int, int] = {}
    users: dict[int, list[int]] = {}
    for s in program.walk():
        if isinstance(s, ir.ArrayView):
            roots[s.out.name] = roots.get(s.array.name, s.array.name)
        if isinstance(s, ir.Collective):
            owner = op_of(s).storage_owner(s)
            owners[s.cid] = owner
            users.setdefault(owner, []).append(live.at(s))
    carver = _Carver(needs, roots, live, syncs or {}, block_values)
    carver.owners = owners
    long = [
        (name, StorageNeed(threads * tile_stride(t), BASE_ALIGNMENT), *live.ranges[name])
        for name, t in tiles.items()
        if t.storage == SHARED and name in live.ranges
    ]
    long += [(cid, needs[cid], min(p), max(p)) for cid, p in users.items() if len(p) > 1 and cid in needs]
    carver.place_long(long)
    carver.walk(program.body, _Dirty())
    regions = dict(carver.regions)
    for cid, owner in owners.items():
        if owner in carver.long:
            regions[cid] = carver.long[owner].region
    tile_regions = {k: g.region for k, g in carver.long.items() if isinstance(k, str)}
    total = max((r.end for r in [*regions.values(), *tile_regions.values()]), default=0)
    return CarvePlan(regions, _round_up(total, BASE_ALIGNMENT), carver.barriers, tile_regions)
