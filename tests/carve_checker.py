"""An independent check of a finished shared-memory plan: races and clobbered values, over every path.

Written from the IR and the finished `Plan` only; it shares no logic with the carver
(`coop_tiles/planner/carve.py`) or its live ranges (`planner/liveness.py`). What it takes from the
rest of the project is what the ops declare: which collective's TempStorage a collective works in
(`TileOp.storage_owner`), whether its shim has a `__syncthreads()` of its own
(`CollectiveChoice.sync`, SYNCS or REENTRANT), and whether it may write its results over its
operands (`TileOp.in_place`; element-wise statements always may).

The model:

- The program becomes a control-flow graph: an `if` goes both ways, a loop may run zero or more
  times (its body's end goes back to its head), a `return` ends the program. A barrier of the
  plan runs where its statement does (one before a loop statement runs once, before the loop).
- Accesses: every statement reads the shared-memory tiles it takes and writes those it defines
  (the tile's region, per thread: a thread touches only its own items, so two tile accesses to
  regions of identical offset and size never conflict); every collective with TempStorage reads
  and writes the whole of it (across threads).
- Races (forward dataflow, loops to a fixpoint, so iteration i+1 meets iteration i): two accesses
  of overlapping bytes, at least one a write, not both thread-private as above, with no barrier of
  the plan before the later statement and no synchronising collective strictly between them on
  some path. Collectives sharing one storage owner (a histogram's counts through a loop)
  synchronise among themselves; a REENTRANT collective may run again in its own storage.
- Clobbers (backward liveness): a write of bytes holding a value still needed afterwards — a
  shared tile read later before it is defined again, or the counts a group of collectives keeps in
  its storage from its first member to its later ones — whatever barriers there are.
- Within one statement: a collective's TempStorage must not overlap any shared tile it takes or
  defines; a statement's tiles may share bytes only as one region written over the same region
  by an element-wise or in-place statement of one item width.
- The plan itself: every collective with a TempStorage need has a region of at least its size,
  aligned (up to 16 bytes), members of one storage group have the same region, everything is within
  the total.

`check(program, plan, needs)` returns the problems found (empty when the plan is sound);
`format_report` prints them with the program and plan.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass
from unittest import mock

from coop_tiles.lang import ir
from coop_tiles.ops.base import op_of
from coop_tiles.planner import StorageNeed, finish_plan
from coop_tiles.runtime import compiler

REENTRANT = "reentrant"
BASE_ALIGNMENT = 16


@dataclass(frozen=True)
class Access:
    sid: int
    line: int | None
    stmt: str  # the statement's class, for reports
    what: str  # "tile v_t" or "TempStorage of #3"
    offset: int
    size: int
    write: bool
    tile: bool  # a tile access: each thread its own items
    owner: int | None = None  # TempStorage: the storage owner's collective id
    group: bool = False  # TempStorage shared by several collectives
    reentrant: bool = False

    @property
    def end(self) -> int:
        return self.offset + self.size

    def overlaps(self, other: Access) -> bool:
        return self.offset < other.end and other.offset < self.end

    def __str__(self) -> str:
        rw = "writes" if self.write else "reads"
        return f"line {self.line} ({self.stmt}, sid {self.sid}) {rw} {self.what} [{self.offset}, {self.end})"


@dataclass(frozen=True)
class Problem:
    kind: str  # "race", "clobber", "overlap", "plan"
    message: str
    first: Access | None = None
    second: Access | None = None

    def __str__(self) -> str:
        parts = [f"{self.kind}: {self.message}"]
        if self.first is not None:
            parts.append(f"\n    {self.first}")
        if self.second is not None:
            parts.append(f"\n    {self.second}")
        return "".join(parts)


# ----- what each statement defines and reads ------------------------------------------------------
def defined(s: ir.Stmt) -> list[ir.Var]:
    """The variables `s` assigns, as its class declares them (a loop's variable included)."""
    return list(ir.defs(s))


def used(s: ir.Stmt) -> list[ir.Var]:
    """The variables `s` itself reads (not its nested bodies'), as its class declares them."""
    return list(ir.uses(s))


def _may_write_over_operands(s: ir.Stmt) -> bool:
    if isinstance(s, (ir.TileMap, ir.Copy)):
        return True
    op = op_of(s)
    return bool(op is not None and getattr(op, "in_place", False))


# ----- the control-flow graph ---------------------------------------------------------------------
@dataclass
class _Node:
    stmt: ir.Stmt | None  # None: a loop head or a while's test (no accesses)
    succ: list[int]


class _Graph:
    def __init__(self, program: ir.Program):
        self.nodes: list[_Node] = []
        self.exit = self.add(None, [])
        self.entry = self.body(program.body, self.exit)
        self.preds: list[list[int]] = [[] for _ in self.nodes]
        for i, n in enumerate(self.nodes):
            for j in n.succ:
                self.preds[j].append(i)

    def add(self, stmt: ir.Stmt | None, succ: list[int]) -> int:
        self.nodes.append(_Node(stmt, succ))
        return len(self.nodes) - 1

    def body(self, stmts: list[ir.Stmt], after: int) -> int:
        entry = after
        for s in reversed(stmts):
            entry = self.stmt(s, entry)
        return entry

    def stmt(self, s: ir.Stmt, after: int) -> int:
        if isinstance(s, ir.Return):
            return self.add(s, [self.exit])
        if isinstance(s, ir.If):
            return self.add(s, [self.body(s.then, after), self.body(s.orelse, after)])
        if isinstance(s, ir.ForRange):
            head = self.add(None, [])
            self.nodes[head].succ = [self.body(s.body, head), after]
            return self.add(s, [head])
        if isinstance(s, ir.While):
            test = self.add(None, [])
            cond = self.body(s.cond_body, test)
            self.nodes[test].succ = [self.body(s.body, cond), after]
            return self.add(s, [cond])
        return self.add(s, [after])


# ----- the check ------------------------------------------------------------------------------------
class _Checker:
    def __init__(self, program: ir.Program, plan, needs: dict | None):
        self.program, self.plan, self.needs = program, plan, needs
        self.carve = plan.carve
        self.tiles = dict(self.carve.tiles)  # tile name -> Region (only the tiles in shared memory)
        self.barriers = set(self.carve.barriers)
        self.problems: list[Problem] = []
        self.owners: dict[int, int] = {}
        members: dict[int, int] = {}
        for s in program.walk():
            if isinstance(s, ir.Collective):
                owner = op_of(s).storage_owner(s)
                self.owners[s.cid] = owner
                members[owner] = members.get(owner, 0) + 1
        self.groups = {o for o, count in members.items() if count > 1}
        self.graph = _Graph(program)
        self.access_cache: dict[int, list[Access]] = {}

    # what a statement touches
    def storage(self, s: ir.Collective):
        region = self.carve.regions.get(s.cid)
        if region is None and self.owners.get(s.cid) in self.carve.regions:
            region = self.carve.regions[self.owners[s.cid]]
        return region

    def accesses(self, s: ir.Stmt) -> list[Access]:
        if s.sid in self.access_cache:
            return self.access_cache[s.sid]
        line = s.loc.line if s.loc else None
        name = type(s).__name__
        out: list[Access] = []
        for v in defined(s):
            if v.name in self.tiles:
                r = self.tiles[v.name]
                out.append(Access(s.sid, line, name, f"tile {v.name}", r.offset, r.size, True, True))
        for v in used(s):
            if v.name in self.tiles:
                r = self.tiles[v.name]
                out.append(Access(s.sid, line, name, f"tile {v.name}", r.offset, r.size, False, True))
        if isinstance(s, ir.Collective):
            r = self.storage(s)
            if r is not None:
                owner = self.owners[s.cid]
                choice = self.plan.collectives.get(s.cid)
                reentrant = choice is not None and choice.sync == REENTRANT
                what = f"TempStorage of #{s.cid}" + (f" (group of #{owner})" if owner in self.groups else "")
                group = owner in self.groups
                out.append(Access(s.sid, line, name, what, r.offset, r.size, True, False, owner, group, reentrant))
        out = list(dict.fromkeys(out))  # a tile read twice (`t + t`) is one access
        self.access_cache[s.sid] = out
        return out

    def syncs(self, s: ir.Stmt) -> bool:
        if not isinstance(s, ir.Collective):
            return False
        choice = self.plan.collectives.get(s.cid)
        return bool(choice is not None and choice.sync)

    # 1. the plan's own consistency
    def check_plan(self) -> None:
        total = self.carve.total_bytes
        for name, r in self.tiles.items():
            layout = self.plan.tiles.get(name)
            if layout is not None:
                least = self.plan.block_threads * layout.items_per_thread * layout.itemsize
                if r.size < least:
                    self.problems.append(Problem("plan", f"tile {name} has {r.size} bytes, needs at least {least}"))
            if r.end > total or r.offset % BASE_ALIGNMENT:
                self.problems.append(Problem("plan", f"tile {name} at [{r.offset}, {r.end}) of {total} bytes"))
        for s in self.program.walk():
            if not isinstance(s, ir.Collective):
                continue
            owner = self.owners[s.cid]
            need = (self.needs or {}).get(owner)
            r = self.storage(s)
            if need is not None:
                if r is None:
                    self.problems.append(Problem("plan", f"collective #{s.cid} (line {_line(s)}) has no TempStorage"))
                    continue
                align = max(1, min(need.align, BASE_ALIGNMENT))
                if r.size < need.size or r.offset % align:
                    what = f"#{s.cid}'s TempStorage [{r.offset}, {r.end}): {need.size} bytes, align {align}"
                    self.problems.append(Problem("plan", what))
            if r is not None:
                if r.end > total:
                    self.problems.append(Problem("plan", f"#{s.cid}'s TempStorage ends at {r.end}, past {total}"))
                if owner != s.cid and owner in self.carve.regions:
                    o = self.carve.regions[owner]
                    if (o.offset, o.size) != (r.offset, r.size):
                        self.problems.append(Problem("plan", f"#{s.cid} and its storage owner #{owner} differ"))

    # 2. within one statement
    def check_statement(self, s: ir.Stmt) -> None:
        acc = self.accesses(s)
        widths = {v.type.dtype.itemsize for v in (*defined(s), *used(s)) if v.name in self.tiles}
        for i, a in enumerate(acc):
            for b in acc[i + 1 :]:
                if not (a.overlaps(b) and (a.write or b.write)):
                    continue
                if a.tile and b.tile:
                    same = (a.offset, a.size) == (b.offset, b.size)
                    if same and _may_write_over_operands(s) and len(widths) == 1:
                        continue
                    if same and a.what == b.what:
                        continue
                    why = "tiles of one statement share bytes"
                else:
                    why = "a collective's TempStorage overlaps a tile it takes or defines"
                self.problems.append(Problem("overlap", why, a, b))

    # 3. races: forward over every path
    def transfer(self, node: _Node, pending: frozenset[Access], report: bool) -> frozenset[Access]:
        s = node.stmt
        if s is None:
            return pending
        if s.sid in self.barriers:
            pending = frozenset()
        mine = self.accesses(s)
        if report:
            for b in mine:
                for a in pending:
                    if self.conflict(a, b):
                        why = "no barrier between these on some path (and no synchronising collective)"
                        self.problems.append(Problem("race", why, a, b))
        if self.syncs(s):
            return frozenset(mine)
        return pending | frozenset(mine)

    @staticmethod
    def conflict(a: Access, b: Access) -> bool:
        if not (a.overlaps(b) and (a.write or b.write)):
            return False
        if a.tile and b.tile and (a.offset, a.size) == (b.offset, b.size):
            return False  # each thread its own items
        if a.owner is not None and a.owner == b.owner:
            if a.group:
                return False  # collectives sharing one storage synchronise among themselves
            if a.sid == b.sid and a.reentrant:
                return False  # runs again in its own storage (two TempStorage in turn)
        return True

    def check_races(self) -> None:
        g = self.graph
        into = [frozenset() for _ in g.nodes]
        out: list[frozenset | None] = [None for _ in g.nodes]
        work = [g.entry]
        while work:
            i = work.pop()
            new = self.transfer(g.nodes[i], into[i], report=False)
            if new == out[i]:
                continue
            out[i] = new
            for j in g.nodes[i].succ:
                merged = into[j] | new
                if merged != into[j] or out[j] is None:
                    into[j] = merged
                    work.append(j)
        seen = set()
        for i, n in enumerate(g.nodes):
            if out[i] is not None:  # reachable
                before = len(self.problems)
                self.transfer(n, into[i], report=True)
                fresh = self.problems[before:]
                del self.problems[before:]
                for p in fresh:
                    key = (p.first, p.second)
                    if key not in seen:
                        seen.add(key)
                        self.problems.append(p)

    # 4. clobbers: backward liveness of tiles and of a group's counts
    def values(self, s: ir.Stmt) -> tuple[set[str], set[str]]:
        """(defined, used) values of `s`: shared tiles by name, and "counts#owner" for a group's storage."""
        defs = {v.name for v in defined(s) if v.name in self.tiles}
        uses = {v.name for v in used(s) if v.name in self.tiles}
        if isinstance(s, ir.Collective) and self.owners.get(s.cid) in self.groups:
            owner = self.owners[s.cid]
            if owner in self.carve.regions:
                (defs if owner == s.cid else uses).add(f"counts#{owner}")
        return defs, uses

    def region_of(self, value: str):
        if value.startswith("counts#"):
            return self.carve.regions[int(value[7:])]
        return self.tiles[value]

    def check_clobbers(self) -> None:
        g = self.graph
        live_in = [frozenset() for _ in g.nodes]
        live_out = [frozenset() for _ in g.nodes]
        changed = True
        while changed:
            changed = False
            for i in reversed(range(len(g.nodes))):
                n = g.nodes[i]
                lo = frozenset().union(*(live_in[j] for j in n.succ)) if n.succ else frozenset()
                if n.stmt is None:
                    li = lo
                else:
                    defs, uses = self.values(n.stmt)
                    li = (lo - defs) | uses
                if lo != live_out[i] or li != live_in[i]:
                    live_out[i], live_in[i], changed = lo, li, True
        for i, n in enumerate(g.nodes):
            s = n.stmt
            if s is None:
                continue
            defs, _ = self.values(s)
            for a in self.accesses(s):
                if not a.write:
                    continue
                for value in live_out[i] - defs:
                    if a.tile and a.what == f"tile {value}":
                        continue
                    if a.owner is not None and value == f"counts#{a.owner}":
                        continue
                    r = self.region_of(value)
                    if a.offset < r.end and r.offset < a.end:
                        self.problems.append(
                            Problem(
                                "clobber",
                                f"writes bytes of {value} [{r.offset}, {r.end}), which is still needed after it "
                                f"(live range {r.first}-{r.last} in the plan)",
                                a,
                            )
                        )

    def run(self) -> list[Problem]:
        self.check_plan()
        for s in self.program.walk():
            self.check_statement(s)
        self.check_races()
        self.check_clobbers()
        return self.problems


def _line(s: ir.Stmt) -> int | None:
    return s.loc.line if s.loc else None


def check(program: ir.Program, plan, needs: dict | None = None) -> list[Problem]:
    """Every problem of `plan` (a finished `Plan` of `program`, after the rewrites); `needs`: the
    TempStorage sizes it was carved for (collective id -> StorageNeed), to check regions against."""
    return _Checker(program, plan, needs).run()


def format_report(problems: list[Problem], program: ir.Program | None = None, plan=None, source: str = "") -> str:
    parts = [f"{len(problems)} problem(s):", *(str(p) for p in problems)]
    if source:
        parts += ["", "source:", source]
    if program is not None:
        parts += ["", str(program)]
    if plan is not None:
        parts += ["", str(plan)]
    return "\n".join(parts)


# ----- plans without NVRTC ------------------------------------------------------------------------------
def fabricated_needs(rng: random.Random, cids) -> dict[int, StorageNeed]:
    """TempStorage sizes and alignments like NVRTC's (a size is a multiple of its alignment): small
    (under 1 KiB, as scans and reductions) or large (1-40 KiB, as exchanges and sorts)."""
    needs = {}
    for cid in cids:
        align = rng.choice([4, 8, 16])
        size = rng.randint(8, 1000) if rng.random() < 0.4 else rng.randint(1024, 40 * 1024)
        needs[cid] = StorageNeed(-(-size // align) * align, align)
    return needs


@contextmanager
def fabricated_compile(rng: random.Random):
    """Run `kernel.compile(...)` up to the plan only, with fabricated TempStorage sizes (no NVRTC):
    yields a list that gets (program, needs, plan) for each compile; the compile then stops."""
    captured = []

    class Planned(Exception):
        pass

    def nvrtc_stage(shims, arch, cache, clock=None):
        return b"", fabricated_needs(rng, shims.storage_cids)

    def finish(program, layouts, needs, arch):
        plan = finish_plan(program, layouts, needs, arch)
        captured.append((program, needs, plan))
        raise Planned

    with mock.patch.object(compiler, "nvrtc_stage", nvrtc_stage), mock.patch.object(compiler, "finish_plan", finish):
        yield captured, Planned


def plan_of(kernel, args, constexprs: dict, rng: random.Random | None = None, arch: str = "sm_90"):
    """(program, needs, plan) of `kernel.compile(*args, **constexprs)` with fabricated TempStorage sizes (no
    NVRTC, no GPU); raises what the compile raises before its plan (SharedMemoryError, TileValueError)."""
    with fabricated_compile(rng if rng is not None else random.Random(0)) as (captured, planned):
        try:
            kernel.compile(*args, arch=arch, **constexprs)
        except planned:
            pass
    return captured[-1]
