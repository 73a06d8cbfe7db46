"""2-D tiles (issue 19) on a GPU: every program of `programs_2d` against its NumPy reference (needs a GPU),
with CuPy and with PyTorch tensors, and at block sizes that give other row arrangements."""

import numpy as np
import pytest
from programs_2d import CASES_2D

import coop_tiles as ct

pytestmark = pytest.mark.gpu


def _library(name):
    """(to device, to host) for CuPy, or for PyTorch (which has bfloat16: moved as its bits)."""
    if name == "cupy":
        cp = pytest.importorskip("cupy")
        return cp.asarray, lambda a, dt: cp.asnumpy(a)
    torch = pytest.importorskip("torch")

    def to_device(a):
        if a.dtype == ct.bfloat16:
            return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).cuda().view(torch.bfloat16)
        return torch.from_numpy(np.ascontiguousarray(a)).cuda()

    def to_host(t, dt):
        if dt == ct.bfloat16:
            return t.view(torch.int16).cpu().numpy().view(ct.bfloat16)
        return t.cpu().numpy()

    return to_device, to_host


def _run(case, library, **jit):
    to_device, to_host = _library("torch" if case.library == "torch" else library)
    args = [to_device(a) if isinstance(a, np.ndarray) else a for a in case.args]
    kernel = ct.jit(case.kernel.fn, **jit) if jit else case.kernel
    kernel[case.grid](*case.launch_args(args), **case.constexprs)
    if library == "torch" or case.library == "torch":
        pytest.importorskip("torch").cuda.synchronize()
    case.check([to_host(args[i], case.args[i].dtype) for i in case.outputs])


@pytest.mark.parametrize("case", CASES_2D, ids=lambda c: c.name)
def test_gpu_matches_reference(case):
    _run(case, "cupy")


@pytest.mark.parametrize("case", CASES_2D, ids=lambda c: c.name)
def test_gpu_with_torch_tensors_matches_reference(case):
    _run(case, "torch")


@pytest.mark.parametrize("threads", [32, 64, 128, 512, 1024])
@pytest.mark.parametrize(
    "case", [c for c in CASES_2D if c.name.startswith(("row_scans", "row_softmax", "axis_red"))], ids=lambda c: c.name
)
def test_gpu_other_block_sizes_match_reference(case, threads):
    """Other block sizes give other lanes per row (a row within a warp, across warps, several rows per thread)."""
    _run(case, "cupy", block_threads=threads)
