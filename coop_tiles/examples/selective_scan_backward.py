"""Mamba's selective scan backward as a tile program, and its host entry point.

The gradient of sum(dout * out) for the forward of selective_scan.py (tests/ssm_references.py derives it). For each
batch b, channel d and state n, with g = dout * silu(z) (or dout), going backwards through the sequence:

    dh[l] = g[l] C[l, n] + exp(dt[l+1] A[d, n]) dh[l+1]       the state's gradient (dh after the end is 0)
    du[l] = g[l] D[d] + sum_n dh[l] B[l, n] dt[l]
    ddt[l] = sum_n dh[l] (B[l, n] u[l] + A[d, n] exp(dt[l] A[d, n]) h[l-1, n])
    dB[l, n] = dh[l] dt[l] u[l],  dC[l, n] = g[l] h[l, n],  dA[d, n] = sum_l dh[l] dt[l] exp(dt[l] A) h[l-1]

One program per (d, b) row walks the chunks of the forward from the last to the first. Per chunk and state it
recomputes h with the forward's scan, seeded with the state the forward saved at the end of the chunk before
(`states`), and runs the reverse recurrence as a reverse scan of the same combine function: with
G[l] = exp(dt[l] A) dh[l], the gradient that reaches h[l-1], G[l] = a[l] G[l+1] + a[l] g[l] C[l], so an
exclusive reverse scan of the pairs (a, a g C) gives G[l+1] at every l (dh[l] = g[l] C[l] + G[l+1]) and its total
G at the chunk's first element: the carry into the chunk before, kept per state in `carries` (thread 0 writes it
and reads it back, as the forward does its states). dt is recomputed from delta, and the output before the gate
(for dz) from the states; nothing else is saved.

Reductions, as Mamba's kernel does them: dA, and fixed B's and C's gradients (dim, dstate), dD and ddelta_bias
(dim,) are summed over the row's chunks in registers (a tile with one slot per state), then added with one atomic
per program and element (the default, `deterministic=False`), or, with `deterministic=True`, stored per program
into a (batch, dim, ...) buffer that the host sums over the batch (two passes, the same bits every run).
Variable B's and C's gradients (batch, groups, dstate, L) are shared by the channels of a group: atomic adds of
each chunk's row (float32, converted to B's dtype at the end; `tile.atomic_add` exchanges the blocked items within
each warp first, so each instruction adds 32 consecutive elements: every channel of the group adds into the same
row, and L2's atomics per sector bound the kernel; the grid runs the batch fastest, as Mamba's does, so that the
programs running together add into `batch` rows, not all into one), or with `deterministic=True` one row per channel
in a (batch, dim, dstate, L) float32 buffer (dim / groups times the memory of dB) summed over each group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import coop_tiles as ct
from coop_tiles import tile

from ._arrays import cast, empty_like, zeros_like
from .selective_scan import LOG2E, affine, as_groups, check_real, launch_choice


@ct.jit(fastmath=True)
def selective_scan_backward(
    u, delta, A, B, C, D, delta_bias, z, dout, states, carries, du, ddelta, dz, dB, dC, totals,
    HAS_D: ct.constexpr, HAS_DELTA_BIAS: ct.constexpr, HAS_Z: ct.constexpr, SOFTPLUS: ct.constexpr,
    CHUNK: ct.constexpr, DSTATE: ct.constexpr, DETERMINISTIC: ct.constexpr,
):  # fmt: skip
    b, d = ct.program_id(0), ct.program_id(1)  # batch fastest, as Mamba's grid: see the module docstring
    dim, L, N = u.shape[1], u.shape[2], A.shape[1]
    if B.ndim == 4:  # variable B: this row's group, and where its gradient goes
        B_rows = B[b, d // (dim // B.shape[1])]
        dB_rows = dB[b, d] if DETERMINISTIC else dB[b, d // (dim // B.shape[1])]
    if C.ndim == 4:
        C_rows = C[b, d // (dim // C.shape[1])]
        dC_rows = dC[b, d] if DETERMINISTIC else dC[b, d // (dim // C.shape[1])]
    # the row's sums, one tile of slots: dA[n] at n, fixed dB[n] at DSTATE + n, fixed dC[n] at 2 DSTATE + n, dD at
    # 3 DSTATE, ddelta_bias at 3 DSTATE + 1
    slot = tile.arange(4 * DSTATE)
    sums = tile.zeros(4 * DSTATE, np.float32)
    chunks = (L + CHUNK - 1) // CHUNK
    for c in range(chunks - 1, -1, -1):
        base = c * CHUNK
        valid = L - base
        # alive across the state loop: x, dt, gz, and the sums over states (dhB, dhAah, y); seven tiles with z
        x = tile.load(u[b, d], base, CHUNK, valid=valid, other=0).astype(np.float32)
        dt = tile.load(delta[b, d], base, CHUNK, valid=valid, other=0).astype(np.float32)
        if HAS_DELTA_BIAS:
            dt = dt + delta_bias[d]
        if SOFTPLUS:
            dt = ct.softplus(dt)
        dt = ct.where(tile.arange(CHUNK) < valid, dt, 0.0)  # past the end: a = 1, and nothing flows back
        gz = tile.load(dout[b, d], base, CHUNK, valid=valid, other=0).astype(np.float32)
        if HAS_Z:  # dz = dout * y * silu'(z), y the output before the gate: its factor now, y summed below
            zt = tile.load(z[b, d], base, CHUNK, valid=valid, other=0).astype(np.float32)
            sig = ct.sigmoid(zt)
            dz_factor = gz * sig * (1.0 + zt * (1.0 - sig))
            gz = gz * zt * sig
            y = x * D[d] if HAS_D else tile.zeros(CHUNK, np.float32)
        if HAS_D:
            sums = ct.where(slot == 3 * DSTATE, sums + tile.sum(gz * x), sums)
        dhB = tile.zeros(CHUNK, np.float32)  # sum over states of dh B: du = gz D + dt dhB, ddt = x dhB + dhAah
        dhAah = tile.zeros(CHUNK, np.float32)  # sum over states of dh A exp(dt A) h[l-1]
        for n in range(N):
            An = A[d, n]
            a = ct.exp2(dt * (An * LOG2E))
            Bn = tile.load(B_rows[n], base, CHUNK, valid=valid, other=0).astype(np.float32) if B.ndim == 4 else B[d, n]
            h0 = 0.0
            if c > 0:
                h0 = states[b, d, c - 1, n]
            bx = dt * x * Bn
            (_, h) = tile.scan((a, bx), op=affine, initial=(1.0, h0))
            ah = h - bx  # exp(dt A) h[l-1]
            Cn = tile.load(C_rows[n], base, CHUNK, valid=valid, other=0).astype(np.float32) if C.ndim == 4 else C[d, n]
            if HAS_Z:
                y = y + h * Cn
            if C.ndim == 4:
                if DETERMINISTIC:
                    tile.store(dC_rows[n], base, gz * h, valid=valid)
                else:
                    tile.atomic_add(dC_rows[n], base, gz * h, valid=valid)
            else:
                sums = ct.where(slot == 2 * DSTATE + n, sums + tile.sum(gz * h), sums)
            gC = gz * Cn
            G0 = 0.0
            if c < chunks - 1:
                G0 = carries[b, d, n]
            (_, later), total = tile.scan(
                (a, a * gC), op=affine, reverse=True, exclusive=True, initial=(1.0, G0), return_total=True
            )
            carries[b, d, n] = total[1]
            dh = gC + later
            dhB = dhB + dh * Bn
            dhah = dh * ah
            dhAah = dhAah + dhah * An
            sums = ct.where(slot == n, sums + tile.sum(dhah * dt), sums)
            if B.ndim == 4:
                if DETERMINISTIC:
                    tile.store(dB_rows[n], base, dh * dt * x, valid=valid)
                else:
                    tile.atomic_add(dB_rows[n], base, dh * dt * x, valid=valid)
            else:
                sums = ct.where(slot == DSTATE + n, sums + tile.sum(dh * dt * x), sums)
        if HAS_Z:
            tile.store(dz[b, d], base, dz_factor * y, valid=valid)
        tile.store(du[b, d], base, gz * D[d] + dt * dhB if HAS_D else dt * dhB, valid=valid)
        ddt = x * dhB + dhAah
        if SOFTPLUS:  # delta read again (as Mamba's kernel does) rather than kept alive across the state loop
            raw = tile.load(delta[b, d], base, CHUNK, valid=valid, other=0).astype(np.float32)
            if HAS_DELTA_BIAS:
                raw = raw + delta_bias[d]
            ddt = ddt * ct.where(raw <= 20.0, ct.sigmoid(raw), 1.0)
        if HAS_DELTA_BIAS:
            sums = ct.where(slot == 3 * DSTATE + 1, sums + tile.sum(ddt), sums)
        tile.store(ddelta[b, d], base, ddt, valid=valid)
    if DETERMINISTIC:  # row b of a (batch, dim * 4 DSTATE) buffer, summed over the batch by the host
        tile.store(totals[b], d * 4 * DSTATE, sums)
    else:  # one atomic per program and slot
        tile.atomic_add(totals, d * 4 * DSTATE, sums)


#: (items per thread, registers per thread) of the launch: 8 items (256 threads per chunk of 2048) keep every tile
#: in registers (at 16 items, the forward's, the planner moves the tiles alive across the state loop to ~60 KB of
#: shared memory); uncapped that takes 207 registers, one block per multiprocessor, so it is capped at 128 (two
#: blocks, a few values spilled to L1-cached local memory, as under Mamba's own launch bounds)
LAUNCH = (8, 128)
_interpreting = ct.jit(selective_scan_backward.fn, interpret=True)
_by_launch: dict[tuple[int, int | None], ct.JITFunction] = {}


def kernel_for(chunk: int, interpret: bool, launch: tuple[int, int | None] = LAUNCH) -> ct.JITFunction:
    """The program at `launch` (items per thread, register cap or None; at least a warp), or its interpreting
    copy."""
    if interpret:
        return _interpreting
    items, registers = launch
    threads = max(32, chunk // items)
    if (threads, registers) not in _by_launch:
        options = dict(block_threads=threads, fastmath=True, max_registers=registers)
        _by_launch[threads, registers] = ct.jit(selective_scan_backward.fn, **options)
    return _by_launch[threads, registers]


def selective_scan_bwd(
    dout: Any,
    u: Any,
    delta: Any,
    A: Any,
    B: Any,
    C: Any,
    states: Any,
    D: Any = None,
    z: Any = None,
    delta_bias: Any = None,
    delta_softplus: bool = False,
    deterministic: bool = False,
    launch: tuple[int, int | None] = LAUNCH,
) -> dict[str, Any]:
    """The gradients of Mamba's selective scan for `dout`, the gradient of its output: a dict with "u", "delta",
    "A", "B", "C" and, for those given, "D", "z", "delta_bias", each of its input's shape and dtype.

    Arguments as `selective_scan_fwd` takes them, with `states` the forward's (`selective_scan.forward`). Atomic
    reductions by default; `deterministic=True` sums per-program partials instead (see the module docstring).
    `launch` (items per thread, register cap) is for tuning (`LAUNCH` says why the default).
    """
    check_real(A)
    batch, dim, seqlen = u.shape
    dstate = A.shape[1]
    Bg, Cg = as_groups(B, C, dim)
    chunk, _ = launch_choice(seqlen, u.itemsize)
    lead = (batch,) if deterministic else ()  # the axis the host sums over

    def weight_grad(X: Any) -> Any:
        """Where the program puts varying X's gradient: rows of (batch, groups, dstate, L), or with deterministic
        sums one per channel (batch, dim, dstate, L); fixed X's go to `totals`."""
        if X.ndim == 2:
            return carries  # not touched
        if deterministic:
            return empty_like(u, (batch, dim, dstate, seqlen), "float32")
        return zeros_like(u, (batch, X.shape[1], dstate, seqlen), "float32")

    carries = empty_like(u, (batch, dim, dstate), "float32")
    grads = {name: empty_like(u, (batch, dim, seqlen), u.dtype) for name in ("u", "delta", "z")[: 2 + (z is not None)]}
    slots = 1 << max(0, dstate - 1).bit_length()  # DSTATE: dstate rounded up to a power of two
    totals = (empty_like if deterministic else zeros_like)(u, (*lead, dim * 4 * slots), "float32")
    dB, dC = weight_grad(Bg), weight_grad(Cg)
    if batch * dim * seqlen:
        kernel_for(chunk, isinstance(u, np.ndarray), launch)[(batch, dim)](
            u, delta, A, Bg, Cg,
            A if D is None else D, A if delta_bias is None else delta_bias, u if z is None else z,
            dout, states, carries, grads["u"], grads["delta"], grads.get("z", u), dB, dC, totals,
            HAS_D=D is not None, HAS_DELTA_BIAS=delta_bias is not None, HAS_Z=z is not None,
            SOFTPLUS=bool(delta_softplus), CHUNK=chunk, DSTATE=slots, DETERMINISTIC=bool(deterministic),
        )  # fmt: skip
    elif deterministic:
        totals[...] = 0
    totals = (totals.sum(axis=0) if deterministic else totals).reshape(dim, 4, slots)

    def varying(total: Any, X: Any) -> Any:
        """Varying X's gradient (with deterministic sums, each group's channels summed)."""
        if deterministic:
            groups = 1 if X.ndim == 3 else X.shape[1]
            total = total.reshape(batch, groups, dim // groups, dstate, seqlen).sum(axis=2)
        return total.reshape(X.shape)

    grads["A"] = cast(totals[:, 0, :dstate], A)
    grads["B"] = cast(totals[:, 1, :dstate] if B.ndim == 2 else varying(dB, B), B)
    grads["C"] = cast(totals[:, 2, :dstate] if C.ndim == 2 else varying(dC, C), C)
    if D is not None:
        grads["D"] = cast(totals[:, 3, 0], D)
    if delta_bias is not None:
        grads["delta_bias"] = cast(totals[:, 3, 1], delta_bias)
    return grads
