"""Programmatic dependent launch, without a GPU: which kernels are launched allowing it, and the wait at the start
of every sm_90 kernel that makes it safe (tests/test_gpu_runtime.py runs dependent launches on a GPU, and
tests/test_claunch_torch.py checks that both launch paths ask the driver for it)."""

import numpy as np
import pytest
from programs import vector_add

from coop_tiles.runtime.launcher import programmatic

MEMORY = {"ld", "st", "atom", "red", "cp", "prefetch"}  # PTX opcodes that touch memory


@pytest.mark.parametrize(
    "arch, expected", [("sm_80", False), ("sm_89", False), ("sm_90", True), ("sm_90a", True), ("sm_100", True)]
)
def test_kernels_for_sm_90_and_later_are_launched_programmatically(arch, expected, monkeypatch):
    monkeypatch.delenv("COOP_TILES_PDL", raising=False)
    assert programmatic(arch) is expected
    monkeypatch.setenv("COOP_TILES_PDL", "0")
    assert programmatic(arch) is False


def test_an_sm_90_kernel_waits_for_the_grid_before_it_first_and_an_sm_80_kernel_has_no_such_wait():
    x = np.zeros(100, np.float32)
    hopper = vector_add.compile(x, x, x, 100, TILE=128, arch="sm_90")
    ampere = vector_add.compile(x, x, x, 100, TILE=128, arch="sm_80")
    entry = hopper.ptx[hopper.ptx.index(f".entry {hopper.kernel_name}") :]
    before = entry[: entry.index("griddepcontrol.wait;")]
    memory = [line.strip() for line in before.splitlines() if line.strip().split(" ")[0].split(".")[0] in MEMORY]
    assert memory and all(line.startswith("ld.param.") for line in memory)  # only the parameters are read before it
    assert "griddepcontrol" not in ampere.ptx
    assert hopper.ptx.count("griddepcontrol") == 1  # (no early launch of the next grid: see shims.GRID_DEPENDENCY)
