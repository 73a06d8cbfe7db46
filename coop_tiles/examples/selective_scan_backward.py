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

Channels per program (`CHANNELS`, 1, 2 or 4): a program may take that many consecutive channels of one group (the
grid's second axis shrinks by as much) and run them side by side, each state of each chunk channel after channel,
so that their variable dB and dC rows are summed in registers and added with one atomic per row and program: the
atomics into a group's rows drop by CHANNELS times. The work of one channel is one set of helpers (`channel_inputs`,
`channel_state`, `channel_outputs`), called once per channel; with one channel the program is the same tile program
as it was before channels existed. The tiles alive across the state loop grow with the channels, so the default
launch gives more threads to more channels (`LAUNCHES`); with 4, some of them leave registers for shared memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import coop_tiles as ct
from coop_tiles import tile

from ._arrays import cast, empty_like, zeros_like
from .selective_scan import LOG2E, affine, as_groups, check_real, launch_choice

# The helpers below are the work of one channel, called once per channel of the program. Each name in them is
# assigned once, and the tiles alive across the state loop are passed in tuples read by index, never unpacked into
# names: a copy counts as alive beside its source when the planner decides what fits in registers.


def channel_inputs(io, flags, b, d, k, c, sums, slot):
    """Channel d's (the program's k-th) tiles alive across chunk c's state loop: its inputs (x, dt, the gradient gz
    reaching sum_n h C: dout, times silu(z) with z; dz's factor with z) and its sums over states (the output before
    the gate y with z, dh B and dh A exp(dt A) h[l-1], zero), as `channel_state` takes them; and the sums with its dD
    added."""
    u, delta, A, B, C, D, delta_bias, z, dout, states, carries, du, ddelta, dz, dB, dC = io
    HAS_D, HAS_DELTA_BIAS, HAS_Z, SOFTPLUS, CHUNK, DSTATE, DETERMINISTIC, CHANNELS = flags
    base = c * CHUNK
    valid = u.shape[2] - base
    x = tile.load(u[b, d], base, CHUNK, valid=valid, other=0).astype(np.float32)
    raw = tile.load(delta[b, d], base, CHUNK, valid=valid, other=0).astype(np.float32)
    biased = raw + delta_bias[d] if HAS_DELTA_BIAS else raw
    soft = ct.softplus(biased) if SOFTPLUS else biased
    dt = ct.where(tile.arange(CHUNK) < valid, soft, 0.0)  # past the end: a = 1, and nothing flows back
    g = tile.load(dout[b, d], base, CHUNK, valid=valid, other=0).astype(np.float32)
    if HAS_Z:  # dz = dout * y * silu'(z), y the output before the gate: its factor now, y summed over the states
        zt = tile.load(z[b, d], base, CHUNK, valid=valid, other=0).astype(np.float32)
        sig = ct.sigmoid(zt)
        dz_factor = g * sig * (1.0 + zt * (1.0 - sig))
        gz = g * zt * sig
        y = x * D[d] if HAS_D else tile.zeros(CHUNK, np.float32)
    else:
        gz, dz_factor, y = g, 0.0, 0.0
    dD = ct.where(slot == k * 4 * DSTATE + 3 * DSTATE, sums + tile.sum(gz * x), sums) if HAS_D else sums
    # du = gz D + dt dhB, ddt = x dhB + dhAah
    return (x, dt, gz, dz_factor), (y, tile.zeros(CHUNK, np.float32), tile.zeros(CHUNK, np.float32)), dD


def varying_row(row, base, valid, part, acc, k, CHANNELS, DETERMINISTIC):
    """The program's k-th channel's part of a chunk row of variable B's or C's gradient: stored into the channel's own
    `row` with deterministic sums (0.0 returned), otherwise summed with the parts of the channels before it (`acc`)
    and returned, the last channel adding the sum into the group's `row` (one atomic add per row and program)."""
    if DETERMINISTIC:
        tile.store(row, base, part, valid=valid)
        total = 0.0
    else:
        total = part if k == 0 else acc + part
        if k == CHANNELS - 1:
            tile.atomic_add(row, base, total, valid=valid)
    return total


