"""coop_tiles.torch on a GPU: the docs' example op (docs/language.md, "PyTorch custom ops") passes
torch.library.opcheck, differentiates, and runs inside torch.compile(fullgraph=True) and captured CUDA graphs; so do
the selective scan's ops."""

import pytest

import coop_tiles as ct
from coop_tiles import tile

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu


@ct.jit
def scale_add(x, y, out, alpha, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    a = tile.load(x, base, TILE, valid=n - base, other=0)
    b = tile.load(y, base, TILE, valid=n - base, other=0)
    tile.store(out, base, a * alpha + b, valid=n - base)


def _setup(ctx, inputs, output):
    ctx.alpha = inputs[2]


def _backward(ctx, grad):
    return grad * ctx.alpha, grad, None


def _axpy(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    out = torch.empty_like(x)
    scale_add[ct.cdiv(x.numel(), 1024)](x, y, out, alpha, x.numel(), TILE=1024)
    return out


def _register():
    from coop_tiles.torch import kernel_op

    return kernel_op(
        "coop_tiles_test::axpy", _axpy, fake=lambda x, y, alpha: torch.empty_like(x), backward=_backward,
        setup_context=_setup,
    )  # fmt: skip


axpy = _register()


def vectors(n=5000, grad=False):
    x, y = (torch.randn(n, device="cuda", requires_grad=grad) for _ in range(2))
    return x, y


def test_opcheck():
    x, y = vectors(grad=True)
    torch.library.opcheck(axpy, (x, y, 2.5))
    torch.library.opcheck(axpy, (x.detach(), y.detach(), -1.0))


def test_autograd():
    x, y = vectors(grad=True)
    (axpy(x, y, 3.0) * torch.arange(x.numel(), device="cuda")).sum().backward()
    weights = torch.arange(x.numel(), device="cuda", dtype=torch.float32)
    torch.testing.assert_close(x.grad, 3.0 * weights)
    torch.testing.assert_close(y.grad, weights)


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_torch_compile_fullgraph(mode):
    def f(x, y):
        return torch.relu(axpy(x * 2, y, 0.5)).sum()

    x, y = vectors()
    compiled = torch.compile(f, fullgraph=True, mode=mode)
    for _ in range(3):  # reduce-overhead: warm-up runs, then the recorded CUDA graph
        torch.testing.assert_close(compiled(x, y), f(x, y))


def test_torch_compile_fullgraph_backward():
    def f(x, y):
        return (axpy(x, y, 1.5) ** 2).sum()

    x, y = vectors(grad=True)
    torch.compile(f, fullgraph=True)(x, y).backward()
    expected_x, expected_y = (2 * (1.5 * x + y) * s for s in (1.5, 1.0))
    torch.testing.assert_close(x.grad, expected_x.detach())
    torch.testing.assert_close(y.grad, expected_y.detach())


def test_cuda_graph_capture_and_replay():
    x, y = vectors()
    axpy(x, y, 2.0)  # compiles and loads the kernel outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = axpy(x, y, 2.0)
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, 2.0 * x + y)


def test_launches_on_the_current_stream():
    x, y = vectors(1 << 22)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = axpy(x, y, 2.0)
        out.add_(1)  # ordered after the kernel only if it ran on `side`
    side.synchronize()
    torch.testing.assert_close(out, 2.0 * x + y + 1)


def _scan_inputs(dtype=torch.float32, L=300):
    g = torch.Generator(device="cuda").manual_seed(0)
    batch, dim, dstate = 2, 8, 4

    def randn(*shape, dt=dtype):
        return torch.randn(*shape, device="cuda", dtype=dt, generator=g)

    return (
        randn(batch, dim, L), (0.5 * torch.rand(batch, dim, L, device="cuda", generator=g)).to(dtype),
        -0.5 * torch.rand(dim, dstate, device="cuda", generator=g), randn(batch, dstate, L), randn(batch, dstate, L),
        randn(dim, dt=torch.float32), randn(batch, dim, L), 0.5 * torch.rand(dim, device="cuda", generator=g),
    )  # fmt: skip


@pytest.mark.parametrize("with_optional", [True, False])
def test_selective_scan_ops_opcheck(with_optional):
    from coop_tiles.examples.selective_scan_torch import selective_scan_bwd_op, selective_scan_fwd_op

    u, delta, A, B, C, D, z, bias = _scan_inputs()
    if not with_optional:
        D = z = bias = None
    inputs = [t.requires_grad_() if t is not None else None for t in (u, delta, A, B, C, D, z, bias)]
    torch.library.opcheck(selective_scan_fwd_op, (*inputs, True, False))
    _, states = selective_scan_fwd_op(*inputs, True, False)
    plain = [t.detach() if t is not None else None for t in inputs]
    args = (torch.randn_like(u), *plain[:5], states.detach(), *plain[5:], True, False)
    torch.library.opcheck(selective_scan_bwd_op, args)
