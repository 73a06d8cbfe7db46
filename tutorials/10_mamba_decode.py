"""Tutorial 10: Mamba's decode step (`selective_state_update`) as a tile program with 2-D tiles.

When Mamba generates text it advances its state by one token at a time. For each batch b, head h (Mamba-1 has
one), row d of the head and state n, with g = h // (nheads // ngroups) the group of B and C the head reads:

    dt'          = softplus(dt[b, h, d] + dt_bias[h, d])
    state[b,h,d,n] = state[b,h,d,n] * exp(A[h, d, n] * dt') + B[b, g, n] * dt' * x[b, h, d]
    out[b, h, d] = (sum_n state[b,h,d,n] * C[b, g, n] + D[h, d] * x[b, h, d]) * silu(z[b, h, d])

The state is large ((batch, nheads, headdim, dstate) floats: 168 MB for Mamba-2's (64, 80, 64, 128)) and every
element of it is read once and written once, with a handful of flops each; everything else is a few vectors. So
the step is a memory-bound stream over the state, and the question is only how to read it.

A tile program holds a block of the state as a **2-D tile**: one program per (block of BLOCK_D rows, batch, head)
on a 3-D grid, the tile `(BLOCK_D, DSTATE)`, read from the 2-D view `state[b, h]` with
`tile.load(view, (r, 0), (BLOCK_D, DSTATE), valid=(rows left, dstate))`. The per-row vectors (x, dt, dt_bias, D,
z) are 1-D tiles of BLOCK_D and the per-state vectors (B, C) 1-D tiles of DSTATE; NumPy's **broadcasting** puts
them on the block, `x[:, None]` along each row and `C[None, :]` down each column, and the dot product with C is
an **axis reduction**, `tile.sum(block * C[None, :], axis=1)`, one value per row:

    Mamba's Triton kernel (_selective_scan_update_kernel)    the tile program (`decode_step` below)
    state_ptrs = state_ptr + offs_m[:, None] * stride_dim     block = state[b, h]    (a 2-D view, any strides)
                 + offs_n[None, :] * stride_dstate
    tl.load(state_ptrs, mask=(offs_m[:, None] < dim)         tile.load(block, (r, 0), (BLOCK_D, DSTATE),
                 & (offs_n[None, :] < dstate), other=0)                 valid=(dim - r, dstate))
    dA = tl.exp(A * dt[:, None])                              ct.exp(a * dt[:, None])
    state * dA + B[None, :] * dt[:, None] * x[:, None]        h0 * decay + b[None, :] * (dt * x)[:, None]
    out = tl.sum(state * C[None, :], axis=1)                  tile.sum(h1 * c[None, :], axis=1)
    BLOCK_SIZE_M and num_warps by hand, by dstate             BLOCK_D by dstate; the layout: the planner

`decode_step` is Mamba-2's layout with every option on (18 lines). The drop-in for Mamba's function,
`coop_tiles.examples.selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
state_batch_indices)`, is the same program with both layouts, the optional inputs, padding tokens
(`state_batch_indices[b] < 0`) and Mamba-2's tied A and dt (stride-0 views: one decay per head, a scalar).
Both are checked below against Mamba's equations in float64 NumPy; on a GPU they are timed against the time a
device copy needs to move the same bytes.

    python tutorials/10_mamba_decode.py
"""

import numpy as np
from _runner import ON_GPU, kernel, report_speed, to_device, to_host, where

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.examples import selective_state_update


@ct.jit(fastmath=True)
def decode_step(state, x, dt, dt_bias, A, B, C, D, z, out, BLOCK_D: ct.constexpr, DSTATE: ct.constexpr):
    r, b, h = ct.program_id(0) * BLOCK_D, ct.program_id(1), ct.program_id(2)
    block = state[b, h]  # this head's (headdim, dstate) state, a 2-D view
    rows, dstate = block.shape[0] - r, block.shape[1]
    g = h // (state.shape[1] // B.shape[1])  # the group of B and C this head reads
    xv = tile.load(x[b, h], r, BLOCK_D, valid=rows).astype(np.float32)  # (BLOCK_D,): one per row
    dtv = tile.load(dt[b, h], r, BLOCK_D, valid=rows).astype(np.float32)
    dtv = ct.softplus(dtv + tile.load(dt_bias[h], r, BLOCK_D, valid=rows))
    bv = tile.load(B[b, g], 0, DSTATE, valid=dstate).astype(np.float32)  # (DSTATE,): one per state
    cv = tile.load(C[b, g], 0, DSTATE, valid=dstate).astype(np.float32)
    a = tile.load(A[h], (r, 0), (BLOCK_D, DSTATE), valid=(rows, dstate))  # (BLOCK_D, DSTATE)
    h0 = tile.load(block, (r, 0), (BLOCK_D, DSTATE), valid=(rows, dstate))
    decay = ct.exp(a * dtv[:, None])  # dt broadcast along each row
    h1 = h0 * decay + bv[None, :] * (dtv * xv)[:, None]  # B down each column, dt * x along each row
    tile.store(block, (r, 0), h1, valid=(rows, dstate))
    y = tile.sum(h1 * cv[None, :], axis=1)  # (BLOCK_D,): each row's dot product with C
    y = y + tile.load(D[h], r, BLOCK_D, valid=rows) * xv
    zv = tile.load(z[b, h], r, BLOCK_D, valid=rows).astype(np.float32)
    tile.store(out[b, h], r, y * zv * ct.sigmoid(zv), valid=rows)


