"""Mamba-2's SSD chunked scan forward (`mamba_chunk_scan_combined`) as five tile programs, and its host entry point.

For batch b, head h (reading group g = h // (nheads // ngroups) of B and C), time t, row p of the head and state
n, with dt' = max(softplus(dt + dt_bias), 0) (bias and softplus optional) and a_t = exp(A[h] * dt'_t):

    state_t[p, n] = a_t * state_{t-1}[p, n] + dt'_t * x_t[p] * B_t[n]          (state_{-1}: initial_states, or 0)
    out_t[p]      = (sum_n C_t[n] * state_t[p, n] + D[h, p] * x_t[p]) * silu(z_t[p])

The sequence is cut into chunks of L steps; with cs_t the cumsum of A * dt' inside a chunk (`dA_cumsum`):

0. `chunk_cumsum`, one program per (chunk, batch, head): dt' and its scaled cumsum (`tile.scan`), as Mamba's
   `_chunk_cumsum_fwd`; the other programs load them as vectors.
1. `chunk_state`, one program per (chunk, batch, head): the state the chunk alone leaves,
   `S_c = (x * (exp(cs_last - cs) * dt')[:, None]).T @ B`, K steps at a time (a (P, K) @ (K, N) product a block,
   `tile.dot` with a loop-carried accumulator in registers; x loaded (K, P) along its contiguous rows and
   multiplied as `x.T`, which the dot reads in place), stored transposed, (N, P), so that `chunk_scan`
   multiplies it as loaded.
2. `state_passing`, one program per (block of E state elements, batch, head): the states entering each chunk,
   `H_c = exp(cs_last of c-1) * H_{c-1} + S_{c-1}`, seeded with the initial state, the last one the final state:
   a loop over the chunks, each thread its own elements (as Mamba's `_state_passing_fwd`: memory-bound, its
   loads independent of the recurrence; a scan of (decay, state) pairs along the chunks exchanged every tile
   through shared memory and ran at a fifth of Mamba's speed on an H100).
3. `chunk_cb`, one program per (block of M rows of a chunk, chunk, batch * group): C B^T inside the chunk, on and
   below the diagonal, once per group (as Mamba's `_bmm_chunk_fwd`; every head of the group reads it).
4. `chunk_scan`, one program per (block of M rows of a chunk, chunk, batch * head): the output rows,
   `(C_m @ H_c.T) * exp(cs_m)[:, None]` plus, for each block k of earlier-or-equal rows,
   `((C B^T)_mk * exp(cs_m[:, None] - cs_k[None, :]) * dt'_k, causal) @ x_k`, then D and the z gate; H_c.T as
   the states are kept (every product's operands multiplied as loaded: one arrangement in shared memory), the
   products' accumulator in registers (its per-row factors from stride-0 views: a broadcast into the
   accumulator's fragment would be an exchange), the weights of each block in rows (cs and dt' as vectors,
   broadcast in registers; the causal mask from row and column indices, cs_m loaded once). Its block
   (M, K, threads, register cap) is a `ScanBlock` of SCAN_BLOCKS, SCAN_BLOCK the one used
   (benchmarks/ssd_probe.py times them all).

As in Mamba, the states between chunks are kept in C's dtype and the final states in float32; the products run
in x's dtype with float32 accumulation.

Packed sequences (`seq_idx`, Mamba's rules): each program takes a constexpr HAS_SEQ_IDX (without it, the code
generated is the same as before it existed). `chunk_state` weighs only the steps of the sequence a chunk ends in,
`state_passing` zeroes the state before a chunk that ends in another sequence than the previous chunk (the
initial state is sequence 0's), `chunk_cb` zeroes C B^T between steps of different sequences (K states at a
time: the masks beside a whole (M, N) block of C spill registers), and `chunk_scan` gives the entering state only
to the rows of the sequence the previous chunk ended in.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np

import coop_tiles as ct
from coop_tiles import tile

from ._arrays import empty_like


def step_sizes(dt_row, dt_bias, h, t0, size, valid, HAS_DT_BIAS, SOFTPLUS):
    """dt' of steps t0..t0+size of a (batch, head) row of dt: bias, softplus, clamped at 0; 0 past `valid`."""
    d = tile.load(dt_row, t0, size, valid=valid, other=0).astype(np.float32)
    if HAS_DT_BIAS:
        d = d + dt_bias[h]
    if SOFTPLUS:
        d = ct.softplus(d)
    return ct.where(tile.arange(size) < valid, ct.maximum(d, 0.0), 0.0)


