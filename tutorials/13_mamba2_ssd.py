"""Tutorial 13: Mamba-2's chunked scan (SSD, `mamba_chunk_scan_combined`) as tile programs with matrix products.

Mamba-2's layer is a linear recurrence per head h over a (headdim, dstate) state, with a scalar decay per step:

    state_t = exp(A[h] * dt_t) * state_{t-1} + dt_t * x_t B_t^T          x_t: (headdim,), B_t, C_t: (dstate,)
    out_t   = state_t C_t + D[h] * x_t                                    (times silu(z_t) when z is given)

Run step by step it is a scan (tutorials 04 and 08); Mamba-2 instead cuts the sequence into chunks of L steps and
turns most of the work into matrix products (the "state space duality"). With cs the cumsum of A * dt inside a
chunk:

1. **The chunk's own state** (what the chunk would leave from a zero state): `S_c = X^T diag(exp(cs_last - cs)
   * dt) B`, a (headdim, L) @ (L, dstate) product, taken K steps at a time. A small program first (as Mamba's
   `_chunk_cumsum_fwd`) writes each chunk's dt (bias and softplus applied) and its cs, `tile.scan(dt * A)`;
   then each block's weights are `ct.exp(cs_last - cs) * dt`, loaded, not carried, so the blocks' loads are
   independent of each other, and `state = tile.dot(scaled.T, bs, state)` adds the block's product (a block
   GEMM of cuBLASDx on the GPU, its accumulator in registers): `scaled` is X's (K, headdim) block times its
   weights, loaded along X's contiguous rows, and the dot reads its `.T` in place (no transposed copy). The
   (headdim, dstate) result is stored through a transposed view of states kept (dstate, headdim), for step 3.
2. **The states between chunks**: `H_c = exp(cs_last of c-1) * H_{c-1} + S_{c-1}`, a linear recurrence over the
   chunks, one per state element, independent between elements: each thread walks the chunks for its own
   elements, a memory-bound loop with no exchange (as Mamba's `_state_passing_fwd`):

       for c in range(nchunks):
           own = tile.load(states[b, h, c], e, E, valid=size, other=0)
           tile.store(passed[b, h, c], e, state, valid=size)
           state = ct.exp(ends[b, h, c]) * state + own

3. **The output**: inside the chunk a causal, decayed attention-like product, `((C B^T) * exp(cs_l - cs_s) * dt_s,
   for s <= l) @ X`, plus the entering state's contribution `(C H_c^T) * exp(cs_l)`, then D and the z gate. Two
   `tile.dot`s per block of earlier rows, the mask and the decay element-wise on the (M, K) block in between;
   every product into the output of one shape, so that its accumulator stays in registers. The states H are
   kept (.., dstate, headdim), so `C @ H^T` multiplies their (K, headdim) blocks as loaded, like each block of X:
   every operand of the accumulator's products lies in shared memory as its rows lie in the threads, and each
   thread stores 16 bytes of a row at once. B is stored (.., seqlen, dstate): C B^T multiplies its blocks, loaded
   along those rows, as `bk.T` (a transposed view loaded item by item would read one element per memory
   sector).

    Mamba's Triton (ssd_combined.py)                      coop_tiles.examples.ssd
    _chunk_cumsum_fwd                                     chunk_cumsum: tile.scan
    _chunk_state_fwd                                      chunk_state: tile.dot
    _state_passing_fwd (a loop over the chunks)           state_passing: a loop over the chunks
    _bmm_chunk_fwd (C B^T per group)                      chunk_cb: tile.dot, once per group
    _chunk_scan_fwd                                       chunk_scan: tile.dot (C H^T, then each block @ X)

**Packed sequences** (`seq_idx`, Mamba's (batch, seqlen) int32 ids, nondecreasing along a row): several
sequences share a row, and none may see another's state. Each program takes a constexpr `HAS_SEQ_IDX` (without
it the generated code is what it was) and masks, as Mamba's kernels do: a chunk's own state takes only the steps
of the sequence it ends in; the state passing zeroes the state before a chunk that ends in another sequence than
the chunk before it; C B^T is 0 between steps of different sequences; and the entering state reaches only the
rows of the sequence the previous chunk ended in. The initial state is sequence 0's.

The drop-in `coop_tiles.examples.mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D, z, dt_bias,
dt_softplus, initial_states, seq_idx, return_final_states=...)` launches the five; below it runs at a small shape
(in the interpreter without a GPU) and is checked against the step-by-step recurrence in float64 NumPy, then with
two sequences packed in each row against each sequence run on its own.

    python tutorials/13_mamba2_ssd.py
"""

