"""Selection (issue 22) on a GPU, against the same sequential references as the interpreter, for every integer
and float dtype (tests/programs_select.py)."""

import numpy as np
import pytest
from programs_select import CASES_SELECT, SELECT_DTYPES
from test_gpu import _library

import coop_tiles as ct

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("case", CASES_SELECT, ids=lambda c: c.name)
def test_gpu_matches_reference(case):
    to_device, to_host = _library(case.library)
    args = [to_device(a) if isinstance(a, np.ndarray) else a for a in case.args]
    case.kernel[case.grid](*case.launch_args(args), **case.constexprs)
    case.check([to_host(args[i], case.args[i].dtype) for i in case.outputs])


@pytest.mark.parametrize("dtype", [d.name for d in SELECT_DTYPES])
@pytest.mark.parametrize("fraction", [0.5, 0.05])
def test_compact_and_nonzero_examples(dtype, fraction):
    """Whole-array compaction in one launch (several hundred programs, the last partial) against NumPy."""
    from coop_tiles.examples import compact, nonzero

    dt = np.dtype(ct.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(5)
    x = np.where(rng.random(1_000_003) < fraction, rng.integers(1, 100, 1_000_003), 0).astype(dt)
    to_device, to_host = _library("torch" if dt == ct.bfloat16 else "cupy")
    d = to_device(x)
    np.testing.assert_array_equal(to_host(compact(d, d != 0), dt), x[x != 0])
    np.testing.assert_array_equal(to_host(nonzero(d), np.int64), np.nonzero(x)[0][:, None])
