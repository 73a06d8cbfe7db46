"""The shared programs on a GPU, against the same references as the interpreter (needs a GPU)."""

import numpy as np
import pytest
from programs import CASES

import coop_tiles as ct

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gpu_matches_reference(case):
    to_device, to_host = _library(case.library)
    args = [to_device(a) if isinstance(a, np.ndarray) else a for a in case.args]
    case.kernel[case.grid](*case.launch_args(args), **case.constexprs)
    got = [to_host(args[i], case.args[i].dtype) for i in case.outputs]
    case.check(got)


#: shared programs also run on PyTorch tensors: 16-bit floats, N-D and transposed views, tuple scans
TORCH_CASES = [
    c
    for c in CASES
    if c.name.startswith(
        (
            "half_ops[float16]",
            "rows_cumsum[contiguous]",
            "rows_cumsum[transposed]",
            "rows_cumsum[strided",
            "batched_rows",
            "chunked_linrec",
            "tile_linrec",
            "matrix_scan",
            "tile_argmax",
            "scaled_cumsum",
            "bool_copy",
        )
    )
]


@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: c.name)
def test_gpu_with_torch_tensors_matches_reference(case):
    to_device, to_host = _library("torch")
    args = [to_device(a) if isinstance(a, np.ndarray) else a for a in case.args]
    case.kernel[case.grid](*case.launch_args(args), **case.constexprs)
    torch = pytest.importorskip("torch")
    torch.cuda.synchronize()
    case.check([to_host(args[i], case.args[i].dtype) for i in case.outputs])


def _library(name):
    """(to device, to host) for CuPy, or for PyTorch (which has bfloat16: moved as its bits)."""
    if name == "cupy":
        cp = pytest.importorskip("cupy")
        return cp.asarray, lambda a, dt: cp.asnumpy(a)
    torch = pytest.importorskip("torch")

    def to_device(a):
        if a.dtype == ct.bfloat16:
            return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
        return torch.from_numpy(a).cuda()

    def to_host(t, dt):
        if dt == ct.bfloat16:
            return t.view(torch.int16).cpu().numpy().view(ct.bfloat16)
        return t.cpu().numpy()

    return to_device, to_host
