"""The option matrix (tests/option_matrix.py) on a GPU: every allowed combination of every op's
options, its outputs against the interpreter's and the NumPy reference (needs a GPU and CuPy)."""

import pytest
from option_matrix import ALLOWED, check, interpret, outcome, run_on_gpu, warm_cache

pytestmark = pytest.mark.gpu

_interpreted: dict = {}
_device: dict = {}


@pytest.fixture(scope="module")
def cubins_cached():
    pytest.importorskip("cupy")
    warm_cache()


@pytest.mark.parametrize("c", ALLOWED, ids=str)
def test_gpu_matches_interpreter(c, cubins_cached):
    source, got = outcome(run_on_gpu, c, _device)
    _, want = outcome(interpret, c, _interpreted)
    check(source, c, got, against=want)
    check(source, c, got)
