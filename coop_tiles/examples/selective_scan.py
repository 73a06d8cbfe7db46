"""Mamba's selective scan (forward) as a tile program, its host entry point, and a NumPy reference.

For each batch b, channel d and state n, with dt = softplus(delta + delta_bias) and x = u:

    h[l, n] = exp(dt[l] * A[d, n]) * h[l-1, n] + dt[l] * B[l, n] * x[l]      (h[-1] = 0)
    out[l]  = (sum_n h[l, n] * C[l, n] + D[d] * x[l]) * silu(z[l])

One program per (d, b) row walks the sequence in chunks of CHUNK elements; per chunk and state
the recurrence is one tuple scan of the pairs (exp(dt * A), dt * B * x) with the composition of
two affine steps, seeded with the state the previous chunk ended in. `states[b, d, c]`, the
state at the end of chunk c, doubles as that carry: the scan's total is written there and read
back by the next chunk. The last chunk's is `last_state`, and all of them are what the backward
(selective_scan_backward.py) starts each chunk from, as Mamba's forward saves them.

Compiled with fast math, as Mamba builds its kernel (`--use_fast_math`); launched as Mamba
launches its own, CHUNK elements (at most 2048) over CHUNK / 16 threads, 16 items each, but with
fewer registers per thread than Mamba's 128, which measured faster on an H100 (`launch_choice`):
80 (6 blocks per multiprocessor; under that cap 16-bit inputs spill a few values, which the
state loop reloads from L1), and 64 for 16-bit inputs longer than one chunk (8 blocks: more
rows in flight when each row takes several chunks).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import coop_tiles as ct
from coop_tiles import tile

from ._arrays import empty_like

LOG2E = 1.4426950408889634
MAX_CHUNK = 2048
ITEMS_PER_THREAD = 16
REGISTERS = 80  # per thread: 6 blocks of 128 threads per multiprocessor
HALF_CHUNKS_REGISTERS = 64  # 16-bit inputs longer than a chunk: 8 blocks


@ct.combine
def affine(a_l, b_l, a_r, b_r):
    """Two steps h -> a*h + b, the earlier one (l) first, as one step."""
    return a_r * a_l, a_r * b_l + b_r


@ct.jit(fastmath=True)
def selective_scan(
    u, delta, A, B, C, D, delta_bias, z, out, states,
    HAS_D: ct.constexpr, HAS_DELTA_BIAS: ct.constexpr, HAS_Z: ct.constexpr, SOFTPLUS: ct.constexpr,
    CHUNK: ct.constexpr,
):  # fmt: skip
    d, b = ct.program_id(0), ct.program_id(1)
    dim, L, N = u.shape[1], u.shape[2], A.shape[1]
    if B.ndim == 4:  # variable B: (batch, groups, dstate, L); this row's group
        B_rows = B[b, d // (dim // B.shape[1])]
    if C.ndim == 4:
        C_rows = C[b, d // (dim // C.shape[1])]
    for base in range(0, L, CHUNK):
        valid = L - base
        x = tile.load(u[b, d], base, CHUNK, valid=valid, other=0).astype(np.float32)
        dt = tile.load(delta[b, d], base, CHUNK, valid=valid, other=0).astype(np.float32)
        if HAS_DELTA_BIAS:
            dt = dt + delta_bias[d]
        if SOFTPLUS:
            dt = ct.softplus(dt)
        dt = ct.where(tile.arange(CHUNK) < valid, dt, 0.0)  # past the end: h stays (a = 1, b = 0)
        dtx = dt * x
        y = x * D[d] if HAS_D else tile.zeros(CHUNK, np.float32)
        for n in range(N):
            Bn = tile.load(B_rows[n], base, CHUNK, valid=valid, other=0).astype(np.float32) if B.ndim == 4 else B[d, n]
            a = ct.exp2(dt * (A[d, n] * LOG2E))
            h0 = 0.0
            if base > 0:
                h0 = states[b, d, base // CHUNK - 1, n]
            (_, h), carry = tile.scan((a, dtx * Bn), op=affine, initial=(1.0, h0), return_total=True)
            states[b, d, base // CHUNK, n] = carry[1]
            Cn = tile.load(C_rows[n], base, CHUNK, valid=valid, other=0).astype(np.float32) if C.ndim == 4 else C[d, n]
            y = y + h * Cn
        if HAS_Z:
            zt = tile.load(z[b, d], base, CHUNK, valid=valid, other=0).astype(np.float32)
            y = y * zt * ct.sigmoid(zt)
        tile.store(out[b, d], base, y, valid=valid)


_interpreting = ct.jit(selective_scan.fn, interpret=True)
_by_threads: dict[tuple[int, int], ct.JITFunction] = {}


def launch_choice(seqlen: int, itemsize: int) -> tuple[int, int]:
    """(chunk, registers per thread) for a sequence length and the inputs' item size: the whole
    sequence (a power of two, at least 32) up to MAX_CHUNK, at REGISTERS, or HALF_CHUNKS_REGISTERS
    for 16-bit inputs longer than the chunk (see the module docstring)."""
    chunk = min(MAX_CHUNK, max(32, 1 << max(0, seqlen - 1).bit_length()))
    return chunk, HALF_CHUNKS_REGISTERS if itemsize == 2 and seqlen > chunk else REGISTERS


def n_chunks(seqlen: Any) -> Any:
    """How many chunks `launch_choice` cuts a row into (at least one: the states of an empty row are zeros);
    shape arithmetic only, so that PyTorch's fake tensors (symbolic lengths) can compute it too."""
    return max(1, (seqlen + MAX_CHUNK - 1) // MAX_CHUNK)


def kernel_for(chunk: int, interpret: bool, max_registers: int = REGISTERS) -> ct.JITFunction:
    """The program at ITEMS_PER_THREAD items per thread (at least a warp), or its interpreting copy."""
    if interpret:
        return _interpreting
    threads = max(32, chunk // ITEMS_PER_THREAD)
    if (threads, max_registers) not in _by_threads:
        options = dict(block_threads=threads, fastmath=True, max_registers=max_registers)
        _by_threads[threads, max_registers] = ct.jit(selective_scan.fn, **options)
    return _by_threads[threads, max_registers]


def selective_scan_fwd(
    u: Any,
    delta: Any,
    A: Any,
    B: Any,
    C: Any,
    D: Any = None,
    z: Any = None,
    delta_bias: Any = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
) -> Any:
    """Mamba's `selective_scan_fn` forward: `out`, or `(out, last_state)`.

    `u`, `delta`, `z`: (batch, dim, L) of float32, float16 or bfloat16, any strides (no copies);
    `A`: (dim, dstate) float32; `B`, `C`: (dim, dstate) float32, or (batch, dstate, L) or
    (batch, groups, dstate, L) of the input dtype; `D`, `delta_bias`: (dim,) float32. `out` has
    the input dtype (gated by silu(z) when z is given), `last_state` is (batch, dim, dstate)
    float32. PyTorch tensors or CuPy arrays run on the GPU, NumPy arrays in the interpreter;
    the outputs are arrays of the same library.
    """
    out, states = forward(u, delta, A, B, C, D, z, delta_bias, delta_softplus)
    return (out, states[:, :, -1]) if return_last_state else out


def forward(
    u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any, z: Any, delta_bias: Any, delta_softplus: bool
) -> tuple[Any, Any]:
    """`out` and the states at the end of each chunk, (batch, dim, chunks, dstate) float32, which the
    backward needs (`selective_scan_fwd` says what the arguments are)."""
    check_real(A)
    batch, dim, seqlen = u.shape
    dstate = A.shape[1]
    B, C = as_groups(B, C, dim)
    chunk, registers = launch_choice(seqlen, u.itemsize)
    out = empty_like(u, (batch, dim, seqlen), u.dtype)
    states = empty_like(u, (batch, dim, n_chunks(seqlen), dstate), "float32")
    if seqlen == 0:  # no chunk runs: the states stay zero
        states[...] = 0
    kernel_for(chunk, isinstance(u, np.ndarray), registers)[(dim, batch)](
        u, delta, A, B, C,
        A if D is None else D, A if delta_bias is None else delta_bias, u if z is None else z,
        out, states,
        HAS_D=D is not None, HAS_DELTA_BIAS=delta_bias is not None, HAS_Z=z is not None,
        SOFTPLUS=bool(delta_softplus), CHUNK=chunk,
    )  # fmt: skip
    return out, states


def check_real(A: Any) -> None:
    """Complex weights (Mamba's complex A, B, C) are not ported: a clear error naming what is."""
    if "complex" in str(A.dtype):
        raise NotImplementedError(f"the selective scan supports real weights only (float32 A), not {A.dtype}")


def as_groups(B: Any, C: Any, dim: int) -> tuple[Any, Any]:
    """B and C with a groups axis when they vary along the sequence ((batch, dstate, L) is one group: a view, not
    a copy), checking that the groups divide `dim`."""
    B, C = (X[:, None] if X.ndim == 3 else X for X in (B, C))
    for X in (B, C):
        if X.ndim == 4 and dim % X.shape[1]:
            raise ValueError(f"dim ({dim}) must be a multiple of the number of groups ({X.shape[1]})")
    return B, C


def selective_scan_reference(
    u: np.ndarray,
    delta: np.ndarray,
    A: np.ndarray,
    B: np.ndarray,
    C: np.ndarray,
    D: np.ndarray | None = None,
    z: np.ndarray | None = None,
    delta_bias: np.ndarray | None = None,
    delta_softplus: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(out, last_state) in float64, one time step after the other (Mamba's `selective_scan_ref`)."""
    u, delta, A = (np.asarray(v, np.float64) for v in (u, delta, A))
    batch, dim, seqlen = u.shape
    if delta_bias is not None:
        delta = delta + np.asarray(delta_bias, np.float64)[:, None]
    if delta_softplus:
        delta = np.where(delta > 20, delta, np.log1p(np.exp(np.minimum(delta, 20))))

    def per_channel(X: np.ndarray) -> np.ndarray:
        """B or C as (batch, dim, dstate, L) (or (dim, dstate) when fixed)."""
        X = np.asarray(X, np.float64)
        if X.ndim == 3:
            X = X[:, None]
        return X if X.ndim == 2 else np.repeat(X, dim // X.shape[1], axis=1)

    B, C = per_channel(B), per_channel(C)
    h = np.zeros((batch, dim, A.shape[1]))
    y = np.empty((batch, dim, seqlen))
    for t in range(seqlen):
        b_t = B if B.ndim == 2 else B[..., t]
        c_t = C if C.ndim == 2 else C[..., t]
        h = np.exp(delta[:, :, t, None] * A) * h + (delta[:, :, t] * u[:, :, t])[..., None] * b_t
        y[:, :, t] = (h * c_t).sum(-1)
    if D is not None:
        y = y + u * np.asarray(D, np.float64)[:, None]
    if z is not None:
        z = np.asarray(z, np.float64)
        y = y * z / (1 + np.exp(-z))
    return y, h
