"""The TempStorage carve plan: one shared-memory buffer, byte offsets per collective, and barriers.

Every collective's TempStorage is live only while the collective runs, but its bytes stay
"dirty" until the next `__syncthreads()`: a slow thread may still be reading them. Walking
the program in order (loops twice, to see the back edge), each collective is placed at the
lowest aligned offset that no dirty region overlaps, within a budget of the largest
storage plus the small (< 1 KiB) ones. If none is free, it goes to offset 0 and a barrier
is placed before it. So small scans and reductions sit beside large loads without a
barrier, while large exchanges share bytes, separated by exactly one barrier.

The same walk places barriers for global-memory hazards inside a block: a read of an
array written earlier in the block (or a write after a read) by another thread.

A collective whose shim has a `__syncthreads()` of its own (`CollectiveChoice.sync`) orders
everything before it: after it, only its own TempStorage is dirty. A REENTRANT one (a scan
carrying its total in CUB's prefix callback) may also run again in that dirty region.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..lang import ir
from ..ops.base import op_of
from .layout import REENTRANT

SMALL_STORAGE_BYTES = 1024
#: Dynamic shared memory is aligned to 16 bytes; offsets are relative to it.
BASE_ALIGNMENT = 16


@dataclass(frozen=True)
class StorageNeed:
    size: int
    align: int


@dataclass(frozen=True)
class Region:
    cid: int
    offset: int
    size: int
    align: int

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
    regions: dict[int, Region]
    total_bytes: int
    barriers: dict[int, Barrier] = field(default_factory=dict)


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


class _Carver:
    def __init__(
        self, needs: dict[int, StorageNeed], roots: dict[str, str], syncs: dict[int, str], block_values: frozenset[str]
    ):
        self.needs = needs
        self.roots = roots  # view -> the array parameter it views (views of one array may overlap)
        self.syncs = syncs
        self.block_values = block_values
        largest = max((n.size for n in needs.values()), default=0)
        small = sum(_round_up(n.size, n.align) for n in needs.values() if n.size < SMALL_STORAGE_BYTES)
        self.budget = largest + small if largest >= SMALL_STORAGE_BYTES else max(largest, small)
        self.regions: dict[int, Region] = {}
        self.barriers: dict[int, Barrier] = {}

    def barrier(self, stmt: ir.Stmt, reason: str) -> _Dirty:
        if stmt.sid not in self.barriers:
            self.barriers[stmt.sid] = Barrier(stmt.sid, stmt.loc.line if stmt.loc else None, reason)
        return _Dirty()

    def place(self, cid: int, dirty: list[Region]) -> Region | None:
        need = self.needs[cid]
        align = max(1, min(need.align, BASE_ALIGNMENT))
        offset = 0
        for r in sorted(dirty, key=lambda r: r.offset):
            if offset + need.size <= r.offset:
                break
            offset = max(offset, _round_up(r.end, align))
        if offset + need.size <= self.budget and not _overlaps(offset, need.size, dirty):
            return Region(cid, offset, need.size, align)
        return None

    def collective(self, s: ir.Collective, dirty: _Dirty) -> _Dirty:
        dirty = self.memory(s, dirty)
        if s.cid not in self.needs:
            return dirty
        sync = self.syncs.get(s.cid, "")
        others = [r for r in dirty.regions if not (sync == REENTRANT and r.cid == s.cid)]
        region = self.regions.get(s.cid)
        if region is None:
            region = self.place(s.cid, others)
            if region is None:
                dirty = self.barrier(s, "TempStorage reuse")
                region = Region(s.cid, 0, self.needs[s.cid].size, self.needs[s.cid].align)
            self.regions[s.cid] = region
        elif _overlaps(region.offset, region.size, others) and s.sid not in self.barriers:
            dirty = self.barrier(s, "TempStorage reuse")
        elif s.sid in self.barriers:
            dirty = _Dirty()
        if sync:  # its own __syncthreads completes every earlier access
            return _Dirty([region])
        return _Dirty(dirty.regions + [region], *dirty.sets())

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


def _overlaps(offset: int, size: int, regions: list[Region]) -> bool:
    return any(offset < r.end and r.offset < offset + size for r in regions)


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def carve(
    program: ir.Program,
    needs: dict[int, StorageNeed],
    pinned: frozenset[int] = frozenset(),
    syncs: dict[int, str] | None = None,
    block_values: frozenset[str] | None = None,
) -> CarvePlan:
    """Offsets for every collective that needs TempStorage, and the barriers between them.

    A `pinned` collective's region lives across other collectives (a histogram's counts kept in
    shared memory through a loop): pinned regions come first and are never reused; the rest
    are carved after them. `syncs` is each collective's `CollectiveChoice.sync`, `block_values` the
    variables other threads than thread 0 need (`planner.layout.block_values`; None: all)."""
    roots: dict[str, str] = {}
    for s in program.walk():
        if isinstance(s, ir.ArrayView):
            roots[s.out.name] = roots.get(s.array.name, s.array.name)
    fixed: dict[int, Region] = {}
    base = 0
    for cid in sorted(pinned):
        need = needs[cid]
        offset = _round_up(base, max(1, min(need.align, BASE_ALIGNMENT)))
        fixed[cid] = Region(cid, offset, need.size, need.align)
        base = offset + need.size
    base = _round_up(base, BASE_ALIGNMENT)
    if block_values is None:
        block_values = frozenset(v.name for s in program.walk() for v in ir.outputs(s))
    carver = _Carver({cid: n for cid, n in needs.items() if cid not in pinned}, roots, syncs or {}, block_values)
    carver.walk(program.body, _Dirty())
    regions = {cid: Region(cid, r.offset + base, r.size, r.align) for cid, r in carver.regions.items()}
    regions.update(fixed)
    total = max((r.end for r in regions.values()), default=0)
    return CarvePlan(regions, _round_up(total, BASE_ALIGNMENT), carver.barriers)
