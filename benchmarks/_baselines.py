"""Triton baselines for benchmarks/run.py, kept apart so that a machine without Triton or PyTorch still runs
every other section (run.py imports this module only inside the measurement that needs it).

No `from __future__ import annotations` here: Triton reads the `tl.constexpr` annotations at run time.
"""

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def _linrec_combine(a_l, b_l, a_r, b_r):
    return a_r * a_l, a_r * b_l + b_r


@triton.jit
def _tile_linrec(a, b, h, n, TILE: tl.constexpr):
    offsets = tl.program_id(0) * TILE + tl.arange(0, TILE)
    mask = offsets < n
    ta = tl.load(a + offsets, mask=mask, other=1.0)
    tb = tl.load(b + offsets, mask=mask, other=0.0)
    _, th = tl.associative_scan((ta, tb), axis=0, combine_fn=_linrec_combine)
    tl.store(h + offsets, th, mask=mask)


def triton_linrec(a: Any, b: Any, h: Any, n: int, *, tile: int, warps: int) -> Callable[[], None]:
    """A launch of the per-tile recurrence h_i = a_i * h_(i-1) + b_i (h = 0 at each tile's start) on float32
    device arrays (CuPy, or anything with `__cuda_array_interface__`), viewed without a copy as the PyTorch
    tensors Triton takes. It runs on PyTorch's current stream, the legacy default stream, which CuPy's
    null-stream events in run.py time as well."""
    ta, tb, th = (torch.as_tensor(v, device="cuda") for v in (a, b, h))
    grid = (triton.cdiv(n, tile),)

    def launch() -> None:
        _tile_linrec[grid](ta, tb, th, n, TILE=tile, num_warps=warps)

    return launch


@triton.jit
def _histogram(x, out, n, BINS: tl.constexpr, HBINS: tl.constexpr, BLOCK: tl.constexpr):
    # persistent: each program strides over the array, keeps its histogram in registers, and adds it to `out`
    # with one atomic per bin at the end. HBINS is BINS rounded up to a power of two (tl.histogram's bins);
    # values outside [0, BINS) are masked out, since tl.histogram does not define them.
    h = tl.zeros((HBINS,), dtype=tl.int32)
    for base in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offsets = base + tl.arange(0, BLOCK)
        inside = offsets < n
        v = tl.load(x + offsets, mask=inside, other=0).to(tl.int32)
        h += tl.histogram(v, HBINS, mask=inside & (v >= 0) & (v < BINS))
    bins = tl.arange(0, HBINS)
    tl.atomic_add(out + bins, h, mask=bins < BINS)


def triton_histogram(x: Any, out: Any, n: int, bins: int, *, block: int, programs: int) -> Callable[[], None]:
    """A launch of a persistent `tl.histogram` kernel on `programs` programs of `block` elements per step, that
    adds the counts of the values of x (an integer device array) in [0, bins) to the int32 array `out` (which
    must be zeroed before each launch). Zero-copy PyTorch views of CuPy arrays, on PyTorch's current stream."""
    tx, tout = torch.as_tensor(x, device="cuda"), torch.as_tensor(out, device="cuda")
    hbins = max(32, triton.next_power_of_2(bins))

    def launch() -> None:
        _histogram[(programs,)](tx, tout, n, BINS=bins, HBINS=hbins, BLOCK=block, num_warps=4)

    return launch


@triton.jit
def _segment_sort_keys(keys, keys_out, SEGMENT: tl.constexpr):
    offsets = tl.program_id(0) * SEGMENT + tl.arange(0, SEGMENT)
    tl.store(keys_out + offsets, tl.sort(tl.load(keys + offsets)))


@triton.jit
def _segment_sort_pairs(keys, keys_out, vals, vals_out, SEGMENT: tl.constexpr):
    # tl.sort sorts one tensor: sort (key << 32 | position) as int64, which orders ties by position (a stable
    # sort), then unpack the key and gather the payload from the positions
    base = tl.program_id(0) * SEGMENT
    position = tl.arange(0, SEGMENT)
    packed = (tl.load(keys + base + position).to(tl.int64) << 32) | position.to(tl.int64)
    packed = tl.sort(packed)
    tl.store(keys_out + base + position, (packed >> 32).to(tl.int32))
    source = (packed & (SEGMENT - 1)).to(tl.int32)
    tl.store(vals_out + base + position, tl.load(vals + base + source))