def group_of(io, d):
    """The groups of variable B and C that channel d reads (0 where fixed): once per program, as the program's
    channels share their group, so that the state loop divides nothing (a 64-bit division is a subroutine of dozens
    of instructions on the GPU)."""
    u, delta, A, B, C, D, delta_bias, z, dout, states, carries, du, ddelta, dz, dB, dC = io
    dim = u.shape[1]
    return (d // (dim // B.shape[1]) if B.ndim == 4 else 0), (d // (dim // C.shape[1]) if C.ndim == 4 else 0)


def channel_state(io, flags, b, d, k, c, n, inputs, running, acc, sums, slot, groups):
    """State n of chunk c for channel d (the program's k-th), `inputs` and `running` as `channel_inputs` makes them:
    the running sums over states, variable B's and C's gradient rows of the program's channels so far (`acc`: dB, dC;
    0.0 before the first channel) and the program's sums, each updated. `groups`: the groups of variable B and C that
    the channels read (`group_of`)."""
    u, delta, A, B, C, D, delta_bias, z, dout, states, carries, du, ddelta, dz, dB, dC = io
    HAS_D, HAS_DELTA_BIAS, HAS_Z, SOFTPLUS, CHUNK, DSTATE, DETERMINISTIC, CHANNELS = flags
    L = u.shape[2]
    base = c * CHUNK
    valid = L - base
    at = k * 4 * DSTATE  # the channel's first slot in `sums`
    An = A[d, n]
    a = ct.exp2(inputs[1] * (An * LOG2E))
    if B.ndim == 4:  # variable B: the channel's group's row, and where its gradient goes
        dB_row = dB[b, d][n] if DETERMINISTIC else dB[b, groups[0]][n]
        Bn = tile.load(B[b, groups[0]][n], base, CHUNK, valid=valid, other=0).astype(np.float32)
    else:
        Bn = B[d, n]
    h0 = 0.0
    if c > 0:
        h0 = states[b, d, c - 1, n]
    bx = inputs[1] * inputs[0] * Bn
    (_, h) = tile.scan((a, bx), op=affine, initial=(1.0, h0))
    ah = h - bx  # exp(dt A) h[l-1]
    if C.ndim == 4:
        dC_row = dC[b, d][n] if DETERMINISTIC else dC[b, groups[1]][n]
        Cn = tile.load(C[b, groups[1]][n], base, CHUNK, valid=valid, other=0).astype(np.float32)
    else:
        Cn = C[d, n]
    y = running[0] + h * Cn if HAS_Z else running[0]
    if C.ndim == 4:
        dC_sum = varying_row(dC_row, base, valid, inputs[2] * h, acc[1], k, CHANNELS, DETERMINISTIC)
        fixed_dC = sums
    else:
        dC_sum = 0.0
        fixed_dC = ct.where(slot == at + 2 * DSTATE + n, sums + tile.sum(inputs[2] * h), sums)
    gC = inputs[2] * Cn
    G0 = 0.0
    if c < (L + CHUNK - 1) // CHUNK - 1:
        G0 = carries[b, d, n]
    (_, later), total = tile.scan(
        (a, a * gC), op=affine, reverse=True, exclusive=True, initial=(1.0, G0), return_total=True
    )
    carries[b, d, n] = total[1]
    dh = gC + later
    dhB = running[1] + dh * Bn
    dhah = dh * ah
    dhAah = running[2] + dhah * An
    dA = ct.where(slot == at + n, fixed_dC + tile.sum(dhah * inputs[1]), fixed_dC)
    if B.ndim == 4:
        dB_sum = varying_row(dB_row, base, valid, dh * inputs[1] * inputs[0], acc[0], k, CHANNELS, DETERMINISTIC)
        fixed_dB = dA
    else:
        dB_sum = 0.0
        fixed_dB = ct.where(slot == at + DSTATE + n, dA + tile.sum(dh * inputs[1] * inputs[0]), dA)
    return (y, dhB, dhAah), (dB_sum, dC_sum), fixed_dB


def channel_outputs(io, flags, b, d, k, c, inputs, running, sums, slot):
    """Chunk c's du, ddelta (and dz) of channel d (the program's k-th), after the state loop; the sums with its
    ddelta_bias added."""
    u, delta, A, B, C, D, delta_bias, z, dout, states, carries, du, ddelta, dz, dB, dC = io
    HAS_D, HAS_DELTA_BIAS, HAS_Z, SOFTPLUS, CHUNK, DSTATE, DETERMINISTIC, CHANNELS = flags
    base = c * CHUNK
    valid = u.shape[2] - base
    if HAS_Z:
        tile.store(dz[b, d], base, inputs[3] * running[0], valid=valid)
    dhB = running[1]
    tile.store(du[b, d], base, inputs[2] * D[d] + inputs[1] * dhB if HAS_D else inputs[1] * dhB, valid=valid)
    ddt = inputs[0] * dhB + running[2]
    if SOFTPLUS:  # delta read again (as Mamba's kernel does) rather than kept alive across the state loop
        raw = tile.load(delta[b, d], base, CHUNK, valid=valid, other=0).astype(np.float32)
        biased = raw + delta_bias[d] if HAS_DELTA_BIAS else raw
        ddelta_row = ddt * ct.where(biased <= 20.0, ct.sigmoid(biased), 1.0)
    else:
        ddelta_row = ddt
    at = k * 4 * DSTATE + 3 * DSTATE + 1  # the channel's ddelta_bias slot
    summed = ct.where(slot == at, sums + tile.sum(ddelta_row), sums) if HAS_DELTA_BIAS else sums
    tile.store(ddelta[b, d], base, ddelta_row, valid=valid)
    return summed


@ct.jit(fastmath=True)
def selective_scan_backward(
    u, delta, A, B, C, D, delta_bias, z, dout, states, carries, du, ddelta, dz, dB, dC, totals,
    HAS_D: ct.constexpr, HAS_DELTA_BIAS: ct.constexpr, HAS_Z: ct.constexpr, SOFTPLUS: ct.constexpr,
    CHUNK: ct.constexpr, DSTATE: ct.constexpr, DETERMINISTIC: ct.constexpr, CHANNELS: ct.constexpr = 1,
):  # fmt: skip
    ct.static_assert(CHANNELS == 1 or CHANNELS == 2 or CHANNELS == 4, "CHANNELS must be 1, 2 or 4")
    # batch fastest, as Mamba's grid (see the module docstring); CHANNELS consecutive channels of one group
    b, d = ct.program_id(0), ct.program_id(1) * CHANNELS
    io = (u, delta, A, B, C, D, delta_bias, z, dout, states, carries, du, ddelta, dz, dB, dC)
    flags = (HAS_D, HAS_DELTA_BIAS, HAS_Z, SOFTPLUS, CHUNK, DSTATE, DETERMINISTIC, CHANNELS)
    groups = group_of(io, d)
    # the program's sums, one tile of slots, 4 DSTATE per channel k from 4 DSTATE k: dA[n] at n, fixed dB[n] at
    # DSTATE + n, fixed dC[n] at 2 DSTATE + n, dD at 3 DSTATE, ddelta_bias at 3 DSTATE + 1
    slot = tile.arange(CHANNELS * 4 * DSTATE)
    sums = tile.zeros(CHANNELS * 4 * DSTATE, np.float32)
    chunks = (u.shape[2] + CHUNK - 1) // CHUNK
    for c in range(chunks - 1, -1, -1):
        # alive across the state loop, per channel: x, dt, gz, and the sums over states dhB, dhAah; with z, y and
        # dz's factor too
        in0, run0, sums = channel_inputs(io, flags, b, d, 0, c, sums, slot)
        if CHANNELS > 1:
            in1, run1, sums = channel_inputs(io, flags, b, d + 1, 1, c, sums, slot)
        if CHANNELS > 2:
            in2, run2, sums = channel_inputs(io, flags, b, d + 2, 2, c, sums, slot)
            in3, run3, sums = channel_inputs(io, flags, b, d + 3, 3, c, sums, slot)
        for n in range(A.shape[1]):
            run0, acc, sums = channel_state(io, flags, b, d, 0, c, n, in0, run0, (0.0, 0.0), sums, slot, groups)
            if CHANNELS > 1:
                run1, acc, sums = channel_state(io, flags, b, d + 1, 1, c, n, in1, run1, acc, sums, slot, groups)
            if CHANNELS > 2:
                run2, acc, sums = channel_state(io, flags, b, d + 2, 2, c, n, in2, run2, acc, sums, slot, groups)
                run3, acc, sums = channel_state(io, flags, b, d + 3, 3, c, n, in3, run3, acc, sums, slot, groups)
        sums = channel_outputs(io, flags, b, d, 0, c, in0, run0, sums, slot)
        if CHANNELS > 1:
            sums = channel_outputs(io, flags, b, d + 1, 1, c, in1, run1, sums, slot)
        if CHANNELS > 2:
            sums = channel_outputs(io, flags, b, d + 2, 2, c, in2, run2, sums, slot)
            sums = channel_outputs(io, flags, b, d + 3, 3, c, in3, run3, sums, slot)
    if DETERMINISTIC:  # row b of a (batch, dim * 4 DSTATE) buffer, summed over the batch by the host
        tile.store(totals[b], d * 4 * DSTATE, sums)
    else:  # one atomic per program and slot
        tile.atomic_add(totals, d * 4 * DSTATE, sums)


#: (items per thread, registers per thread) of the launch: 8 items (256 threads per chunk of 2048) keep every tile
#: in registers (at 16 items, the forward's, the planner moves the tiles alive across the state loop to ~60 KB of
#: shared memory); uncapped that takes 207 registers, one block per multiprocessor, so it is capped at 128 (two
#: blocks, a few values spilled to L1-cached local memory, as under Mamba's own launch bounds)
LAUNCH = (8, 128)
#: channels per program (1, 2 or 4; `channels_for` says where they apply): 1. Measured on an H200 (benchmarks/
#: bwd_probe.py, the mamba_bwd section's shapes, each at its LAUNCHES entry): 2 channels 1.5-1.8x and 4 channels
#: 3.9-4.4x one channel's time; the atomics saved cost less than the work of the wider state loop
CHANNELS = 1
#: the default launch per channels per program: the tiles alive across the state loop grow with the channels, so
#: more threads hold them
LAUNCHES = {1: LAUNCH, 2: (4, 128), 4: (2, 64)}
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


def channels_for(channels: int, dim: int, B: Any, C: Any) -> int:
    """The channels per program a launch takes: `channels` where every group of variable B and C (B and C with
    their groups axis) has a multiple of them (a program's channels share their group's rows), otherwise 1."""
    if channels not in LAUNCHES:
        raise ValueError(f"channels per program must be one of {sorted(LAUNCHES)}, not {channels}")
    groups = [X.shape[1] for X in (B, C) if X.ndim == 4] or [1]
    return channels if all((dim // g) % channels == 0 for g in groups) else 1


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
    launch: tuple[int, int | None] | None = None,
    channels: int | None = None,
) -> dict[str, Any]:
    """The gradients of Mamba's selective scan for `dout`, the gradient of its output: a dict with "u", "delta",
    "A", "B", "C" and, for those given, "D", "z", "delta_bias", each of its input's shape and dtype.

    Arguments as `selective_scan_fwd` takes them, with `states` the forward's (`selective_scan.forward`). Atomic
    reductions by default; `deterministic=True` sums per-program partials instead (see the module docstring).
    `channels` (1, 2 or 4; default `CHANNELS`) consecutive channels per program where `channels_for` allows them;
    `launch` (items per thread, register cap; default `LAUNCHES[channels]`) is for tuning (`LAUNCH` says why).
    """
    check_real(A)
    batch, dim, seqlen = u.shape
    dstate = A.shape[1]
    Bg, Cg = as_groups(B, C, dim)
    channels = channels_for(CHANNELS if channels is None else channels, dim, Bg, Cg)
    launch = LAUNCHES[channels] if launch is None else launch
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
        kernel_for(chunk, isinstance(u, np.ndarray), launch)[(batch, dim // channels)](
            u, delta, A, Bg, Cg,
            A if D is None else D, A if delta_bias is None else delta_bias, u if z is None else z,
            dout, states, carries, grads["u"], grads["delta"], grads.get("z", u), dB, dC, totals,
            HAS_D=D is not None, HAS_DELTA_BIAS=delta_bias is not None, HAS_Z=z is not None,
            SOFTPLUS=bool(delta_softplus), CHUNK=chunk, DSTATE=slots, DETERMINISTIC=bool(deterministic),
            CHANNELS=channels,
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
