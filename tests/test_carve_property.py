"""Shared-memory plans checked by an independent checker (`carve_checker.py`), no GPU needed.

- random tile programs (seeded), written as Python source and built by the front end, planned with
  fabricated TempStorage sizes: collectives (load, store, scan, reverse scan, exclusive scan with
  initial, carried scan, carried reverse scan, reductions, all-reduces in loops, sort, histogram,
  histograms accumulated through a loop, adjacent difference) and element-wise statements, over
  tiles in registers and in shared memory, in `for` and `while` loops and both branches of `if`s;
- every program of `programs.py` (with several fabricated size sets) and issue 17's program;
- the checker itself: it finds the race of issue 17 in the carve before its fix (c3756f0), and a
  barrier dropped from, or a region moved in, a sound plan.
"""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from carve_checker import check, fabricated_compile, fabricated_needs, format_report
from drawing_checker import drawing_problems

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.codegen.shims import generate_shims
from coop_tiles.errors import SharedMemoryError, TileValueError
from coop_tiles.lang import ir
from coop_tiles.lang.frontend import build_program
from coop_tiles.lang.types import WEAK_INT, ArrayType
from coop_tiles.planner import StorageNeed, finish_plan, plan_layouts
from coop_tiles.planner.carve import Barrier
from coop_tiles.runtime import compiler

I32 = ArrayType(np.dtype(np.int32))
PARAMS = {"x": I32, "y": I32, "z": I32, "n": WEAK_INT}
TILES = (256, 1000, 4096, 9000)
THREADS = (128, 256)
PROGRAMS = 200


