"""The complete plan of one kernel: layouts, CUB choices and the TempStorage carve, printable."""

from __future__ import annotations

from dataclasses import dataclass

from ..lang import ir
from .carve import CarvePlan, StorageNeed, carve
from .layout import CollectiveChoice, LayoutPlan, TileLayout


@dataclass
class Plan:
    program: str
    block_threads: int
    tiles: dict[str, TileLayout]
    collectives: dict[int, CollectiveChoice]
    carve: CarvePlan
    #: the variables other threads than thread 0 need (`planner.layout.block_values`)
    block_values: frozenset[str] = frozenset()

    @property
    def shared_bytes(self) -> int:
        return self.carve.total_bytes

    def barrier_before(self, stmt: ir.Stmt) -> bool:
        return stmt.sid in self.carve.barriers

    def __str__(self) -> str:
        out = [
            f"plan for {self.program}: {self.block_threads} threads per block, {self.shared_bytes} bytes of TempStorage"
        ]
        out.append("tiles:")
        out.append(f"  {'name':<10} {'line':>5} {'dtype':<8} {'size':>6} {'items/thread':>12}  {'arrangement':<11}")
        for t in self.tiles.values():
            name = t.name.removeprefix("v_") if t.name.startswith("v_") else f"({t.name})"
            out.append(
                f"  {name:<10} {t.line or '?':>5} {t.dtype:<8} {t.size:>6} {t.items_per_thread:>12}  "
                f"{t.arrangement:<11}"
            )
        out.append("collectives:")
        width = max([12, *(len(c.op) for c in self.collectives.values())])
        out.append(
            f"  {'#':>3} {'line':>5}  {'op':<{width}} {'CUB primitive':<23} {'algorithm':<29} "
            f"{'offset':>7} {'bytes':>7} {'align':>5}"
        )
        for cid, c in sorted(self.collectives.items()):
            r = self.carve.regions.get(cid)
            where = f"{r.offset:>7} {r.size:>7} {r.align:>5}" if r else f"{'-':>7} {'0':>7} {'-':>5}"
            out.append(f"  {cid:>3} {c.line or '?':>5}  {c.op:<{width}} {c.primitive:<23} {c.algorithm:<29} {where}")
        out.append("barriers (__syncthreads before):")
        if not self.carve.barriers:
            out.append("  none")
        for b in self.carve.barriers.values():
            out.append(f"  line {b.line or '?'}: {b.reason}")
        return "\n".join(out)


def finish_plan(program: ir.Program, layouts: LayoutPlan, needs: dict[int, StorageNeed]) -> Plan:
    """Carve TempStorage for `layouts` given each collective's queried size and alignment."""
    syncs = {cid: c.sync for cid, c in layouts.collectives.items() if c.sync}
    carved = carve(program, needs, layouts.pinned, syncs, layouts.block_values)
    return Plan(program.name, layouts.block_threads, layouts.tiles, layouts.collectives, carved, layouts.block_values)
