"""Selection (issue 22) on a GPU, against the same sequential references as the interpreter, for every integer
and float dtype (tests/programs_select.py)."""

import numpy as np
import pytest
from programs_select import CASES_SELECT
from test_gpu import _library

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("case", CASES_SELECT, ids=lambda c: c.name)
def test_gpu_matches_reference(case):
    to_device, to_host = _library(case.library)
    args = [to_device(a) if isinstance(a, np.ndarray) else a for a in case.args]
    case.kernel[case.grid](*case.launch_args(args), **case.constexprs)
    case.check([to_host(args[i], case.args[i].dtype) for i in case.outputs])
