"""Counts accumulated through a loop with lane copies (issue 22): where the planner takes them, and the
properties of their generated code that made the hand-written kernel fast (checked on an sm_90 cubin, no GPU)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from programs import histogram_loop

from coop_tiles.ops.histogram import ALGORITHMS, LANES, lanes_pay, resolve_algorithm

CHUNK, ITEMS = 4096, 16  # the planner's 256 threads: 16 uint8 items each


def test_lane_copies_are_taken_where_they_fit_and_keep_half_the_threads_busy():
    assert lanes_pay(256, 256)  # 33 KB a block: 6 blocks of 256 threads an SM
    assert not lanes_pay(256, 128)  # 6 blocks of 128 threads: under half of 2048
    assert lanes_pay(383, 256) and not lanes_pay(384, 1024)  # 48 KiB a block at most
    assert resolve_algorithm("auto", 256, ITEMS, threads=256) == LANES
    assert resolve_algorithm("auto", 256, ITEMS) == ALGORITHMS["atomic"]  # not accumulated: CUB's
    assert resolve_algorithm("atomic", 256, ITEMS, threads=256) == ALGORITHMS["atomic"]  # asked for
    assert resolve_algorithm("auto", 8, ITEMS, threads=256) == ALGORITHMS["sort"]


@pytest.fixture(scope="module")
def kernel():
    x = np.zeros(1 << 20, np.uint8)
    return histogram_loop.compile(x, np.zeros(256, np.int32), x.size, BINS=256, CHUNK=CHUNK, ALGO="auto", arch="sm_90")


def test_the_loop_adds_to_lane_copies_without_a_branch_per_item(kernel):
    assert LANES in {c.algorithm for c in kernel.plan.collectives.values()}
    ptx = [line.strip() for line in kernel.ptx.splitlines()]
    atoms = [i for i, line in enumerate(ptx) if "atom.shared" in line]
    assert len(atoms) == 2 * ITEMS  # a whole tile's path and a partial one's, each unrolled
    assert all(not ptx[i].startswith("@") for i in atoms)  # every item adds (uncounted: to the spare bin)
    for path in (atoms[:ITEMS], atoms[ITEMS:]):  # no branch (a convergence region in SASS) between adds
        assert not [line for line in ptx[path[0] : path[-1]] if re.search(r"\bbra\b", line)]
    # the whole tile's adds test no index; the partial one's compare indices in 32 bits
    assert not [line for line in ptx[atoms[0] : atoms[ITEMS - 1]] if line.startswith("setp")]
    assert not [line for line in ptx[atoms[ITEMS] : atoms[-1]] if re.match(r"setp\.\w+\.[su]64", line)]


def test_the_lane_copy_loop_leaves_room_for_a_full_multiprocessor_of_threads(kernel):
    assert kernel.registers() <= 32  # 2048 threads' worth of an SM's 64K registers
    assert kernel.local_memory_bytes() == 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, bins, low, high", [(np.uint8, 256, 0, 256), (np.int16, 300, -20, 320)])
def test_gpu_lane_copies_count_as_numpy(dtype, bins, low, high):
    import cupy as cp

    n = (1 << 20) + 777  # whole tiles and a partial last one
    host = np.random.default_rng(22).integers(low, high, n).astype(dtype)
    out = cp.zeros(bins, cp.int32)
    histogram_loop[132 * 2](cp.asarray(host), out, n, BINS=bins, CHUNK=CHUNK, ALGO="auto")
    wide = host.astype(np.int64)
    expected = np.bincount(wide[(wide >= 0) & (wide < bins)], minlength=bins)
    np.testing.assert_array_equal(cp.asnumpy(out), expected)
