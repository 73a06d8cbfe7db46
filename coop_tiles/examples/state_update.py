"""Mamba's decode step, `selective_state_update`, as a tile program, and its host entry point.

One step of the selective state space for each batch b, head h, row d and state n (Mamba-1's state has no head
axis: one head), with g = h // (nheads // ngroups) the group of B and C that head h reads:

    dt'          = softplus(dt[b, h, d] + dt_bias[h, d])              (dt_bias and softplus optional)
    state[b,h,d,n] = state[b,h,d,n] * exp(A[h, d, n] * dt') + B[b, g, n] * dt' * x[b, h, d]
    out[b, h, d] = (sum_n state[b,h,d,n] * C[b, g, n] + D[h, d] * x[b, h, d]) * silu(z[b, h, d])

One program per (block of BLOCK_D rows, batch, head): the state block is a 2-D tile (BLOCK_D, DSTATE), read
once and written once; x, dt, D, dt_bias and z are 1-D tiles of the rows, broadcast along the states
(`x[:, None]`), B and C 1-D tiles of the states, broadcast down the rows (`C[None, :]`), and `out` is the
sum along the states (`tile.sum(..., axis=1)`). Mamba-2 passes A, dt and dt_bias constant over a head (stride 0
along its rows and states, its `TIE_HDIM`): the program then reads one A and one dt per head, and the decay
exp(A * dt) is a scalar.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

import coop_tiles as ct
from coop_tiles import tile

from ._arrays import empty_like

LOG2E = 1.4426950408889634


@ct.jit(fastmath=True)
def state_update(
    state, x, dt, dt_bias, A, B, C, D, z, out, state_batch_indices,
    HEADS: ct.constexpr, HAS_DT_BIAS: ct.constexpr, HAS_D: ct.constexpr, HAS_Z: ct.constexpr,
    HAS_INDICES: ct.constexpr, SOFTPLUS: ct.constexpr, TIE_HDIM: ct.constexpr,
    BLOCK_D: ct.constexpr, DSTATE: ct.constexpr, EVEN_DSTATE: ct.constexpr,
):  # fmt: skip
    r, b, h = ct.program_id(0) * BLOCK_D, ct.program_id(1), ct.program_id(2)
    out_rows = out[b, h] if HEADS else out[b]
    rows = out_rows.shape[0] - r  # rows of this block in the head (BLOCK_D but at the end)
    s = b
    if HAS_INDICES:
        s = state_batch_indices[b]
    if s >= 0:
        block = state[s, h] if HEADS else state[s]  # (dim, dstate)
        cols = None if EVEN_DSTATE else block.shape[1]  # None: all DSTATE columns, nothing masked
        g = h // (state.shape[1] // B.shape[1]) if HEADS else 0  # head h's group of B and C
        Bv = tile.load(B[b, g] if HEADS else B[b], 0, DSTATE, valid=cols, other=0).astype(np.float32)
        Cv = tile.load(C[b, g] if HEADS else C[b], 0, DSTATE, valid=cols, other=0).astype(np.float32)
        xv = tile.load(x[b, h] if HEADS else x[b], r, BLOCK_D, valid=rows, other=0).astype(np.float32)
        # (z read before the state is written: a load after a store waits for it, as the arrays may overlap)
        if HAS_Z:
            zv = tile.load(z[b, h] if HEADS else z[b], r, BLOCK_D, valid=rows, other=0).astype(np.float32)
        old = tile.load(block, (r, 0), (BLOCK_D, DSTATE), valid=(rows, cols), other=0).astype(np.float32)
        if TIE_HDIM:  # one dt and one A per head: the decay is a scalar
            dtv = np.float32(dt[b, h, 0] if HEADS else dt[b, 0])
            if HAS_DT_BIAS:
                dtv = dtv + (dt_bias[h, 0] if HEADS else dt_bias[0])
            if SOFTPLUS:
                dtv = ct.softplus(dtv)
            decay = ct.exp2((A[h, 0, 0] if HEADS else A[0, 0]) * dtv * LOG2E)
            new = old * decay + Bv[None, :] * (xv * dtv)[:, None]
        else:
            dtv = tile.load(dt[b, h] if HEADS else dt[b], r, BLOCK_D, valid=rows, other=0).astype(np.float32)
            if HAS_DT_BIAS:
                dtv = dtv + tile.load(dt_bias[h] if HEADS else dt_bias, r, BLOCK_D, valid=rows, other=0)
            if SOFTPLUS:
                dtv = ct.softplus(dtv)
            Av = tile.load(A[h] if HEADS else A, (r, 0), (BLOCK_D, DSTATE), valid=(rows, cols), other=0)
            new = old * ct.exp2(Av.astype(np.float32) * (dtv * LOG2E)[:, None]) + Bv[None, :] * (xv * dtv)[:, None]
        tile.store(block, (r, 0), new, valid=(rows, cols))
        y = tile.sum(new * Cv[None, :], axis=1)
        if HAS_D:
            y = y + xv * tile.load(D[h] if HEADS else D, r, BLOCK_D, valid=rows, other=0)
        if HAS_Z:
            y = y * zv * ct.sigmoid(zv)
        tile.store(out_rows, r, y, valid=rows)
    else:  # a padding token (a negative state index): out is 0, no state is touched
        tile.store(out_rows, r, tile.zeros(BLOCK_D, np.float32), valid=rows)


_interpreting = ct.jit(state_update.fn, interpret=True)
_by_threads: dict[int, ct.JITFunction] = {}
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
INDEX_DTYPES = ("int32", "int64")
#: the threads of a program, and the elements of state each thread updates: 8 for short rows (dstate up to
#: WIDE_STATE), 16 for wider ones
BLOCK_THREADS = 128
ITEMS_NARROW, ITEMS_WIDE, WIDE_STATE = 8, 16, 32


def launch_choice(dim: int, dstate: int) -> tuple[int, int, int]:
    """(BLOCK_D, DSTATE, threads per block) for rows of `dim` states of `dstate`: DSTATE the power of two at or
    above dstate, ITEMS_NARROW (or, for rows wider than WIDE_STATE, ITEMS_WIDE) elements of state per thread,
    BLOCK_D rows of them making BLOCK_THREADS threads (no more rows than dim rounded up to a power of two; at
    least a warp).

    The planner gives each thread 16-byte words of one row, interleaved with the other lanes', so each warp's
    access to the state covers whole sectors, and the sum along a row is per-thread adds and warp shuffles. The
    program is short, so what each thread does besides its state (its indices, the rows' x, dt, D and z, the
    states' B and C) is a large share of its instructions: more state per thread amortises it, until the
    blocks get too few to hide the memory's latency. Measured on an H200 (kernel times, do_bench): Mamba-2's
    (64, 80, 64, 128) 16 per thread at 128 threads 95-101 us, 8 per thread at 128 threads 116-120 us, at 256
    threads 217-220 us; Mamba-1's (64, 5120, 16) 8 per thread at 128 threads 17.7-19.8 us, 16 per thread 24-26 us,
    and a program looping over 2 or 4 batches (A, D and dt_bias read once for them) 19-23 us: no better."""
    dstate_p2 = 1 << max(0, dstate - 1).bit_length()
    items = ITEMS_NARROW if dstate_p2 <= WIDE_STATE else ITEMS_WIDE
    block_d = max(1, min(BLOCK_THREADS * items // dstate_p2, 1 << max(0, dim - 1).bit_length()))
    return block_d, dstate_p2, max(32, block_d * dstate_p2 // items)


def kernel_for(threads: int, interpret: bool) -> ct.JITFunction:
    """The program at `threads` threads per block, or its interpreting copy."""
    if interpret:
        return _interpreting
    if threads not in _by_threads:
        _by_threads[threads] = ct.jit(state_update.fn, block_threads=threads, fastmath=True)
    return _by_threads[threads]


def selective_state_update(
    state: Any,
    x: Any,
    dt: Any,
    A: Any,
    B: Any,
    C: Any,
    D: Any = None,
    z: Any = None,
    dt_bias: Any = None,
    dt_softplus: bool = False,
    state_batch_indices: Any = None,
) -> Any:
    """Mamba's `selective_state_update` (mamba_ssm.ops.triton.selective_state_update): one decode step. Updates
    `state` in place and returns `out`.

    Shapes, Mamba-1 or Mamba-2 (with heads; ngroups divides nheads, head h reads group h // (nheads // ngroups)):

        state: (batch, dim, dstate) or (batch, nheads, dim, dstate); with state_batch_indices any number of
               states along the first axis
        x, dt, z: (batch, dim) or (batch, nheads, dim)
        A: (dim, dstate) or (nheads, dim, dstate)
        B, C: (batch, dstate) or (batch, ngroups, dstate)
        D, dt_bias: (dim,) or (nheads, dim)
        state_batch_indices: (batch,) int32 or int64: batch b updates state[state_batch_indices[b]]; a negative
               index is a padding token (its out is 0 and no state is touched)
        out: (batch, nheads, dim) for a 4-D state, else (batch, dim); x's dtype (a new contiguous array)

    As in Mamba, each argument may take either form (the one without heads is one head, or one group for B and
    C). Any float dtypes (float16, bfloat16, float32, float64; computed in float32) and any strides, with no
    copies: stride-0 views broadcast as Mamba-2 passes them (A, dt and dt_bias constant over a head's rows and
    states: one value is read per head). PyTorch tensors or CuPy arrays run on their GPU; NumPy arrays run in
    the interpreter.
    """
    launch = prepare(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices)
    kernel_for(launch.threads, isinstance(state, np.ndarray))[launch.grid](*launch.args, **launch.constexprs)
    return launch.out[:, 0] if launch.squeeze else launch.out


class Launch(NamedTuple):
    """How `selective_state_update` launches the program for its arguments (`prepare`)."""

    threads: int
    grid: tuple[int, int, int]
    args: tuple
    constexprs: dict[str, Any]
    out: Any
    #: out loses its head axis on return (a 3-D state taken as one head)
    squeeze: bool


class Plan(NamedTuple):
    """What `prepare` derives from the arguments' shapes, strides and dtypes alone (checked once per signature, then
    kept: a decode step calls with the same signature every time, and the checks cost more host time than the
    launch)."""

    threads: int
    grid: tuple[int, int, int]
    constexprs: dict[str, Any]
    #: out's shape (x's dtype)
    out_shape: tuple[int, ...]
    squeeze: bool
    #: the arguments given without the head (or group) axis that others have: lifted to one head (`_lift`)
    lifted: tuple[str, ...]


#: the plans of the signatures seen (`_signature`), a few per model (one per batch size); emptied past MAX_PLANS
_PLANS: dict[tuple, Plan] = {}
MAX_PLANS = 256
_NAMES = ("state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias")


def prepare(
    state: Any,
    x: Any,
    dt: Any,
    A: Any,
    B: Any,
    C: Any,
    D: Any = None,
    z: Any = None,
    dt_bias: Any = None,
    dt_softplus: bool = False,
    state_batch_indices: Any = None,
) -> Launch:
    """`selective_state_update`'s checks, its output and its launch of the program, without launching it (for
    `kernel_for(launch.threads, False).compile(*launch.args, **launch.constexprs)`)."""
    arrays = (state, x, dt, A, B, C, D, z, dt_bias)
    key = (_signature(arrays), _signature((state_batch_indices,)), bool(dt_softplus))
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= MAX_PLANS:
            _PLANS.clear()
        plan = _PLANS.setdefault(key, _plan(dict(zip(_NAMES, arrays)), bool(dt_softplus), state_batch_indices))
    args = dict(zip(_NAMES, arrays))
    for name in plan.lifted:
        args[name] = _lift(name, args[name])
    x = args["x"]
    out = empty_like(x, plan.out_shape, x.dtype)
    given = {k: x if v is None else v for k, v in args.items()}  # absent ones: any array, never read
    indices = x if state_batch_indices is None else state_batch_indices
    launch_args = tuple(given[k] for k in ("state", "x", "dt", "dt_bias", "A", "B", "C", "D", "z")) + (out, indices)
    return Launch(plan.threads, plan.grid, launch_args, plan.constexprs, out, plan.squeeze)


def _signature(arrays: tuple) -> tuple:
    """What the plan of these arguments depends on: each one's shape, strides and dtype (None where absent)."""
    return tuple(
        None
        if a is None
        else (tuple(a.shape), a.stride() if callable(getattr(a, "stride", None)) else a.strides, a.dtype, type(a))
        for a in arrays
    )