@ct.jit
def chunk_cumsum(
    dt, A, dt_bias, dt_out, dA_cumsum, seqlen,
    HAS_DT_BIAS: ct.constexpr, SOFTPLUS: ct.constexpr, L: ct.constexpr,
):  # fmt: skip
    """Chunk c of (b, h): dt' and its cumsum of A * dt' (cs) into dt_out[b, h, c] and dA_cumsum[b, h, c] ((batch,
    nheads, nchunks, L); dt' is 0 past the sequence's end, so cs stays at the chunk's total there). dt: a
    (batch, nheads, seqlen) view. As Mamba's `_chunk_cumsum_fwd`: the other programs load these as vectors."""
    c, b, h = ct.program_id(0), ct.program_id(1), ct.program_id(2)
    t0 = c * L
    d = step_sizes(dt[b, h], dt_bias, h, t0, L, min(L, seqlen - t0), HAS_DT_BIAS, SOFTPLUS)
    tile.store(dt_out[b, h, c], 0, d)
    tile.store(dA_cumsum[b, h, c], 0, tile.scan(d * A[h]))


@ct.jit(fastmath=True)  # (its weights' exp as Triton's tl.exp: ex2.approx)
def chunk_state(
    x, B, seq_idx, dt_out, dA_cumsum, states, seqlen,
    HAS_SEQ_IDX: ct.constexpr, L: ct.constexpr, P: ct.constexpr, N: ct.constexpr, K: ct.constexpr,
):  # fmt: skip
    """The state chunk c of (b, h) alone leaves into states[b, c, h] (a (batch, nchunks, nheads, P, N) view,
    float32): `(x * (exp(cs_end - cs) * dt')[:, None]).T @ B` over the chunk, K steps a block (`tile.dot` with a
    loop-carried accumulator; x's rows loaded whole, its `.T` read in place by the dot), dt' and cs loaded from
    `chunk_cumsum`'s dt_out and dA_cumsum (each block's loads independent of the others: no scan, no barrier
    but the product's). x: (batch, nheads, seqlen, P), B: (batch, ngroups, seqlen, N) views. With HAS_SEQ_IDX
    only the steps of the sequence the chunk ends in count (seq_idx: (batch, seqlen) int32)."""
    c, b, h = ct.program_id(0), ct.program_id(1), ct.program_id(2)
    g = h // (x.shape[1] // B.shape[1])
    t0 = c * L
    steps = min(L, seqlen - t0)
    end = dA_cumsum[b, h, c, L - 1]  # (cs at the chunk's end: constant past the sequence's)
    state = tile.zeros((P, N), np.float32)
    if HAS_SEQ_IDX:
        last = seq_idx[b, t0 + steps - 1]
    for k in range(0, L, K):
        xs = tile.load(x[b, h], (t0 + k, 0), (K, P), valid=(steps - k, None), other=0)
        bs = tile.load(B[b, g], (t0 + k, 0), (K, N), valid=(steps - k, None), other=0)
        cs = tile.load(dA_cumsum[b, h, c], k, K, valid=L - k, other=0)  # (K may pass a short chunk: d is 0 there)
        d = tile.load(dt_out[b, h, c], k, K, valid=L - k, other=0)
        if HAS_SEQ_IDX:
            d = ct.where(tile.load(seq_idx[b], t0 + k, K, valid=steps - k, other=-1) == last, d, 0.0)
        scaled = (xs.astype(np.float32) * (ct.exp(end - cs) * d)[:, None]).astype(xs.dtype)
        state = tile.dot(scaled.T, bs, state)
    tile.store(states[b, c, h], (0, 0), state)


