"""Live ranges over the program's statements in order: what the planner needs to know which tiles
are alive together (register pressure, shared-memory reuse) and where a region may be reused.

Statements are numbered depth first in program order, two steps apart: a statement reads its
operands at its even step, and an element-wise statement (each item computed from the same item
of its operands, of the same width) writes its result at the odd step after, so its result may
take its operands' bytes. A variable lives from its first access to its last; a loop that reads
it and either does not define it first or is not the only place it is accessed keeps it alive
through every iteration (the back edge), so its range covers the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..lang import ir
from ..lang.types import TileType
from ..ops.base import op_of


@dataclass
class Liveness:
    #: statement id -> its (even) step in program order
    positions: dict[int, int] = field(default_factory=dict)
    #: variable name -> (first, last) step it is alive at, inclusive
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: step -> the user's line of that statement
    lines: dict[int, int | None] = field(default_factory=dict)

    def at(self, s: ir.Stmt) -> int:
        return self.positions[s.sid]

    def live(self, name: str, step: int) -> bool:
        first, last = self.ranges.get(name, (1, 0))
        return first <= step <= last

    def line(self, step: int) -> int | None:
        return self.lines.get(step - step % 2)


def liveness(program: ir.Program) -> Liveness:
    """Number the statements and compute every variable's live range."""
    result = Liveness()
    defs: dict[str, list[int]] = {}
    uses: dict[str, list[int]] = {}
    loops: list[tuple[int, int]] = []

    def visit(body: list[ir.Stmt]) -> None:
        for s in body:
            pos = 2 * len(result.positions)
            result.positions[s.sid] = pos
            result.lines[pos] = s.loc.line if s.loc else None
            for v in ir.uses(s):
                uses.setdefault(v.name, []).append(pos)
            for v in ir.defs(s):
                defs.setdefault(v.name, []).append(pos + _in_place(s))
            for part in ir.regions(s):
                visit(part)
            if isinstance(s, (ir.ForRange, ir.While)):
                loops.append((pos, 2 * len(result.positions) - 1))

    visit(program.body)
    for name in defs.keys() | uses.keys():
        d, u = defs.get(name, []), uses.get(name, [])
        first, last = min(d + u), max(d + u)
        for start, end in loops:
            inside_uses = [p for p in u if start <= p <= end]
            if not inside_uses:
                continue
            inside_defs = [p for p in d if start <= p <= end]
            outside = any(not start <= p <= end for p in d + u)
            carried = not inside_defs or min(inside_uses) <= max(inside_defs)
            if outside or carried:
                first, last = min(first, start), max(last, end)
        result.ranges[name] = (first, last)
    return result


def _in_place(s: ir.Stmt) -> int:
    """1 when `s` may write its tile results over its tile operands (an element-wise statement,
    or an op that says so), all of one width, else 0."""
    op = op_of(s)
    if not (isinstance(s, (ir.TileMap, ir.Copy)) or (op is not None and op.in_place)):
        return 0
    tiles = [v for v in (*ir.uses(s), *ir.defs(s)) if isinstance(v.type, TileType)]
    return int(len({v.type.dtype.itemsize for v in tiles}) == 1)
