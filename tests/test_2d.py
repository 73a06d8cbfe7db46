"""2-D tiles (issue 19) without a GPU: every program of `programs_2d` in the interpreter against its NumPy
reference and compiled to a cubin (sm_90 and sm_80), and the row layouts' maps, remaps and plans."""

import re

import numpy as np
import pytest
from carve_checker import check, format_report
from drawing_checker import drawing_problems
from programs_2d import CASES_2D, layer_norm, row_scans, row_softmax

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.lang import ir
from coop_tiles.ops.shape import source_elements, source_expr
from coop_tiles.planner.layout import PER_COL, PER_ROW, WHOLE, RowShape, choose_rows

_PROGRAMS = {}
for _case in CASES_2D:
    _PROGRAMS.setdefault(_case.kernel, _case)


@pytest.mark.parametrize("case", CASES_2D, ids=lambda c: c.name)
def test_interpreter_matches_reference(case):
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in case.args]
    ct.jit(case.kernel.fn, interpret=True)[case.grid](*case.launch_args(args), **case.constexprs)
    case.check([args[i] for i in case.outputs])


@pytest.mark.parametrize("case", CASES_2D, ids=lambda c: c.name)
def test_compiles_to_cubin_without_local_memory(case, tmp_path):
    k = case.kernel.compile(*case.args, arch="sm_90", **case.constexprs)
    assert k.cubin[:4] == b"\x7fELF"
    assert k.local_memory_bytes() == 0
    problems = check(k.program, k.plan)
    assert not problems, format_report(problems, k.program, k.plan)
    problems = drawing_problems(k.plan, tmp_path / "plan.svg", k.program)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("case", list(_PROGRAMS.values()), ids=lambda c: c.name)
def test_compiles_for_sm_80(case):
    assert case.kernel.compile(*case.args, arch="sm_80", **case.constexprs).cubin[:4] == b"\x7fELF"


SHAPES = [
    RowShape(64, 64, 4, 16, 1),
    RowShape(10, 7, 2, 4, 3),
    RowShape(33, 300, 64, 5, 1),
    RowShape(5, 3, 1, 3, 2),
    RowShape(4, 64, 4, 16, 1, run=4),  # interleaved 16-byte runs
    RowShape(3, 100, 8, 16, 1, run=4),
]


def _python(expr: str) -> str:
    """A C++ index expression of `RowShape.index_expr` as Python (non-negative ints: `/` is `//`)."""
    expr = expr.replace("&&", " and ").replace("/", "//")
    return re.sub(r"^\(\((.*)\) \? (.*) : (\d+)\)$", r"(\2 if (\1) else \3)", expr)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("holds", [WHOLE, PER_ROW, PER_COL])
