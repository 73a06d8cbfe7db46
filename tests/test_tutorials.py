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
    if "report_speed(speed)" in path.read_text():  # a perf_report sweep: only on a GPU, else one line
        from _runner import ON_GPU

        assert ON_GPU or out.count("performance report skipped: no GPU") == 1


SPEED_TUTORIALS = ("02_cumsum", "05_histogram", "07_sort", "08_mamba_selective_scan", "09_softmax_layernorm",
                   "10_mamba_decode", "11_mamba_backward", "13_mamba2_ssd", "14_topk_sampling",
                   "15_moe_routing")  # fmt: skip


@pytest.mark.parametrize("stem", SPEED_TUTORIALS)
def test_speed_tutorials_declare_a_perf_report(stem):
    """Each sweep names one line per provider, and its plot after the tutorial."""
    import coop_tiles as ct

    speed = _tutorial(stem)["speed"]
    assert isinstance(speed, ct.testing.Mark)
    for b in speed.benchmarks:
        assert len(b.line_vals) == len(b.line_names) >= 2 and b.plot_name.startswith(stem[:3]) and b.ylabel


@pytest.mark.gpu
@pytest.mark.parametrize("stem", SPEED_TUTORIALS)
def test_speed_tutorials_sweep_on_gpu(stem, tmp_path):
    """On a GPU: every point of every sweep is a positive rate, and the table is written."""
    speed = _tutorial(stem)["speed"]
    for table in speed.run(save_path=tmp_path):
        assert all(v > 0 for _, values in table.rows for v, _, _ in values), table
        assert (tmp_path / f"{table.benchmark.plot_name}.csv").exists()


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


def _tutorial(stem: str) -> dict:
    sys.path.insert(0, str(TUTORIALS[0].parent))
    return runpy.run_path(str(TUTORIALS[0].parent / f"{stem}.py"))


def test_softmax_layernorm_kernels_compile_without_gpu():
    """Tutorial 09's programs at the sizes benchmarks/sections/softmax.py runs: sm_90 cubins, nothing spilled."""
    import ml_dtypes

    import coop_tiles as ct

    t = _tutorial("09_softmax_layernorm")
    f, h, v = np.zeros((2, 2), np.float32), np.zeros((2, 2), ml_dtypes.bfloat16), np.zeros(2, np.float32)
    compiled = [
        t["softmax_fwd"].compile(f, f, 1, BLOCK=16384, arch="sm_90"),
        ct.jit(t["softmax_fwd"].fn, block_threads=1024).compile(h, h, 1, BLOCK=16384, arch="sm_90"),
        t["layer_norm_fwd"].compile(h, h, v, v, v, v, 1, 1e-5, BLOCK=4096, arch="sm_90"),
        t["layer_norm_fwd"].compile(h, h, h[0], h[0], v, v, 1, 1e-5, BLOCK=16384, arch="sm_90"),  # bfloat16 w, b
        t["softmax_bwd"].compile(f, f, f, 1, BLOCK=4096, arch="sm_90"),
        t["layer_norm_bwd"].compile(f, f, v, v, v, f, v, v, 1, 1, ROWS=16, BLOCK=4096, arch="sm_90"),
    ]
    assert compiled[1].block_threads == 1024
    for k in compiled:
        assert k.local_memory_bytes() == 0


