"""The shared programs on a GPU, against the same references as the interpreter (needs a GPU)."""

import numpy as np
import pytest
from programs import CASES

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gpu_matches_reference(case):
    cp = pytest.importorskip("cupy")
    args = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in case.args]
    case.kernel[case.grid](*args, **case.constexprs)
    got = [cp.asnumpy(args[i]) for i in case.outputs]
    case.check(got)
