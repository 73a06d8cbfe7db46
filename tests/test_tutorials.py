"""The tutorials run as scripts (on the GPU if there is one, else in the interpreter) and compile."""

import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

TUTORIALS = sorted((Path(__file__).parent.parent / "tutorials").glob("[0-9][0-9]_*.py"))


@pytest.fixture(autouse=True)
def tutorials_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(TUTORIALS[0].parent))


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs(path, capsys):
    runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    assert "matches" in out or (path.stem == "06_autotune" and "every config compiles" in out)


def test_tutorial_kernels_compile_without_gpu():
    sys.path.insert(0, str(TUTORIALS[0].parent))
    cumsum = runpy.run_path(str(TUTORIALS[1]))
    x = np.zeros(1, np.int64)
    k = cumsum["exclusive_scan_one_program"].compile(x, x, 1, CHUNK=1024, arch="sm_90")
    assert "scan[add], carried" in str(k.plan)
    assert "(s.temp[run]).ExclusiveScan(fold, prefix, coop::add{}, block)" in k.shim_source
    assert k.local_memory_bytes() == 0
    f = np.zeros(1, np.float32)
    k = cumsum["whole_array_recurrence"].compile(f, f, f, 1, TILE=4096, arch="sm_90")
    assert "coop_chain_begin(coop_grid_state)" in k.numba_source and k.local_memory_bytes() == 0
    assert "coop_prefetch_0(" in k.numba_source and "coop_prefetch_1(" in k.numba_source  # a and b, before the ticket
    softmax = runpy.run_path(str(TUTORIALS[2]))
    f = np.zeros(1, np.float32)
    k = softmax["row_softmax"].compile(f, f, f, 1, TILE=1024, arch="sm_90")
    assert k.local_memory_bytes() == 0
