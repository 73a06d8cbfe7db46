"""Tutorial 08: Mamba's selective scan (the forward pass) as a tile program.

Mamba's selective state-space layer runs, for every batch b and channel d, `dstate` linear
recurrences along the sequence, one per state n, and sums them into one output:

    dt_l   = softplus(delta_l + delta_bias[d])
    h_l[n] = exp(dt_l * A[d, n]) * h_(l-1)[n] + dt_l * B_l[n] * u_l        (h_(-1) = 0)
    out_l  = (sum_n h_l[n] * C_l[n] + D[d] * u_l) * silu(z_l)

Each recurrence is tutorial 04's h -> a*h + b, so a block scans it with the same `@ct.combine`
function over (a, b) pairs, and carries it across chunks of the sequence with `initial=` and
`return_total=True`. The program is `selective_scan` in coop_tiles/examples/selective_scan.py:
37 lines, and the 4-line combine function `affine`. Read it next to Mamba's kernel,
csrc/selective_scan/selective_scan_fwd_kernel.cuh in state-spaces/mamba (376 lines: the kernel
function 235, its traits 47, its launch 39; with load/store/scan helpers in the 255 lines of
selective_scan_common.h, and complex weights, which the tile program leaves out):

    Mamba's CUDA kernel (per thread)                  the tile program (per thread block)
    one block per (batch, dim) row, chunks of          one program per (d, b) row: `for base in
      kNThreads x kNItems = 128 x 16 elements            range(0, L, CHUNK)`, CHUNK = 2048
    load_input: BlockLoad of u and delta               tile.load(u[b, d], base, CHUNK, valid=L - base)
    delta + bias, softplus, delta * u, D * u           element-wise tile expressions
    for each state: load_weight(B), load_weight(C)     for n in range(N): tile.load(B_rows[n], ...)
    (exp2f(delta * A * log2 e), B * delta * u)         (ct.exp2(dt * (A[d, n] * LOG2E)), dtx * Bn)
    BlockScan<float2>::InclusiveScan(..., SSMScanOp,   tile.scan((a, bx), op=affine,
      prefix_op): the running prefix carries the         initial=(1.0, h0), return_total=True)
      state from chunk to chunk in shared memory       last_state[b, d, n] carries it (thread 0 writes it)
    out_vals += h * C                                  y = y + h * Cn
    out * silu(z), BlockStore                          y * zt * ct.sigmoid(zt), tile.store(out[b, d], ...)

The planner makes the choices Mamba's author made by hand, and prints them in
`kernel.compile(...).plan`: rows of 16-bit floats move in 16-byte words per thread and are converted
to float32 as they arrive; B and C rows, loaded in the innermost loop, move in words too, with no
shared memory; the scan is `cub::BlockScan` over a struct of two floats. It is a carried scan, with
one barrier per state, which also shares thread 0's seed (Mamba's prefix callback takes two); the
carry is written to `last_state` and read back by thread 0 alone, so the state loop has no other
barrier. The entry point
`coop_tiles.examples.selective_scan_fwd(u, delta, A, B, C, D, z, delta_bias, delta_softplus)` takes
Mamba's arguments (PyTorch or CuPy on the GPU, NumPy in the interpreter) and launches the program as
Mamba launches its kernel, 16 items per thread and fast math, but with fewer registers per thread than
Mamba's 128, which measured faster on an H100 (`launch_choice`): 80 (6 blocks per multiprocessor), or
64 for 16-bit inputs longer than one chunk (8 blocks).

    python tutorials/08_mamba_selective_scan.py
"""

import time

import numpy as np
from _runner import ON_GPU, report_speed, to_device, to_host, where

import coop_tiles as ct
from coop_tiles.examples import selective_scan_fwd, selective_scan_reference


def inputs(batch: int, dim: int, L: int, dstate: int, rng: np.random.Generator) -> dict:
    """As Mamba's own tests draw them: B and C vary along the sequence (one group)."""
    return {
        "u": rng.standard_normal((batch, dim, L)).astype(np.float32),
        "delta": (0.5 * rng.random((batch, dim, L))).astype(np.float32),
        "A": (-0.5 * rng.random((dim, dstate))).astype(np.float32),
        "B": rng.standard_normal((batch, dstate, L)).astype(np.float32),
        "C": rng.standard_normal((batch, dstate, L)).astype(np.float32),
        "D": rng.standard_normal(dim).astype(np.float32),
        "z": rng.standard_normal((batch, dim, L)).astype(np.float32),
        "delta_bias": (0.5 * rng.random(dim)).astype(np.float32),
    }


def main() -> None:
    # on a GPU: 4 chunks of 2048 per row; in the interpreter: a small problem
    batch, dim, L, dstate = (2, 256, 8192, 16) if ON_GPU else (2, 4, 300, 8)
    host = inputs(batch, dim, L, dstate, np.random.default_rng(0))
    args = dict(zip(host, to_device(*host.values())))
    out, last_state = selective_scan_fwd(**args, delta_softplus=True, return_last_state=True)

    expected_out, expected_last = selective_scan_reference(**host, delta_softplus=True)
    # Mamba's float32 tolerances, against the largest value: at 8192 steps the float32 sums of the states
    # differ from float64 by a few times 1e-3 where they cancel to near zero (Mamba's own kernel too)
    for got, expected in ((out, expected_out), (last_state, expected_last)):
        assert np.abs(to_host(got) - expected).max() <= 2e-3 + 6e-4 * np.abs(expected).max()
    print(f"selective scan of ({batch}, {dim}, {L}) x {dstate} states ran {where()}: matches the float64 reference")

    if not ON_GPU:
        t0 = time.perf_counter()
        selective_scan_fwd(**args, delta_softplus=True)
        print(f"(the interpreter took {time.perf_counter() - t0:.2f} s)")


# ----- how fast: GB/s of the bytes a forward must move, against the sequence length (batch 4, 1536 channels) ---------
@ct.testing.perf_report(
    ct.testing.Benchmark(
        x_names=["L"],
        x_vals=[2**k for k in range(8, 14)],
        line_arg="provider",
        line_vals=["coop_tiles", "copy"],
        line_names=["selective_scan_fwd", "copy of those bytes (the limit)"],
        plot_name="08_mamba_selective_scan",
        xlabel="sequence length L",
        ylabel="GB/s",
        x_log=True,
    )
)
def speed(L: int, provider: str) -> float:
    import cupy as cp

    batch, dim, dstate = 4, 1536, 16
    args = {name: cp.asarray(a) for name, a in inputs(batch, dim, L, dstate, np.random.default_rng(0)).items()}
    moved = 4 * args["u"].nbytes + 2 * args["B"].nbytes  # u, delta, z read, out written; B and C read
    src, dst = cp.empty(moved // 8, cp.float32), cp.empty(moved // 8, cp.float32)
    run = {
        "coop_tiles": lambda: selective_scan_fwd(**args, delta_softplus=True),
        "copy": lambda: cp.copyto(dst, src),  # reads and writes moved / 2 bytes each
    }[provider]
    return moved / ct.testing.do_bench(run) / 1e6


if __name__ == "__main__":
    main()
    report_speed(speed)