def test_softmax_layernorm_block_of_rows_and_chunked_plans():
    """The block-of-rows programs at 1024 columns give each row a warp (32 * BM threads): axis reductions by warp
    shuffles, no shared memory, no barrier; the chunked layer norm at 16384 bfloat16 columns in halves at 512 threads
    fits two blocks per SM (at most 64 registers), nothing spilled."""
    import ml_dtypes

    import coop_tiles as ct

    t = _tutorial("09_softmax_layernorm")
    h, f, v = np.zeros((2, 2), ml_dtypes.bfloat16), np.zeros((2, 2), np.float32), np.zeros(2, np.float32)
    rows = [
        ct.jit(t["softmax_rows_fwd"].fn, block_threads=128).compile(h, h, 1, 1, BM=4, BLOCK=1024, arch="sm_90"),
        ct.jit(t["layer_norm_rows_fwd"].fn, block_threads=128).compile(
            f, f, v, v, v, v, 1, 1, 1e-5, BM=4, BLOCK=1024, arch="sm_90"
        ),
    ]
    for k in rows:
        assert k.shared_bytes == 0 and not k.plan.carve.barriers and k.local_memory_bytes() == 0
        assert "warp shuffles over 32 lanes" in str(k.plan)
    chunked = ct.jit(t["layer_norm_fwd_chunked"].fn, block_threads=512)
    k = chunked.compile(h, h, h[0], h[0], v, v, 1, 1e-5, BLOCK=8192, arch="sm_90")
    assert k.local_memory_bytes() == 0 and k.registers() <= 64


def test_softmax_layernorm_bfloat16_in_interpreter():
    """The forward programs on bfloat16 rows (converted to float32 as they load, rounded back as they store), against
    float64 NumPy on the same bfloat16 inputs, within bfloat16's rounding."""
    import ml_dtypes

    import coop_tiles as ct

    t = _tutorial("09_softmax_layernorm")
    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng(3)
    rows, cols = 5, 200
    x = rng.standard_normal((rows, cols)).astype(bf16)
    w, b = (
        (1 + 0.1 * rng.standard_normal(cols)).astype(np.float32),
        (0.1 * rng.standard_normal(cols)).astype(np.float32),
    )
    y, ln = np.zeros((rows, cols), bf16), np.zeros((rows, cols), bf16)
    mean, rstd = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    ct.jit(t["softmax_fwd"].fn, interpret=True)[rows](x, y, cols, BLOCK=256)
    ct.jit(t["layer_norm_fwd"].fn, interpret=True)[rows](x, ln, w, b, mean, rstd, cols, 1e-5, BLOCK=256)
    np.testing.assert_allclose(y.astype(np.float64), t["softmax_reference"](x), rtol=8e-3, atol=1e-6)
    expected, mu, rs = t["layer_norm_reference"](x, w, b, 1e-5)
    np.testing.assert_allclose(ln.astype(np.float64), expected, rtol=8e-3, atol=8e-3)
    np.testing.assert_allclose(mean, mu, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(rstd, rs, rtol=1e-4)
    # a block of 2 rows per program (the last block partial), and the layer norm in chunks of 64 columns
    ct.jit(t["softmax_rows_fwd"].fn, interpret=True)[3](x, y, rows, cols, BM=2, BLOCK=256)
    chunked = ct.jit(t["layer_norm_fwd_chunked"].fn, interpret=True)
    chunked[rows](x, ln, w, b, mean, rstd, cols, 1e-5, BLOCK=64)
    np.testing.assert_allclose(y.astype(np.float64), t["softmax_reference"](x), rtol=8e-3, atol=1e-6)
    np.testing.assert_allclose(ln.astype(np.float64), expected, rtol=8e-3, atol=8e-3)
    np.testing.assert_allclose(mean, mu, rtol=1e-4, atol=1e-6)


def test_mamba_decode_kernel_compiles_without_gpu():
    """Tutorial 10's decode_step at Mamba-2's decode shape: an sm_90 cubin, the state block in 16-byte words, its row
    sums in registers and warp shuffles, nothing spilled."""
    t = _tutorial("10_mamba_decode")
    shapes = [(2, 2, 64, 128), (2, 2, 64), (2, 2, 64), (2, 64), (2, 64, 128), (2, 1, 128), (2, 1, 128), (2, 64)]
    shapes += [(2, 2, 64), (2, 2, 64)]
    args = [np.zeros(s, np.float32) for s in shapes]
    k = t["decode_step"].compile(*args, BLOCK_D=16, DSTATE=128, arch="sm_90")
    plan = str(k.plan)
    assert "load 2-D, 16-byte words per row run" in plan and "store 2-D, 16-byte words per row run" in plan
    assert "reduce[add] axis=1: thread-sequential" in plan
    assert k.local_memory_bytes() == 0 and k.shared_bytes == 0