from __future__ import annotations

import numpy as np
from _runner import ON_GPU, report_speed, to_device, to_host, where

import coop_tiles as ct
from coop_tiles.examples import mamba_chunk_scan_combined


def reference(x, dt, A, B, C, D, dt_bias, initial):
    """(out, final state) of the recurrence above, one step at a time, in float64 (softplus on dt + dt_bias)."""
    x, dt, B, C, D, initial = (np.asarray(a, np.float64) for a in (x, dt, B, C, D, initial))
    dt = np.log1p(np.exp(dt + dt_bias))
    heads_per_group = x.shape[2] // B.shape[2]
    B, C = np.repeat(B, heads_per_group, axis=2), np.repeat(C, heads_per_group, axis=2)
    state, out = initial.copy(), np.empty_like(x)
    for t in range(x.shape[1]):
        state = (
            np.exp(A * dt[:, t])[:, :, None, None] * state
            + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, :, None, :]
        )
        out[:, t] = np.einsum("bhpn,bhn->bhp", state, C[:, t]) + D[:, None] * x[:, t]
    return out, state


def main() -> None:
    rng = np.random.default_rng(13)
    batch, seqlen, nheads, headdim, dstate, ngroups, chunk = 1, 100, 4, 16, 16, 2, 32
    if ON_GPU:
        batch, seqlen, nheads, headdim, dstate, ngroups, chunk = 2, 1000, 8, 64, 128, 2, 256
    f32 = np.float32
    x = rng.standard_normal((batch, seqlen, nheads, headdim)).astype(f32)
    dt = (rng.standard_normal((batch, seqlen, nheads)) - 3).astype(f32)
    A = -rng.random(nheads).astype(f32)
    B = (rng.standard_normal((batch, seqlen, ngroups, dstate)) / 5).astype(f32)
    C = rng.standard_normal((batch, seqlen, ngroups, dstate)).astype(f32)
    D, dt_bias = rng.standard_normal(nheads).astype(f32), (rng.random(nheads) - 0.5).astype(f32)
    initial = rng.standard_normal((batch, nheads, headdim, dstate)).astype(f32)
    args = to_device(x, dt, A, B, C, D, dt_bias, initial)
    out, final = mamba_chunk_scan_combined(
        *args[:5], chunk, D=args[5], dt_bias=args[6], dt_softplus=True, initial_states=args[7],
        return_final_states=True,
    )  # fmt: skip
    expected_out, expected_final = reference(x, dt, A, B, C, D, dt_bias, initial)
    tol = 2e-3 if ON_GPU else 1e-4  # tf32-free float32 products on both; the GPU's exp and products differ slightly
    np.testing.assert_allclose(to_host(out), expected_out, rtol=tol, atol=tol)
    np.testing.assert_allclose(to_host(final), expected_final, rtol=tol, atol=tol)
    shape = (batch, seqlen, nheads, headdim, dstate, ngroups)
    print(f"mamba_chunk_scan_combined {shape}, chunk {chunk}, {where()}: matches the step-by-step recurrence")

    cut = seqlen * 3 // 8  # inside a chunk: sequence 0 (from the initial state), then sequence 1 (from zeros)
    seq_idx = np.repeat(np.array([[0, 1]], np.int32), [cut, seqlen - cut], axis=1).repeat(batch, axis=0)
    out, final = mamba_chunk_scan_combined(
        *args[:5], chunk, D=args[5], dt_bias=args[6], dt_softplus=True, initial_states=args[7],
        seq_idx=to_device(seq_idx)[0], return_final_states=True,
    )  # fmt: skip
    first, _ = reference(x[:, :cut], dt[:, :cut], A, B[:, :cut], C[:, :cut], D, dt_bias, initial)
    second, expected_final = reference(x[:, cut:], dt[:, cut:], A, B[:, cut:], C[:, cut:], D, dt_bias, 0 * initial)
    np.testing.assert_allclose(to_host(out), np.concatenate([first, second], axis=1), rtol=tol, atol=tol)
    np.testing.assert_allclose(to_host(final), expected_final, rtol=tol, atol=tol)
    print(f"with seq_idx (sequences of {cut} and {seqlen - cut} steps in each row): matches each one run alone")


