"""NumPy references of Mamba's state-space operations, for tests of the tile programs that port them.

`selective_state_update` mirrors `mamba_ssm.ops.triton.selective_state_update.selective_state_update`
(state-spaces/mamba, `mamba_ssm/ops/triton/selective_state_update.py`: its Triton kernel
`_selective_scan_update_kernel` and its PyTorch `selective_state_update_ref`), Mamba's decode step.
"""

from __future__ import annotations

import numpy as np


def _softplus(v: np.ndarray) -> np.ndarray:
    """Mamba's kernel: `softplus(dt)` where dt <= 20, else dt (log1p(exp(dt)) without overflow)."""
    return np.where(v <= 20.0, np.logaddexp(0.0, np.minimum(v, 20.0)), v)


def selective_state_update(
    state: np.ndarray,
    x: np.ndarray,
    dt: np.ndarray,
    A: np.ndarray,
    B: np.ndarray,
    C: np.ndarray,
    D: np.ndarray | None = None,
    z: np.ndarray | None = None,
    dt_bias: np.ndarray | None = None,
    dt_softplus: bool = False,
    state_batch_indices: np.ndarray | None = None,
) -> np.ndarray:
    """One step of Mamba's selective state update: updates `state` in place and returns `out`.

    Shapes as Mamba's function takes them, Mamba-1 or Mamba-2 (with heads):

        state: (batch, dim, dstate) or (batch_states, nheads, dim, dstate)   (updated in place, in its dtype)
        x, dt, z: (batch, dim) or (batch, nheads, dim)
        A: (dim, dstate) or (nheads, dim, dstate)
        B, C: (batch, dstate) or (batch, ngroups, dstate); head h reads group h // (nheads // ngroups)
        D, dt_bias: (dim,) or (nheads, dim)
        state_batch_indices: (batch,) integers: batch b updates state[state_batch_indices[b]]; a negative index is
            a padding token: its output is 0 and no state is touched (the kernel's rule)
        out: x's shape and dtype

    For each batch b, head h, row d and state n (computed in float64, rounded once to the outputs' dtypes):

        dt'  = dt[b, h, d] + dt_bias[h, d]                     (dt_bias optional)
        dt'  = softplus(dt') if dt_softplus (dt' itself above 20)
        state[s, h, d, n] = state[s, h, d, n] * exp(A[h, d, n] * dt') + B[b, g, n] * dt' * x[b, h, d]
        out[b, h, d] = sum_n state[s, h, d, n] * C[b, g, n]  (+ D[h, d] * x[b, h, d])  (* z * sigmoid(z))

    with s = state_batch_indices[b] (or b) and g = h // (nheads // ngroups). Broadcast (stride-0) inputs, as
    Mamba-2's decode passes A, dt, dt_bias and D, are ordinary NumPy views here. Every input may be a NumPy array of
    any float dtype (bfloat16 as `ml_dtypes.bfloat16`).
    """
    has_heads = state.ndim == 4
    heads_state = state if has_heads else state[:, None]  # a view: writes land in `state`
    f64 = np.float64

    def heads(v: np.ndarray | None, axis: int) -> np.ndarray | None:
        if v is None:
            return None
        v = np.asarray(v)
        return (v if has_heads else np.expand_dims(v, axis)).astype(f64)

    x_, dt_, z_ = heads(x, 1), heads(dt, 1), heads(z, 1)
    A_, B_, C_ = heads(A, 0), heads(B, 1), heads(C, 1)
    D_, bias_ = heads(D, 0), heads(dt_bias, 0)
    batch = x_.shape[0]
    _, nheads, dim, dstate = heads_state.shape
    ngroups = B_.shape[1]
    assert x_.shape == (batch, nheads, dim) and dt_.shape == x_.shape, (x_.shape, dt_.shape)
    assert A_.shape == (nheads, dim, dstate) and nheads % ngroups == 0
    assert B_.shape == (batch, ngroups, dstate) and C_.shape == B_.shape
    if bias_ is not None:
        dt_ = dt_ + bias_
    if dt_softplus:
        dt_ = _softplus(dt_)
    groups = np.arange(nheads) // (nheads // ngroups)
    Bh, Ch = B_[:, groups], C_[:, groups]  # (batch, nheads, dstate)
    out = np.zeros((batch, nheads, dim), f64)
    for b in range(batch):
        s = b if state_batch_indices is None else int(state_batch_indices[b])
        if s < 0:
            continue  # padding: out stays 0, no state is touched
        old = heads_state[s].astype(f64)  # (nheads, dim, dstate)
        new = old * np.exp(A_ * dt_[b][:, :, None]) + Bh[b][:, None, :] * (dt_[b] * x_[b])[:, :, None]
        heads_state[s] = new.astype(state.dtype)
        out[b] = np.einsum("hdn,hn->hd", new, Ch[b])
        if D_ is not None:
            out[b] += D_ * x_[b]
        if z_ is not None:
            out[b] *= z_[b] / (1 + np.exp(-z_[b]))
    out = out.astype(np.asarray(x).dtype)
    return out if has_heads else out[:, 0]
