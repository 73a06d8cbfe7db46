"""A 2-layer Mamba-1 model (coop_tiles.examples.mamba) trained for 30 steps on a synthetic task on the GPU, once
with coop_tiles' selective_scan_fn and once with a sequential float32 PyTorch scan, from the same seed (issue 20)."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from coop_tiles.examples.mamba import MambaLM, reference_selective_scan  # noqa: E402

VOCAB, D_MODEL, BATCH, L, STEPS = 32, 64, 4, 128, 30
#: per-step losses may differ by this much relative: the scans sum in different orders, and 30 Adam steps carry it
LOSS_RTOL = 2e-3


def batches(seed: int = 0) -> list:
    """Next-token prediction on sequences that repeat a random motif of 8 tokens: learnable in a few steps."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(STEPS):
        motif = torch.randint(0, VOCAB, (BATCH, 8), generator=g)
        seq = motif.repeat(1, (L + 1) // 8 + 1)[:, : L + 1]
        out.append((seq[:, :-1], seq[:, 1:]))
    return out


def train(scan) -> list[float]:
    torch.manual_seed(0)
    model = MambaLM(VOCAB, D_MODEL, layers=2, scan=scan).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for x, y in batches():
        x, y = x.cuda(), y.cuda()
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_training_matches_the_reference_scan_step_by_step():
    ours = train(None)  # None: selective_scan_fn
    reference = train(reference_selective_scan)
    for step, (a, b) in enumerate(zip(ours, reference)):
        assert abs(a - b) <= LOSS_RTOL * abs(b), f"step {step}: {a} vs {b}"
    assert ours[-1] < 0.5 * ours[0], ours
