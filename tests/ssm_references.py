"""NumPy references of Mamba's state-space operations, for tests of the tile programs that port them.

`selective_scan_backward` is the gradient of Mamba's selective scan (`selective_scan_ref` of
`mamba_ssm/ops/selective_scan_interface.py`; its CUDA backward is `csrc/selective_scan/selective_scan_bwd_kernel.cuh`),
derived by hand and checked against finite differences (tests/test_ssm_references.py).

`selective_state_update` mirrors `mamba_ssm.ops.triton.selective_state_update.selective_state_update`
(state-spaces/mamba, `mamba_ssm/ops/triton/selective_state_update.py`: its Triton kernel
`_selective_scan_update_kernel` and its PyTorch `selective_state_update_ref`), Mamba's decode step.

`ssd_combined` is the forward of Mamba-2's `mamba_chunk_scan_combined` (`mamba_ssm/ops/triton/ssd_combined.py`),
step by step: the recurrence that `ssd_minimal_discrete` (`mamba_ssm/modules/ssd_minimal.py`) and the chunked
kernels compute by blocks.
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


def selective_scan_backward(
    dout: np.ndarray,
    u: np.ndarray,
    delta: np.ndarray,
    A: np.ndarray,
    B: np.ndarray,
    C: np.ndarray,
    D: np.ndarray | None = None,
    z: np.ndarray | None = None,
    delta_bias: np.ndarray | None = None,
    delta_softplus: bool = False,
) -> dict[str, np.ndarray]:
    """The gradients of `sum(dout * out)` of Mamba's selective scan, in float64: a dict with "u", "delta", "A", "B",
    "C" and, for those given, "D", "z", "delta_bias", each of its input's shape.

    Shapes as `selective_scan_fn` takes them: u, delta, z, dout (batch, dim, L); A (dim, dstate); B, C (dim, dstate)
    (fixed), (batch, dstate, L) (variable) or (batch, groups, dstate, L) (grouped: channel d reads group
    d // (dim // groups)); D, delta_bias (dim,). With dt = softplus(delta + delta_bias) (softplus optional, the
    identity above 20), h[-1] = 0, g = dout * silu(z) (or dout) and y the output before the gate:

        h[t]  = exp(dt[t] A) h[t-1] + dt[t] u[t] B[t]
        dh[t] = g[t] C[t] + exp(dt[t+1] A) dh[t+1]                       (dh[L-1] = g[L-1] C[L-1])
        dC[t] = g[t] h[t],   dB[t] = dh[t] dt[t] u[t],   dA = sum_t dh[t] dt[t] exp(dt[t] A) h[t-1]
        du[t] = g[t] D + sum_n dh[t] B[t] dt[t],   dD = sum g u,   dz = dout y silu'(z)
        ddt[t] = sum_n dh[t] (B[t] u[t] + A exp(dt[t] A) h[t-1]),   ddelta = ddt * softplus'(delta + delta_bias)

    each summed over the axes its input does not have (fixed B over batch and time, grouped B over the channels of
    its group, A, D and delta_bias over batch and time).
    """
    f64 = np.float64
    dout, u, delta, A = (np.asarray(v, f64) for v in (dout, u, delta, A))
    batch, dim, seqlen = u.shape
    raw = delta + (0.0 if delta_bias is None else np.asarray(delta_bias, f64)[:, None])
    dt = _softplus(raw) if delta_softplus else raw

    def per_channel(X: np.ndarray) -> np.ndarray:
        """B or C as (batch, dim, dstate, L), fixed ones broadcast."""
        X = np.asarray(X, f64)
        if X.ndim == 2:
            return np.broadcast_to(X[None, :, :, None], (batch, dim, X.shape[1], seqlen))
        X = X[:, None] if X.ndim == 3 else X
        return np.repeat(X, dim // X.shape[1], axis=1)

    def to_input(dX: np.ndarray, X: np.ndarray) -> np.ndarray:
        """A per-channel gradient (batch, dim, dstate, L) summed back to X's shape."""
        X = np.asarray(X)
        if X.ndim == 2:
            return dX.sum(axis=(0, 3))
        groups = 1 if X.ndim == 3 else X.shape[1]
        summed = dX.reshape(batch, groups, dim // groups, *dX.shape[2:]).sum(axis=2)
        return summed.reshape(X.shape)

    Bc, Cc = per_channel(B), per_channel(C)
    decay = np.exp(dt[:, :, None, :] * A[None, :, :, None])  # (batch, dim, dstate, L)
    h = np.zeros(Bc.shape)
    prev = np.zeros(Bc.shape[:3])
    for t in range(seqlen):
        prev = decay[..., t] * prev + (dt[:, :, t] * u[:, :, t])[..., None] * Bc[..., t]
        h[..., t] = prev
    h_before = np.concatenate([np.zeros(h.shape[:3] + (1,)), h[..., :-1]], axis=-1)  # h[t-1]
    grads: dict[str, np.ndarray] = {}
    g = dout
    if z is not None:
        z = np.asarray(z, f64)
        y = (h * Cc).sum(axis=2) + (0.0 if D is None else u * np.asarray(D, f64)[:, None])
        sig = 1 / (1 + np.exp(-z))
        grads["z"] = dout * y * sig * (1 + z * (1 - sig))
        g = dout * z * sig
    dh = np.zeros(h.shape)
    after = np.zeros(h.shape[:3])  # exp(dt[t+1] A) dh[t+1]
    for t in range(seqlen - 1, -1, -1):
        dh[..., t] = g[:, :, None, t] * Cc[..., t] + after
        after = decay[..., t] * dh[..., t]
    grads["C"] = to_input(g[:, :, None, :] * h, C)
    grads["B"] = to_input(dh * (dt * u)[:, :, None, :], B)
    grads["A"] = (dh * dt[:, :, None, :] * decay * h_before).sum(axis=(0, 3))
    grads["u"] = (dh * Bc).sum(axis=2) * dt
    ddt = (dh * (Bc * u[:, :, None, :] + A[None, :, :, None] * decay * h_before)).sum(axis=2)
    if D is not None:
        grads["u"] = grads["u"] + g * np.asarray(D, f64)[:, None]
        grads["D"] = (g * u).sum(axis=(0, 2))
    softplus_slope = np.where(raw <= 20.0, 1 / (1 + np.exp(-np.minimum(raw, 20.0))), 1.0)
    grads["delta"] = ddt * softplus_slope if delta_softplus else ddt
    if delta_bias is not None:
        grads["delta_bias"] = grads["delta"].sum(axis=(0, 2))
    return grads


def ssd_combined(x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False, initial_states=None, seq_idx=None):
    """(out, final_states) in float64 of Mamba-2's SSD forward, one time step after another: with
    dt' = max(softplus(dt + dt_bias), 0) and head h reading group h // (nheads // ngroups) of B and C,
    state = exp(A[h] dt') state + dt' x B^T, out = (state C + D x) * silu(z). Shapes as Mamba's
    `mamba_chunk_scan_combined`: x, z (batch, seqlen, nheads, headdim), dt (batch, seqlen, nheads), A and
    dt_bias (nheads,), B and C (batch, seqlen, ngroups, dstate), D (nheads, headdim) or (nheads,).

    seq_idx (batch, seqlen), nondecreasing along a row, packs sequences: each run of equal ids goes through the
    recurrence on its own, from initial_states when it is the row's first and its id is 0 (Mamba's rule), else
    from zeros; the final state is the state at the row's end."""
    if seq_idx is not None:
        return _ssd_packed(x, dt, A, B, C, D, z, dt_bias, dt_softplus, initial_states, np.asarray(seq_idx))
    f = lambda a: None if a is None else np.asarray(a, np.float64)  # noqa: E731
    x, dt, A, B, C, D, z, dt_bias = map(f, (x, dt, A, B, C, D, z, dt_bias))
    batch, seqlen, nheads, headdim = x.shape
    heads_per_group = nheads // B.shape[2]
    B, C = (np.repeat(a, heads_per_group, axis=2) for a in (B, C))  # (batch, seqlen, nheads, dstate)
    if dt_bias is not None:
        dt = dt + dt_bias
    if dt_softplus:
        dt = _softplus(dt)
    dt = np.maximum(dt, 0.0)
    state = np.zeros((batch, nheads, headdim, B.shape[3])) if initial_states is None else f(initial_states).copy()
    out = np.empty_like(x)
    for t in range(seqlen):
        decay = np.exp(A * dt[:, t])[:, :, None, None]
        state = decay * state + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, :, None, :]
        out[:, t] = np.einsum("bhpn,bhn->bhp", state, C[:, t])
    if D is not None:
        out += x * (D if D.ndim == 2 else D[:, None])
    if z is not None:
        out *= z / (1.0 + np.exp(-z))
    return out, state


def _ssd_packed(x, dt, A, B, C, D, z, dt_bias, dt_softplus, initial_states, seq_idx):
    """`ssd_combined` of each run of equal ids of each row of seq_idx on its own, concatenated."""
    outs, finals = [], []
    for b in range(seq_idx.shape[0]):
        row = seq_idx[b]
        starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
        pieces = []
        for start, stop in zip(starts, np.r_[starts[1:], row.size]):
            part = lambda a: None if a is None else a[b : b + 1, start:stop]  # noqa: B023, E731
            first = initial_states is not None and start == 0 and row[0] == 0
            out, final = ssd_combined(
                part(x), part(dt), A, part(B), part(C), D, part(z), dt_bias, dt_softplus,
                initial_states[b : b + 1] if first else None,
            )  # fmt: skip
            pieces.append(out)
        outs.append(np.concatenate(pieces, axis=1))
        finals.append(final)
    return np.concatenate(outs), np.concatenate(finals)