@ct.jit
def state_passing(
    states, ends, initial, seq_idx, passed, final,
    HAS_INITIAL: ct.constexpr, HAS_SEQ_IDX: ct.constexpr, L: ct.constexpr, E: ct.constexpr,
):  # fmt: skip
    """Elements e..e+E of the states entering each chunk of (b, h) into passed[b, h] (chunk 0 gets the initial
    state), and the final state into final[b, h]: `H_c = exp(ends[c - 1]) * H_{c-1} + states[c - 1]`, one chunk
    a step, each thread its own elements (a memory-bound recurrence: no exchange, no barrier). states and passed:
    (batch, nheads, nchunks, P * N) views; initial and final: (batch, nheads, P * N); ends: (batch, nheads,
    nchunks), each chunk's total log-decay. With HAS_SEQ_IDX (seq_idx: (batch, seqlen) int32, L the chunk length)
    the state is zeroed before a chunk that ends in another sequence than the previous chunk (or than sequence 0,
    the initial state's, for chunk 0): Mamba's rule."""
    e, b, h = ct.program_id(0) * E, ct.program_id(1), ct.program_id(2)
    size = final.shape[2] - e
    if HAS_INITIAL:
        state = tile.load(initial[b, h], e, E, valid=size, other=0).astype(np.float32)
    else:
        state = tile.zeros(E, np.float32)
    if HAS_SEQ_IDX:
        seq = 0  # the sequence `state` belongs to
    for c in range(ends.shape[2]):
        own = tile.load(states[b, h, c], e, E, valid=size, other=0)  # (issued before the barrier the store needs)
        tile.store(passed[b, h, c], e, state, valid=size)
        if HAS_SEQ_IDX:
            last = seq_idx[b, min((c + 1) * L, seq_idx.shape[1]) - 1]
            state = ct.where(last == seq, state, 0.0)
            seq = last
        state = ct.exp(ends[b, h, c]) * state + own
    tile.store(final[b, h], e, state, valid=size)


@ct.jit
def chunk_cb(
    C, B, seq_rows, seq_cols, cb, seqlen,
    HAS_SEQ_IDX: ct.constexpr, L: ct.constexpr, N: ct.constexpr, M: ct.constexpr, K: ct.constexpr,
):  # fmt: skip
    """Rows m..m+M of C_c B_c^T for chunk c of (b, g) into cb[b, c, g] ((batch, nchunks, ngroups, L, L), float32),
    the (M, K) blocks on and below the diagonal that `chunk_scan` reads (once per group, not per head). C and B:
    (batch, ngroups, seqlen, N) views; B's blocks are loaded along its contiguous rows and multiplied transposed
    (the dot reads `bk.T` in place). With HAS_SEQ_IDX the
    entries between steps of different sequences are 0: seq_rows (batch, seqlen, at least K) and seq_cols
    (batch, M, seqlen), seq_idx repeated along a last and a middle axis (stride-0 views, as chunk_scan's)."""
    m, c, bg = ct.program_id(0) * M, ct.program_id(1), ct.program_id(2)
    b, g = bg // C.shape[1], bg % C.shape[1]
    t0 = c * L
    steps = min(L, seqlen - t0)
    if HAS_SEQ_IDX:  # K states at a time (with the masks, the whole (M, N) block of C spills registers)
        for k in range(0, min(m + M, steps), K):
            acc = tile.zeros((M, K), np.float32)
            for n in range(0, N, K):
                cn = tile.load(C[b, g], (t0 + m, n), (M, K), valid=(steps - m, N - n), other=0)
                bn = tile.load(B[b, g], (t0 + k, n), (K, K), valid=(steps - k, N - n), other=0)
                acc = tile.dot(cn, bn.T, acc)
            row_seq = tile.load(seq_rows[b], (t0 + m, 0), (M, K), valid=(steps - m, None), other=-1)
            col_seq = tile.load(seq_cols[b], (0, t0 + k), (M, K), valid=(None, steps - k), other=-2)
            tile.store(cb[b, c, g], (m, k), ct.where(row_seq == col_seq, acc, 0.0), valid=(L - m, L - k))
    else:
        cm = tile.load(C[b, g], (t0 + m, 0), (M, N), valid=(steps - m, None), other=0)
        for k in range(0, min(m + M, steps), K):
            bk = tile.load(B[b, g], (t0 + k, 0), (K, N), valid=(steps - k, None), other=0)
            tile.store(cb[b, c, g], (m, k), tile.dot(cm, bk.T), valid=(L - m, L - k))


