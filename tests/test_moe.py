"""`coop_tiles.examples.moe_align_block_size` (issue 22) against a sequential implementation of vLLM's outputs: in
the interpreter, compiled to sm_90 cubins, and on a GPU (marked)."""

import importlib
import inspect
import sys
from pathlib import Path

import numpy as np
import pytest
from carve_checker import check as check_carve
from carve_checker import format_report

from coop_tiles.examples import moe, moe_align_block_size
from coop_tiles.examples.moe import CHUNK, align_routes, count_routes, place_routes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tutorials"))
#: the sequential reference of vLLM's outputs is tutorial 15's, the one the tutorial checks itself against
sequential = importlib.import_module("15_moe_routing").sequential

#: (tokens, top-k, experts, block size, id dtype): fewer routes than experts, several programs, int64 ids, one
#: program's whole chunk
SHAPES = [
    (3, 2, 8, 4, np.int32),
    (300, 8, 64, 16, np.int64),
    (700, 8, 256, 64, np.int32),
    (5, 4, 64, 32, np.int32),
    (256, 8, 256, 64, np.int32),
]


def routes(tokens, topk, experts, dtype, seed=0):
    ids = np.random.default_rng(seed).integers(0, experts, (tokens, topk)).astype(dtype)
    ids.reshape(-1)[::17] = experts + 3  # (ids outside [0, experts): skipped)
    ids.reshape(-1)[5::23] = -1
    return ids


def check(got, want):
    for name, g, w in zip(("sorted_token_ids", "expert_ids", "num_tokens_post_padded"), got, want):
        assert g.dtype == w.dtype, name
        np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.mark.parametrize("tokens, topk, experts, block, dtype", SHAPES, ids=str)
def test_interpreter_matches_sequential(tokens, topk, experts, block, dtype):
    ids = routes(tokens, topk, experts, dtype)
    check(moe_align_block_size(ids, block, experts), sequential(ids, block, experts))


def test_interpreter_sums_the_counts_in_steps(monkeypatch):
    """More programs than `COLUMNS`: `place_routes` sums the programs' counts a block of columns at a time."""
    monkeypatch.setattr(moe, "COLUMNS", 2)
    ids = routes(700, 8, 256, np.int32)  # (3 programs)
    check(moe_align_block_size(ids, 64, 256), sequential(ids, 64, 256))


def _line_of(fn, text: str) -> int:
    """The file line of the first line of `fn` that contains `text`."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_programs_compile():
    i32 = np.zeros(1, np.int32)
    one = align_routes.compile(i32, i32, i32, i32, i32, 1, 1, 1, 1, CHUNK=CHUNK, EXPERTS=256, BITS=9, arch="sm_90")
    counts = np.zeros((256, 3), np.int32)  # (experts, programs): rows of 12 bytes
    first = count_routes.compile(i32, counts, i32, 1, 1, CHUNK=CHUNK, EXPERTS=256, arch="sm_90")
    assert "histogram" in str(first.plan)
    args = (i32, counts, i32, i32, i32, i32, 1, 1, 1)
    second = place_routes.compile(*args, CHUNK=CHUNK, EXPERTS=256, BITS=9, COLUMNS=4, arch="sm_90")
    assert "BlockRadixSort" in str(second.plan) and "BlockRadixSort" in str(one.plan)
    for k in (one, first, second):  # (the H100 machine's NVRTC spills 8 bytes of one program; this one none)
        problems = check_carve(k.program, k.plan)
        assert not problems and k.local_memory_bytes() <= 8, format_report(problems, k.program, k.plan)
    # the one program writes `sorted_ids` twice, the sentinel then the routes: a barrier comes between them
    fill, scatter = _line_of(moe.fill, "tile.store(sorted_ids"), _line_of(moe.place, "tile.scatter(sorted_ids")
    assert any(fill < b.line <= scatter for b in one.plan.carve.barriers.values()), str(one.plan)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [1, 256, 700, 4096, 16384])
@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_gpu_matches_sequential(tokens, library):
    ids = routes(tokens, 8, 256, np.int32, seed=tokens)
    if library == "torch":
        torch = pytest.importorskip("torch")
        got = moe_align_block_size(torch.from_numpy(ids).cuda(), 64, 256)
        got = [a.cpu().numpy() for a in got]
    else:
        cp = pytest.importorskip("cupy")
        got = [cp.asnumpy(a) for a in moe_align_block_size(cp.asarray(ids), 64, 256)]
    check(got, sequential(ids, 64, 256))