# ----- how fast: against the same chunked algorithm in PyTorch operations (einsums, one loop over the chunks) -------
def torch_ssd(x, dt, A, B, C, chunk, D, dt_bias):
    """(out, final state) of the three steps above in PyTorch operations, as Mamba's `ssd_minimal_discrete` does
    them (without an initial state): softplus(dt + dt_bias), the products per chunk, the states passed in a loop."""
    import torch
    import torch.nn.functional as F

    batch, seqlen, nheads, headdim = x.shape
    B, C = (t.repeat_interleave(nheads // B.shape[2], dim=2) for t in (B, C))
    dt = F.softplus(dt + dt_bias)
    pad = -seqlen % chunk  # the padded steps have dt = 0: no decay, no input
    x, dt, B, C = (F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in (x, dt, B, C))
    chunks = x.shape[1] // chunk
    X = (x * dt[..., None]).reshape(batch, chunks, chunk, nheads, headdim)
    B, C = (t.reshape(batch, chunks, chunk, nheads, -1) for t in (B, C))
    cs = torch.cumsum((A * dt).reshape(batch, chunks, chunk, nheads).permute(0, 3, 1, 2), dim=-1)  # (b, h, c, l)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=x.device).tril()
    decay = torch.exp((cs[..., :, None] - cs[..., None, :]).masked_fill(~causal, float("-inf")))
    inside = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", C, B, decay, X)
    own = torch.einsum("bclhn,bhcl,bclhp->bchpn", B, torch.exp(cs[..., -1:] - cs), X)
    state, entering = torch.zeros_like(own[:, 0]), []
    for c in range(chunks):
        entering.append(state)
        state = torch.exp(cs[:, :, c, -1])[..., None, None] * state + own[:, c]
    out = inside + torch.einsum("bclhn,bchpn,bhcl->bclhp", C, torch.stack(entering, 1), torch.exp(cs))
    return out.reshape(batch, -1, nheads, headdim)[:, :seqlen] + D[:, None] * x[:, :seqlen], state


@ct.testing.perf_report(
    ct.testing.Benchmark(
        x_names=["seqlen"],
        x_vals=[1024, 4096, 16384],
        line_arg="provider",
        line_vals=["coop_tiles", "torch"],
        line_names=["mamba_chunk_scan_combined", "PyTorch operations"],
        plot_name="13_mamba2_ssd",
        xlabel="sequence length (batch 2, 8 heads of 64, 128 states, chunks of 256, float32)",
        ylabel="ms per forward",
        x_log=True,
    )
)
def speed(seqlen: int, provider: str) -> float:
    import torch

    batch, nheads, headdim, dstate = 2, 8, 64, 128
    x = torch.randn(batch, seqlen, nheads, headdim, device="cuda")
    dt = torch.randn(batch, seqlen, nheads, device="cuda") - 3
    A, D, dt_bias = (
        -torch.rand(nheads, device="cuda"),
        torch.randn(nheads, device="cuda"),
        torch.zeros(nheads, device="cuda"),
    )
    B, C = (torch.randn(batch, seqlen, 1, dstate, device="cuda") for _ in range(2))
    if provider == "coop_tiles":
        run = lambda: mamba_chunk_scan_combined(x, dt, A, B, C, 256, D=D, dt_bias=dt_bias, dt_softplus=True)  # noqa: E731
    else:
        run = lambda: torch_ssd(x, dt, A, B, C, 256, D, dt_bias)  # noqa: E731
    return ct.testing.do_bench(run)


if __name__ == "__main__":
    main()
    report_speed(speed)
