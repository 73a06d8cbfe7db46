"""The declared IR: statement declarations, defs/uses/regions/rewrite, ir.verify after every stage,
variable kinds, and rewrites owned by their ops (no GPU)."""

import copy
from dataclasses import dataclass, fields

import numpy as np
import pytest
from programs import CASES, histogram_loop, matrix_scan

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.errors import InternalError
from coop_tiles.lang import interpreter, ir
from coop_tiles.lang.frontend import build_program
from coop_tiles.lang.types import INT64, WEAK_INT, ArrayType, ScalarType, TileType
from coop_tiles.ops import base
from coop_tiles.ops.histogram import HistogramBegin, HistogramComposite, HistogramEnd
from coop_tiles.ops.scan import TileScan
from coop_tiles.runtime.compiler import rewrite_stage

I32 = ArrayType(np.dtype(np.int32))
F32 = ArrayType(np.dtype(np.float32))


# ----- declarations ------------------------------------------------------------------------------
def test_every_field_of_every_statement_class_has_one_role():
    classes = {ir.Param, ir.ScalarOp, ir.If, ir.ForRange, ir.While, *base.BY_STMT}
    for cls in classes:
        assert sorted(cls.roles.all()) == sorted(f.name for f in fields(cls)), cls.__name__


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"defs": "out"}, "no role for a"),
        ({"defs": "out", "uses": "a b"}, "no field b"),
        ({"defs": "out", "uses": "a out"}, "out declared twice"),
        ({"defs": "out", "uses": "a", "reads": "a"}, "unknown role reads"),
    ],
)
def test_a_statement_class_with_a_wrong_declaration_is_rejected_when_made(spec, message):
    with pytest.raises(TypeError, match=message):

        @dataclass
        class Bad(ir.Stmt, **spec):
            out: ir.Var
            a: ir.Value


def test_a_subclass_declares_only_its_own_fields():
    @dataclass
    class Base(ir.Collective, defs="out"):
        out: ir.Var

    @dataclass
    class More(Base, uses="src"):
        src: ir.Var

    assert More.roles.defs == ("out",) and More.roles.uses == ("src",) and "cid" in More.roles.meta


# ----- what statements define and read ------------------------------------------------------------------
def _scan_total(x, z, TILE: ct.constexpr):
    s, tot = tile.scan(tile.load(x, 0, TILE), return_total=True)
    z[0] = tot + tile.sum(s)


def test_a_scans_total_is_a_definition():
    p = build_program(_scan_total, {"x": I32, "z": I32}, {"TILE": 64})
    (scan,) = [s for s in p.walk() if isinstance(s, TileScan)]
    assert [v.name for v in ir.defs(scan)] == [scan.outs[0].name, scan.totals[0].name]
    assert scan.totals[0] not in ir.uses(scan)


def _histogram_program() -> ir.Program:
    params = {"x": I32, "out": I32, "n": INT64}
    return build_program(histogram_loop.fn, params, {"BINS": 16, "CHUNK": 256, "ALGO": "auto"})


def test_histogram_rewrite_statements_declare_what_they_touch():
    p = rewrite_stage(_histogram_program())
    classes = (HistogramBegin, HistogramComposite, HistogramEnd)
    begin, composite, end = (next(s for s in p.walk() if isinstance(s, c)) for c in classes)
    assert ir.uses(begin) == (begin.acc,) and ir.refs(begin) == (begin.src,)  # the loop's tile: its layout only
    assert ir.defs(end) == (end.acc,) and ir.uses(end) == ()
    assert ir.uses(composite)[0] == composite.src
    ir.verify(p, "test")


def test_regions_walk_and_rewrite():
    def loop(x, n):
        acc = 0
        for i in range(n):
            if i > 2:
                acc = acc + x[i]
        x[0] = acc

    p = build_program(loop, {"x": I32, "n": INT64}, {})
    (for_,) = [s for s in p.body if isinstance(s, ir.ForRange)]
    assert ir.regions(for_) == (for_.body,)
    assert ir.defs(for_) == (for_.var,)
    (if_,) = [s for s in for_.body if isinstance(s, ir.If)]
    assert ir.regions(if_) == (if_.then, if_.orelse)
    assert list(ir.walk([for_]))[:2] == [for_, for_.body[0]]
    renamed = ir.rewrite(for_, lambda v: ir.Var(v.name + "_r", v.type, v.kind, v.source))
    assert renamed.var.name == for_.var.name + "_r" and renamed.sid == for_.sid
    names = {v.name for s in ir.walk([renamed]) for v in (*ir.defs(s), *ir.uses(s))}
    assert names and all(n.endswith("_r") for n in names)
    assert for_.var.name + "_r" not in {v.name for s in ir.walk([for_]) for v in ir.defs(s)}  # the original is kept


