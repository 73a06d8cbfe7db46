"""Issue 17's program on a GPU: a tile in shared memory scanned, then sorted (needs a GPU).

Its first carve raced (the last store's TempStorage over the tile the sort still read): `y` came out
wrong in the last, partial tile under compute-sanitizer, and right by luck without it. The program is
also a shared case (`programs.scan_then_sort`), and `scripts/gpu-check.sh --sanitize` runs it under
racecheck and memcheck.
"""

import numpy as np
import pytest
from carve_checker import check, format_report
from programs import scan_then_sort

import coop_tiles as ct

pytestmark = pytest.mark.gpu

TILE = 9000


@pytest.mark.parametrize("n", [22583, 14346])
def test_gpu_scan_then_sort_matches_numpy(n):
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(n)
    for _ in range(10):  # the race showed only now and then: launch it several times
        x = rng.integers(-1000, 1000, n).astype(np.int32)
        y, z = cp.zeros(n, cp.int32), cp.zeros(n, cp.int32)
        scan_then_sort[ct.cdiv(n, TILE)](cp.asarray(x), y, z, n, TILE=TILE)
        tiles = [x[base : base + TILE] for base in range(0, n, TILE)]
        np.testing.assert_array_equal(cp.asnumpy(y), np.concatenate([np.cumsum(t, dtype=np.int32) for t in tiles]))
        np.testing.assert_array_equal(cp.asnumpy(z), np.concatenate([np.sort(t) for t in tiles]))


def test_gpu_plan_of_scan_then_sort_passes_the_checker():
    """The plan of the kernel the GPU runs (this device's arch, NVRTC's TempStorage sizes)."""
    x = np.zeros(22583, np.int32)
    k = scan_then_sort.compile(x, x, x, len(x), TILE=TILE)
    assert k.plan.carve.tiles, "the tile lives in shared memory"
    problems = check(k.program, k.plan)
    assert not problems, format_report(problems, k.program, k.plan)
