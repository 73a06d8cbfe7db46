"""Tile kernels as PyTorch operators: `kernel_op` registers a launcher as a `torch.library` custom op.

A launcher is a Python function of tensors that allocates its outputs and launches tile kernels on them. Registered
with its fake function (the outputs' shapes and dtypes, computed without running anything) and, optionally, its
autograd formula, it is an operator PyTorch can trace: `torch.compile(fullgraph=True)` keeps it in the graph as one
opaque call, CUDA graphs capture its launches, `torch.library.opcheck` checks it, and DDP/FSDP differentiate
through it like any other op. Launches inside it run on PyTorch's current stream (the runtime's default stream for
tensor arguments), which is the capturing stream under `torch.cuda.graph` and the compiled graph's stream under
`torch.compile`. This module imports torch; `import coop_tiles` does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


def kernel_op(
    name: str,
    launcher: Callable[..., Any] | None = None,
    *,
    fake: Callable[..., Any],
    backward: Callable[..., Any] | None = None,
    setup_context: Callable[..., None] | None = None,
    mutates_args: Iterable[str] = (),
    schema: str | None = None,
) -> Any:
    """Register `launcher` as the custom op `name` ("namespace::op_name") with its fake function and, if given, its
    autograd formula; returns the op (call it like the launcher). Usable as a decorator: `@kernel_op(name, fake=f)`.

    `launcher`'s type hints give the op's schema (`torch.Tensor`, `torch.Tensor | None`, `int`, `float`, `bool`,
    tuples of tensors as results), or `schema` gives it. Outputs must be new tensors (no views of the inputs or of
    each other); inputs it writes to are named in `mutates_args`. `fake(*args)` returns tensors of the outputs'
    shapes, dtypes and devices (`torch.empty_like`, `x.new_empty(shape)`), never launching anything.
    `backward(ctx, *grads)` and `setup_context(ctx, inputs, output)` are `torch.library.register_autograd`'s: the
    backward may call other ops registered here, so that it traces too.
    """
    if launcher is None:
        return lambda f: kernel_op(
            name, f, fake=fake, backward=backward, setup_context=setup_context, mutates_args=mutates_args, schema=schema
        )
    if (backward is None) != (setup_context is None):
        raise ValueError("kernel_op: give backward and setup_context together, or neither")
    op = torch.library.custom_op(name, launcher, mutates_args=tuple(mutates_args), schema=schema)
    op.register_fake(fake)
    if backward is not None:
        op.register_autograd(backward, setup_context=setup_context)
    return op