@ct.jit
def chunk_scan(
    x, z, D_rows, cb, C, dt_out, dA_cumsum, cs_rows, seq_rows, passed, out, seqlen,
    HAS_D: ct.constexpr, D_PER_ROW: ct.constexpr, HAS_Z: ct.constexpr, HAS_SEQ_IDX: ct.constexpr,
    L: ct.constexpr, P: ct.constexpr, N: ct.constexpr, M: ct.constexpr, K: ct.constexpr,
):  # fmt: skip
    """Rows m..m+M of chunk c of (b, h) into out[b, h] (a (batch, nheads, seqlen, P) view like x and z). C:
    (batch, ngroups, seqlen, N); cb: (batch, nchunks, ngroups, L, L), C B^T of each chunk (`chunk_cb`; only its
    entries on and below the diagonal are read); passed: (batch, nchunks, nheads, N, P), the state entering each
    chunk, transposed, read K states at a time along its contiguous rows; dt_out and dA_cumsum: (batch, nheads,
    nchunks, L). The products into the output, all (M, K) @ (K, P) (C and the states K rows at a time, then each
    earlier block's), keep their accumulator in registers (`tile.dot`'s fragment), all with row-major operands in
    shared memory, where a broadcast would be an exchange: its per-row factors are 2-D
    loads of views that repeat a vector (stride 0): cs_rows, dA_cumsum repeated along a last axis (at least P
    wide), D_rows, D (nheads, P) repeated along a middle axis of M. The weights of each block, in rows, take
    their per-row and per-column factors as vectors (a broadcast in registers), loaded once (the block's cs) or
    once a step (the step's cs and dt'), and the causal mask from row and column indices. With HAS_SEQ_IDX
    (seq_rows as `chunk_cb`'s, at least P wide) the entering state reaches only the rows of the sequence the
    previous chunk ends in (sequence 0 for chunk 0), and cb is already 0 between sequences."""
    m, c, bh = ct.program_id(0) * M, ct.program_id(1), ct.program_id(2)
    b, h = bh // x.shape[1], bh % x.shape[1]
    g = h // (x.shape[1] // C.shape[1])
    t0 = c * L
    steps = min(L, seqlen - t0)
    rows = steps - m
    acc = tile.zeros((M, P), np.float32)
    for n in range(0, N, K):
        cn = tile.load(C[b, g], (t0 + m, n), (M, K), valid=(rows, N - n), other=0)
        hn = tile.load(passed[b, c, h], (n, 0), (K, P), valid=(N - n, None), other=0).astype(cn.dtype)
        acc = tile.dot(cn, hn, acc)
    if HAS_SEQ_IDX:
        prev = 0
        if c > 0:
            prev = seq_rows[b, t0 - 1, 0]
        acc = ct.where(tile.load(seq_rows[b], (t0 + m, 0), (M, P), valid=(rows, None), other=-1) == prev, acc, 0.0)
    acc = acc * ct.exp(tile.load(cs_rows[b, h, c], (m, 0), (M, P), valid=(L - m, None), other=0))
    cs_m = tile.load(dA_cumsum[b, h, c], m, M, valid=L - m, other=0)[:, None]
    row = (tile.arange(M) + m)[:, None]
    for k in range(0, min(m + M, steps), K):
        xk = tile.load(x[b, h], (t0 + k, 0), (K, P), valid=(steps - k, None), other=0)
        cs_k = tile.load(dA_cumsum[b, h, c], k, K, valid=L - k, other=0)[None, :]
        dt_k = tile.load(dt_out[b, h, c], k, K, valid=L - k, other=0)[None, :]
        cb_k = tile.load(cb[b, c, g], (m, k), (M, K), valid=(L - m, L - k), other=0)
        weights = cb_k * (ct.exp(ct.minimum(cs_m - cs_k, 0.0)) * dt_k)
        causal = ct.where(row >= (tile.arange(K) + k)[None, :], weights, 0.0)  # (cb above the diagonal: unset)
        acc = tile.dot(causal.astype(xk.dtype), xk, acc)
    xm = tile.load(x[b, h], (t0 + m, 0), (M, P), valid=(rows, None), other=0).astype(np.float32)
    if HAS_D:
        if D_PER_ROW:
            acc = acc + xm * tile.load(D_rows[h], (0, 0), (M, P))
        else:
            acc = acc + xm * D_rows[h, 0, 0]
    if HAS_Z:
        zm = tile.load(z[b, h], (t0 + m, 0), (M, P), valid=(rows, None), other=0).astype(np.float32)
        acc = acc * zm * ct.sigmoid(zm)
    tile.store(out[b, h], (t0 + m, 0), acc, valid=(rows, None))


