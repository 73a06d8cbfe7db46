"""`coop_tiles.examples.moe_align_block_size` (issue 22) against a sequential implementation of vLLM's outputs: in
the interpreter, compiled to sm_90 cubins, and on a GPU (marked)."""

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
from carve_checker import check as check_carve
from carve_checker import format_report

from coop_tiles.examples import moe, moe_align_block_size
from coop_tiles.examples.moe import CHUNK, align_routes, count_routes, place_routes, recount_routes
from coop_tiles.lang import interpreter

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tutorials"))
#: the sequential reference of vLLM's outputs is tutorial 15's, the one the tutorial checks itself against
sequential = importlib.import_module("15_moe_routing").sequential

#: (tokens, top-k, experts, block size, id dtype): fewer routes than experts, several chunks, int64 ids, one
#: program's whole chunk, a block size that is not a power of two
SHAPES = [
    (3, 2, 8, 4, np.int32),
    (300, 8, 64, 16, np.int64),
    (700, 8, 256, 64, np.int32),
    (5, 4, 64, 32, np.int32),
    (256, 8, 256, 64, np.int32),
    (200, 8, 60, 24, np.int32),
    (300, 4, 1, 8, np.int32),
]
#: RECOUNT_CHUNKS forcing each path for several chunks: one launch (`recount_routes`), two launches
PATHS = {"one launch": 1 << 30, "two launches": 1}


def routes(tokens, topk, experts, dtype, seed=0):
    ids = np.random.default_rng(seed).integers(0, experts, (tokens, topk)).astype(dtype)
    ids.reshape(-1)[::17] = experts + 3  # (ids outside [0, experts): skipped)
    ids.reshape(-1)[5::23] = -1
    return ids


def check(got, want):
    for name, g, w in zip(("sorted_token_ids", "expert_ids", "num_tokens_post_padded"), got, want):
        assert g.dtype == w.dtype, name
        np.testing.assert_array_equal(g, w, err_msg=name)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("tokens, topk, experts, block, dtype", SHAPES, ids=str)
def test_interpreter_matches_sequential(monkeypatch, tokens, topk, experts, block, dtype, path):
    monkeypatch.setattr(moe, "RECOUNT_CHUNKS", PATHS[path])
    ids = routes(tokens, topk, experts, dtype)
    check(moe_align_block_size(ids, block, experts), sequential(ids, block, experts))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("tokens", [1, 256, 700])
def test_interpreter_skips_every_route(monkeypatch, tokens, path):
    """No expert id in range: no route placed, every block -1, a padded total of 0."""
    monkeypatch.setattr(moe, "RECOUNT_CHUNKS", PATHS[path])
    ids = np.full((tokens, 8), 256, np.int32)
    ids[::2] = -1
    check(moe_align_block_size(ids, 64, 256), sequential(ids, 64, 256))


def test_interpreter_sums_the_counts_in_steps(monkeypatch):
    """More programs than `COLUMNS`: `place_routes` sums the programs' counts a block of columns at a time."""
    monkeypatch.setattr(moe, "RECOUNT_CHUNKS", 1)
    monkeypatch.setattr(moe, "COLUMNS", 2)
    ids = routes(700, 8, 256, np.int32)  # (3 programs)
    check(moe_align_block_size(ids, 64, 256), sequential(ids, 64, 256))


@pytest.mark.parametrize("tile_size", [512, 2048, 4096])
def test_interpreter_recounts_in_steps(monkeypatch, tile_size):
    """`recount_routes` counts the ids before a chunk and from it in steps of RECOUNT_TILE, smaller than a chunk,
    as large, or straddling chunks (4096: chunks of 2048)."""
    monkeypatch.setattr(moe, "RECOUNT_TILE", tile_size)
    ids = routes(1100, 8, 256, np.int32)  # (5 chunks, the last partial)
    check(moe_align_block_size(ids, 64, 256), sequential(ids, 64, 256))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("tokens, block, experts", [(256, 64, 256), (700, 64, 256), (100, 8, 64), (3, 16, 8)], ids=str)