def triton_segment_sort(
    keys: Any, keys_out: Any, vals: Any = None, vals_out: Any = None, *, segment: int, warps: int
) -> Callable[[], None]:
    """A launch that sorts each segment of `segment` (a power of two) int32 keys with `tl.sort`, one program per
    segment; with `vals`, the int32 payload goes along (a packed 64-bit key, stable). Zero-copy PyTorch views of
    CuPy arrays, on PyTorch's current stream."""
    tk, tko = torch.as_tensor(keys, device="cuda"), torch.as_tensor(keys_out, device="cuda")
    grid = (tk.numel() // segment,)
    if vals is None:

        def launch() -> None:
            _segment_sort_keys[grid](tk, tko, SEGMENT=segment, num_warps=warps)

        return launch
    tv, tvo = torch.as_tensor(vals, device="cuda"), torch.as_tensor(vals_out, device="cuda")

    def launch_pairs() -> None:
        _segment_sort_pairs[grid](tk, tko, tv, tvo, SEGMENT=segment, num_warps=warps)

    return launch_pairs


@triton.jit
def _selective_scan(
    u, delta, A, B, C, D, delta_bias, z, out, last_state,
    dim, L, dims_per_group,
    u_sb, u_sd, dt_sb, dt_sd, A_sd, A_sn, B_sb, B_sg, B_sn, C_sb, C_sg, C_sn, z_sb, z_sd, out_sb, out_sd,
    DSTATE: tl.constexpr, BLOCK_L: tl.constexpr,
):  # fmt: skip
    # Mamba's selective scan forward with variable B and C, z, D, delta_bias and softplus: one program per
    # (d, b) row, chunks of BLOCK_L along the sequence, all DSTATE states of a chunk as one (DSTATE, BLOCK_L)
    # tile scanned along the sequence with the affine composition; h carries the states across chunks.
    d = tl.program_id(0)
    b = tl.program_id(1)
    g = d // dims_per_group
    n = tl.arange(0, DSTATE)
    a_n = tl.load(A + d * A_sd + n * A_sn) * 1.4426950408889634  # exp(x) = exp2(x * log2(e))
    d_skip = tl.load(D + d)
    bias = tl.load(delta_bias + d)
    last = (tl.arange(0, BLOCK_L) == BLOCK_L - 1)[None, :]
    h = tl.zeros([DSTATE], dtype=tl.float32)
    for base in range(0, L, BLOCK_L):
        l = base + tl.arange(0, BLOCK_L)
        inside = l < L
        x = tl.load(u + b * u_sb + d * u_sd + l, mask=inside, other=0.0).to(tl.float32)
        dt = tl.load(delta + b * dt_sb + d * dt_sd + l, mask=inside, other=0.0).to(tl.float32) + bias
        dt = tl.where(dt <= 20.0, tl.log(1.0 + tl.exp(dt)), dt)
        dt = tl.where(inside, dt, 0.0)  # past the end: a = 1, b = 0
        rows = n[:, None]
        Bt = tl.load(B + b * B_sb + g * B_sg + rows * B_sn + l[None, :], mask=inside[None, :], other=0.0)
        Ct = tl.load(C + b * C_sb + g * C_sg + rows * C_sn + l[None, :], mask=inside[None, :], other=0.0)
        a = tl.exp2(dt[None, :] * a_n[:, None])
        bx = Bt.to(tl.float32) * (dt * x)[None, :]
        a_cum, b_cum = tl.associative_scan((a, bx), axis=1, combine_fn=_linrec_combine)
        hs = a_cum * h[:, None] + b_cum
        y = tl.sum(hs * Ct.to(tl.float32), axis=0) + d_skip * x
        zt = tl.load(z + b * z_sb + d * z_sd + l, mask=inside, other=0.0).to(tl.float32)
        y = y * zt * tl.sigmoid(zt)
        tl.store(out + b * out_sb + d * out_sd + l, y.to(out.dtype.element_ty), mask=inside)
        h = tl.sum(tl.where(last, hs, 0.0), axis=1)
    tl.store(last_state + (b * dim + d) * DSTATE + n, h)


def triton_selective_scan(
    u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any, z: Any, delta_bias: Any, out: Any, last_state: Any,
    *, block_l: int, warps: int
) -> Callable[[], None]:  # fmt: skip
    """A launch of the Triton selective scan on PyTorch tensors: u, delta, z, out (batch, dim, L) with unit last
    stride; B, C (batch, groups, dstate, L) with unit last stride; A (dim, dstate); D, delta_bias (dim,); softplus on;
    last_state a contiguous (batch, dim, dstate) float32 tensor."""
    batch, dim, L = u.shape
    dstate = A.shape[1]
    strides = (
        *u.stride()[:2], *delta.stride()[:2], *A.stride(), *B.stride()[:3], *C.stride()[:3], *z.stride()[:2],
        *out.stride()[:2],
    )  # fmt: skip
    grid = (dim, batch)

    def launch() -> None:
        _selective_scan[grid](
            u, delta, A, B, C, D, delta_bias, z, out, last_state, dim, L, dim // B.shape[1], *strides,
            DSTATE=dstate, BLOCK_L=block_l, num_warps=warps,
        )  # fmt: skip

    return launch


def torch_selective_scan_ref(
    u: Any, delta: Any, A: Any, B: Any, C: Any, D: Any, z: Any, delta_bias: Any, dtype: Any = torch.float32
) -> tuple[Any, Any]:
    """(out, last_state): Mamba's `selective_scan_ref` equations in PyTorch, one time step after the other, in
    `dtype` (variable B and C as (batch, groups, dstate, L); softplus on): the sequential baseline, and in float64
    the reference the benchmark checks every implementation against."""
    batch, dim, L = u.shape
    u, delta, z = (t.to(dtype) for t in (u, delta, z))
    delta = torch.nn.functional.softplus(delta + delta_bias.to(dtype)[:, None])
    B, C = (t.to(dtype).repeat_interleave(dim // t.shape[1], dim=1) for t in (B, C))  # (batch, dim, dstate, L)
    delta_a = torch.exp(torch.einsum("bdl,dn->bdln", delta, A.to(dtype)))
    delta_b_u = torch.einsum("bdl,bdnl->bdln", delta * u, B)
    h = u.new_zeros((batch, dim, A.shape[1]))
    ys = []
    for t in range(L):
        h = delta_a[:, :, t] * h + delta_b_u[:, :, t]
        ys.append(torch.einsum("bdn,bdn->bd", h, C[..., t]))
    out = (torch.stack(ys, dim=2) + u * D.to(dtype)[:, None]) * torch.nn.functional.silu(z)
    return out, h