#: rows of a chunk per `chunk_cb` program, and rows of B per step of its loop
BLOCK_M = 64
BLOCK_K = 64


class ScanBlock(NamedTuple):
    """A `chunk_scan` launch: rows of a chunk per program (M), steps and states per product (K), threads per
    block, a register cap (`ct.jit(max_registers=...)`, None for none) and fast math (`ct.jit(fastmath=...)`)."""

    M: int
    K: int
    threads: int
    registers: int | None = None
    fastmath: bool = False


#: the `chunk_scan` launches benchmarks/ssd_probe.py times (registers a thread, shared bytes and blocks a
#: multiprocessor at headdim 64, dstate 128, chunk 256, bfloat16, as the device's NVRTC 13.0 compiles them, none with
#: local memory; then the H200's times at (8, 4096, 80, 64, 128) and (2, 16384, 32, 64, 128), operands in padded
#: row-major layouts, before the whole-block path of the accumulator's loads and stores; a cap is ptxas's register
#: limit: the tiles themselves need far fewer; `f`: fast math, the weights' exp as Triton's tl.exp, 4% faster. Left
#: out, all slower: 128 threads at M 64 (1.7x the time), 64 threads at M 32 (2.7x), a K loop that loads step k + K
#: beside step k's product (1.25x: tiles moved to shared memory past the register budget, or spills))
SCAN_BLOCKS = {
    "m64k64t256": ScanBlock(64, 64, 256),  # 216, 36 KiB, 1 block: 3.79 / 1.47 ms
    "m64k32t256": ScanBlock(64, 32, 256),  # 124, 19 KiB, 2 blocks: 3.01 / 1.18 ms
    "m32k32t128r168": ScanBlock(32, 32, 128, 168),  # 168, 14 KiB, 3 blocks: 3.01 / 1.19 ms
    "m64k64t256r128": ScanBlock(64, 64, 256, 128),  # 128, 36 KiB, 2 blocks: 2.65 / 1.03 ms
    "m64k32t256r128": ScanBlock(64, 32, 256, 128),  # 128, 19 KiB, 2 blocks: 2.94 / 1.15 ms
    "m64k64t256r128f": ScanBlock(64, 64, 256, 128, fastmath=True),  # 128, 36 KiB, 2 blocks: 2.56 / 0.98 ms
    "m64k32t256r128f": ScanBlock(64, 32, 256, 128, fastmath=True),  # 128, 19 KiB, 2 blocks: 2.81 / 1.10 ms
}
#: the launch `mamba_chunk_scan_combined` uses (the rule: this one, M and K cut to the chunk; switching is this line)
SCAN_BLOCK = "m64k64t256r128f"
#: the launch with seq_idx, whose masks need more registers than SCAN_BLOCK's cap (160 bytes a thread spilled there)
SEQ_SCAN_BLOCK = "m64k64t256"
#: bytes of a `chunk_state` program's dot operands per step (two buffers of a (P, K) and a (K, N) tile); more
#: puts the operands past 32 items a thread into shared memory (measured when chunk_state still scanned dt':
#: no gain then; not re-measured since)
STATE_OPERAND_BYTES = 48 * 1024
#: state elements per `state_passing` program (4 a thread: 16-byte loads of float32)
BLOCK_E = 1024


