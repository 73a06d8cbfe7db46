"""coop_tiles.torch on a GPU: the docs' example op (docs/language.md, "PyTorch custom ops") passes
torch.library.opcheck, differentiates, and runs inside torch.compile(fullgraph=True) and captured CUDA graphs; so do
the selective scan's ops."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from programs import vector_add

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


# ----- the C launch path with PyTorch tensors ---------------------------------------------------------------------
@ct.jit
def scale_rows(x, out, alpha, TILE: ct.constexpr):
    """out = alpha * x for (rows, n) arrays of any strides, on a (chunks, rows) grid as the top-k example's."""
    c, r = ct.program_id(0), ct.program_id(1)
    n = x.shape[1]
    base = c * TILE
    t = tile.load(x[r], base, TILE, valid=n - base, other=0)
    tile.store(out[r], base, t * alpha, valid=n - base)


@ct.jit
def add3(x, y, out):
    """out = x + y for 3-D arrays of any strides, one element per program of a 3-D grid."""
    i, j, k = ct.program_id(0), ct.program_id(1), ct.program_id(2)
    out[i, j, k] = x[i, j, k] + y[i, j, k]


def _counting_run(kernel, monkeypatch) -> list:
    """The grids of the calls that reach the Python `run` (the C path's fallback) from now on."""
    calls = []
    run = kernel.run
    monkeypatch.setitem(kernel.__dict__, "run", lambda grid, *rest: calls.append(grid) or run(grid, *rest))
    return calls


def _launches(dtype):
    """(name, launch(seed) -> (got, expected as float64 NumPy)) for tensors of ranks 1 to 3, contiguous and
    strided, on int and tuple grids."""

    def rand(seed, *shape):
        g = torch.Generator(device="cuda").manual_seed(seed)
        return torch.randn(*shape, device="cuda", generator=g).to(dtype)

    def host(t):
        return t.float().cpu().numpy().astype(np.float64)

    def flat(seed, grid):
        x, y = rand(seed, 3001), rand(seed + 1, 3001)
        out = torch.zeros_like(x)
        vector_add[grid](x, y, out, 3001, TILE=512)
        return out, host(x) + host(y)

    def rows(seed, strided):
        x = rand(seed, 300, 6).T if strided else rand(seed, 6, 300)  # (6, 300) of strides (1, 6): no unit stride
        out = torch.zeros(6, 600, device="cuda", dtype=dtype)[:, ::2] if strided else torch.zeros_like(x)
        scale_rows[(ct.cdiv(300, 128), 6)](x, out, 0.5, TILE=128)
        return out, 0.5 * host(x)

    def cube(seed):
        x, y = rand(seed, 2, 3, 5), rand(seed + 1, 5, 2, 3).permute(1, 2, 0)
        out = torch.zeros(2, 3, 5, device="cuda", dtype=dtype)
        add3[(2, 3, 5)](x, y, out)
        return out, host(x) + host(y)

    return [
        ("1-D, int grid", lambda s: flat(s, ct.cdiv(3001, 512))),
        ("1-D, (g,) grid", lambda s: flat(s, (ct.cdiv(3001, 512),))),
        ("2-D", lambda s: rows(s, False)),
        ("2-D strided", lambda s: rows(s, True)),
        ("3-D strided, (g0, g1, g2) grid", cube),
    ]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pytorch_tensors_of_any_rank_launch_through_the_c_path(dtype, monkeypatch):
    """After a launch of each kind (which compiles and teaches the kernel its tensors' keys), launches of ranks 1 to
    3, strided, on tuple grids, run in C (never entering `run`) and compute what NumPy does."""
    pytest.importorskip("coop_tiles.runtime._claunch")
    dtype = getattr(torch, dtype)
    tolerance = {"rtol": 1e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {"rtol": 1e-6, "atol": 1e-6}
    launches = _launches(dtype)
    for _, launch in launches:
        launch(0)
    kernels = {k: _counting_run(k, monkeypatch) for k in (scale_rows, add3, vector_add)}
    for name, launch in launches:
        got, expected = launch(7)
        np.testing.assert_allclose(got.float().cpu().numpy(), expected, err_msg=name, **tolerance)
    assert {k.__name__: calls for k, calls in kernels.items()} == {"scale_rows": [], "add3": [], "vector_add": []}


def test_a_plain_pytorch_launch_does_not_enter_python(monkeypatch):
    """The common PyTorch launch runs in C, on PyTorch's current stream (a CUDA graph captured on a side stream
    records it, which a launch on any other stream would break)."""
    claunch = pytest.importorskip("coop_tiles.runtime._claunch")
    kernel = ct.jit(scale_add.fn)
    x, y = vectors(10_000)
    out = torch.empty_like(x)
    kernel[ct.cdiv(x.numel(), 1024)](x, y, out, 2.0, x.numel(), TILE=1024)  # compiles through run()
    assert isinstance(kernel[1], claunch.BoundLaunch)
    calls = _counting_run(kernel, monkeypatch)
    for alpha in (3.0, -1.0):
        kernel[ct.cdiv(x.numel(), 1024)](x, y, out, alpha, x.numel(), TILE=1024)
        torch.testing.assert_close(out, alpha * x + y)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    out.zero_()
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
        kernel[ct.cdiv(x.numel(), 1024)](x, y, out, 0.5, x.numel(), TILE=1024)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 0.5 * x + y)
    assert calls == []


def test_the_c_path_launches_pytorch_tensors_without_cupy():
    """In a process that never imports CuPy, PyTorch launches still run in C."""
    pytest.importorskip("coop_tiles.runtime._claunch")
    script = textwrap.dedent(
        """
        import sys, torch
        sys.path.insert(0, "tests")
        from programs import vector_add
        x = torch.arange(3000, dtype=torch.float32, device="cuda")
        out = torch.zeros(3000, device="cuda")
        vector_add[(3,)](x, x, out, 3000, TILE=1024)
        calls = []
        run = vector_add.run
        vector_add.run = lambda *call: calls.append(call[0]) or run(*call)
        for _ in range(3):
            vector_add[(3,)](x, x, out, 3000, TILE=1024)
        torch.testing.assert_close(out, 2 * x)
        assert calls == [] and "cupy" not in sys.modules, (calls, "cupy" in sys.modules)
        print("ok")
        """
    )
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
