"""The complete plan of one kernel: layouts, CUB choices and the shared-memory carve, printable."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import SharedMemoryError
from ..lang import ir
from .carve import CarvePlan, Region, StorageNeed, carve
from .layout import LOCAL, REGISTER_ITEMS, REGISTERS, CollectiveChoice, LayoutPlan, TileLayout

#: the most dynamic shared memory a block may opt into, per architecture (CUDA programming guide)
MAX_SHARED_BYTES = {
    "sm_70": 98304,
    "sm_72": 98304,
    "sm_75": 65536,
    "sm_80": 166912,
    "sm_86": 101376,
    "sm_87": 166912,
    "sm_89": 101376,
    "sm_90": 232448,
    "sm_100": 232448,
    "sm_103": 232448,
    "sm_110": 232448,
    "sm_120": 101376,
    "sm_121": 101376,
}


def max_shared_bytes(arch: str) -> int:
    """The opt-in shared-memory maximum of `arch` (`sm_90a` counts as `sm_90`; unknown: 99 KiB)."""
    return MAX_SHARED_BYTES.get(arch.rstrip("af"), 101376)


@dataclass
class Plan:
    program: str
    block_threads: int
    tiles: dict[str, TileLayout]
    collectives: dict[int, CollectiveChoice]
    carve: CarvePlan
    #: the variables other threads than thread 0 need (`planner.layout.block_values`)
    block_values: frozenset[str] = frozenset()
    #: the architecture planned for ("" when unknown)
    arch: str = ""
    #: what the GPU rewrites said of collectives, by cid (`ir.Program.notes`)
    notes: dict[int, str] = field(default_factory=dict)

    @property
    def shared_bytes(self) -> int:
        return self.carve.total_bytes

    @property
    def shared_limit(self) -> int:
        """The most shared memory a block of `arch` may have (0 when the arch is unknown)."""
        return max_shared_bytes(self.arch) if self.arch else 0

    def draw(self, path: str | Path) -> Path:
        """Draw the shared-memory plan to `path` (`.svg`: no dependency; `.png` and other formats
        through matplotlib) and return the path written: see `planner.drawing`."""
        from .drawing import draw

        return draw(self, path)

    def barrier_before(self, stmt: ir.Stmt) -> bool:
        return stmt.sid in self.carve.barriers

    def largest_users(self, count: int = 4) -> str:
        """The tiles and collectives taking the most shared memory, for error messages."""
        tiles = self.carve.tiles.items()
        users = [(r.size, f"tile {self.tiles[name].label} (line {self.tiles[name].line})") for name, r in tiles]
        seen: set[int | str] = set()
        for cid, r in self.carve.regions.items():
            if r.key not in seen:
                seen.add(r.key)
                c = self.collectives[cid]
                users.append((r.size, f"{c.op} ({c.primitive}, line {c.line})"))
        return ", ".join(f"{what}: {size} bytes" for size, what in sorted(users, key=lambda u: -u[0])[:count])

    def __str__(self) -> str:
        out = [
            f"plan for {self.program}: {self.block_threads} threads per block, "
            f"{self.shared_bytes} bytes of shared memory"
        ]
        out.append("tiles:")
        out.append(
            f"  {'name':<10} {'line':>5} {'dtype':<8} {'size':>6} {'items/thread':>12}  {'arrangement':<11} "
            f"{'storage':<9} {'offset':>7} {'bytes':>7} {'live (lines)':>12}"
        )
        for t in self.tiles.values():
            r = self.carve.tiles.get(t.name)
            out.append(
                f"  {t.label:<10} {t.line or '?':>5} {t.dtype:<8} {t.extent:>6} {t.items_per_thread:>12}  "
                f"{t.shown:<11} {t.storage:<9} {_where(r)}"
            )
        out.append("collectives:")
        width = max([12, *(len(c.op) for c in self.collectives.values())])
        out.append(
            f"  {'#':>3} {'line':>5}  {'op':<{width}} {'CUB primitive':<23} {'algorithm':<35} "
            f"{'offset':>7} {'bytes':>7} {'live (lines)':>12}"
        )
        for cid, c in sorted(self.collectives.items()):
            where = _where(self.carve.regions.get(cid))
            out.append(f"  {cid:>3} {c.line or '?':>5}  {c.op:<{width}} {c.primitive:<23} {c.algorithm:<35} {where}")
        out.append("barriers (__syncthreads before):")
        if not self.carve.barriers:
            out.append("  none")
        for b in self.carve.barriers.values():
            out.append(f"  line {b.line or '?'}: {b.reason}")
        if self.notes:
            out.append("notes:")
            out += [f"  #{cid} (line {self.collectives[cid].line or '?'}): {note}" for cid, note in self.notes.items()]
        return "\n".join(out)


def _where(r: Region | None) -> str:
    if r is None:
        return f"{'-':>7} {'0':>7} {'-':>12}"
    live = f"{r.first or '?'}-{r.last or '?'}"
    return f"{r.offset:>7} {r.size:>7} {live:>12}"


def finish_plan(program: ir.Program, layouts: LayoutPlan, needs: dict[int, StorageNeed], arch: str) -> Plan:
    """Carve shared memory for `layouts` given each collective's queried TempStorage size and
    alignment. Past `arch`'s maximum, tiles leave shared memory, largest first (for registers,
    or local memory past 32 items per thread); if it still does not fit, a SharedMemoryError
    names the largest users."""
    tiles = dict(layouts.tiles)
    syncs = {cid: c.sync for cid, c in layouts.collectives.items() if c.sync}
    limit = max_shared_bytes(arch)
    while True:
        carved = carve(program, needs, tiles, layouts.liveness, layouts.block_threads, syncs, layouts.block_values)
        plan = Plan(
            program.name,
            layouts.block_threads,
            tiles,
            layouts.collectives,
            carved,
            layouts.block_values,
            arch,
            dict(program.notes),
        )
        movable = [t for t in tiles.values() if t.name in carved.tiles]
        if carved.total_bytes <= limit or not movable:
            break
        largest = max(movable, key=lambda t: carved.tiles[t.name].size)
        storage = LOCAL if largest.items_per_thread > REGISTER_ITEMS else REGISTERS
        tiles[largest.name] = replace(largest, storage=storage)
    if plan.shared_bytes > limit:
        raise SharedMemoryError(
            f"{program.name} needs {plan.shared_bytes} bytes of shared memory per block, more than {arch}'s "
            f"limit of {limit}; largest users: {plan.largest_users()}. Use smaller tiles or fewer threads per block"
        )
    return plan
