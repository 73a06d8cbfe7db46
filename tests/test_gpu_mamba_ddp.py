"""The Mamba-1 model's training step under torch.distributed: 2 processes on 2 GPUs (NCCL, DDP), each with half of
every batch, against one process on the whole batch: per-step gradients equal within tolerance (issue 20). This is
how a user scales past one GPU: through PyTorch's distributed engine; coop_tiles' ops are ordinary custom ops there."""

import os
import socket

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    pytest.skip("needs 2 CUDA GPUs", allow_module_level=True)

from test_gpu_mamba_training import BATCH, D_MODEL, VOCAB, batches  # noqa: E402

from coop_tiles.examples.mamba import MambaLM  # noqa: E402

STEPS = 5
#: gradients may differ by float32 summation order (DDP's all-reduce, the backward's atomics)
RTOL, ATOL = 2e-3, 1e-5


def _step_grads(model, ddp, x, y, opt) -> list:
    loss = torch.nn.functional.cross_entropy(ddp(x).reshape(-1, VOCAB), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    grads = [p.grad.detach().cpu().clone() for p in model.parameters()]
    opt.step()
    return grads


def _worker(rank: int, world: int, port: int, path: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    torch.manual_seed(0)
    model = MambaLM(VOCAB, D_MODEL, layers=2).cuda(rank)
    ddp = DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    half = BATCH // world
    steps = []
    for x, y in batches()[:STEPS]:
        part = slice(rank * half, (rank + 1) * half)
        steps.append(_step_grads(model, ddp, x[part].cuda(rank), y[part].cuda(rank), opt))
    if rank == 0:
        torch.save(steps, path)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_gradients_equal_single_process_gradients(tmp_path):
    import torch.multiprocessing as mp

    path = str(tmp_path / "ddp_grads.pt")
    mp.spawn(_worker, args=(2, _free_port(), path), nprocs=2, join=True)
    distributed = torch.load(path)
    torch.manual_seed(0)
    model = MambaLM(VOCAB, D_MODEL, layers=2).cuda(0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step, (x, y) in enumerate(batches()[:STEPS]):
        single = _step_grads(model, model, x.cuda(0), y.cuda(0), opt)
        for i, (a, b) in enumerate(zip(distributed[step], single)):
            where = f"step {step}, parameter {i}"
            torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL, msg=lambda m, w=where: f"{w}: {m}")
