"""Which block of the state `coop_tiles.examples.selective_state_update` should give each program (issue 19): one short
GPU run over the launch choices, for the shapes and dtypes of benchmarks/sections/state_update.py.

    python benchmarks/state_update_probe.py      # PyTorch; about a minute on an H100

For each case (Mamba-1 (64, 5120, 16), Mamba-2 (64, 80, 64, 128)) and input dtype, every (BLOCK_D, threads) below is
run once from the same state and checked against the section's float64 reference, then timed as the section times it
(a working state updated in place, `ct.testing.do_bench(..., host_ahead=True)`: the L2 flushed before each call, the
GPU's time alone). The choices differ in the elements of state per thread (BLOCK_D * DSTATE / threads: 4, 8 or 16:
one to four 16-byte words of a row, the lanes' words interleaved) and so in bytes in flight per thread, registers,
and lanes per row (shuffle steps of the row sums). `launch_choice`'s current choice is marked *; the fastest correct
choice per case is what it should return.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import coop_tiles.examples.state_update as ssu  # noqa: E402
from benchmarks.device import torch_copy_rate_gbs  # noqa: E402
from benchmarks.sections import state_update as section  # noqa: E402
from benchmarks.timing import cuda_time_ms  # noqa: E402
from coop_tiles.examples import selective_state_update  # noqa: E402

#: (BLOCK_D, threads) per dstate: 4, 8 and 16 elements of state per thread, at several block sizes
CHOICES = {
    16: [(32, 128), (64, 128), (128, 128), (64, 256), (128, 256), (256, 256), (128, 512), (256, 512), (32, 64)],
    128: [(4, 128), (8, 256), (16, 512), (8, 128), (16, 256), (16, 128), (32, 256), (64, 512)],
}


def main() -> None:
    import torch

    copy_gbs = torch_copy_rate_gbs(torch)
    default = ssu.launch_choice
    print("| case | dtype | BLOCK_D | threads | per thread | ms | of limit | correct |")
    print("|---|---|---|---|---|---|---|---|")
    for name, *shape in section.STATE_UPDATE_SHAPES:
        dim, dstate = shape[2], shape[3]
        for dtype in section.STATE_UPDATE_DTYPES:
            args = section.state_update_inputs(name, tuple(shape), dtype)
            limit_ms = section.state_update_bytes(args) / 1e6 / copy_gbs
            expected_state, expected_out = section.state_update_reference(args)
            rtol, atol = section.STATE_UPDATE_TOLERANCE[dtype]
            for block_d, threads in CHOICES[dstate]:
                ssu.launch_choice = lambda d, n, c=(block_d, dstate, threads): c
                ssu._PLANS.clear()  # (the plans of the signatures seen hold the launch choice made for them)
                try:
                    state = args["state"].clone()
                    out = selective_state_update(state, **_rest(args))
                    ok = torch.allclose(state.double(), expected_state, rtol=rtol, atol=atol) and torch.allclose(
                        out.double(), expected_out, rtol=rtol, atol=atol
                    )
                    working = args["state"].clone()
                    ms = cuda_time_ms(lambda w=working: selective_state_update(w, **_rest(args)), host_ahead=True)
                finally:
                    ssu.launch_choice = default
                    ssu._PLANS.clear()
                mark = "*" if default(dim, dstate) == (block_d, dstate, threads) else ""
                print(
                    f"| {name} | {dtype} | {block_d}{mark} | {threads} | {block_d * dstate // threads} | {ms:.4f} "
                    f"| {limit_ms / ms:.0%} | {'yes' if ok else 'NO'} |"
                )


def _rest(args: dict) -> dict:
    """The section's arguments but the state, as its `measure` passes them."""
    return {**{k: v for k, v in args.items() if k != "state"}, "dt_softplus": True}


if __name__ == "__main__":
    main()
