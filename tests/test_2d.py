"""2-D tiles (issue 19) in the interpreter, against NumPy references (`programs_2d`)."""

import numpy as np
import pytest
from programs_2d import CASES_2D

import coop_tiles as ct


@pytest.mark.parametrize("case", CASES_2D, ids=lambda c: c.name)
def test_interpreter_matches_reference(case):
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in case.args]
    ct.jit(case.kernel.fn, interpret=True)[case.grid](*case.launch_args(args), **case.constexprs)
    case.check([args[i] for i in case.outputs])
