"""Ports of real Triton kernels as tile programs (issue 19, "Ports as tests"), with host wrappers that
launch them as the originals' wrappers do and float64 NumPy references written from the equations.

The originals, read for what they compute (no code copied):

- Mamba-2's `_chunk_cumsum_fwd_kernel` and `_chunk_cumsum_bwd_kernel`
  (state-spaces/mamba, `mamba_ssm/ops/triton/ssd_chunk_state.py`) and their wrappers `_chunk_cumsum_fwd`/`_bwd`;
- flash-linear-attention's `fused_recurrent_fwd_kernel` (`fla/ops/common/fused_recurrent.py`) as
  `fused_recurrent_simple_gla` (`fla/ops/simple_gla/fused_recurrent.py`) calls it: a head-wise gate `g`, no
  `g_gamma`/`gk`/`gv`, no `cu_seqlens`, the state `(K, V)` (not V-first), forward and `reverse=True`.

Lines of the `@triton.jit` function body (its signature and decorators left out) against the tile program's
body (its docstring left out), blank lines and comments not counted (originals: state-spaces/mamba e9594ce,
fla-org/flash-linear-attention bc3b101):

=========================== ========= ===== ==================================================================
kernel                      original  port  what differs
=========================== ========= ===== ==================================================================
_chunk_cumsum_fwd_kernel    26        13    no pointer or stride arithmetic: 2-D blocks of views that the
                                            wrapper permutes (as the original's wrapper permutes strides);
                                            `valid=` for the masks; `ct.softplus` has Mamba's threshold
                                            of 20; rows past nheads are not zeroed (never stored)
_chunk_cumsum_bwd_kernel    47        29    as above; `dA`/`ddt_bias` are (nheads,) arrays added into
                                            atomically, or (batch, nchunks, nheads) workspaces (the original
                                            passes one pointer with zero batch and chunk strides)
fused_recurrent_fwd_kernel  82 (40)   14    simple GLA only: 40 of the 82 lines run for it (the original
(simple GLA)                                also has g_gamma, gk, gv, varlen, a V-first state); a 3-D grid
                                            (block of V, block of K, sequence * head) where the original
                                            decodes one program id; one time index per step instead of
                                            seven pointers stepped by +-1
ddA suffix sum (PyTorch)    2         4     not a Triton kernel: the backward's `ddA_cumsum_prev.flip([-1])
                                            .cumsum(dim=-1).flip([-1])` and its add into ddA (two flips, a
                                            cumsum and adds in PyTorch) as one reverse scan along rows
=========================== ========= ===== ==================================================================

(`test_ports.test_line_counts_in_the_table` checks the ports' counts against the bodies below.)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

import coop_tiles as ct
from coop_tiles import tile


# ----- Mamba-2: chunk cumsum, forward ----------------------------------------------------------------
@ct.jit
def chunk_cumsum_fwd_kernel(
    dt,
    A,
    dt_bias,
    dt_out,
    dA_cumsum,
    seqlen,
    nheads,
    chunk_size,
    dt_min,
    dt_max,
    DT_SOFTPLUS: ct.constexpr,
    HAS_DT_BIAS: ct.constexpr,
    BLOCK_SIZE_H: ct.constexpr,
    BLOCK_SIZE_CHUNK: ct.constexpr,
):
    """One (batch, chunk, block of heads): dt (+ dt_bias, softplus, clamped to [dt_min, dt_max], zero past the
    sequence) into `dt_out`, and its cumsum times A along the chunk into `dA_cumsum`. `dt` is a
    (batch, nheads, seqlen) view; `dt_out` and `dA_cumsum` (batch, nchunks, nheads, chunk_size) views."""
    b, c, h = ct.program_id(0), ct.program_id(1), ct.program_id(2) * BLOCK_SIZE_H
    limit = min(chunk_size, seqlen - c * chunk_size)
    x = tile.load(dt[b], (h, c * chunk_size), (BLOCK_SIZE_H, BLOCK_SIZE_CHUNK), valid=(nheads - h, limit))
    x = x.astype(np.float32)
    if HAS_DT_BIAS:
        x = x + tile.load(dt_bias, h, BLOCK_SIZE_H, valid=nheads - h).astype(np.float32)[:, None]
    if DT_SOFTPLUS:
        x = ct.softplus(x)
    x = ct.minimum(ct.maximum(x, dt_min), dt_max)
    x = ct.where(tile.arange(BLOCK_SIZE_CHUNK)[None, :] < limit, x, 0.0)
    tile.store(dt_out[b, c], (h, 0), x, valid=(nheads - h, chunk_size))
    a = tile.load(A, h, BLOCK_SIZE_H, valid=nheads - h).astype(np.float32)
    tile.store(dA_cumsum[b, c], (h, 0), tile.scan(x * a[:, None], axis=1), valid=(nheads - h, chunk_size))


# ----- Mamba-2: chunk cumsum, backward ---------------------------------------------------------------
@ct.jit
def chunk_cumsum_bwd_kernel(
    ddA,
    ddt_out,
    dt,
    A,
    dt_bias,
    ddt,
    dA,
    ddt_bias,
    seqlen,
    nheads,
    chunk_size,
    dt_min,
    dt_max,
    DT_SOFTPLUS: ct.constexpr,
    HAS_DT_BIAS: ct.constexpr,
    BLOCK_SIZE_H: ct.constexpr,
    BLOCK_SIZE_CHUNK: ct.constexpr,
    DETERMINISTIC_REDUCTION: ct.constexpr,
):
    """The forward's gradients for one (batch, chunk, block of heads): `ddt` from the gradients of dA (`ddA`,
    not cumulated) and of dt_out (`ddt_out`), through the clamp, softplus and dt_bias; the chunk's share of
    `dA` and `ddt_bias`, stored into (batch, nchunks, nheads) workspaces (DETERMINISTIC_REDUCTION) or added
    atomically into (nheads,) arrays. `ddA`, `ddt_out` are (batch, nchunks, nheads, chunk_size) views, `dt`
    and `ddt` (batch, nheads, seqlen) ones."""
    b, c, h = ct.program_id(0), ct.program_id(1), ct.program_id(2) * BLOCK_SIZE_H
    limit = min(chunk_size, seqlen - c * chunk_size)
    block, valid = (BLOCK_SIZE_H, BLOCK_SIZE_CHUNK), (nheads - h, limit)
    dda = tile.load(ddA[b, c], (h, 0), block, valid=valid).astype(np.float32)
    a = tile.load(A, h, BLOCK_SIZE_H, valid=nheads - h).astype(np.float32)
    g = dda * a[:, None] + tile.load(ddt_out[b, c], (h, 0), block, valid=valid).astype(np.float32)
    x = tile.load(dt[b], (h, c * chunk_size), block, valid=valid).astype(np.float32)
    if HAS_DT_BIAS:
        x = x + tile.load(dt_bias, h, BLOCK_SIZE_H, valid=nheads - h).astype(np.float32)[:, None]
    pre = x
    if DT_SOFTPLUS:
        x = ct.softplus(x)
    clamped = (x < dt_min) | (x > dt_max)
    inside = tile.arange(BLOCK_SIZE_CHUNK)[None, :] < limit
    x = ct.where(inside, ct.minimum(ct.maximum(x, dt_min), dt_max), 0.0)
    g = ct.where(inside & ~clamped, g, 0.0)
    if DT_SOFTPLUS:
        g = ct.where(pre <= 20.0, g * ct.sigmoid(pre), g)
    tile.store(ddt[b], (h, c * chunk_size), g, valid=valid)
    da = tile.sum(dda * x, axis=1)
    if DETERMINISTIC_REDUCTION:
        tile.store(dA[b, c], h, da, valid=nheads - h)
    else:
        tile.atomic_add(dA, h, da, valid=nheads - h)
    if HAS_DT_BIAS:
        if DETERMINISTIC_REDUCTION:
            tile.store(ddt_bias[b, c], h, tile.sum(g, axis=1), valid=nheads - h)
        else:
            tile.atomic_add(ddt_bias, h, tile.sum(g, axis=1), valid=nheads - h)


# ----- Mamba-2: the backward's suffix sum (PyTorch in the original) -----------------------------------
@ct.jit
def chunk_suffix_sum_kernel(
    ddA_cumsum, ddA, nheads, chunk_size, BLOCK_SIZE_H: ct.constexpr, BLOCK_SIZE_CHUNK: ct.constexpr
):
    """ddA[..., j] += the sum of ddA_cumsum[..., j:] along the chunk, for one (batch, chunk, block of heads):
    `ddA_cumsum.flip([-1]).cumsum(dim=-1).flip([-1])` and the add after it in `_mamba_chunk_scan_combined_bwd`,
    the gradient of a cumsum. Both are (batch, nchunks, nheads, chunk_size) views."""
    b, c, h = ct.program_id(0), ct.program_id(1), ct.program_id(2) * BLOCK_SIZE_H
    block, valid = (BLOCK_SIZE_H, BLOCK_SIZE_CHUNK), (nheads - h, chunk_size)
    suffix = tile.scan(tile.load(ddA_cumsum[b, c], (h, 0), block, valid=valid), axis=1, reverse=True)
    tile.store(ddA[b, c], (h, 0), tile.load(ddA[b, c], (h, 0), block, valid=valid) + suffix, valid=valid)


# ----- flash-linear-attention: fused recurrent simple GLA, forward -----------------------------------
@ct.jit
def fused_recurrent_gla_fwd_kernel(
    q,
    k,
    v,
    g,
    o,
    h0,
    ht,
    scale,
    T,
    K,
    V,
    BK: ct.constexpr,
    BV: ct.constexpr,
    REVERSE: ct.constexpr,
    USE_INITIAL_STATE: ct.constexpr,
    STORE_FINAL_STATE: ct.constexpr,
):
    """One (block of V, block of K, sequence * head): the state `h` (BK, BV) decays by exp(g_t) and gains
    k_t v_t^T at each step t (from T-1 down to 0 with REVERSE); o_t = (q_t * scale) h, this block of K's
    share (the wrapper sums the shares). q, k (N, T, H, K), v (N, T, H, V), g (N, T, H), o (NK, N, T, H, V),
    h0 and ht (N, H, K, V)."""
    kk, vv, nh = ct.program_id(1) * BK, ct.program_id(0) * BV, ct.program_id(2)
    n, hd = nh // q.shape[2], nh % q.shape[2]
    h = tile.zeros((BK, BV), np.float32)
    if USE_INITIAL_STATE:
        h = h + tile.load(h0[n, hd], (kk, vv), (BK, BV), valid=(K - kk, V - vv)).astype(np.float32)
    for step in range(T):
        t = T - 1 - step if REVERSE else step
        bq = tile.load(q[n, t, hd], kk, BK, valid=K - kk).astype(np.float32) * scale
        bk = tile.load(k[n, t, hd], kk, BK, valid=K - kk).astype(np.float32)
        bv = tile.load(v[n, t, hd], vv, BV, valid=V - vv).astype(np.float32)
        h = h * ct.exp(np.float32(g[n, t, hd])) + bk[:, None] * bv[None, :]
        tile.store(o[ct.program_id(1), n, t, hd], vv, tile.sum(h * bq[:, None], axis=0), valid=V - vv)
    if STORE_FINAL_STATE:
        tile.store(ht[n, hd], (kk, vv), h, valid=(K - kk, V - vv))


# ----- host wrappers: launches as the originals' wrappers make them ---------------------------------------
@dataclass
class Launch:
    """A kernel with its grid, arguments and constexprs: run it (compiled, or in the interpreter with NumPy
    arrays) or compile it for an arch."""

    kernel: ct.JITFunction
    grid: tuple[int, ...]
    args: list[Any]
    constexprs: dict[str, Any]

    def __call__(self, interpret: bool = False) -> None:
        kernel = _interpreted(self.kernel) if interpret else self.kernel
        kernel[self.grid](*self.args, **self.constexprs)

    def compile(self, arch: str) -> ct.CompiledKernel:
        return self.kernel.compile(*self.args, arch=arch, **self.constexprs)


@functools.cache
def _interpreted(kernel: ct.JITFunction) -> ct.JITFunction:
    return ct.jit(kernel.fn, interpret=True)


def next_power_of_2(n: int) -> int:
    """The least power of two at least `n` (Triton's `next_power_of_2`)."""
    return 1 << max(n - 1, 0).bit_length()


def _permuted(a: Any, axes: tuple[int, ...]) -> Any:
    """A view of `a` with its axes permuted, for NumPy and CuPy (`transpose`) and PyTorch (`permute`)."""
    return a.permute(*axes) if hasattr(a, "permute") else a.transpose(axes)


def chunk_cumsum_fwd(
    dt: Any,
    A: Any,
    dt_out: Any,
    dA_cumsum: Any,
    dt_bias: Any = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    block_size_h: int = 4,
) -> Launch:
    """`_chunk_cumsum_fwd`: dt (batch, seqlen, nheads) and A (nheads,) into dt_out and dA_cumsum
    (batch, nheads, nchunks, chunk_size) float32 arrays the caller gives."""
    batch, seqlen, nheads = dt.shape
    chunk_size = dt_out.shape[3]
    return Launch(
        chunk_cumsum_fwd_kernel,
        (batch, dt_out.shape[2], -(-nheads // block_size_h)),
        [
            _permuted(dt, (0, 2, 1)),
            A,
            A if dt_bias is None else dt_bias,
            _permuted(dt_out, (0, 2, 1, 3)),
            _permuted(dA_cumsum, (0, 2, 1, 3)),
            seqlen,
            nheads,
            chunk_size,
            float(dt_limit[0]),
            float(dt_limit[1]),
        ],
        {
            "DT_SOFTPLUS": dt_softplus,
            "HAS_DT_BIAS": dt_bias is not None,
            "BLOCK_SIZE_H": block_size_h,
            "BLOCK_SIZE_CHUNK": next_power_of_2(chunk_size),
        },
    )


def chunk_cumsum_bwd(
    ddA: Any,
    ddt_out: Any,
    dt: Any,
    A: Any,
    ddt: Any,
    dA: Any,
    ddt_bias: Any = None,
    dt_bias: Any = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    deterministic: bool = False,
    block_size_h: int = 4,
) -> Launch:
    """`_chunk_cumsum_bwd`: ddA, ddt_out (batch, nheads, nchunks, chunk_size), dt (batch, seqlen, nheads) and
    A (nheads,) into ddt (like dt), dA and ddt_bias (float32): (batch, nchunks, nheads) workspaces, which the
    caller sums over their first two axes, when `deterministic`; else (nheads,) arrays the caller zeroes,
    added into atomically."""
    batch, seqlen, nheads = dt.shape
    chunk_size = ddA.shape[3]
    return Launch(
        chunk_cumsum_bwd_kernel,
        (batch, ddA.shape[2], -(-nheads // block_size_h)),
        [
            _permuted(ddA, (0, 2, 1, 3)),
            _permuted(ddt_out, (0, 2, 1, 3)),
            _permuted(dt, (0, 2, 1)),
            A,
            A if dt_bias is None else dt_bias,
            _permuted(ddt, (0, 2, 1)),
            dA,
            dA if ddt_bias is None else ddt_bias,
            seqlen,
            nheads,
            chunk_size,
            float(dt_limit[0]),
            float(dt_limit[1]),
        ],
        {
            "DT_SOFTPLUS": dt_softplus,
            "HAS_DT_BIAS": dt_bias is not None,
            "BLOCK_SIZE_H": block_size_h,
            "BLOCK_SIZE_CHUNK": next_power_of_2(chunk_size),
            "DETERMINISTIC_REDUCTION": deterministic,
        },
    )


def chunk_suffix_sum(ddA_cumsum: Any, ddA: Any, block_size_h: int = 4) -> Launch:
    """Adds the suffix sums along the chunk of `ddA_cumsum` into `ddA`, both (batch, nheads, nchunks,
    chunk_size) float32."""
    batch, nheads, nchunks, chunk_size = ddA.shape
    return Launch(
        chunk_suffix_sum_kernel,
        (batch, nchunks, -(-nheads // block_size_h)),
        [_permuted(ddA_cumsum, (0, 2, 1, 3)), _permuted(ddA, (0, 2, 1, 3)), nheads, chunk_size],
        {"BLOCK_SIZE_H": block_size_h, "BLOCK_SIZE_CHUNK": next_power_of_2(chunk_size)},
    )


def fused_recurrent_simple_gla(
    q: Any,
    k: Any,
    v: Any,
    g: Any,
    o_parts: Any,
    scale: float | None = None,
    initial_state: Any = None,
    final_state: Any = None,
    reverse: bool = False,
) -> Launch:
    """`fused_recurrent_simple_gla`'s forward: q, k (N, T, H, K), v (N, T, H, V) and g (N, T, H) into `o_parts`
    (NK, N, T, H, V) float32, one share per block of K (the output is their sum over axis 0), with scale
    1/sqrt(K) by default; from `initial_state` and into `final_state` ((N, H, K, V) float32) when given."""
    N, T, H, K = k.shape
    V = v.shape[-1]
    BK, BV = min(next_power_of_2(K), 64), min(next_power_of_2(V), 64)
    return Launch(
        fused_recurrent_gla_fwd_kernel,
        (-(-V // BV), -(-K // BK), N * H),
        [
            q,
            k,
            v,
            g,
            o_parts,
            q if initial_state is None else initial_state,
            q if final_state is None else final_state,
            K**-0.5 if scale is None else scale,
            T,
            K,
            V,
        ],
        {
            "BK": BK,
            "BV": BV,
            "REVERSE": reverse,
            "USE_INITIAL_STATE": initial_state is not None,
            "STORE_FINAL_STATE": final_state is not None,
        },
    )


# ----- references: float64 NumPy, from the equations ------------------------------------------------------
def _dt_forward(dt: np.ndarray, dt_bias: np.ndarray | None, softplus: bool, dt_limit: tuple[float, float]):
    """(pre-activation, activation, clamped mask) of Mamba-2's dt: dt + dt_bias, then log(1 + e^x) where
    x <= 20 (x itself above), then clamped to dt_limit."""
    pre = dt.astype(np.float64) + (0 if dt_bias is None else dt_bias.astype(np.float64))
    act = np.where(pre <= 20, np.log1p(np.exp(np.minimum(pre, 20))), pre) if softplus else pre
    return pre, np.clip(act, *dt_limit), (act < dt_limit[0]) | (act > dt_limit[1])


def _chunked(x: np.ndarray, chunk_size: int) -> np.ndarray:
    """(batch, seqlen, nheads) to (batch, nheads, nchunks, chunk_size), zero past seqlen."""
    batch, seqlen, nheads = x.shape
    nchunks = -(-seqlen // chunk_size)
    padded = np.zeros((batch, nchunks * chunk_size, nheads), x.dtype)
    padded[:, :seqlen] = x
    return padded.reshape(batch, nchunks, chunk_size, nheads).transpose(0, 3, 1, 2)


def ref_chunk_cumsum_fwd(dt, A, chunk_size, dt_bias=None, dt_softplus=False, dt_limit=(0.0, np.inf)):
    """(dA_cumsum, dt_out): dt_out[b, h, c, j] is the activated dt at time c * chunk_size + j (0 past
    seqlen), dA_cumsum its running sum times A[h] along j."""
    _, act, _ = _dt_forward(dt, dt_bias, dt_softplus, dt_limit)
    dt_out = _chunked(act, chunk_size)
    return np.cumsum(dt_out * A.astype(np.float64)[:, None, None], axis=-1), dt_out


def ref_chunk_cumsum_bwd(ddA, ddt_out, dt, A, dt_bias=None, dt_softplus=False, dt_limit=(0.0, np.inf)):
    """(ddt, dA, ddt_bias) by the chain rule through dA = dt_out * A (`ddA` its gradient, per element) and
    dt_out (`ddt_out`): the clamp passes gradients inside dt_limit only, softplus multiplies them by
    sigmoid(pre) (where pre <= 20). Elements past seqlen do not count."""
    batch, seqlen, nheads = dt.shape
    pre, act, clamped = _dt_forward(dt, dt_bias, dt_softplus, dt_limit)

    def per_time(x: np.ndarray) -> np.ndarray:  # (batch, nheads, nchunks, chunk) to (batch, seqlen, nheads)
        return x.astype(np.float64).transpose(0, 2, 3, 1).reshape(batch, -1, nheads)[:, :seqlen]

    dda = per_time(ddA)
    g = np.where(clamped, 0.0, dda * A.astype(np.float64) + per_time(ddt_out))
    if dt_softplus:
        g = np.where(pre <= 20, g / (1 + np.exp(-pre)), g)
    return g, (dda * act).sum(axis=(0, 1)), g.sum(axis=(0, 1))


def ref_simple_gla(q, k, v, g, scale=None, initial_state=None, reverse=False):
    """(o, final state): S_t = exp(g_t) S_{t-1} + k_t v_t^T, o_t = scale q_t^T S_t, per sequence and head,
    over t = 0..T-1 (T-1..0 when reversed), S from initial_state (or zeros)."""
    N, T, H, K = k.shape
    V = v.shape[-1]
    scale = K**-0.5 if scale is None else scale
    q, k, v, g = (x.astype(np.float64) for x in (q, k, v, g))
    S = np.zeros((N, H, K, V)) if initial_state is None else initial_state.astype(np.float64).copy()
    o = np.zeros((N, T, H, V))
    for t in range(T - 1, -1, -1) if reverse else range(T):
        S = S * np.exp(g[:, t])[:, :, None, None] + k[:, t, :, :, None] * v[:, t, :, None, :]
        o[:, t] = np.einsum("nhk,nhkv->nhv", q[:, t] * scale, S)
    return o, S
