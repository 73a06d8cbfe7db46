"""A Triton top-k over long rows, written the way Triton users write one (sort-based, Triton's sort having no
payload): each value's order-preserving bits and its index packed into one uint64 key, `tl.sort` of each chunk of
a row keeping its first k, then `tl.sort` of a row's candidates keeping the first k. The baseline of
benchmarks/sections/topk.py."""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl


@triton.jit
def _pack(v, offs):
    """The uint64 key of float32 values `v` at int32 `offs`: larger values first, then smaller indices (`offs` made
    uint32 first: Triton types a Python int by the tensor it meets, and 0xFFFFFFFF is out of int32's range)."""
    bits = v.to(tl.uint32, bitcast=True)
    ordered = tl.where((bits >> 31) != 0, ~bits, bits | 0x80000000)
    return (ordered.to(tl.uint64) << 32) | (0xFFFFFFFF - offs.to(tl.uint32)).to(tl.uint64)


@triton.jit
def _chunk_topk(x_ptr, cand_ptr, n, n_cand, K: tl.constexpr, CHUNK: tl.constexpr):
    chunk, row = tl.program_id(0), tl.program_id(1)
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    v = tl.load(x_ptr + row.to(tl.int64) * n + offs, mask=offs < n, other=float("-inf")).to(tl.float32)
    keys = tl.sort(_pack(v, offs), descending=True)
    j = tl.arange(0, CHUNK)
    tl.store(cand_ptr + row.to(tl.int64) * n_cand + chunk * K + j, keys, mask=j < K)


@triton.jit
def _merge_topk(cand_ptr, vals_ptr, idx_ptr, n_cand, K: tl.constexpr, M: tl.constexpr):
    row = tl.program_id(0)
    j = tl.arange(0, M)
    keys = tl.sort(tl.load(cand_ptr + row.to(tl.int64) * n_cand + j, mask=j < n_cand, other=0), descending=True)
    ordered = (keys >> 32).to(tl.uint32)
    bits = tl.where((ordered >> 31) != 0, ordered ^ 0x80000000, ~ordered)
    index = 0xFFFFFFFF - (keys & 0xFFFFFFFF)
    out = row.to(tl.int64) * K + j
    tl.store(vals_ptr + out, bits.to(tl.float32, bitcast=True).to(vals_ptr.dtype.element_ty), mask=j < K)
    tl.store(idx_ptr + out, index.to(tl.int64), mask=j < K)


def topk(x: Any, k: int, chunk: int, warps: int = 8) -> tuple[Any, Any]:
    """(values, int64 indices) of each row's k largest of the contiguous 2-D PyTorch tensor `x`, largest first,
    ties by index; `chunk` (a power of two, at least k) elements per program of the first stage."""
    import torch

    rows, n = x.shape
    chunks = triton.cdiv(n, chunk)
    n_cand = chunks * k
    cand = torch.empty((rows, n_cand), dtype=torch.uint64, device=x.device)
    vals = torch.empty((rows, k), dtype=x.dtype, device=x.device)
    idx = torch.empty((rows, k), dtype=torch.int64, device=x.device)
    _chunk_topk[(chunks, rows)](x, cand, n, n_cand, K=k, CHUNK=chunk, num_warps=warps)
    _merge_topk[(rows,)](cand, vals, idx, n_cand, K=k, M=triton.next_power_of_2(n_cand), num_warps=warps)
    return vals, idx
