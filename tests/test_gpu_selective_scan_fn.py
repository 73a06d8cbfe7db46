"""coop_tiles.examples.selective_scan_fn on a GPU against a float64 PyTorch reference of Mamba's selective scan (the
test's own code, sequential, differentiated by autograd), with Mamba's tolerances (state-spaces/mamba,
tests/ops/test_selective_scan.py): the output, the last state and every gradient, for variable, grouped and fixed
B/C, float32/float16/bfloat16 inputs and several lengths; deterministic gradients repeat bit for bit; the function
runs inside torch.compile(fullgraph=True) and a captured CUDA graph; CPU tensors are a clear error."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def reference(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """(out, last_state) of Mamba's selective scan in float64, one step after the other."""
    u, delta, A = u.double(), delta.double(), A.double()
    batch, dim, L = u.shape
    if delta_bias is not None:
        delta = delta + delta_bias.double()[:, None]
    if delta_softplus:
        delta = torch.where(delta <= 20, torch.nn.functional.softplus(delta), delta)

    def per_channel(X):
        X = X.double()
        if X.dim() == 2:
            return X[None, :, :, None].expand(batch, dim, X.shape[1], L)
        X = X[:, None] if X.dim() == 3 else X
        return X.repeat_interleave(dim // X.shape[1], dim=1)

    Bc, Cc = per_channel(B), per_channel(C)
    h = u.new_zeros(batch, dim, A.shape[1])
    ys = []
    for t in range(L):
        h = torch.exp(delta[:, :, t, None] * A) * h + (delta[:, :, t] * u[:, :, t])[..., None] * Bc[..., t]
        ys.append((h * Cc[..., t]).sum(-1))
    y = torch.stack(ys, dim=-1) if L else u.new_zeros(batch, dim, 0)
    if D is not None:
        y = y + u * D.double()[:, None]
    if z is not None:
        y = y * torch.nn.functional.silu(z.double())
    return y, h


def make(batch, dim, L, dstate, dtype, B_kind, C_kind, groups=2, seed=0):
    """Mamba's test inputs (its distributions): A, D, delta_bias and fixed B/C float32, the rest `dtype`."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape, dt=dtype):
        return torch.randn(*shape, device="cuda", dtype=dt, generator=g)

    def weight(kind):
        return {"fixed": lambda: randn(dim, dstate, dt=torch.float32), "variable": lambda: randn(batch, dstate, L),
                "grouped": lambda: randn(batch, groups, dstate, L)}[kind]()  # fmt: skip

    return {
        "u": randn(batch, dim, L),
        "delta": (0.5 * torch.rand(batch, dim, L, device="cuda", generator=g)).to(dtype),
        "A": -0.5 * torch.rand(dim, dstate, device="cuda", generator=g),
        "B": weight(B_kind),
        "C": weight(C_kind),
        "D": randn(dim, dt=torch.float32),
        "z": randn(batch, dim, L),
        "delta_bias": 0.5 * torch.rand(dim, device="cuda", generator=g),
    }


def tolerances(dtype):
    """Mamba's: (rtol, atol) of outputs and inputs' gradients, (rtolw, atolw) of the weights'."""
    rtol, atol = {torch.float32: (6e-4, 2e-3), torch.float16: (3e-3, 5e-3), torch.bfloat16: (3e-2, 5e-2)}[dtype]
    rtolw, atolw = (1e-3, 1e-3) if dtype == torch.float32 else (max(1e-3, rtol), max(1e-3, atol))
    return rtol, atol, rtolw, atolw


def run_and_check(inputs, softplus, dtype, deterministic=False):
    from coop_tiles.examples import selective_scan_fn

    leaves = {k: v.detach().clone().requires_grad_() for k, v in inputs.items()}
    out, last = selective_scan_fn(**leaves, delta_softplus=softplus, return_last_state=True,
                                  deterministic=deterministic)  # fmt: skip
    refs = {k: v.detach().clone().requires_grad_() for k, v in inputs.items()}
    out_ref, last_ref = reference(**refs, delta_softplus=softplus)
    rtol, atol, rtolw, atolw = tolerances(dtype)
    assert out.dtype == dtype and out.shape == inputs["u"].shape and last.dtype == torch.float32
    torch.testing.assert_close(out.double(), out_ref.to(dtype).double(), rtol=rtol, atol=atol)
    torch.testing.assert_close(last.double(), last_ref, rtol=rtol, atol=atol)
    g = torch.randn(out.shape, generator=torch.Generator(out.device).manual_seed(7), device=out.device).to(out.dtype)
    out.backward(g)
    out_ref.backward(g.double())
    varying = {k: inputs[k].dim() > 2 for k in ("B", "C")}
    bounds = {  # Mamba's, as its test sets them
        "u": (rtol * 2, atol * 2), "delta": (rtol * 5, atol * 10), "A": (rtolw, atolw * 5),
        "B": (rtol, atol) if varying["B"] else (rtolw, atolw), "C": (rtol, atol) if varying["C"] else (rtolw, atolw),
        "D": (rtolw, atolw), "z": (rtolw, atolw), "delta_bias": (rtolw, atolw),
    }  # fmt: skip
    for name, leaf in leaves.items():
        expected = refs[name].grad.to(leaf.dtype).double()
        assert leaf.grad is not None and leaf.grad.dtype == leaf.dtype and leaf.grad.shape == leaf.shape, name
        r, a = bounds[name]
        torch.testing.assert_close(leaf.grad.double(), expected, rtol=r, atol=a, msg=lambda m, n=name: f"{n}: {m}")
    return {k: v.grad for k, v in leaves.items()}


VARIANTS = {
    "variable": ("variable", "variable"),
    "grouped": ("grouped", "grouped"),
    "fixed": ("fixed", "fixed"),
    "fixed B, grouped C": ("fixed", "grouped"),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("L", [1, 7, 777, 2048 + 33])
@pytest.mark.parametrize("variant", VARIANTS)
def test_matches_reference(variant, L, dtype):
    inputs = make(2, 4, L, 8, DTYPES[dtype], *VARIANTS[variant])
    run_and_check(inputs, True, DTYPES[dtype])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_long_sequence(dtype):
    inputs = make(1, 2, 8192, 8, DTYPES[dtype], "variable", "variable")
    run_and_check(inputs, True, DTYPES[dtype])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("L", [777, 2048 + 33])
@pytest.mark.parametrize("variant", ["variable", "grouped", "fixed B, grouped C"])
def test_two_channels_per_program(variant, L, dtype, monkeypatch):
    """The backward with two channels of a group per program (`selective_scan_backward.CHANNELS`, which
    selective_scan_fn's backward takes), its variable dB/dC rows summed before the atomics, against the reference."""
    from coop_tiles.examples import selective_scan_backward

    monkeypatch.setattr(selective_scan_backward, "CHANNELS", 2)
    inputs = make(2, 8, L, 8, DTYPES[dtype], *VARIANTS[variant])
    run_and_check(inputs, True, DTYPES[dtype])


def test_optional_inputs_absent():
    inputs = make(2, 4, 300, 8, torch.float32, "variable", "fixed")
    for k in ("D", "z", "delta_bias"):
        del inputs[k]
    run_and_check(inputs, False, torch.float32)


def test_deterministic_gradients_repeat_bit_for_bit():
    inputs = make(2, 8, 2048 + 33, 8, torch.float32, "grouped", "fixed")
    first = run_and_check(inputs, True, torch.float32, deterministic=True)
    second = run_and_check(inputs, True, torch.float32, deterministic=True)
    for k in first:
        assert torch.equal(first[k], second[k]), k


def test_torch_compile_fullgraph_and_cuda_graph():
    from coop_tiles.examples import selective_scan_fn

    inputs = make(2, 4, 777, 8, torch.float32, "variable", "variable")

    def loss(u, delta, A, B, C, D, z, delta_bias):
        return (selective_scan_fn(u, delta, A, B, C, D, z, delta_bias, delta_softplus=True) ** 2).sum()

    def grads(fn):
        leaves = [v.detach().clone().requires_grad_() for v in inputs.values()]
        fn(*leaves).backward()
        return [leaf.grad for leaf in leaves]

    eager = grads(loss)
    for got, expected in zip(grads(torch.compile(loss, fullgraph=True)), eager):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    for _ in range(3):  # reduce-overhead: CUDA graphs of the forward and the backward, after warm-up runs
        got_all = grads(torch.compile(loss, fullgraph=True, mode="reduce-overhead"))
    for got, expected in zip(got_all, eager):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)

    args = [v.detach().clone() for v in inputs.values()]
    selective_scan_fn(*args, delta_softplus=True)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = selective_scan_fn(*args, delta_softplus=True)
    args[0].copy_(torch.randn_like(args[0]))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, selective_scan_fn(*args, delta_softplus=True))


def test_cpu_tensors_are_a_clear_error():
    from coop_tiles.examples import selective_scan_fn

    inputs = {k: v.cpu() for k, v in make(1, 2, 16, 4, torch.float32, "variable", "variable").items()}
    with pytest.raises(ValueError, match="CUDA tensors"):
        selective_scan_fn(**inputs)


def test_complex_weights_are_a_clear_error():
    from coop_tiles.examples import selective_scan_fn

    inputs = make(1, 2, 16, 4, torch.float32, "variable", "variable")
    inputs["A"] = inputs["A"].to(torch.complex64)
    with pytest.raises(NotImplementedError, match="real weights only"):
        selective_scan_fn(**inputs)
