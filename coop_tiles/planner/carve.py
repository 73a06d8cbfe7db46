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
    TempStorage) or a tile's name; alive from line `first` to line `last`, and from step `start`
    to step `stop` of the program's statements in order (`Liveness`; the drawing's columns)."""

    key: int | str
    offset: int
    size: int
    align: int
    first: int | None = None
    last: int | None = None
    start: int | None = None
    stop: int | None = None

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
    #: the statements' steps and lines the regions' `start` and `stop` count in
    live: Liveness | None = None
    #: collective id -> its statement's step
    collective_steps: dict[int, int] = field(default_factory=dict)
    #: region key -> the steps of the statements that touch its bytes (within its live range)
    accesses: dict[int | str, frozenset[int]] = field(default_factory=dict)


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
        self.long: dict[int | str, Region] = {}  # alive from step `start` to `stop`
        self.owners: dict[int, int] = {}
        self.regions: dict[int, Region] = {}
        self.barriers: dict[int, Barrier] = {}
        self.accesses: dict[int | str, set[int]] = {}
        self.budget = 0

    # ----- long-lived regions: fixed offsets by live range ----------------------------------------
    def place_long(self, items: list[tuple[int | str, StorageNeed, int, int]]) -> None:
        for key, need, start, stop in sorted(items, key=lambda x: (x[2], -x[1].size)):
            alive = [g for g in self.long.values() if g.start <= stop and start <= g.stop]
            offset = self.lowest(need, alive)
            # A result written at the odd step after its operands' last read (an element-wise or in-place
            # statement) may take an operand's bytes only whole: each thread then overwrites only its own
            # items. Partly over them, a thread would overwrite another thread's items before it reads them.
            operands = [g for g in self.long.values() if start % 2 and g.stop == start - 1]
            placed = Region(key, offset, need.size, need.align)
            if any(_overlaps(placed, [r]) and (r.offset, r.size) != (offset, need.size) for r in operands):
                whole = [
                    r.offset
                    for r in operands
                    if isinstance(r.key, str) and r.size == need.size and not _overlaps(r, alive)
                ]
                offset = min(whole) if whole else self.lowest(need, alive + operands)
            first, last = self.live.line(start), self.live.line(stop)
            self.long[key] = Region(key, offset, need.size, need.align, first, last, start, stop)
        top = max((g.end for g in self.long.values()), default=0)
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

    # ----- the walk -------------------------------------------------------------------------------
    def barrier(self, stmt: ir.Stmt, reason: str) -> None:
        if stmt.sid not in self.barriers:
            self.barriers[stmt.sid] = Barrier(stmt.sid, stmt.loc.line if stmt.loc else None, reason)

    def step(self, s: ir.Stmt, dirty: _Dirty) -> _Dirty:
        """One statement: decide once whether a barrier goes before it (any of its accesses
        conflicting with what the block may still touch), place its TempStorage, then mark
        everything it touches dirty. The decision covers all of the statement's accesses
        together, so a barrier taken for one of them never forgets another."""
        position = self.live.at(s)
        tiles = [(v, self.long[v.name]) for v in (*ir.defs(s), *ir.uses(s)) if v.name in self.long]
        reasons = [f"shared memory of {ir.label(v)} reused" for v, r in tiles if _conflicts(r, dirty.regions)]
        hazard = self.memory_hazard(s, dirty)
        if hazard:
            reasons.append(hazard)
        owner = self.owners.get(s.cid, s.cid) if isinstance(s, ir.Collective) else None
        storage = self.long[owner] if owner in self.long else self.regions.get(owner)
        if storage is not None and self.storage_conflict(s, storage, dirty):
            reasons.append("TempStorage reuse")
        if reasons or s.sid in self.barriers:
            if reasons:
                self.barrier(s, reasons[0])
            dirty = _Dirty()
        if storage is None and owner is not None and owner in self.needs:
            storage, placed_over_dirty = self.place(s, owner, position, dirty)
            if placed_over_dirty:
                self.barrier(s, "TempStorage reuse")
                dirty = _Dirty()
        for region in [r for _, r in tiles] + ([storage] if storage is not None else []):
            dirty = dirty.add(region)
            self.accesses.setdefault(region.key, set()).add(position)
        self.record_memory(s, dirty)
        return self.synced(s, dirty) if isinstance(s, ir.Collective) else dirty

    def storage_conflict(self, s: ir.Collective, storage: Region, dirty: _Dirty) -> bool:
        """Whether `s`'s TempStorage bytes are dirty from another region. Collectives sharing one
        region synchronise among themselves; a REENTRANT collective may run again in its own."""
        shared = storage.key in self.long
        reentrant = self.syncs.get(s.cid) == REENTRANT
        own = shared or reentrant
        return _overlaps(storage, [r for r in dirty.regions if not (own and r.key == storage.key)])

    def place(self, s: ir.Collective, cid: int, position: int, dirty: _Dirty) -> tuple[Region, bool]:
        """A short TempStorage region for collective `cid` at statement `s`: the lowest offset clear
        of the long-lived regions alive while `s` reads its operands and writes its results
        (steps `position` and `position + 1`) and of dirty bytes; past the budget, over dirty
        bytes (the second result: a barrier must go first)."""
        need = self.needs[cid]
        reserved = [g for g in self.long.values() if g.start <= position + 1 and position <= g.stop]
        offset = self.lowest(need, reserved + dirty.regions)
        over_dirty = offset + need.size > self.budget
        if over_dirty:
            offset = self.lowest(need, reserved)
        line = s.loc.line if s.loc else None
        region = Region(cid, offset, need.size, need.align, line, line, position, position + 1)
        self.regions[cid] = region
        return region, over_dirty

    def synced(self, s: ir.Collective, dirty: _Dirty) -> _Dirty:
        """After a collective with its own `__syncthreads()`: every access before it is complete,
        but for its own (it may touch its tiles, storage and array after its barrier)."""
        if not self.syncs.get(s.cid):
            return dirty
        keys = {s.cid, self.owners.get(s.cid, s.cid), *(v.name for v in (*ir.defs(s), *ir.uses(s)))}
        access = _global_access(s)
        array = {self.roots.get(access[0], access[0])} if access is not None else set()
        return _Dirty([r for r in dirty.regions if r.key in keys], *(x & array for x in dirty.sets()))

    def memory_hazard(self, s: ir.Stmt, dirty: _Dirty) -> str:
        """Why a barrier must go before `s` for global memory (a read of an array another thread
        wrote since the last barrier, or a write of one it read or wrote), or "" if none.
        Element writes, and element reads whose value only thread 0 needs, are thread 0's alone:
        they conflict with other threads' accesses, not with each other."""
        access = self.access(s)
        if access is None:
            return ""
        array, is_write, solo = access
        others_wrote = array in dirty.writes or (not solo and array in dirty.solo_writes)
        others_read = array in dirty.reads or (not solo and array in dirty.solo_reads)
        if not (others_wrote or (is_write and others_read)):
            return ""
        kind = ("write after " + ("write" if others_wrote else "read")) if is_write else "read after write"
        return f"{kind} of {array}"

    def record_memory(self, s: ir.Stmt, dirty: _Dirty) -> None:
        access = self.access(s)
        if access is not None:
            array, is_write, solo = access
            if solo:
                (dirty.solo_writes if is_write else dirty.solo_reads).add(array)
            else:
                (dirty.writes if is_write else dirty.reads).add(array)

    def access(self, s: ir.Stmt) -> tuple[str, bool, bool] | None:
        """(the array parameter, is a write, by thread 0 alone) of a statement touching global memory."""
        access = _global_access(s)
        if access is None:
            return None
        array, is_write = access
        solo = isinstance(s, ir.ArrayWrite) or (isinstance(s, ir.ArrayRead) and s.out.name not in self.block_values)
        return self.roots.get(array, array), is_write, solo

    def walk(self, body: list[ir.Stmt], dirty: _Dirty) -> _Dirty:
        for s in body:
            if isinstance(s, ir.If):
                dirty = self.step(s, dirty)
                dirty = self.walk(s.then, _copy(dirty)).merged(self.walk(s.orelse, _copy(dirty)))
            elif isinstance(s, (ir.ForRange, ir.While)):
                dirty = self.loop(s, self.step(s, dirty))
            else:
                dirty = self.step(s, dirty)
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