@pytest.mark.parametrize("order", ["program-id order", "reversed"])
def test_interpreter_writes_every_element(monkeypatch, tokens, block, experts, order, path):
    """The outputs' buffer poisoned first, the programs run in either order: every element is written, and no
    program of a launch writes over another's where that matters (the one-launch paths' programs write apart).
    (700 tokens: 3 chunks, 4 programs of `recount_routes`, the last writing only padding.)"""
    poison = -12345

    def poisoned(like, shape, dtype):
        return np.full(shape, poison, np.dtype(dtype))

    monkeypatch.setattr(moe, "empty_like", poisoned)
    monkeypatch.setattr(moe, "RECOUNT_CHUNKS", PATHS[path])
    if order == "reversed":
        monkeypatch.setattr(interpreter, "descending", lambda program: True)
    ids = routes(tokens, 8, experts, np.int32, seed=tokens)
    got = moe_align_block_size(ids, block, experts)
    assert not any((g == poison).any() for g in got)
    check(got, sequential(ids, block, experts))


@pytest.mark.parametrize("block, experts, columns", [(64, 256, 16), (16, 256, 16), (4, 8, 4), (64, 8, 64), (5, 3, 8)])
def test_pad_columns(block, experts, columns):
    """A power of two of columns per padding program: at most PAD_TILE elements, at most the block size rounded
    up."""
    assert moe.pad_columns(block, experts) == columns


def test_programs_compile():
    i32 = np.zeros(1, np.int32)
    args = (i32, i32, i32, i32, 1, 1, 1, 1)
    one = align_routes.compile(*args, CHUNK=CHUNK, EXPERTS=256, BITS=8, COLUMNS=16, arch="sm_90")
    counts = np.zeros((256, 3), np.int32)  # (experts, programs): rows of 12 bytes
    first = count_routes.compile(i32, counts, i32, 1, 1, CHUNK=CHUNK, EXPERTS=256, arch="sm_90")
    assert "histogram" in str(first.plan) and "histogram" in str(one.plan)
    args = (i32, counts, i32, i32, i32, i32, 1, 1, 1)
    second = place_routes.compile(*args, CHUNK=CHUNK, EXPERTS=256, BITS=8, COLUMNS=4, arch="sm_90")
    assert "BlockRadixSort" in str(second.plan) and "BlockRadixSort" in str(one.plan)
    args = (i32, i32, i32, i32, i32, 1, 1, 1, 1)
    constexprs = {"CHUNK": CHUNK, "EXPERTS": 256, "BITS": 8, "COLUMNS": 16, "TILE": moe.RECOUNT_TILE}
    recount = recount_routes.compile(*args, **constexprs, arch="sm_90")
    assert "BlockRadixSort" in str(recount.plan) and "32 lane copies" in str(recount.plan)
    for k in (one, recount, first, second):  # (the H100 machine's NVRTC spills 8 bytes of one program; this one none)
        problems = check_carve(k.program, k.plan)
        assert not problems and k.local_memory_bytes() <= 8, format_report(problems, k.program, k.plan)


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


@pytest.mark.gpu
@pytest.mark.parametrize(
    "tokens, path", [(256, "one launch"), (4096, "one launch"), (4096, "two launches"), (16384, "one launch")]
)
def test_gpu_writes_every_element(monkeypatch, tokens, path):
    """The buffer poisoned before the launch: every element is written, on the GPU's schedule of the programs;
    the path forced (by RECOUNT_CHUNKS) where the tokens take several chunks."""
    torch = pytest.importorskip("torch")
    poison = -12345

    def poisoned(like, shape, dtype):
        return torch.full(shape, poison, dtype=getattr(torch, dtype), device=like.device)

    monkeypatch.setattr(moe, "empty_like", poisoned)
    monkeypatch.setattr(moe, "RECOUNT_CHUNKS", PATHS[path])
    ids = routes(tokens, 8, 256, np.int32, seed=tokens + 1)
    got = [a.cpu().numpy() for a in moe_align_block_size(torch.from_numpy(ids).cuda(), 64, 256)]
    assert not any((g == poison).any() for g in got)
    check(got, sequential(ids, 64, 256))
