"""A short GPU run of issue 20's backward: `selective_scan_bwd` (its default launch) against Mamba's CUDA backward at
the mamba_bwd section's shapes and dtypes, each gradient compared with Mamba's (largest difference over Mamba's largest
magnitude). The section (benchmarks/sections/mamba_bwd.py) also checks a float64 reference, tries every launch, and
measures peak memory and a training step; this fits beside other work in one 10-minute GPU call.

    python benchmarks/bwd_probe.py      # carry benchmarks/.mamba (benchmarks/_mamba_cuda.py builds Mamba's op)
"""

import sys
import time

sys.path.insert(0, ".")
import torch  # noqa: E402

from benchmarks import _mamba_cuda  # noqa: E402
from benchmarks.sections.mamba import MAMBA_DTYPES, MAMBA_SHAPES, _mamba_inputs  # noqa: E402
from benchmarks.sections.mamba_bwd import GRADS  # noqa: E402
from benchmarks.timing import cuda_time_ms  # noqa: E402
from coop_tiles.examples.selective_scan import forward  # noqa: E402
from coop_tiles.examples.selective_scan_backward import selective_scan_bwd  # noqa: E402

MAMBA_GRADS = ("u", "delta", "A", "B", "C", "D", "delta_bias", "z")  # the order of Mamba's binding's results


def row(ext, shape: tuple[int, ...], dtype: str) -> str:
    """Both backwards timed on one shape and dtype, and the largest relative difference of each gradient."""
    x = _mamba_inputs(shape, dtype)
    args = [x[k] for k in GRADS]
    dout = torch.randn_like(x["u"])
    _, states = forward(*args[:5], x["D"], x["z"], x["delta_bias"], True)
    out, mamba_states, _ = ext.fwd(*args, True)

    def ours():
        return selective_scan_bwd(dout, *args[:5], states, x["D"], x["z"], x["delta_bias"], True)

    def theirs():
        return ext.bwd(*args, dout, mamba_states, out, True)

    mine, reference = ours(), dict(zip(MAMBA_GRADS, theirs()))
    diffs = [
        f"{k} {float((mine[k].float() - v.float()).abs().max() / v.float().abs().max().clamp(min=1e-6)):.1e}"
        for k, v in reference.items()
    ]
    t_ours, t_theirs = cuda_time_ms(ours), cuda_time_ms(theirs)
    return (f"{shape} {dtype}: ours {t_ours:.3f} ms, Mamba {t_theirs:.3f} ms, Mamba / ours {t_theirs / t_ours:.2f}x; "
            f"largest difference from Mamba's over its largest value: {', '.join(diffs)}")  # fmt: skip


if __name__ == "__main__":
    started = time.time()
    extension = _mamba_cuda.load()
    print(f"Mamba's op built or loaded in {time.time() - started:.0f} s", flush=True)
    for shape in MAMBA_SHAPES:
        for dtype in MAMBA_DTYPES:
            print(row(extension, shape, dtype), flush=True)
            torch.cuda.empty_cache()