def _conflicts(tile: Region, dirty: list[Region]) -> bool:
    """Whether a tile's bytes are dirty from another region: a tile's bytes belong to their
    thread, so a dirty tile of the very same bytes (an element-wise chain) is no hazard."""

    def same_bytes(r: Region) -> bool:
        return isinstance(r.key, str) and r.offset == tile.offset and r.size == tile.size

    return _overlaps(tile, [r for r in dirty if r.key != tile.key and not same_bytes(r)])


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
        block_values = frozenset(v.name for s in program.walk() for v in ir.defs(s))
    roots: dict[str, str] = {}
    owners: dict[int, int] = {}
    users: dict[int, list[int]] = {}
    steps: dict[int, int] = {}
    for s in program.walk():
        if isinstance(s, ir.ArrayView):
            roots[s.out.name] = roots.get(s.array.name, s.array.name)
        if isinstance(s, ir.Collective):
            owner = op_of(s).storage_owner(s)
            owners[s.cid] = owner
            steps[s.cid] = live.at(s)
            users.setdefault(owner, []).append(steps[s.cid])
    carver = _Carver(needs, roots, live, syncs or {}, block_values)
    carver.owners = owners
    long = [
        (name, StorageNeed(threads * tile_stride(t), BASE_ALIGNMENT), *live.ranges[name])
        for name, t in tiles.items()
        if t.storage == SHARED and name in live.ranges
    ]
    # through the step after the last user: an in-place collective writes its results there
    long += [(cid, needs[cid], min(p), max(p) + 1) for cid, p in users.items() if len(p) > 1 and cid in needs]
    carver.place_long(long)
    carver.walk(program.body, _Dirty())
    regions = dict(carver.regions)
    for cid, owner in owners.items():
        if owner in carver.long:
            regions[cid] = carver.long[owner]
    tile_regions = {k: g for k, g in carver.long.items() if isinstance(k, str)}
    total = max((r.end for r in [*regions.values(), *tile_regions.values()]), default=0)
    accesses = {key: frozenset(steps) for key, steps in carver.accesses.items()}
    return CarvePlan(regions, _round_up(total, BASE_ALIGNMENT), carver.barriers, tile_regions, live, steps, accesses)
