"""The block-size rule (block_threads=None), with the occupancy numbers faked (no GPU)."""

from types import SimpleNamespace

import numpy as np
import pytest
from programs import reductions, scaled_cumsum

import coop_tiles as ct
from coop_tiles.lang.types import WEAK_FLOAT, WEAK_INT, ArrayType
from coop_tiles.runtime import blockdims, launcher
from coop_tiles.runtime.kernel import Signature

SIG = Signature(
    (
        ("x", ArrayType(np.dtype(np.int32))),
        ("y", ArrayType(np.dtype(np.float64))),
        ("n", WEAK_INT),
        ("alpha", WEAK_FLOAT),
    ),
    (("TILE", 4096),),
    None,
    "sm_90",
)
DEVICE = SimpleNamespace(device_id=0, properties=SimpleNamespace(max_threads_per_multiprocessor=2048))


@pytest.fixture
def fake_gpu(monkeypatch):
    """Occupancy (and spills) by block size from a table; loading is a no-op."""
    table = {}
    monkeypatch.setattr(launcher, "load", lambda kernel, device_id: kernel)

    def measure(kernel, function, device):
        # blocks a multiprocessor, or (blocks, bytes of local memory a thread[, blocks if shared memory set no limit])
        entry = table[kernel.block_threads]
        blocks, spilled, unlimited = (*entry, entry[0])[:3] if isinstance(entry, tuple) else (entry, 0, entry)
        occupancy = blocks * kernel.block_threads / 2048
        return blockdims.Measured(kernel.block_threads, 64, kernel.shared_bytes, blocks, occupancy, spilled, unlimited)

    monkeypatch.setattr(blockdims, "measure", measure)
    return table


def test_default_is_kept_when_occupancy_is_enough(fake_gpu):
    fake_gpu.update({256: 4})  # 1024 of 2048 thread slots
    kernel = blockdims.select(ct.jit(scaled_cumsum.fn), SIG, DEVICE)
    assert kernel.block_threads == 256
    assert kernel.block_choice.reason == "default rule, occupancy is enough"
    assert [m.block_threads for m in kernel.block_choice.measured] == [256]


def test_low_occupancy_tries_every_candidate_and_takes_the_best(fake_gpu):
    fake_gpu.update({128: 6, 256: 2, 512: 1, 1024: 0})  # 128 threads: 768 resident, the most
    kernel = blockdims.select(ct.jit(scaled_cumsum.fn), SIG, DEVICE)
    assert kernel.block_threads == 128
    assert kernel.block_choice.reason == "highest occupancy"
    # 64 threads would need 64 items per thread: not a candidate.
    assert sorted(m.block_threads for m in kernel.block_choice.measured) == [128, 256, 512, 1024]
    assert "128 threads per block" in str(kernel.block_choice)


def test_ties_go_to_the_size_closest_to_the_default(fake_gpu):
    fake_gpu.update({128: 4, 256: 1, 512: 1, 1024: 0})  # 128 and 512 both 512 resident threads
    kernel = blockdims.select(ct.jit(scaled_cumsum.fn), SIG, DEVICE)
    assert kernel.block_threads == 128


def test_sizes_that_spill_lose_to_any_that_does_not(fake_gpu):
    # 1024 threads: the most resident, but its registers spill (bytes of local memory a thread)
    fake_gpu.update({128: 6, 256: 1, 512: 1, 1024: (1, 96)})  # (128: 768 resident threads, 1024: 1024)
    kernel = blockdims.select(ct.jit(scaled_cumsum.fn), SIG, DEVICE)
    assert kernel.block_threads == 128
    assert "1024 threads: 64 regs" in str(kernel.block_choice) and "96 B local" in str(kernel.block_choice)


def test_a_spilling_size_only_when_every_one_spills(fake_gpu):
    fake_gpu.update({128: (6, 8), 256: (1, 8), 512: (1, 8), 1024: (0, 8)})
    kernel = blockdims.select(ct.jit(scaled_cumsum.fn), SIG, DEVICE)
    assert kernel.block_threads == 128


REDUCTIONS = Signature(
    (("x", ArrayType(np.dtype(np.float32))), ("out", ArrayType(np.dtype(np.float32))), ("n", WEAK_INT)),
    (("TILE", 8192),),
    None,
    "sm_90",
)


def test_striped_tiles_limited_by_registers_keep_the_default(fake_gpu):
    fake_gpu.update({256: 2, 512: 2, 1024: 1})  # (registers: 512 of 2048 thread slots at 256, 1024 at 512)
    kernel = blockdims.select(ct.jit(reductions.fn), REDUCTIONS, DEVICE)
    assert all(t.arrangement == "striped" for t in kernel.plan.tiles.values())
    assert (kernel.block_threads, kernel.block_choice.reason) == (
        256,
        "default rule for striped tiles limited by registers: items per thread, not occupancy",
    )


def test_striped_tiles_limited_by_shared_memory_or_spilling_take_the_highest_occupancy(fake_gpu):
    fake_gpu.update({256: (2, 0, 6), 512: 2, 1024: 1})  # (shared memory: 2 blocks of 256, registers would fit 6)
    assert blockdims.select(ct.jit(reductions.fn), REDUCTIONS, DEVICE).block_threads == 512
    fake_gpu.update({256: (2, 8), 512: 2, 1024: 1})
    assert blockdims.select(ct.jit(reductions.fn), REDUCTIONS, DEVICE).block_threads == 512
