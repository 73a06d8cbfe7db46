"""A Mamba-1 language model in PyTorch whose selective scan is coop_tiles' `selective_scan_fn` (issue 20).

The block is Mamba's (in/out projections, a depthwise causal convolution, x and dt projections, the selective
scan gated by z); everything but the scan is plain PyTorch. `scan=` swaps the scan for another function of the
same signature, e.g. `reference_selective_scan` (sequential float32 PyTorch), to compare training step by step.
Imports torch: load it as `coop_tiles.examples.mamba` only where PyTorch is installed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


def reference_selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    delta_bias: torch.Tensor | None = None,
    delta_softplus: bool = False,
) -> torch.Tensor:
    """Mamba's selective scan in float32 PyTorch, one step after the other (autograd differentiates it); B and C
    of shape (batch, dstate, L). Slow: for tests and small models."""
    u, delta = u.float(), delta.float()
    if delta_bias is not None:
        delta = delta + delta_bias.float()[:, None]
    if delta_softplus:
        delta = F.softplus(delta)
    B, C = B.float(), C.float()
    h = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    ys = []
    for t in range(u.shape[2]):
        h = torch.exp(delta[:, :, t, None] * A) * h + (delta[:, :, t] * u[:, :, t])[..., None] * B[:, None, :, t]
        ys.append((h * C[:, None, :, t]).sum(-1))
    y = torch.stack(ys, dim=-1)
    if D is not None:
        y = y + u * D.float()[:, None]
    if z is not None:
        y = y * F.silu(z.float())
    return y


def _coop_scan(*args: Any, **kwargs: Any) -> torch.Tensor:
    from coop_tiles.examples import selective_scan_fn

    return selective_scan_fn(*args, **kwargs)


class MambaBlock(nn.Module):
    """One Mamba-1 mixer: (batch, L, d_model) -> (batch, L, d_model)."""

    def __init__(
        self, d_model: int, d_state: int = 16, d_conv: int = 4, expand: int = 2, scan: Callable | None = None
    ) -> None:
        super().__init__()
        d_inner, self.dt_rank, self.d_state = expand * d_model, math.ceil(d_model / 16), d_state
        self.scan = scan or _coop_scan
        self.in_proj = nn.Linear(d_model, 2 * d_inner, bias=False)
        self.conv1d = nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner, padding=d_conv - 1)
        self.x_proj = nn.Linear(d_inner, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, d_inner, bias=True)
        dt = torch.exp(torch.rand(d_inner) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        with torch.no_grad():  # Mamba's dt initialisation: softplus(bias) uniform in log space over [1e-3, 0.1]
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1, dtype=torch.float32)).repeat(d_inner, 1))
        self.D = nn.Parameter(torch.ones(d_inner))
        self.out_proj = nn.Linear(d_inner, d_model, bias=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        L = hidden.shape[1]
        x, z = self.in_proj(hidden).transpose(1, 2).chunk(2, dim=1)  # (batch, d_inner, L) each
        x = F.silu(self.conv1d(x)[..., :L])
        dt, B, C = self.x_proj(x.transpose(1, 2)).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        delta = (dt @ self.dt_proj.weight.t()).transpose(1, 2)  # the bias goes in as delta_bias
        y = self.scan(
            x.contiguous(),
            delta.contiguous(),
            -torch.exp(self.A_log.float()),
            B.transpose(1, 2).contiguous(),
            C.transpose(1, 2).contiguous(),
            self.D.float(),
            z=z.contiguous(),
            delta_bias=self.dt_proj.bias.float(),
            delta_softplus=True,
        )
        return self.out_proj(y.transpose(1, 2))


class MambaLM(nn.Module):
    """A small Mamba-1 language model: embedding, `layers` pre-norm residual Mamba blocks, a tied head."""

    def __init__(self, vocab: int, d_model: int, layers: int = 2, scan: Callable | None = None, **block: Any) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(layers))
        self.blocks = nn.ModuleList(MambaBlock(d_model, scan=scan, **block) for _ in range(layers))
        self.norm_f = nn.LayerNorm(d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embedding(tokens)
        for norm, block in zip(self.norms, self.blocks):
            h = h + block(norm(h))
        return self.norm_f(h) @ self.embedding.weight.t()