# ----- random programs ------------------------------------------------------------------------------
class Generator:
    """Source text of one random tile program `prog(x, y, z, n, TILE, BINS)`. Tiles are int32 or int64,
    of TILE elements (histograms: BINS); names bound inside an `if` or a loop stay there (the front end
    rejects reading them after), and reassignments keep a name's dtype (one type per name)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.count = 0
        self.lines: list[str] = []

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def program(self) -> str:
        self.lines = [
            "def prog(x, y, z, n, TILE: ct.constexpr, BINS: ct.constexpr):",
            "    base = ct.program_id(0) * TILE",
            "    valid = n - base",
            "    t0 = tile.load(x, base, TILE, valid=valid, other=0)",
        ]
        scope = {"tiles": {"t0": "int32"}, "hists": {}, "scalars": []}
        for _ in range(self.rng.randint(3, 8)):
            self.item(scope, 1, top=True)
        t = self.rng.choice(sorted(scope["tiles"]))
        self.lines.append(f"    tile.store(y, base, {t}, valid=valid)")
        return "\n".join(self.lines) + "\n"

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def tile_of(self, scope, dtype: str | None = None) -> str:
        names = sorted(n for n, d in scope["tiles"].items() if dtype is None or d == dtype)
        return self.rng.choice(names)

    def item(self, scope, depth: int, top: bool = False) -> None:
        r = self.rng.random()
        if top and r < 0.12:
            return self.for_loop(scope, depth)
        if top and r < 0.20:
            return self.if_else(scope, depth)
        if top and r < 0.25:
            return self.histogram_loop(scope, depth)
        if top and r < 0.30:
            return self.carried_loop(scope, depth)
        if top and r < 0.34:
            return self.while_loop(scope, depth)
        self.simple(scope, depth)

    def simple(self, scope, depth: int) -> None:
        rng, tiles = self.rng, scope["tiles"]
        a = self.tile_of(scope)
        kind = rng.choice(
            ["load", "scan", "scan", "xscan", "total", "reduce", "sort", "sort", "hist", "store", "store"]
            + ["map", "map", "map2", "wide", "scalar", "reassign", "reassign", "diff"]
            + ["rows", "columns", "rowsum", "flip", "transpose"]
        )
        new = self.fresh("t")
        if kind == "load":
            self.emit(depth, f"{new} = tile.load(x, base + {rng.randint(0, 3)}, TILE, valid=valid, other=0)")
            tiles[new] = "int32"
        elif kind == "scan":
            op = rng.choice(['"add"', '"max"', '"min"'])
            self.emit(depth, f"{new} = tile.scan({a}, op={op}{rng.choice(['', ', reverse=True'])})")
            tiles[new] = tiles[a]
        elif kind == "xscan":
            self.emit(depth, f"{new} = tile.scan({a}, exclusive=True, initial={rng.randint(-3, 3)})")
            tiles[new] = tiles[a]
        elif kind == "total":
            s = self.fresh("s")
            seed = rng.choice(["", f"initial={rng.randint(0, 2)}, "])
            self.emit(depth, f"{new}, {s} = tile.scan({a}, {seed}return_total=True)")
            tiles[new] = tiles[a]
            scope["scalars"].append(s)
        elif kind == "reduce":
            s = self.fresh("s")
            self.emit(depth, f"{s} = tile.{rng.choice(['sum', 'max', 'min'])}({a})")
            if rng.random() < 0.5:
                self.emit(depth, f"z[ct.program_id(0)] = {s}")  # thread 0's alone
            else:
                scope["scalars"].append(s)
        elif kind == "sort":
            args = rng.choice(["", ", valid=valid", ", descending=True"])
            self.emit(depth, f"{new} = tile.sort({a}{args})")
            tiles[new] = tiles[a]
        elif kind == "hist":
            h = self.fresh("h")
            self.emit(depth, f"{h} = tile.histogram({a}, BINS)")
            scope["hists"][h] = "int32"
            if rng.random() < 0.5:
                self.emit(depth, f"tile.store(z, base, tile.scan({h}))")
            else:
                s = self.fresh("s")
                self.emit(depth, f"{s} = tile.sum({h})")
                scope["scalars"].append(s)
        elif kind == "store":
            self.emit(depth, f"tile.store({rng.choice(['y', 'z'])}, base, {a}, valid=valid)")
        elif kind == "map":
            self.emit(depth, f"{new} = {a} * {rng.randint(2, 5)} - {rng.randint(0, 3)}")
            tiles[new] = tiles[a]
        elif kind == "map2":
            b = self.tile_of(scope)
            self.emit(depth, f"{new} = {a} + {b}")
            tiles[new] = "int64" if "int64" in (tiles[a], tiles[b]) else "int32"
        elif kind == "wide":
            self.emit(depth, f"{new} = {a}.astype(np.int64)")
            tiles[new] = "int64"
        elif kind == "scalar" and scope["scalars"]:
            s = rng.choice(scope["scalars"])
            self.emit(depth, f"{new} = ({a} + {s}).astype(np.{tiles[a]})")
            tiles[new] = tiles[a]
        elif kind == "reassign":
            how = rng.choice(["{a} + 1", "tile.scan({a})", "tile.sort({a})", "tile.adjacent_difference({a})"])
            self.emit(depth, f"{a} = " + how.format(a=a))
        elif kind == "diff":
            self.emit(depth, f"{new} = tile.adjacent_difference({a})")
            tiles[new] = tiles[a]
        elif kind in ("rows", "columns", "rowsum", "transpose"):  # over the tile as 8 rows (2-D tiles)
            block = f"tile.reshape({a}, (8, TILE // 8))"
            how = {
                "rows": f"tile.scan({block}, axis=1, initial=tile.arange(8).astype({block}.dtype))",
                "columns": f"tile.scan({block}, op='max', axis=0)",
                "rowsum": f"{block} - tile.sum({block}, axis=1, keepdims=True)",
                "transpose": f"{block}.T",
            }[kind]
            self.emit(depth, f"{new} = tile.reshape({how}, TILE)")
            tiles[new] = tiles[a]
        elif kind == "flip":
            self.emit(depth, f"{new} = tile.flip({a})")
            tiles[new] = tiles[a]
        else:
            self.emit(depth, f"{new} = {a} - 1")
            tiles[new] = tiles[a]

    def inner(self, scope) -> dict:
        return {"tiles": dict(scope["tiles"]), "hists": dict(scope["hists"]), "scalars": list(scope["scalars"])}

    def for_loop(self, scope, depth: int) -> None:
        self.emit(depth, f"for i{self.count} in range({self.rng.randint(1, 3)}):")
        inner = self.inner(scope)
        for _ in range(self.rng.randint(1, 3)):
            self.simple(inner, depth + 1)

    def while_loop(self, scope, depth: int) -> None:
        c = self.fresh("c")
        self.emit(depth, f"{c} = 0")
        self.emit(depth, f"while {c} < {self.rng.randint(1, 3)}:")
        inner = self.inner(scope)
        for _ in range(self.rng.randint(1, 3)):
            self.simple(inner, depth + 1)
        self.emit(depth + 1, f"{c} += 1")

    def if_else(self, scope, depth: int) -> None:
        self.emit(depth, f"if n > {self.rng.randint(0, 20000)}:")
        inner = self.inner(scope)
        for _ in range(self.rng.randint(1, 2)):
            self.simple(inner, depth + 1)
        if self.rng.random() < 0.7:
            self.emit(depth, "else:")
            inner = self.inner(scope)
            for _ in range(self.rng.randint(1, 2)):
                self.simple(inner, depth + 1)

    def histogram_loop(self, scope, depth: int) -> None:
        """`h = h + tile.histogram(...)` in a loop: the counts stay in shared memory through it (rewritten)."""
        h = self.fresh("h")
        self.emit(depth, f"{h} = tile.zeros(BINS, np.int32)")
        self.emit(depth, f"for i{self.count} in range({self.rng.randint(1, 3)}):")
        inner = self.inner(scope)
        if self.rng.random() < 0.5:
            self.simple(inner, depth + 1)
        src = self.tile_of(inner)
        self.emit(depth + 1, f"{h} = {h} + tile.histogram({src}, BINS)")
        if self.rng.random() < 0.5:
            self.simple(inner, depth + 1)
        if self.rng.random() < 0.5:
            self.emit(depth, f"tile.store(z, base, tile.scan({h}))")
        else:
            s = self.fresh("s")
            self.emit(depth, f"{s} = tile.sum({h})")
            scope["scalars"].append(s)

    def carried_loop(self, scope, depth: int) -> None:
        """A scan carried through a loop (seeded with the last total), or an all-reduce."""
        c = self.fresh("c")
        self.emit(depth, f"{c} = 0")
        i = f"i{self.count}"
        self.emit(depth, f"for {i} in range({self.rng.randint(1, 3)}):")
        inner = self.inner(scope)
        t, s = self.fresh("t"), self.fresh("t")
        self.emit(depth + 1, f"{t} = tile.load(x, base + {i} * 7, TILE, valid=valid, other=0)")
        inner["tiles"][t] = "int32"
        if self.rng.random() < 0.6:
            reverse = self.rng.choice(["", "reverse=True, "])
            self.emit(depth + 1, f"{s}, {c} = tile.scan({t}, {reverse}initial={c}, return_total=True)")
            self.emit(depth + 1, f"tile.store(y, base, {s}, valid=valid)")
        else:
            self.emit(depth + 1, f"{c} = {c} + tile.sum({t})")
            self.emit(depth + 1, f"tile.store(y, base, {t} - {c}, valid=valid)")
        if self.rng.random() < 0.5:
            self.simple(inner, depth + 1)


def load_function(source: str, directory: Path, name: str):
    """`prog` from `source`, written to a file (the front end reads a function's source from its file)."""
    path = directory / f"{name}.py"
    path.write_text("import numpy as np\nimport coop_tiles as ct\nfrom coop_tiles import tile\n\n\n" + source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.prog


def plan_program(program: ir.Program, threads: int, rng: random.Random):
    """Rewrite, lay out, and carve `program` with fabricated TempStorage sizes: (needs, plan)."""
    compiler.rewrite_stage(program)
    layouts = plan_layouts(program, threads)
    needs = fabricated_needs(rng, generate_shims(program, layouts).storage_cids)
    return needs, finish_plan(program, layouts, needs, "sm_90")


def test_random_programs(tmp_path):
    rng = random.Random(17)
    planned = shared = looped = grouped = skipped = 0
    failures = []
    for i in range(PROGRAMS):
        tile_size, threads = rng.choice(TILES), rng.choice(THREADS)
        source = Generator(rng).program()
        fn = load_function(source, tmp_path, f"prog{i}")
        constexprs = {"TILE": tile_size, "BINS": rng.choice([256, 4096])}
        program = build_program(fn, PARAMS, constexprs)
        try:
            needs, plan = plan_program(program, threads, rng)
        except SharedMemoryError:
            skipped += 1
            continue
        planned += 1
        shared += bool(plan.carve.tiles)
        looped += any(isinstance(s, (ir.ForRange, ir.While)) for s in program.walk())
        grouped += any(type(s).__name__ == "HistogramBegin" for s in program.walk())
        problems = check(program, plan, needs)
        drawn = drawing_problems(plan, tmp_path / "plan.svg", program)  # the drawing shows the same
        if problems or drawn:
            header = f"program {i}: TILE={tile_size}, BINS={constexprs['BINS']}, {threads} threads"
            failures.append(header + "\n" + "\n".join(drawn) + format_report(problems, None, plan, source))
    assert not failures, f"{len(failures)} of {planned} plans fail the check; the first:\n{failures[0]}"
    # the programs cover what they should
    assert planned >= 0.9 * PROGRAMS and skipped <= 0.1 * PROGRAMS
    assert shared >= PROGRAMS // 4 and looped >= PROGRAMS // 4 and grouped >= PROGRAMS // 20


# ----- issue 17's program and the shared test programs ------------------------------------------------
def issue17(x, y, z, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, tile.scan(t), valid=n - base)
    tile.store(z, base, tile.sort(t, valid=n - base), valid=n - base)


#: TempStorage sizes of issue 17's program as NVRTC reports them at 256 threads and TILE=9000 (load,
#: scan, store, sort, store), and the same with a larger scan and sort
ISSUE17_SIZES = [(4736, 112, 4736, 37120, 4736), (4736, 4096, 4736, 9000, 4736), (9000,) * 5]


@pytest.mark.parametrize("sizes", ISSUE17_SIZES, ids=str)
def test_issue17_program(sizes):
    program = compiler.rewrite_stage(build_program(issue17, PARAMS, {"TILE": 9000}))
    layouts = plan_layouts(program, 256)
    needs = {c: StorageNeed(size, 16) for c, size in zip(generate_shims(program, layouts).storage_cids, sizes)}
    plan = finish_plan(program, layouts, needs, "sm_90")
    assert plan.carve.tiles, "the tile lives in shared memory"
    problems = check(program, plan, needs)
    assert not problems, format_report(problems, program, plan)


def _specialisations():
    from programs import CASES

    seen = {}
    for case in CASES:
        key = (case.name.split("[")[0], case.kernel, tuple(sorted(case.constexprs.items())))
        seen.setdefault(key, case)
    return list(seen.values())


def _specialisations_2d():
    from programs_2d import CASES_2D

    seen = {}
    for case in CASES_2D:
        seen.setdefault((case.kernel, tuple(sorted(case.constexprs.items()))), case)
    return list(seen.values())


@pytest.mark.parametrize("case", _specialisations() + _specialisations_2d(), ids=lambda c: c.name)
def test_shared_programs(case, tmp_path):
    """Every program of programs.py, with three sets of fabricated TempStorage sizes, and at 128 and
    256 threads where it has no block size of its own."""
    rng = random.Random(case.name)
    kernels = [case.kernel] + ([ct.jit(case.kernel.fn, block_threads=128)] if case.kernel.block_threads is None else [])
    for kernel in kernels:
        for _ in range(3):
            with fabricated_compile(rng) as (captured, planned):
                try:
                    kernel.compile(*case.launch_args(list(case.args)), arch="sm_90", **case.constexprs)
                except planned:
                    pass
                except (SharedMemoryError, TileValueError):  # too large a tile for 128 threads
                    assert kernel is not case.kernel
                    break
            program, needs, plan = captured[-1]
            problems = check(program, plan, needs)
            assert not problems, format_report(problems, program, plan)
            drawn = drawing_problems(plan, tmp_path / "plan.svg", program)
            assert not drawn, "\n".join(drawn)


# ----- the checker can fail ----------------------------------------------------------------------------
def _old_carve():
    """coop_tiles/planner/carve.py as of c3756f0, before issue 17's fix, as a module."""
    root = Path(__file__).resolve().parent.parent
    try:
        text = subprocess.run(
            ["git", "show", "c3756f0:coop_tiles/planner/carve.py"], cwd=root, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git history here")
    name = "coop_tiles.planner._carve_c3756f0"
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "coop_tiles.planner"
    sys.modules[name] = module
    try:
        exec(compile(text, "carve_c3756f0.py", "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    module.ir = _IrBeforeDeclarations()
    return module


class _IrBeforeDeclarations:
    """`coop_tiles.lang.ir` as the old carve called it: `outputs`/`inputs` were `defs`/`uses`."""

    outputs = staticmethod(ir.defs)
    inputs = staticmethod(ir.uses)

    def __getattr__(self, name: str):
        return getattr(ir, name)


def test_checker_finds_the_race_of_issue17_in_the_carve_before_its_fix():
    import coop_tiles.planner.plan as plan_module

    old = _old_carve()
    program = compiler.rewrite_stage(build_program(issue17, PARAMS, {"TILE": 9000}))
    layouts = plan_layouts(program, 256)
    needs = {c: StorageNeed(s, 16) for c, s in zip(generate_shims(program, layouts).storage_cids, ISSUE17_SIZES[0])}
    with mock.patch.object(plan_module, "carve", old.carve):
        plan = finish_plan(program, layouts, needs, "sm_90")
    problems = check(program, plan, needs)
    text = format_report(problems, program, plan)
    last_line = max(s.loc.line for s in program.walk() if isinstance(s, ir.Collective))  # the sort and the store
    # the second store's TempStorage over `t`, which the sort on its line still reads, with no barrier
    race = [p for p in problems if p.kind == "race" and "v_t" in p.first.what and p.second.stmt == "TileStore"]
    assert race and race[0].first.stmt == "TileSort" and race[0].first.line == last_line, text
    assert race[0].second.line == last_line and race[0].second.write, text
    # and the scan's TempStorage over its own result
    assert [p for p in problems if p.kind == "overlap" and p.first.stmt == "TileScan"], text


def _sound_plan():
    program = compiler.rewrite_stage(build_program(issue17, PARAMS, {"TILE": 9000}))
    layouts = plan_layouts(program, 256)
    needs = {c: StorageNeed(s, 16) for c, s in zip(generate_shims(program, layouts).storage_cids, ISSUE17_SIZES[1])}
    plan = finish_plan(program, layouts, needs, "sm_90")
    assert not check(program, plan, needs)
    return program, needs, plan


def test_checker_finds_a_dropped_barrier():
    program, needs, plan = _sound_plan()
    assert plan.carve.barriers
    for sid in list(plan.carve.barriers):
        barriers = {k: b for k, b in plan.carve.barriers.items() if k != sid}
        broken = replace(plan, carve=replace(plan.carve, barriers=barriers))
        problems = check(program, broken, needs)
        assert [p for p in problems if p.kind == "race" and p.second.sid == sid], format_report(problems, plan=broken)


def test_checker_finds_a_region_moved_onto_another():
    program, needs, plan = _sound_plan()
    sort = next(s for s in program.walk() if type(s).__name__ == "TileSort")
    t = plan.carve.tiles["v_t"]
    regions = dict(plan.carve.regions)
    regions[sort.cid] = replace(regions[sort.cid], offset=t.offset)  # the sort's TempStorage over its operand
    broken = replace(plan, carve=replace(plan.carve, regions=regions))
    problems = check(program, broken, needs)
    assert [p for p in problems if p.kind == "overlap" and p.second.what == f"TempStorage of #{sort.cid}"], (
        format_report(problems, plan=broken)
    )
    # a tile alive across a collective whose TempStorage is moved onto it: clobbered, barriers or not
    load = next(s for s in program.walk() if type(s).__name__ == "TileLoad")
    scan = next(s for s in program.walk() if type(s).__name__ == "TileScan")
    regions = dict(plan.carve.regions)
    regions[scan.cid] = replace(regions[scan.cid], offset=t.offset)
    barriers = {s.sid: Barrier(s.sid, None, "test") for s in program.walk() if isinstance(s, ir.Collective)}
    broken = replace(plan, carve=replace(plan.carve, regions=regions, barriers=barriers))
    problems = check(program, broken, needs)
    assert [p for p in problems if p.kind == "clobber" and "v_t" in p.message], format_report(problems, plan=broken)


def test_checker_follows_loops_and_branches():
    """A barrier that only one branch has, or that only the first iteration meets, is not enough."""

    def looped(x, y, z, n, TILE: ct.constexpr):
        base = ct.program_id(0) * TILE
        for i in range(3):
            t = tile.load(x, base, TILE, valid=n - base, other=0)
            tile.store(y, base, tile.sort(t), valid=n - base)

    program = compiler.rewrite_stage(build_program(looped, PARAMS, {"TILE": 4096}))
    layouts = plan_layouts(program, 256)
    needs = {c: StorageNeed(16384, 16) for c in generate_shims(program, layouts).storage_cids}
    plan = finish_plan(program, layouts, needs, "sm_90")
    assert not check(program, plan, needs), format_report(check(program, plan, needs), program, plan)
    load = next(s for s in program.walk() if type(s).__name__ == "TileLoad")
    loop = next(s for s in program.walk() if isinstance(s, ir.ForRange))
    assert load.sid in plan.carve.barriers  # the next iteration's load reuses the store's bytes
    # the barrier moved before the loop: it runs once, and iteration 2's load meets iteration 1's store
    barriers = {k: b for k, b in plan.carve.barriers.items() if k != load.sid}
    barriers[loop.sid] = plan.carve.barriers[load.sid]
    broken = replace(plan, carve=replace(plan.carve, barriers=barriers))
    problems = check(program, broken, needs)
    assert [p for p in problems if p.kind == "race" and p.second.sid == load.sid], format_report(problems, plan=broken)


def test_scan_returning_its_total_without_initial_plans():
    """Found by the random programs (issue 18): `tile.scan(t, return_total=True)` over a tile that fills the
    block is a carried scan (a built-in op has an identity), whose `thread0_reads` iterated `s.initial`, None."""

    def total(x, y, z, n, TILE: ct.constexpr):
        s, tot = tile.scan(tile.load(x, 0, TILE, valid=n, other=0), return_total=True)
        tile.store(y, 0, s - tot, valid=n)

    plan_layouts(build_program(total, PARAMS, {"TILE": 4096}), 256)


def test_a_result_takes_its_operands_bytes_whole_or_not_at_all():
    """Found by the random programs: `t6 = t5.astype(np.int64)` is a cast into a temporary, then a copy into
    `t6`, which may take the temporary's bytes (it writes at the step after its read). The lowest free offset
    lay partly over them, so thread i's copy wrote into thread i-128's items before that thread read them."""

    def widened(x, y, z, n, TILE: ct.constexpr):
        base = ct.program_id(0) * TILE
        t0 = tile.load(x, base, TILE, valid=n - base, other=0)
        t1 = t0 + t0
        tile.store(y, base, t0, valid=n - base)
        for i in range(2):
            t5 = t0 + t1
            t6 = t5.astype(np.int64)
            t0 = tile.scan(t0)
        tile.store(z, base, tile.sort(t0), valid=n - base)

    program = compiler.rewrite_stage(build_program(widened, PARAMS, {"TILE": 9000}))
    layouts = plan_layouts(program, 256)
    needs = {c: StorageNeed(1000, 16) for c in generate_shims(program, layouts).storage_cids}
    plan = finish_plan(program, layouts, needs, "sm_90")
    copy = next(s for s in program.walk() if isinstance(s, ir.Copy) and s.out.name == "v_t6")
    result, operand = plan.carve.tiles["v_t6"], plan.carve.tiles[copy.src.name]
    assert result.offset == operand.offset or result.end <= operand.offset or operand.end <= result.offset
    problems = check(program, plan, needs)
    assert not problems, format_report(problems, program, plan)