def reference(state, x, dt, dt_bias, A, B, C, D, z):
    """(new state, out) in float64: Mamba's `selective_state_update_ref` in NumPy, Mamba-2's layout."""
    state, x, dt, dt_bias, A, B, C, D, z = (np.asarray(v, np.float64) for v in (state, x, dt, dt_bias, A, B, C, D, z))
    dt = dt + dt_bias
    dt = np.where(dt <= 20, np.log1p(np.exp(np.minimum(dt, 20))), dt)  # softplus, dt itself above 20
    heads_per_group = state.shape[1] // B.shape[1]
    B, C = np.repeat(B, heads_per_group, axis=1), np.repeat(C, heads_per_group, axis=1)  # (batch, nheads, dstate)
    new = state * np.exp(A * dt[..., None]) + B[:, :, None, :] * (dt * x)[..., None]
    out = np.einsum("bhdn,bhn->bhd", new, C) + D * x
    return new, out * z / (1 + np.exp(-z))


def inputs(batch: int, nheads: int, headdim: int, dstate: int, ngroups: int, rng: np.random.Generator) -> dict:
    """Drawn as Mamba's tests draw them: A = -(uniform + 1), dt_bias = uniform - 4, the rest standard normal."""
    f32 = np.float32
    return {
        "state": rng.standard_normal((batch, nheads, headdim, dstate)).astype(f32),
        "x": rng.standard_normal((batch, nheads, headdim)).astype(f32),
        "dt": rng.standard_normal((batch, nheads, headdim)).astype(f32),
        "dt_bias": (rng.random((nheads, headdim)) - 4).astype(f32),
        "A": (-rng.random((nheads, headdim, dstate)) - 1).astype(f32),
        "B": rng.standard_normal((batch, ngroups, dstate)).astype(f32),
        "C": rng.standard_normal((batch, ngroups, dstate)).astype(f32),
        "D": rng.standard_normal((nheads, headdim)).astype(f32),
        "z": rng.standard_normal((batch, nheads, headdim)).astype(f32),
    }


def main() -> None:
    # on a GPU: Mamba-2's decode shape (batch 64, 80 heads of 64 rows, dstate 128); in the interpreter: a small one
    batch, nheads, headdim, dstate, ngroups = (64, 80, 64, 128, 1) if ON_GPU else (2, 4, 24, 16, 2)
    block_d = 2048 // dstate  # 2048 states per program; the runtime picks its threads
    host = inputs(batch, nheads, headdim, dstate, ngroups, np.random.default_rng(0))
    expected_state, expected_out = reference(**host)

    args = dict(zip(host, to_device(*(v.copy() for v in host.values()))))  # (the interpreter updates in place)
    out = to_device(np.empty_like(host["x"]))[0]
    grid = (-(-headdim // block_d), batch, nheads)
    kernel(decode_step)[grid](*args.values(), out, BLOCK_D=block_d, DSTATE=dstate)
    # Mamba's float32 tolerances (its tests' rtol 3e-4, atol 1e-3)
    np.testing.assert_allclose(to_host(args["state"]), expected_state, rtol=3e-4, atol=1e-3)
    np.testing.assert_allclose(to_host(out), expected_out, rtol=3e-4, atol=1e-3)

    args = dict(zip(host, to_device(*(v.copy() for v in host.values()))))  # the drop-in, from the same state
    given = {k: v for k, v in args.items() if k != "dt_bias"}
    dropin_out = selective_state_update(**given, dt_bias=args["dt_bias"], dt_softplus=True)
    np.testing.assert_allclose(to_host(args["state"]), expected_state, rtol=3e-4, atol=1e-3)
    np.testing.assert_allclose(to_host(dropin_out), expected_out, rtol=3e-4, atol=1e-3)
    shape = (batch, nheads, headdim, dstate)
    print(f"decode step of a {shape} state ran {where()}: decode_step matches Mamba's "
          "equations, and so does selective_state_update")  # fmt: skip


# ----- how fast: GB/s of the state read and written (the rest is a few vectors) against the batch, Mamba-2's heads --
@ct.testing.perf_report(
    ct.testing.Benchmark(
        x_names=["batch"],
        x_vals=[2**k for k in range(0, 9)],
        line_arg="provider",
        line_vals=["decode_step", "selective_state_update", "copy"],
        line_names=["decode_step", "selective_state_update (the drop-in)", "copy of the state (the limit)"],
        plot_name="10_mamba_decode",
        xlabel="batch (80 heads of 64 x 128 float32 states)",
        ylabel="GB/s",
        x_log=True,
    )
)
def speed(batch: int, provider: str) -> float:
    import cupy as cp

    nheads, headdim, dstate, block_d = 80, 64, 128, 16
    args = {
        name: cp.asarray(a) for name, a in inputs(batch, nheads, headdim, dstate, 1, np.random.default_rng(0)).items()
    }
    out, copy = cp.empty_like(args["x"]), cp.empty_like(args["state"])
    grid = (ct.cdiv(headdim, block_d), batch, nheads)
    run = {
        "decode_step": lambda: decode_step[grid](*args.values(), out, BLOCK_D=block_d, DSTATE=dstate),
        "selective_state_update": lambda: selective_state_update(**args, dt_softplus=True),
        "copy": lambda: cp.copyto(copy, args["state"]),
    }[provider]
    return 2 * args["state"].nbytes / ct.testing.do_bench(run) / 1e6


if __name__ == "__main__":
    main()
    report_speed(speed)