def test_row_layout_code_matches_its_python_map(shape, holds):
    rs = shape.holding(holds)
    size = {WHOLE: rs.m * rs.n, PER_ROW: rs.m, PER_COL: rs.n}[holds]
    threads = rs.lanes * -(-rs.m // rs.rows)
    seen = set()
    for tid in range(threads):
        for i in range(rs.items):
            want = rs.element(tid, i)
            for code in (rs.index_expr("tid", size, python=True), _python(rs.index_expr("tid", size))):
                got = eval(code, {"tid": tid, "i": i})  # noqa: S307 - the generated expression
                assert got == (size if want is None else want), (code, tid, i)
            if want is not None:
                seen.add(want)
    assert seen == set(range(size))  # every element held (replicas: by several threads)


@pytest.mark.parametrize(
    "kind, axis, src, out",
    [
        (ir.BROADCAST, None, (4, 1), (4, 6)),
        (ir.BROADCAST, None, (6,), (4, 6)),
        (ir.BROADCAST, None, (1, 6), (4, 6)),
        (ir.BROADCAST, None, (1, 1), (4, 6)),
        (ir.BROADCAST, None, (1,), (5,)),
        (ir.RESHAPE, None, (4, 6), (3, 8)),
        (ir.TRANSPOSE, None, (4, 6), (6, 4)),
        (ir.FLIP, 0, (4, 6), (4, 6)),
        (ir.FLIP, 1, (4, 6), (4, 6)),
        (ir.FLIP, 0, (7,), (7,)),
    ],
)
def test_exchange_index_matches_the_remaps_meaning(kind, axis, src, out):
    s = ir.TileRemap(ir.Var("o", ir_tile(out)), ir.Var("s", ir_tile(src)), kind, axis)
    want = source_elements(kind, axis, src, out)
    code = source_expr(s, "e").replace("/", "//")
    assert [eval(code, {"e": e}) for e in range(len(want))] == list(want)  # noqa: S307


def ir_tile(shape):
    from coop_tiles.lang.types import TileType

    return TileType(np.dtype(np.float32), 0, shape)


def test_row_arrangement_prefers_no_padding_then_vectors_then_narrow_rows():
    assert choose_rows(64, 64, 256, 4) == RowShape(64, 64, 4, 16, 1)  # a block of 64 rows of 64: 4 lanes a row
    assert choose_rows(1, 4096, 256, 4) == RowShape(1, 4096, 256, 16, 1)  # one long row over the block
    assert choose_rows(64, 32, 256, 4) == RowShape(64, 32, 4, 8, 1)
    assert choose_rows(4096, 1, 256, 4).lanes == 1
    # rows no op takes in order: a lane's columns in interleaved 16-byte runs (coalesced loads)
    assert choose_rows(1, 16384, 512, 4, in_order=False) == RowShape(1, 16384, 512, 32, 1, run=4)
    assert choose_rows(1, 16384, 512, 2, in_order=False).run == 8


def test_softmax_plan_keeps_rows_in_registers():
    x = np.zeros((64, 64), np.float32)
    k = row_softmax.compile(x, x, 64, 64, BM=16, BN=64, arch="sm_90")
    text = str(k.plan)
    assert "16x64" in text and "rows: 16 lanes x 4 items, 1 row/thread" in text
    assert "reduce[max] axis=1: thread-sequential over 4 items + warp shuffles over 16 lanes" in text
    assert "broadcast, each thread's own items" in text and "through shared memory" not in text
    assert k.shared_bytes == 0 and k.local_memory_bytes() == 0
    assert "bar.sync" not in k.ptx


def test_long_rows_load_in_interleaved_runs():
    @ct.jit
    def both(x, y, z, BN: ct.constexpr):
        t = tile.load(x, (0, 0), (1, BN))
        tile.store(y, (0, 0), t - tile.max(t, axis=1, keepdims=True))
        u = tile.load(x, (0, 0), (1, BN))
        tile.store(z, (0, 0), tile.scan(u, axis=1))

    x = np.zeros((1, 8192), np.float32)
    k = both.compile(x, x, x, BN=8192, arch="sm_90")
    plan = str(k.plan)
    assert "rows: 256 lanes x 32 items, 1 row/thread" not in plan  # (scans take interleaved runs too)
    assert plan.count("rows: 256 lanes x 32 items in runs of 4, 1 row/thread") >= 3
    assert k.local_memory_bytes() == 0


def test_layer_norm_weights_broadcast_down_columns_in_registers():
    x = np.zeros((64, 256), np.float32)
    w = np.zeros(256, np.float32)
    k = layer_norm.compile(x, w, w, x, w, w, 64, 256, 1e-5, BM=8, BN=256, arch="sm_90")
    plan = str(k.plan)
    assert "per column, over rows" in plan  # the weights: one value per column, in each row group
    assert "through shared memory" not in plan
    assert k.shared_bytes == 0
    # each thread's runs of 4 weights (and of 4 biases) in one 16-byte load where whole and aligned
    assert plan.count("load, along rows, runs in words where whole") == 2
    assert k.shim_source.count("reinterpret_cast<const uint4*>(p)") == 2


def test_column_scan_is_a_row_scan_between_transposes():
    x = np.zeros((64, 64), np.int32)
    k = row_scans.compile(x, x, x, x, x, np.zeros(64, np.int32), 64, 64, BM=64, BN=64, arch="sm_90")
    assert str(k.plan).count("transpose through shared memory") == 2


def test_row_scan_of_a_wide_row_uses_shared_memory_across_warps():
    @ct.jit
    def wide(x, y, BN: ct.constexpr):
        t = tile.load(x, (0, 0), (2, BN))
        tile.store(y, (0, 0), tile.scan(t, axis=1))

    x = np.zeros((2, 2048), np.float32)
    k = wide.compile(x, x, BN=2048, arch="sm_90")
    assert "shared memory across 4 warps" in str(k.plan)
    assert k.local_memory_bytes() == 0


@pytest.mark.parametrize("threads", [32, 128, 1024])
@pytest.mark.parametrize(
    "case",
    [c for c in CASES_2D if c.name.startswith(("row_scans[float64", "row_softmax[float32", "axis_red"))],
    ids=lambda c: c.name,
)
def test_other_block_sizes_compile(case, threads):
    """The block sizes `test_gpu_2d` also runs: other lanes per row, rows across warps, several rows per thread."""
    k = ct.jit(case.kernel.fn, block_threads=threads).compile(*case.args, arch="sm_90", **case.constexprs)
    assert k.block_threads == threads
    if max(t.items_per_thread for t in k.plan.tiles.values()) <= 32:  # (past that, tiles leave registers)
        assert k.local_memory_bytes() == 0
    problems = check(k.program, k.plan)
    assert not problems, format_report(problems, k.program, k.plan)


@pytest.mark.parametrize("shape", [(16, 256), (4, 2048), (256, 32), (16, 13), (1, 601)], ids=str)
def test_reverse_row_scan_code_has_the_forward_ones_shape(shape):
    """A reverse axis scan is lowered along the rows (no flips): the forward scan's barriers, shared memory and
    shuffles, and no local memory."""

    def kernel(reverse):
        @ct.jit
        def k(x, y, tot, seeds, BM: ct.constexpr, BN: ct.constexpr):
            t = tile.load(x, (0, 0), (BM, BN))
            s, total = tile.scan(t, axis=1, reverse=reverse, initial=tile.load(seeds, 0, BM), return_total=True)
            tile.store(y, (0, 0), s)
            tile.store(tot, 0, total)

        return k

    m, n = shape
    x, sd = np.zeros((m, n), np.float32), np.zeros(m, np.float32)
    fwd, rev = (kernel(r).compile(x, x, sd, sd, BM=m, BN=n, arch="sm_90") for r in (False, True))
    assert "flip" not in str(rev.plan) and "scan[add, reverse] axis=1" in str(rev.plan)
    for k in (fwd, rev):
        assert ".local" not in k.ptx and k.local_memory_bytes() == 0
    assert rev.ptx.count("bar.sync") == fwd.ptx.count("bar.sync")
    assert rev.shared_bytes == fwd.shared_bytes
    assert rev.ptx.count("shfl.sync") == fwd.ptx.count("shfl.sync")
