"""`selective_scan_fn`: Mamba's selective scan for PyTorch, differentiable, as two custom ops (`coop_tiles.torch`).

`coop_tiles::selective_scan_fwd` runs the forward program and returns `out` and the states at the end of each
chunk; `coop_tiles::selective_scan_bwd` runs the backward program (selective_scan_backward.py) from them. The
forward's autograd formula calls the backward op, so both trace under `torch.compile(fullgraph=True)` and are
captured by CUDA graphs. Importing this module imports torch and registers the ops; `coop_tiles.examples` imports
it only when `selective_scan_fn` is asked for.
"""

from __future__ import annotations

from typing import Any

import torch

from coop_tiles.torch import kernel_op

from .selective_scan import forward, n_chunks
from .selective_scan_backward import selective_scan_bwd

FWD_SCHEMA = (
    "(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, Tensor? delta_bias, "
    "bool delta_softplus, bool deterministic) -> (Tensor, Tensor)"
)
BWD_SCHEMA = (
    "(Tensor dout, Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor states, Tensor? D, Tensor? z, "
    "Tensor? delta_bias, bool delta_softplus, bool deterministic) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, "
    "Tensor, Tensor)"
)


def _on_cuda(u: torch.Tensor) -> None:
    """The programs run on CUDA tensors; the interpreter takes NumPy arrays (`selective_scan_fwd`)."""
    if u.device.type != "cuda":
        raise ValueError(
            f"selective_scan_fn runs on CUDA tensors, not {u.device.type} ones; on the CPU, call "
            "coop_tiles.examples.selective_scan_fwd with NumPy arrays (the interpreter: slow, for tests)"
        )


def _fwd_fake(u, delta, A, B, C, D, z, delta_bias, delta_softplus, deterministic):
    batch, dim, seqlen = u.shape
    return u.new_empty(u.shape), u.new_empty((batch, dim, n_chunks(seqlen), A.shape[1]), dtype=torch.float32)


def _setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    u, delta, A, B, C, D, z, delta_bias, delta_softplus, deterministic = inputs
    ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, output[1])
    ctx.delta_softplus, ctx.deterministic = delta_softplus, deterministic


def _backward(ctx: Any, dout: torch.Tensor, dstates: torch.Tensor) -> tuple:
    """The gradients of the inputs; the states' own gradient is not taken (as Mamba's last_state's is not)."""
    u, delta, A, B, C, D, z, delta_bias, states = ctx.saved_tensors
    du, ddelta, dA, dB, dC, dD, dz, ddelta_bias = selective_scan_bwd_op(
        dout, u, delta, A, B, C, states, D, z, delta_bias, ctx.delta_softplus, ctx.deterministic
    )
    return (du, ddelta, dA, dB, dC, dD if D is not None else None, dz if z is not None else None,
            ddelta_bias if delta_bias is not None else None, None, None)  # fmt: skip


@kernel_op(
    "coop_tiles::selective_scan_fwd",
    fake=_fwd_fake,
    backward=_backward,
    setup_context=_setup_context,
    schema=FWD_SCHEMA,
)
def selective_scan_fwd_op(u, delta, A, B, C, D, z, delta_bias, delta_softplus, deterministic):
    """(out, states): the forward program."""
    _on_cuda(u)
    return forward(u, delta, A, B, C, D, z, delta_bias, delta_softplus)


def _bwd_fake(dout, u, delta, A, B, C, states, D, z, delta_bias, delta_softplus, deterministic):
    like = (u, u, A, B, C, D, z, delta_bias)
    return tuple(x.new_empty(x.shape, dtype=u.dtype if x is z else x.dtype) if x is not None else u.new_empty(0)
                 for x in like)  # fmt: skip


@kernel_op("coop_tiles::selective_scan_bwd", fake=_bwd_fake, schema=BWD_SCHEMA)
def selective_scan_bwd_op(dout, u, delta, A, B, C, states, D, z, delta_bias, delta_softplus, deterministic):
    """(du, ddelta, dA, dB, dC, dD, dz, ddelta_bias): the backward program; the gradients of absent inputs are
    empty tensors (an op returns tensors, not None)."""
    _on_cuda(u)
    grads = selective_scan_bwd(dout, u, delta, A, B, C, states, D, z, delta_bias, delta_softplus, deterministic)
    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")
    return tuple(grads[k] if k in grads else u.new_empty(0) for k in names)


def selective_scan_fn(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
    *,
    deterministic: bool = False,
) -> Any:
    """Mamba's `selective_scan_fn` (mamba_ssm.ops.selective_scan_interface): the same arguments, shapes, dtypes and
    results (`out`, or `(out, last_state)`), differentiable in u, delta, A, B, C, D, z and delta_bias; the gradient
    of last_state is not taken, as in Mamba. CUDA tensors only. `deterministic=True` sums the weights' gradients in
    a fixed order (see selective_scan_backward.py) instead of with atomics."""
    out, states = selective_scan_fwd_op(u, delta, A, B, C, D, z, delta_bias, bool(delta_softplus), bool(deterministic))
    return (out, states[:, :, -1]) if return_last_state else out