# ----- ir.verify ---------------------------------------------------------------------------------------
def _programs_of_every_case(monkeypatch) -> dict[str, ir.Program]:
    """The built program of every case of tests/programs.py (through the interpreter, one run each)."""
    built: dict[str, ir.Program] = {}
    run = interpreter.run

    def capture(program, grid, args):
        built.setdefault(current, program)
        return run(program, grid, args)

    monkeypatch.setattr(interpreter, "run", capture)
    seen = set()
    for case in CASES:
        key = (case.kernel, tuple(sorted(case.constexprs.items())), tuple(getattr(a, "dtype", 0) for a in case.args))
        if key in seen:
            continue
        seen.add(key)
        current = case.name
        args = [a.copy() if isinstance(a, np.ndarray) else a for a in case.args]
        ct.jit(case.kernel.fn, interpret=True)[case.grid](*case.launch_args(args), **case.constexprs)
    return built


def test_verify_passes_after_build_and_after_every_rewrite_of_every_test_program(monkeypatch):
    programs = _programs_of_every_case(monkeypatch)
    assert len(programs) > 30
    rewriters = base.rewriting_ops()
    for name, built in programs.items():
        ir.verify(built, "build")
        for debug in (False, True):
            p = copy.deepcopy(built)
            for op in rewriters:
                op.rewrite(p, debug, "sm_90")
                ir.verify(p, f"{type(op).__name__} of {name}")


def _straight(x, n):
    a = n + 1
    x[0] = a * 2


def test_verify_rejects_a_use_before_its_definition():
    p = build_program(_straight, {"x": I32, "n": INT64}, {})
    ir.verify(p)
    i = next(i for i, s in enumerate(p.body) if isinstance(s, ir.ScalarOp))
    p.body[i], p.body[i + 1] = p.body[i + 1], p.body[i]
    with pytest.raises(InternalError, match=r"after stage 'swap'.*reads %\w+ before it is defined on every path"):
        ir.verify(p, "swap")


def _branches(x, n):
    if n > 0:
        v = n + 1
    else:
        v = n - 1
    x[0] = v


def test_verify_needs_a_definition_on_every_branch():
    p = build_program(_branches, {"x": I32, "n": INT64}, {})
    ir.verify(p)
    (if_,) = [s for s in p.body if isinstance(s, ir.If)]
    if_.orelse[:] = [s for s in if_.orelse if not isinstance(s, ir.Copy)]  # `v` now set on one branch only
    with pytest.raises(InternalError, match=r"Copy: it reads %v_v before it is defined|reads %v_v"):
        ir.verify(p)
    if_.orelse.append(ir.Return(sid=10_000))  # ...and the other branch leaves the program
    ir.verify(p)


def _loop(x, n):
    acc = 0
    for i in range(n):
        acc = acc + i
    x[0] = acc


def test_verify_loop_bodies_see_only_what_is_defined_before_the_loop_or_earlier_in_the_body():
    p = build_program(_loop, {"x": I32, "n": INT64}, {})
    ir.verify(p)
    (for_,) = [s for s in p.body if isinstance(s, ir.ForRange)]
    before = next(i for i, s in enumerate(p.body) if isinstance(s, ir.Copy))
    for_.body.append(p.body.pop(before))  # `acc = 0` moves to the end of the body: the first iteration reads nothing
    with pytest.raises(InternalError, match=r"reads %v_acc before it is defined on every path"):
        ir.verify(p)


def test_verify_rejects_two_types_for_one_name_and_a_temporary_defined_twice():
    p = build_program(_straight, {"x": I32, "n": INT64}, {})
    op = next(s for s in p.body if isinstance(s, ir.ScalarOp))
    op.out = ir.Var(op.out.name, ScalarType(np.dtype(np.int8)), ir.TEMP)
    with pytest.raises(InternalError, match="is a temp int(8|64) here but a temp int(64|8) elsewhere"):
        ir.verify(p)
    p = build_program(_straight, {"x": I32, "n": INT64}, {})
    i = next(i for i, s in enumerate(p.body) if isinstance(s, ir.ScalarOp))
    p.body.insert(i, copy.copy(p.body[i]))
    p.body[i].sid = 10_000
    with pytest.raises(InternalError, match="temporary %t\\d+ is defined twice"):
        ir.verify(p)


def test_verify_rejects_malformed_statements():
    p = build_program(_straight, {"x": I32, "n": INT64}, {})
    op = next(s for s in p.body if isinstance(s, ir.ScalarOp))
    op.op = op.args[0]  # a variable hidden in an attribute
    with pytest.raises(InternalError, match="attribute 'op' holds a variable"):
        ir.verify(p)
    p = build_program(_straight, {"x": I32, "n": INT64}, {})
    p.body.append(p.body[-1])
    with pytest.raises(InternalError, match="appears twice"):
        ir.verify(p)
    p = build_program(_straight, {"x": I32, "n": INT64}, {})
    p.body.append(ir.If(ir.Lit(True, ScalarType(np.dtype(np.bool_))), [ir.Return(sid=10_001)], "no", sid=10_000))
    with pytest.raises(InternalError, match="region 'orelse' is not a list of statements"):
        ir.verify(p)