def mamba_chunk_scan_combined(
    x: Any,
    dt: Any,
    A: Any,
    B: Any,
    C: Any,
    chunk_size: int,
    D: Any = None,
    z: Any = None,
    dt_bias: Any = None,
    dt_softplus: bool = False,
    initial_states: Any = None,
    seq_idx: Any = None,
    return_final_states: bool = False,
) -> Any:
    """The forward of Mamba's `mamba_chunk_scan_combined` (mamba_ssm.ops.triton.ssd_combined): `out`, or
    `(out, final_states)` with return_final_states.

        x, z: (batch, seqlen, nheads, headdim)     dt: (batch, seqlen, nheads)     A, dt_bias: (nheads,)
        B, C: (batch, seqlen, ngroups, dstate)      D: (nheads, headdim) or (nheads,)
        initial_states, final_states: (batch, nheads, headdim, dstate)
        seq_idx: (batch, seqlen) int32, nondecreasing along a row (not checked, as in Mamba)
        out: (batch, seqlen, nheads, headdim), x's dtype; final_states float32

    headdim, dstate and chunk_size are tile sizes (each program specialises on them). PyTorch tensors or CuPy
    arrays run on their GPU; NumPy arrays in the interpreter. seq_idx packs several sequences in a row, as
    Mamba's: each run of equal ids is a sequence of its own, no state passes from one to the next, and
    initial_states is the state entering sequence 0 (a row whose first id is not 0 starts from zeros);
    final_states is the state at the row's end (its last sequence's)."""
    batch, seqlen, nheads, headdim = x.shape
    dstate = B.shape[3]
    _check(x, dt, A, B, C, D, z, dt_bias, initial_states)
    if seq_idx is not None:
        _check_seq_idx(x, seq_idx)
    interpret = isinstance(x, np.ndarray)
    nchunks = -(-seqlen // chunk_size)
    f32 = "float32"
    dt_out = empty_like(x, (batch, nheads, nchunks, chunk_size), f32)
    dA_cumsum = empty_like(x, (batch, nheads, nchunks, chunk_size), f32)
    states = empty_like(x, (batch, nchunks, nheads, dstate, headdim), f32)  # (each transposed: for chunk_scan)
    out = empty_like(x, (batch, seqlen, nheads, headdim), x.dtype)
    xh, Bg, Cg, outh = (_permute(a, (0, 2, 1, 3)) for a in (x, B, C, out))
    zh = None if z is None else _permute(z, (0, 2, 1, 3))
    sizes = dict(L=chunk_size, P=headdim, N=dstate)
    has_seq = seq_idx is not None
    seq = A if seq_idx is None else seq_idx  # (A: a placeholder the programs do not read without HAS_SEQ_IDX)

    _program(chunk_cumsum, interpret)[nchunks, batch, nheads](
        _permute(dt, (0, 2, 1)), A, A if dt_bias is None else dt_bias, dt_out, dA_cumsum, seqlen,
        HAS_DT_BIAS=dt_bias is not None, SOFTPLUS=bool(dt_softplus), L=chunk_size,
    )  # fmt: skip
    _program(chunk_state, interpret)[nchunks, batch, nheads](
        xh, Bg, seq, dt_out, dA_cumsum, _permute(states, (0, 1, 2, 4, 3)), seqlen,
        HAS_SEQ_IDX=has_seq, K=state_block(chunk_size, headdim, dstate, _itemsize(x)), **sizes,
    )  # fmt: skip
    initial = None if initial_states is None else _transposed(initial_states)
    ends = dA_cumsum[:, :, :, chunk_size - 1]
    passed, final = pass_states(states, ends, initial, C.dtype, interpret, seq_idx, chunk_size)
    block_m, block_k = min(BLOCK_M, chunk_size), min(BLOCK_K, chunk_size)
    seq_rows = seq_cols = A
    if has_seq:
        seq_rows = _expand(seq_idx[:, :, None], (batch, seqlen, max(headdim, block_k)))
        seq_cols = _expand(seq_idx[:, None, :], (batch, block_m, seqlen))
    ngroups = B.shape[2]
    cb = empty_like(x, (batch, nchunks, ngroups, chunk_size, chunk_size), f32)
    _program(chunk_cb, interpret)[-(-chunk_size // block_m), nchunks, batch * ngroups](
        Cg, Bg, seq_rows, seq_cols, cb, seqlen,
        HAS_SEQ_IDX=has_seq, L=chunk_size, N=dstate, M=block_m, K=block_k,
    )  # fmt: skip
    scan_chunks(
        xh, zh, D, cb, Cg, dt_out, dA_cumsum, seq_rows if has_seq else None, passed, outh, seqlen,
        SCAN_BLOCKS[SEQ_SCAN_BLOCK if has_seq else SCAN_BLOCK], interpret,
    )  # fmt: skip
    return (out, _transposed(final)) if return_final_states else out


def scan_chunks(
    xh: Any,
    zh: Any | None,
    D: Any | None,
    cb: Any,
    Cg: Any,
    dt_out: Any,
    dA_cumsum: Any,
    seq_rows: Any | None,
    passed: Any,
    outh: Any,
    seqlen: int,
    block: ScanBlock,
    interpret: bool = False,
) -> None:
    """One `chunk_scan` launch as `block` says (M and K cut to the chunk), writing outh: xh, zh and outh
    (batch, nheads, seqlen, headdim) views, Cg (batch, ngroups, seqlen, dstate), passed (batch, nchunks, nheads,
    dstate, headdim), the others as `mamba_chunk_scan_combined` makes them; zh, D and seq_rows None without z, D
    and seq_idx. Separate from `mamba_chunk_scan_combined` so that benchmarks/ssd_probe.py times each launch."""
    batch, nheads, _, headdim = xh.shape
    nchunks, chunk_size = dA_cumsum.shape[2:]
    M, K = min(block.M, chunk_size), min(block.K, chunk_size)
    D_rows = dt_out if D is None else _expand(D.reshape(nheads, -1)[:, None, :], (nheads, M, -1))  # (or unread)
    cs_rows = _expand(dA_cumsum[..., None], (batch, nheads, nchunks, chunk_size, headdim))
    scan_program(block, interpret)[-(-chunk_size // M), nchunks, batch * nheads](
        xh, xh if zh is None else zh, D_rows, cb, Cg, dt_out, dA_cumsum, cs_rows,
        dt_out if seq_rows is None else seq_rows, passed, outh, seqlen,
        HAS_D=D is not None, D_PER_ROW=D is not None and D.ndim == 2, HAS_Z=zh is not None,
        HAS_SEQ_IDX=seq_rows is not None, L=chunk_size, P=headdim, N=Cg.shape[3], M=M, K=K,
    )  # fmt: skip


def scan_program(block: ScanBlock, interpret: bool) -> ct.JITFunction:
    """`chunk_scan` compiled at `block`'s threads and register cap, or its interpreting copy."""
    return _INTERPRETING[chunk_scan] if interpret else _scan_kernel(block)


@functools.cache
def _scan_kernel(block: ScanBlock) -> ct.JITFunction:
    return ct.jit(chunk_scan.fn, block_threads=block.threads, max_registers=block.registers, fastmath=block.fastmath)


def state_block(chunk_size: int, headdim: int, dstate: int, itemsize: int) -> int:
    """Steps of a chunk per `chunk_state` dot: the largest power of two, at most the chunk and at least 16, whose
    operands fit STATE_OPERAND_BYTES."""
    k = 16
    while 2 * k <= chunk_size and 2 * (headdim + dstate) * 2 * k * itemsize <= STATE_OPERAND_BYTES:
        k *= 2
    return k


def pass_states(
    states: Any,
    ends: Any,
    initial_states: Any,
    dtype: Any,
    interpret: bool = False,
    seq_idx: Any = None,
    chunk_size: int = 0,
) -> tuple[Any, Any]:
    """(the state entering each chunk, in `dtype`; the final state, float32) from each chunk's own state `states`
    ((batch, nchunks, nheads, headdim, dstate), float32) and its total log-decay `ends` ((batch, nheads, nchunks)),
    seeded with `initial_states` ((batch, nheads, headdim, dstate), or None for zeros), reset where a chunk ends
    in another sequence of `seq_idx` ((batch, seqlen) int32, chunks of `chunk_size` steps; or None): Mamba's
    `_state_passing_fwd` as one `state_passing` launch. Element-wise over each state: its last two axes may be
    (dstate, headdim) instead, as `mamba_chunk_scan_combined` keeps them, if initial_states' are too."""
    batch, nchunks, nheads, headdim, dstate = states.shape
    flat = headdim * dstate
    passed = empty_like(states, (batch, nchunks, nheads, headdim, dstate), dtype)
    final = empty_like(states, (batch, nheads, headdim, dstate), "float32")
    by_chunk = (batch, nchunks, nheads, flat)
    initial = final if initial_states is None else _reshape(initial_states, (batch, nheads, flat))
    _program(state_passing, interpret)[-(-flat // BLOCK_E), batch, nheads](
        _permute(_reshape(states, by_chunk), (0, 2, 1, 3)), ends, initial, ends if seq_idx is None else seq_idx,
        _permute(_reshape(passed, by_chunk), (0, 2, 1, 3)), _reshape(final, (batch, nheads, flat)),
        HAS_INITIAL=initial_states is not None, HAS_SEQ_IDX=seq_idx is not None,
        L=0 if seq_idx is None else chunk_size, E=BLOCK_E,
    )  # fmt: skip
    return passed, final


_INTERPRETING = {
    k: ct.jit(k.fn, interpret=True) for k in (chunk_cumsum, chunk_state, state_passing, chunk_cb, chunk_scan)
}


def _program(kernel: ct.JITFunction, interpret: bool) -> ct.JITFunction:
    """`kernel`, or its interpreting copy for NumPy arrays."""
    return _INTERPRETING[kernel] if interpret else kernel


def _check(x: Any, dt: Any, A: Any, B: Any, C: Any, D: Any, z: Any, dt_bias: Any, initial_states: Any) -> None:
    """Raise a ValueError naming the first argument whose shape does not fit x's and B's (Mamba's asserts)."""
    batch, seqlen, nheads, headdim = _shape(x)
    ngroups, dstate = _shape(B)[2:]
    expected = {
        "dt": [(batch, seqlen, nheads)], "A": [(nheads,)], "B": [(batch, seqlen, ngroups, dstate)],
        "C": [(batch, seqlen, ngroups, dstate)], "D": [(nheads, headdim), (nheads,)], "z": [_shape(x)],
        "dt_bias": [(nheads,)], "initial_states": [(batch, nheads, headdim, dstate)],
    }  # fmt: skip
    given = {"dt": dt, "A": A, "B": B, "C": C, "D": D, "z": z, "dt_bias": dt_bias, "initial_states": initial_states}
    for name, a in given.items():
        if a is not None and _shape(a) not in expected[name]:
            shapes = " or ".join(map(str, expected[name]))
            raise ValueError(
                f"{name} must be {shapes} for x of shape {_shape(x)} and B of {_shape(B)}, not {_shape(a)}"
            )
    if nheads % ngroups:
        raise ValueError(f"nheads ({nheads}) must be a multiple of ngroups ({ngroups}, B.shape[2])")


def _check_seq_idx(x: Any, seq_idx: Any) -> None:
    """Raise a ValueError unless seq_idx is an int32 (batch, seqlen) array of x's library and device."""
    expected = _shape(x)[:2]
    if _shape(seq_idx) != expected:
        raise ValueError(f"seq_idx must be {expected} for x of shape {_shape(x)}, not {_shape(seq_idx)}")
    if str(seq_idx.dtype).removeprefix("torch.") != "int32":
        raise ValueError(f"seq_idx must be int32, not {seq_idx.dtype}")
    if _place(seq_idx) != _place(x):
        raise ValueError(f"seq_idx must be on x's device ({_place(x)}), not {_place(seq_idx)}")


def _place(a: Any) -> str:
    """The library and device of an array: "numpy cpu", "torch cuda:0", "cupy <CUDA Device 0>"."""
    return f"{type(a).__module__.split('.')[0]} {getattr(a, 'device', 'cpu')}"


def _itemsize(a: Any) -> int:
    """Bytes per element of a NumPy or CuPy array or a PyTorch tensor."""
    return a.element_size() if callable(getattr(a, "element_size", None)) else a.dtype.itemsize


def _shape(a: Any) -> tuple[int, ...]:
    return tuple(int(n) for n in a.shape)


def _permute(a: Any, axes: tuple[int, ...]) -> Any:
    """A view of `a` with its axes in the order `axes` (NumPy, CuPy or PyTorch)."""
    return a.permute(*axes) if callable(getattr(a, "permute", None)) else a.transpose(axes)


def _expand(a: Any, shape: tuple[int, ...]) -> Any:
    """A view of `a` with its axes of extent 1 repeated to `shape` (stride 0; -1 keeps an axis)."""
    if callable(getattr(a, "expand", None)):
        return a.expand(*shape)
    shape = tuple(n if n != -1 else a.shape[i] for i, n in enumerate(shape))
    return np.broadcast_to(a, shape) if isinstance(a, np.ndarray) else _cupy().broadcast_to(a, shape)


def _cupy() -> Any:
    import cupy

    return cupy


def _transposed(a: Any) -> Any:
    """A contiguous copy of `a` with its last two axes swapped: states between the (headdim, dstate) of the
    arguments and results and the (dstate, headdim) the programs keep."""
    if callable(getattr(a, "contiguous", None)):
        return a.transpose(-1, -2).contiguous()
    return a.swapaxes(-1, -2).copy()


def _reshape(a: Any, shape: tuple[int, ...]) -> Any:
    """`a` (contiguous: a view) in `shape`; an initial state of other strides is copied."""
    return a.reshape(shape)