def _plan(args: dict[str, Any], dt_softplus: bool, state_batch_indices: Any) -> Plan:
    """The checked `Plan` of these arguments (a ValueError naming the one that does not fit)."""
    heads = _has_heads(args)
    state = args["state"]
    squeeze = heads and state.ndim == 3  # Mamba's rule: out has no head axis when the state has none
    lifted = tuple(k for k, v in args.items() if heads and v is not None and v.ndim == _RANKS[k])
    args = {k: _lift(k, v) if k in lifted else v for k, v in args.items()}
    _check(args, heads, state_batch_indices, squeeze)
    state, x = args["state"], args["x"]
    dim, dstate = state.shape[-2], state.shape[-1]
    batch, nheads = x.shape[0], state.shape[1] if heads else 1
    A, dt, dt_bias, D, z = args["A"], args["dt"], args["dt_bias"], args["D"], args["z"]
    tie = _zero_stride(A, -1) and _zero_stride(A, -2) and _zero_stride(dt, -1)
    tie = tie and (dt_bias is None or _zero_stride(dt_bias, -1))
    block_d, dstate_p2, threads = launch_choice(dim, dstate)
    constexprs = dict(
        HEADS=heads, HAS_DT_BIAS=dt_bias is not None, HAS_D=D is not None, HAS_Z=z is not None,
        HAS_INDICES=state_batch_indices is not None, SOFTPLUS=dt_softplus, TIE_HDIM=tie,
        BLOCK_D=block_d, DSTATE=dstate_p2, EVEN_DSTATE=dstate == dstate_p2,
    )  # fmt: skip
    out_shape = (batch, nheads, dim) if heads else (batch, dim)
    return Plan(threads, (-(-dim // block_d), batch, nheads), constexprs, out_shape, squeeze, lifted)


#: each argument's rank without heads (Mamba-1's); with heads it is one more
_RANKS = {"state": 3, "x": 2, "dt": 2, "z": 2, "A": 2, "B": 2, "C": 2, "D": 1, "dt_bias": 1}


def _has_heads(args: dict[str, Any]) -> bool:
    """Whether any argument is in Mamba-2's form (a ValueError naming one in neither)."""
    heads = False
    for name, a in args.items():
        if a is None:
            continue
        if a.ndim not in (_RANKS[name], _RANKS[name] + 1):
            raise ValueError(f"{name} must have {_RANKS[name]} or {_RANKS[name] + 1} dimensions, not {_shape(a)}")
        heads = heads or a.ndim > _RANKS[name]
    return heads


def _lift(name: str, a: Any) -> Any:
    """`a` with a head (or group) axis of one, a view: where Mamba-2's form has it."""
    return a[None] if name in ("A", "D", "dt_bias") else a[:, None]


def _check(args: dict[str, Any], heads: bool, indices: Any, lifted: bool) -> None:
    """Raise a ValueError naming the argument whose shape or dtype does not fit the state's (`lifted`: a 3-D state
    given a head axis because another argument has one)."""
    state, x, B = args["state"], args["x"], args["B"]
    nheads, dim, dstate = (state.shape[1] if heads else 1), state.shape[-2], state.shape[-1]
    batch = x.shape[0]
    ngroups = B.shape[1] if heads else 1
    per_head = (nheads,) if heads else ()
    taken = " (a 3-D state taken as one head: another argument has a head axis)" if lifted else ""
    rows = (batch, *per_head, dim)
    expected = {"x": rows, "dt": rows, "z": rows, "A": (*per_head, dim, dstate), "D": (*per_head, dim)}
    expected |= {"dt_bias": (*per_head, dim), "state_batch_indices": (batch,)}
    expected |= dict.fromkeys(("B", "C"), (batch, ngroups, dstate) if heads else (batch, dstate))
    for name, a in {**args, "state_batch_indices": indices}.items():
        if a is not None and name != "state" and _shape(a) != expected[name]:
            raise ValueError(
                f"{name} must be {expected[name]} for a state of shape {_shape(state)}{taken} (batch {batch} from "
                f"x, ngroups {ngroups} from B), not {_shape(a)}"
            )
    if nheads % ngroups:
        raise ValueError(f"nheads ({nheads}) must be a multiple of ngroups ({ngroups}, B.shape[1])")
    if indices is None and state.shape[0] < batch:
        raise ValueError(f"state holds {state.shape[0]} states for a batch of {batch} (x.shape[0])")
    for name, a in args.items():
        if a is not None and _dtype(a) not in FLOAT_DTYPES:
            raise ValueError(f"{name} must be of a float dtype ({', '.join(FLOAT_DTYPES)}), not {_dtype(a)}")
    if indices is not None and _dtype(indices) not in INDEX_DTYPES:
        raise ValueError(f"state_batch_indices must be int32 or int64, not {_dtype(indices)}")


def _shape(a: Any) -> tuple[int, ...]:
    return tuple(int(n) for n in a.shape)


def _dtype(a: Any) -> str:
    """The dtype's name, `float32`, for NumPy, CuPy and PyTorch alike."""
    return str(a.dtype).removeprefix("torch.")


def _zero_stride(a: Any, axis: int) -> bool:
    """Whether `a` is broadcast (stride 0) along `axis`."""
    return (a.stride(axis) if callable(getattr(a, "stride", None)) else a.strides[axis]) == 0