def test_a_broken_rewrite_is_caught_when_the_tests_verify_every_stage(monkeypatch):
    class Swapper(base.TileOp):
        def rewrite(self, program, debug, arch):
            i = next(i for i, s in enumerate(program.body) if isinstance(s, ir.ScalarOp))
            program.body[i], program.body[i + 1] = program.body[i + 1], program.body[i]

    monkeypatch.setenv(ir.VERIFY_ENV, "1")
    monkeypatch.setitem(base.BY_PUBLIC, _straight, Swapper())
    assert type(base.rewriting_ops()[-1]) is Swapper
    with pytest.raises(InternalError, match="after stage 'rewrite by Swapper'"):
        rewrite_stage(build_program(_straight, {"x": I32, "n": INT64}, {}))
    monkeypatch.setenv(ir.VERIFY_ENV, "0")
    rewrite_stage(build_program(_straight, {"x": I32, "n": INT64}, {}))  # not verified: no error


# ----- variables ---------------------------------------------------------------------------------------
def _helper(t, scale):
    y = t * scale
    return y


def _kinds(x, out, n, TILE: ct.constexpr):
    pair = (tile.load(x, 0, TILE), n)
    for i in range(2):
        pair = (_helper(pair[0], 2.0), pair[1])
    tile.store(out, 0, pair[0])


def test_variables_carry_their_kind_and_source_name():
    p = build_program(_kinds, {"x": F32, "out": F32, "n": WEAK_INT}, {"TILE": 64})
    found = {v.name: v for s in p.walk() for v in (*ir.defs(s), *ir.uses(s))}
    assert [(v.kind, v.source) for v in p.params] == [(ir.PARAM, "x"), (ir.PARAM, "out"), (ir.PARAM, "n")]
    users = {(v.source, v.kind) for v in found.values() if v.kind == ir.USER}
    assert {("pair[0]", ir.USER), ("pair[1]", ir.USER), ("i", ir.USER), ("y", ir.USER)} <= users
    assert all(v.source == "" for v in found.values() if v.kind == ir.TEMP)
    assert ir.label(next(v for v in found.values() if v.source == "pair[0]")) == "pair[0]"
    temp = next(v for v in found.values() if v.kind == ir.TEMP)
    assert ir.label(temp) == f"({temp.name})"


def test_the_plan_shows_tuple_items_by_their_source_names():
    from coop_tiles.planner import plan_layouts

    f2 = ArrayType(np.dtype(np.float32), 2)
    p = build_program(matrix_scan.fn, {"m": f2, "out": f2, "red": f2, "n": INT64}, {"TILE": 128})
    labels = {t.label for t in plan_layouts(p).tiles.values()}
    assert {"cols[0]", "cols[3]"} <= labels


# ----- rewrites owned by ops ---------------------------------------------------------------------------------
def test_the_rewrite_stage_runs_the_rewrites_the_ops_register():
    owners = {type(op).__name__ for op in base.rewriting_ops()}
    assert {"Histogram", "Load", "DeviceAssertOp"} <= owners
    p = rewrite_stage(_histogram_program())
    assert any(isinstance(s, HistogramBegin) for s in p.walk())


def _asserting(x, n):
    ct.device_assert(n > 0, "n must be positive")
    x[0] = n


@pytest.mark.parametrize("debug", [False, True])
def test_device_asserts_are_dropped_by_their_ops_rewrite_unless_debugging(debug):
    p = rewrite_stage(build_program(_asserting, {"x": I32, "n": INT64}, {}), debug)
    kept = [s for s in p.walk() if type(s).__name__ == "DeviceAssert"]
    assert len(kept) == int(debug)


def test_load_converted_is_the_load_ops_rewrite():
    def k(x, y, TILE: ct.constexpr):
        tile.store(y, 0, tile.load(x, 0, TILE).astype(np.float32))

    p = rewrite_stage(build_program(k, {"x": ArrayType(np.dtype(np.float16)), "y": F32}, {"TILE": 64}))
    (load,) = [s for s in p.walk() if type(s).__name__ == "TileLoad"]
    assert load.out.type == TileType(np.dtype(np.float32), 64)
    ir.verify(p)


# ----- a front-end bug ir.verify found -------------------------------------------------------------------
def _loop_variable_after_the_loop(x, n):
    for i in range(n):
        x[i] = 1
    x[0] = i  # HERE: no `i` when the range is empty


def _loop_variable_bound_before(x, n):
    i = 5
    for i in range(n):
        x[i] = 1
    x[0] = i


def test_a_loop_variable_read_after_its_loop_must_be_bound_before_it():
    """An empty range binds no loop variable: the front end accepted the read (the interpreter then
    failed with a KeyError, and ir.verify rejected the IR); it is now a located user error."""
    with pytest.raises(ct.TileSyntaxError, match="variable 'i' is not assigned on every path") as e:
        build_program(_loop_variable_after_the_loop, {"x": I32, "n": INT64}, {})
    assert e.value.loc.text.strip() == "x[0] = i  # HERE: no `i` when the range is empty"
    x = np.zeros(4, np.int32)
    ct.jit(_loop_variable_bound_before, interpret=True)[1](x, 0)
    assert x[0] == 5
    ct.jit(_loop_variable_bound_before, interpret=True)[1](x, 3)
    assert list(x) == [2, 1, 1, 0]
