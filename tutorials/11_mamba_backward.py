"""Tutorial 11: Mamba's selective scan backward as a tile program, and the scan as a differentiable PyTorch op.

Tutorial 08 ran the forward: for each batch b, channel d and state n, the recurrence h[l] = a[l] h[l-1] + bx[l]
with a = exp(dt A) and bx = dt B u, and out = (sum_n h C + D u) silu(z). Training needs its gradient. With
g = dout silu(z), the gradient of the loss with respect to the state runs the same recurrence backwards:

    dh[l] = g[l] C[l] + a[l+1] dh[l+1]          (nothing after the end)

and every input's gradient is element-wise in dh, h and the inputs: dB = dh dt u, dC = g h, du = g D + dh B dt,
ddt = dh (B u + A a h[l-1]), dA = sum dh dt a h[l-1] (tests/ssm_references.py derives them and checks them
against finite differences). The program is `selective_scan_backward` in
coop_tiles/examples/selective_scan_backward.py; read it next to Mamba's
csrc/selective_scan/selective_scan_bwd_kernel.cuh:

    Mamba's CUDA kernel                                 the tile program
    the forward saves x: (a, h) at the end of each      the forward saves `states[b, d, c]`, h at the end of
      chunk, and out before the gate                      each chunk (half of x; `out` is recomputed)
    chunks from the last: for (chunk = n - 1; ...)      for c in range(chunks - 1, -1, -1)
    BlockScan with prefix x[chunk - 1]: h again         tile.scan((a, bx), op=affine, initial=(1.0, h0))
    BlockReverseScan (its own reverse_scan.cuh) of      tile.scan((a, a * g * C), op=affine, reverse=True,
      (a[l+1], g C): the decays shifted by one            exclusive=True, initial=(1.0, G0)): G[l] = a[l] dh[l]
      element, the next chunk's first through smem       shifts nothing; its total is the carry, in `carries`
    dB, dC of variable B/C: BlockExchange then          tile.atomic_add(dB_row, base, dh * dt * u): its
      atomicAdd per element (the exchange makes the       op warp-exchanges the blocked items first, so a
      atomics coalesced); grid (batch, dim)               warp adds 32 consecutive elements; grid (batch, dim),
                                                          or (batch, dim / CHANNELS) with CHANNELS channels per
                                                          program, their rows summed before one atomic add
    dA, fixed dB/dC, dD, ddelta_bias: BlockReduce      a tile of slots: ct.where(slot == n, sums +
      per state, smem across chunks, atomicAdd            tile.sum(...), sums); one tile.atomic_add at the end
                                                          (or stores, summed by the host: deterministic=True)
    128 threads x 16 items; u, delta, dout, du and      256 threads x 8 items (`LAUNCH`); x, dt, g silu(z),
      ddelta kept across the state loop; out read         the dz factor, y and the sums over states of dh B and
      for dz                                              dh A a h[l-1]: all in registers; y summed for dz

The exclusive reverse scan is the trick that spares the shift: scanning the pairs (a[l], a[l] g[l] C[l]) from the
end gives G[l+1] = a[l+1] dh[l+1] at every l, so dh[l] = g[l] C[l] + G[l+1] with no element borrowed from a
neighbour, and the total, G at the chunk's first element, is exactly what the chunk before needs.

For PyTorch, `coop_tiles.examples.selective_scan_fn` wraps both programs as custom ops (`coop_tiles.torch`), with
the backward op as the forward's autograd formula: a drop-in for mamba_ssm's function of that name, inside
torch.compile(fullgraph=True) and CUDA graphs. This script runs the NumPy entry points (on the GPU with CuPy when
there is one, else in the interpreter) and checks every gradient against the float64 reference.

    python tutorials/11_mamba_backward.py
"""

import sys
from pathlib import Path

import numpy as np
from _runner import ON_GPU, report_speed, to_device, to_host, where

import coop_tiles as ct
from coop_tiles.examples import selective_scan_bwd
from coop_tiles.examples.selective_scan import forward

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from ssm_references import selective_scan_backward  # noqa: E402


def main() -> None:
    batch, dim, L, dstate = (2, 64, 4096 + 33, 16) if ON_GPU else (2, 4, 2048 + 33, 4)
    rng = np.random.default_rng(0)
    host = {
        "u": rng.standard_normal((batch, dim, L)).astype(np.float32),
        "delta": (0.5 * rng.random((batch, dim, L))).astype(np.float32),
        "A": (-0.5 * rng.random((dim, dstate))).astype(np.float32),
        "B": rng.standard_normal((batch, dstate, L)).astype(np.float32),
        "C": rng.standard_normal((batch, dstate, L)).astype(np.float32),
        "D": rng.standard_normal(dim).astype(np.float32),
        "z": rng.standard_normal((batch, dim, L)).astype(np.float32),
        "delta_bias": (0.5 * rng.random(dim)).astype(np.float32),
    }
    dout = rng.standard_normal((batch, dim, L)).astype(np.float32)
    args = dict(zip(host, to_device(*host.values())))
    (device_dout,) = to_device(dout)
    _, states = forward(**args, delta_softplus=True)
    grads = selective_scan_bwd(device_dout, **args, states=states, delta_softplus=True)

    expected = selective_scan_backward(dout, **host, delta_softplus=True)
    for name, value in expected.items():  # float32 against float64, relative to the gradient's largest value
        error = np.abs(to_host(grads[name]) - value).max() / np.abs(value).max()
        assert error < 1e-3, (name, error)
    print(f"selective scan backward of ({batch}, {dim}, {L}) x {dstate} states ran {where()}: "
          f"every gradient matches the float64 reference")  # fmt: skip


# ----- how fast: a forward + backward through autograd against the length, beside PyTorch's step-by-step scan ------
@ct.testing.perf_report(
    ct.testing.Benchmark(
        x_names=["L"],
        x_vals=[256, 1024, 2048],
        line_arg="provider",
        line_vals=["coop_tiles", "torch"],
        line_names=["selective_scan_fn", "PyTorch, one step after the other"],
        plot_name="11_mamba_backward",
        xlabel="sequence length (batch 2, dim 256, 16 states, float32)",
        ylabel="ms per forward + backward",
        x_log=True,
    )
)
def speed(L: int, provider: str) -> float:
    import torch

    from coop_tiles.examples import selective_scan_fn
    from coop_tiles.examples.mamba import reference_selective_scan

    batch, dim, dstate = 2, 256, 16
    u, delta = torch.randn(batch, dim, L, device="cuda"), 0.5 * torch.rand(batch, dim, L, device="cuda")
    A = -0.5 * torch.rand(dim, dstate, device="cuda")
    B, C = torch.randn(batch, dstate, L, device="cuda"), torch.randn(batch, dstate, L, device="cuda")
    leaves = [t.requires_grad_() for t in (u, delta, A, B, C)]
    scan = selective_scan_fn if provider == "coop_tiles" else reference_selective_scan
    return ct.testing.do_bench(lambda: scan(*leaves, delta_softplus=True).sum().backward())


if __name__ == "__main__":
    main()
    report_speed(speed)
