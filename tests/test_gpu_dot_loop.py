"""Tutorial 12's K loop pipelined on the GPU (`ct.jit(arch="sm_90a")`: cuBLASDx's TMA + WGMMA pipeline, the device
pipelines built by the prepare kernel before each launch; ops/dot_loop.py) against torch.matmul, on an sm_90 GPU.

Small integers (in [-3, 3]) make every product and partial sum exact in float32, so the result must equal
torch.matmul's of the float32 operands bit for bit, whichever path ran: the pipeline (16-byte aligned operands whose
rows are whole 16 bytes) or the loop as written (a misaligned view, rows of an odd number of elements)."""

from __future__ import annotations

import pytest
from test_dot_loop import tutorial_12  # (the tests' one import of tutorial 12)

import coop_tiles as ct

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

BLOCKS = ({"BM": 128, "BN": 128, "BK": 64}, {"BM": 128, "BN": 256, "BK": 64}, {"BM": 256, "BN": 128, "BK": 64})


@pytest.fixture(scope="module")
def kernel():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("sm_90a kernels run on a 9.0 GPU only")
    return ct.jit(tutorial_12().matmul.kernel.fn, block_threads=256, arch="sm_90a")


def integers(rows: int, cols: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(-3, 4, (rows, cols), device="cuda", generator=gen).to(torch.bfloat16)


def product(kernel, a, b, blocks: dict, stream=None):
    (m, k), n = a.shape, b.shape[1]
    c = torch.full((m, n), float("nan"), device="cuda")
    grid = tutorial_12().grid(m, n)(blocks)
    launch = kernel[grid] if stream is None else kernel[(grid,), stream.cuda_stream]
    launch(a, b, c, m, n, k, TF32=False, **blocks)
    return c


@pytest.mark.parametrize("blocks", BLOCKS, ids=lambda b: f"{b['BM']}x{b['BN']}x{b['BK']}")
@pytest.mark.parametrize(
    "shape",
    [(1024, 1024, 1024), (1000, 776, 520), (4000, 4008, 1000), (1000, 777, 515), (8, 16, 8)],
    ids=["aligned", "ragged", "ragged large", "rows not whole 16 bytes", "smaller than a tile"],
)
def test_pipelined_tutorial_12_gives_torch_matmul(kernel, blocks, shape):
    m, n, k = shape
    a, b = integers(m, k, 1), integers(k, n, 2)
    assert torch.equal(product(kernel, a, b, blocks), torch.matmul(a.float(), b.float()))


def test_a_misaligned_operand_runs_the_loop_and_gives_torch_matmul(kernel):
    m, n, k = 1000, 776, 520
    a = integers(m, k + 8, 3)[:, 1 : k + 1]  # (2 bytes into a 16-byte word: TMA cannot read it)
    b = integers(k, n, 4)
    assert torch.equal(product(kernel, a, b, BLOCKS[0]), torch.matmul(a.float(), b.float()))


def test_launches_on_two_streams_keep_their_own_descriptors(kernel):
    """Two products of different operands launched on two streams at once, then each again: each stream's launch
    state holds its own device pipelines."""
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    pairs = [(integers(1024, 512, 5), integers(512, 768, 6)), (integers(512, 1024, 7), integers(1024, 256, 8))]
    for stream in streams:  # (the operands are made on the current stream; PyTorch's streams do not wait for it)
        stream.wait_stream(torch.cuda.current_stream())
    results = []
    for _ in range(2):
        for stream, (a, b) in zip(streams, pairs):
            with torch.cuda.stream(stream):
                results.append(product(kernel, a, b, BLOCKS[0], stream))
    torch.cuda.synchronize()
    for i, c in enumerate(results):
        a, b = pairs[i % 2]
        assert torch.equal(c, torch.matmul(a.float(), b.float()))
