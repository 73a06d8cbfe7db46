"""The compile pipeline as a declared list of stages, and dumping their outputs (COOP_TILES_DUMP)."""

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.errors import LaunchError
from coop_tiles.runtime.compiler import STAGES

SEEDS = {"fn", "sig", "cache", "clock", "on_built"}


@ct.jit
def cumsum(x, y, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base)
    tile.store(y, base, tile.scan(t), valid=n - base)


def compile_cumsum():
    x = np.zeros(8, np.int32)
    return cumsum.compile(x, x, 8, TILE=512, arch="sm_90")


def test_each_stage_takes_what_earlier_stages_made():
    names = [stage.name for stage in STAGES]
    assert len(set(names)) == len(names)
    for i, stage in enumerate(STAGES):
        unknown = set(stage.inputs) - SEEDS - set(names[:i])
        assert not unknown, f"stage {stage.name} takes {unknown}, which no earlier stage makes"
    assert names[:2] == ["ir", "rewritten"] and names[-1] == "cubin"


def test_dump_prints_the_asked_stages_to_stderr(monkeypatch, capsys):
    monkeypatch.setenv("COOP_TILES_DUMP", "ir, plan,shims,body")
    monkeypatch.delenv("COOP_TILES_DUMP_DIR", raising=False)
    k = compile_cumsum()
    err = capsys.readouterr().err
    headers = [line for line in err.splitlines() if line.startswith("===== coop_tiles: cumsum")]
    stages = [h.rsplit("stage ", 1)[1].split()[0] for h in headers]
    assert stages == ["ir", "shims", "plan", "body"]  # in pipeline order
    assert "program cumsum(" in err and "scan" in err
    assert str(k.plan) in err
    assert k.shim_source.rstrip() in err
    assert k.numba_source.rstrip() in err


def test_dump_writes_every_stage_into_the_dump_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("COOP_TILES_DUMP", "all")
    monkeypatch.setenv("COOP_TILES_DUMP_DIR", str(tmp_path))
    k = compile_cumsum()
    files = {p.name.split(".", 2)[2]: p for p in tmp_path.iterdir()}
    assert set(files) == {stage.name + stage.suffix for stage in STAGES}
    assert files["shims.cu"].read_text() == k.shim_source.rstrip("\n") + "\n"
    assert files["plan.txt"].read_text() == str(k.plan) + "\n"
    assert "BLOCK_SCAN_WARP_SCANS" in files["layouts.txt"].read_text()
    assert "TempStorage" in files["nvrtc.txt"].read_text()
    assert files["cubin.txt"].read_text() == f"cubin: {len(k.cubin)} bytes\n"


def test_dump_of_an_unknown_stage_names_the_stages(monkeypatch):
    monkeypatch.setenv("COOP_TILES_DUMP", "ir,ptx")
    with pytest.raises(LaunchError, match="names no stage ptx; the stages are ir, rewritten, layouts"):
        compile_cumsum()


def test_dump_of_the_ir_of_an_interpreted_launch(monkeypatch, capsys):
    monkeypatch.setenv("COOP_TILES_DUMP", "ir")
    monkeypatch.delenv("COOP_TILES_DUMP_DIR", raising=False)
    x = np.arange(8, dtype=np.int32)
    y = np.zeros(8, np.int32)
    ct.jit(cumsum.fn, interpret=True)[1](x, y, 8, TILE=8)
    np.testing.assert_array_equal(y, np.cumsum(x))
    err = capsys.readouterr().err
    assert "stage ir =====" in err and "program cumsum(" in err
