"""The benchmarks' structure, without a GPU: every section module imports and declares a `Section`, the registry's names
are unique and `--only` takes them, the page renders every section from results of the shape each section returns
(failures included), and two runs' results compare side by side (benchmarks/compare.py)."""

from __future__ import annotations

import importlib
import inspect
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import compare, report  # noqa: E402
from benchmarks.section import NEEDS, Section  # noqa: E402
from benchmarks.sections import DOCUMENT_ORDER, NAMES, SECTIONS, by_name  # noqa: E402

#: the sections and the order `--only` and --help list them in (as before the split into modules)
EXPECTED = (
    "bandwidth",
    "launch",
    "compile",
    "blocks",
    "linrec",
    "half",
    "rows2d",
    "histogram",
    "segsort",
    "chained",
    "mamba",
    "mamba_bwd",
    "gather",
    "softmax",
    "state_update",
    "ssd",
    "select",
    "matmul",
    "topk",
    "moe",
    "scan2d",
)


def _tune(ms: float, best: object = 4096) -> dict:
    return {"best": best, "ms": ms, "times": {best: ms}, "correct": True}


def fake_results(scale: float = 1.0) -> dict:
    """Results of every section, shaped as each section's `run` returns them (times multiplied by `scale`), with a
    failure of each kind a section records: a whole row, one implementation, a whole section."""
    s = scale
    bandwidth = [
        {
            "n": f"2^{log2n}",
            "dtype": dtype,
            "copy_ms": 0.18 * s,
            "copy_gbs": 2900.0,
            "scan_ms": 0.185 * s,
            "scan_gbs": 2880.0,
            "scan_ratio": 0.99,
            "sum_ms": 0.098 * s,
            "sum_gbs": 2700.0,
            "sum_ratio": 0.93,
            "cupy_sum_ms": 0.12 * s,
            "correct": True,
        }
        for log2n in (26, 28)
        for dtype in ("int32", "float32")
    ]
    launches = [
        {"arrays": a, "coop_us": 4.8 * s, "cupy_us": 6.5 * s, "numba_us": 57.0 * s, "driver_us": 4.5 * s}
        for a in (1, 4, 8)
    ] + [
        {"path": p, "us": 6.0 * s, "cupy_us": 6.5 * s} for p in ("CuPy 1-D, `kernel[(1,)]`", "PyTorch 1-D, `kernel[1]`")
    ]
    blocks = [
        {
            "kernel": kernel,
            "n": "2^26",
            "dtype": "int32",
            "chosen": 256,
            "choice": "256 threads per block (default rule)",
            "auto_ms": 0.1 * s,
            "fixed": {128: 0.1 * s, 256: 0.1 * s, 512: 0.099 * s, 1024: 0.11 * s},
            "best": 512,
            "ratio": 0.99,
        }
        for kernel in ("scan", "sum")
    ]
    compiles = {
        "arch": "sm_90",
        "gpu": True,
        "cpus": 16,
        "runs": 3,
        "cold": {
            "import_s": 0.3 * s,
            "compile_s": 1.2 * s,
            "load_s": 0.01 * s,
            "stages": {"frontend": 0.01 * s, "nvrtc": 0.9 * s, "numba": 0.2 * s, "total": 1.2 * s},
        },
        "warm": {"import_s": 0.3 * s, "compile_s": 0.04 * s, "load_s": 0.01 * s, "start_s": 0.35 * s},
        "process_s": [1.2 * s, 0.8 * s, 0.3 * s],
        "autotune_s": 2.0 * s,
    }
    linrec = [
        {
            "n": "2^26",
            "elements": 1 << 26,
            "copy_ms": 0.18 * s,
            "copy_gbs": 2900.0,
            "coop": _tune(0.28 * s),
            "triton": _tune(0.4 * s, (2048, 4)),
        },
        {
            "n": "2^28",
            "elements": 1 << 28,
            "copy_ms": 0.7 * s,
            "copy_gbs": 2950.0,
            "coop": {"error": "RuntimeError: no"},
            "triton": _tune(1.6 * s, (4096, 8)),
        },
        {"n": "2^30", "elements": 1 << 30, "error": "MemoryError: out of memory"},
    ]
    half = [
        {
            "n": "2^26",
            "dtype": dtype,
            "elements": 1 << 26,
            "copy_ms": 0.094 * s,
            "copy_gbs": 2849.0,
            "scan": _tune(0.14 * s),
            "sum": _tune(0.056 * s) if dtype == "float16" else {"error": "TypeError: x \\| y"},
        }
        for dtype in ("float16", "bfloat16")
    ]
    rows2d = [
        {
            "input": "contiguous",
            "shape": (4096, 8192),
            "strides": (8192, 1),
            "torch_ms": 0.3 * s,
            "coop": _tune(0.2 * s),
        },
        {"input": "transposed", "shape": (8192, 4096), "strides": (1, 8192), "error": "ValueError: strided"},
    ]
    histogram = [
        {
            "case": "uint8, 256 bins",
            "n": "2^28",
            "elements": 1 << 28,
            "range": (0, 256),
            "read_ms": 0.09 * s,
            "coop": _tune(0.1 * s, (4096, 4)),
            "cub": _tune(0.12 * s, "HistogramEven"),
            "triton": {"error": "ImportError: no triton"},
            "torch": _tune(1.0 * s, "bincount"),
        }
    ]
    segsort = [
        {
            "sort": "keys only",
            "n": "2^24",
            "coop": _tune(0.2 * s, 2048),
            "cub": _tune(0.22 * s, "BlockRadixSort"),
            "torch": _tune(0.5 * s, "default"),
            "torch_stable": _tune(0.6 * s, "stable"),
            "triton": _tune(0.9 * s, 4),
        }
    ]
    chained = {
        "scans": [
            {
                "n": "2^26",
                "dtype": "int32",
                "elements": 1 << 26,
                "copy_ms": 0.18 * s,
                "chained": _tune(0.185 * s, (4096, None)),
                "three": _tune(0.4 * s, 4096),
                "cub": _tune(0.19 * s, "InclusiveSum"),
                "torch": {"error": "RuntimeError: x"},
            }
        ],
        "linrec": [{"n": "2^26", "elements": 1 << 26, "copy_ms": 0.18 * s, "coop": _tune(0.28 * s, (8192, 512))}],
        "costs": {
            "plain_us": 4.9 * s,
            "chained_us": 5.5 * s,
            "plain_ms": 0.01 * s,
            "chained_ms": 0.012 * s,
            "graph_ms": 0.015 * s,
            "direct_ms": 0.012 * s,
            "correct": True,
        },
    }
    mamba = [
        {
            "shape": (8, 1536, 2048, 16),
            "dtype": "float32",
            "elements": 8 * 1536 * 2048 * 16,
            "limit_ms": 0.5 * s,
            "coop": _tune(0.9 * s, None),
            "mamba": _tune(1.0 * s, None),
            "triton": _tune(1.5 * s, (64, 4)),
            "torch": _tune(90.0 * s, None),
        },
        {
            "shape": (8, 4096, 2048, 16),
            "dtype": "bfloat16",
            "elements": 8 * 4096 * 2048 * 16,
            "limit_ms": 0.7 * s,
            "coop": _tune(1.2 * s, None),
            "mamba": {"error": "RuntimeError: not built"},
            "triton": _tune(2.0 * s, (128, 4)),
        },
    ]
    mamba_bwd = [
        {
            "shape": (8, 1536, 2048, 16),
            "dtype": "bfloat16",
            "limit_ms": 0.6 * s,
            "coop": {**_tune(1.0 * s, None), "correct": True},
            "launches": {
                (8, 128): _tune(1.0 * s, None),
                (8, None): _tune(1.1 * s, None),
                (16, None): {"error": "X: y"},
            },
            "coop_both": _tune(1.5 * s, None),
            "coop_peak": {"bytes": 300 * 2**20},
            "mamba": {**_tune(1.2 * s, None), "both_ms": 1.8 * s},
            "mamba_peak": {"bytes": 400 * 2**20},
        },
        {"shape": (2, 2048, 8192, 16), "dtype": "float32", "error": "RuntimeError: out of memory"},
        {
            "shape": ("model", 8, 2048, 768),
            "dtype": "float32",
            "coop": _tune(20.0 * s, None),
            "mamba": _tune(22.0 * s, None),
        },
        {
            "shape": ("model", 8, 2048, 768),
            "dtype": "bfloat16",
            "coop": _tune(15.0 * s, None),
            "mamba": {"error": "E: f"},
        },
    ]
    softmax = [
        {
            "kernel": kernel,
            "shape": (4096, 1024),
            "dtype": "float32",
            "copy_ms": 0.012 * s,
            "bytes": 2 * 4096 * 1024 * 4,
            "copy_bytes": 2 * 4096 * 1024 * 4,
            "coop": _tune(0.013 * s, None),
            "triton": _tune(0.014 * s, 8),
            "torch": _tune(0.02 * s, None) if kernel == "softmax" else {"error": "RuntimeError: x"},
        }
        for kernel in ("softmax", "layer_norm")
    ] + [{"kernel": "softmax", "shape": (4096, 16384), "dtype": "bfloat16", "error": "ValueError: y"}]
    scan2d = {
        "rows": [
            {
                "shape": (4096, 256),
                "dtype": "float32",
                "case": case,
                "copy_ms": 0.006 * s,
                "elements": 4096 * 256,
                "coop": {"error": "TileTypeError: tile.load's first argument must be a 1-D array"},
                "triton": _tune(0.008 * s, (16, 4)),
                "torch": _tune(0.01 * s, None),
            }
            for case in ("inclusive", "reverse")
        ],
        "chained": [
            {
                "n": "2^28",
                "dtype": "int32",
                "elements": 1 << 28,
                "copy_ms": 0.7 * s,
                "forward": _tune(0.72 * s, (8192, None)),
                "reverse": _tune(0.74 * s, (8192, 512)),
            }
        ],
    }
    state_update = [
        {
            "case": "Mamba-1",
            "shape": (64, 5120, 16),
            "dtype": "bfloat16",
            "limit_ms": 0.015 * s,
            "mamba": _tune(0.175 * s, None),
            "coop": {"error": "NotImplementedError: not available"},
        },
        {"case": "Mamba-2", "shape": (64, 80, 64, 128), "dtype": "float32", "error": "RuntimeError: z"},
    ]
    ssd = [
        {
            "shape": (8, 4096, 80, 64, 128, 1, 256),
            "coop": _tune(1.5 * s, None),
            "mamba": _tune(1.62 * s, None),
            "passing_coop": {**_tune(0.1 * s, None), "correct": None},
            "passing_mamba": _tune(0.3 * s, None),
        },
        {"shape": (2, 16384, 32, 64, 128, 1, 256), "error": "RuntimeError: x"},
    ]
    gather = [
        {
            "case": "gather",
            "n": "2^26",
            "elements": 1 << 26,
            "copy_ms": 0.2 * s,
            "coop": _tune(0.5 * s, 4096),
            "torch": _tune(0.6 * s, "take (int64 index)"),
            "torch2": {"error": "RuntimeError: x"},
        },
        {"case": "scatter", "n": "2^26", "elements": 1 << 26, "error": "MemoryError: out of memory"},
    ]
    select = [
        {
            "n": "2^28",
            "elements": 1 << 28,
            "dtype": "float32",
            "fraction": 0.5,
            "selected": 1 << 27,
            "copy_ms": 0.715 * s,
            "coop_if": _tune(0.6 * s, (4096, None)),
            "coop_flagged": _tune(0.7 * s, (8192, None)),
            "coop_nonzero": _tune(0.8 * s, (4096, 256)),
            "cub_if": _tune(0.7 * s, "if"),
            "cub_flagged": {"error": "RuntimeError: nvcc not found"},
            "masked_select": _tune(1.98 * s, "masked_select"),
            "nonzero": _tune(0.91 * s, "nonzero"),
        },
        {"n": "2^28", "elements": 1 << 28, "dtype": "int32", "fraction": 0.05, "error": "MemoryError: out of memory"},
    ]
    matmul = [
        {
            "shape": (4096, 4096, 4096),
            "dtype": "bfloat16",
            "tf32": False,
            "peak": 989.0,
            "coop": {**_tune(0.2 * s, (128, 128, 32, 256)), "skipped": {(128, 256, 32, 256): "LaunchError: x"}},
            "torch": _tune(0.16 * s, "torch.mm(out_dtype=float32)"),
            "triton": {"error": "ImportError: no triton"},
        },
        {"shape": (8192, 8192, 1024), "dtype": "float32", "tf32": True, "peak": None, "error": "RuntimeError: z"},
    ]
    topk = [
        {
            "dtype": "float32",
            "k": 50,
            "coop": _tune(0.05 * s, 4096),
            "triton": _tune(0.3 * s, 8192),
            "torch": _tune(0.19 * s, "torch.topk"),
            "coop_sampler": _tune(0.06 * s, 4096),
            "torch_sampler": {"error": "RuntimeError: x"},
        },
        {"dtype": "bfloat16", "k": 1, "coop": _tune(0.03 * s), "triton": {"error": "x"}, "torch": _tune(0.12 * s)},
        {"dtype": "bfloat16", "k": 1024, "error": "MemoryError: out of memory"},
    ]
    moe = [
        {
            "tokens": 256,
            "coop": _tune(0.005 * s, None),
            "vllm": _tune(0.009 * s, None),
            "agree": True,
            "host_us": {"coop": 11.5, "vllm": 14.25},
        },
        {"tokens": 4096, "coop": _tune(0.01 * s, None), "vllm": {"error": "RuntimeError: nvcc not found"}},
        {"tokens": 16384, "error": "MemoryError: out of memory"},
    ]
    return {
        "matmul": matmul,
        "topk": topk,
        "moe": moe,
        "select": select,
        "softmax": softmax,
        "scan2d": scan2d,
        "state_update": state_update,
        "ssd": ssd,
        "bandwidth": bandwidth,
        "launches": launches,
        "blocks": blocks,
        "compiles": compiles,
        "linrec": linrec,
        "half": half,
        "rows2d": rows2d,
        "histogram": histogram,
        "segsort": segsort,
        "chained": chained,
        "mamba": mamba,
        "mamba_bwd": mamba_bwd,
        "gather": gather,
    }


def test_registry():
    assert NAMES == EXPECTED
    assert sorted(DOCUMENT_ORDER) == sorted(NAMES)
    assert [section.name for section in SECTIONS] == list(NAMES)
    assert len({section.key for section in SECTIONS}) == len(SECTIONS)
    for name in NAMES:
        module = importlib.import_module(f"benchmarks.sections.{name}")
        section = module.SECTION
        assert isinstance(section, Section) and section.name == name and by_name(name) is section
        assert callable(section.run) and list(inspect.signature(section.run).parameters) == ["sizes", "arch"]
        assert callable(section.lines)
        assert set(section.needs) <= set(NEEDS)


def test_unknown_need_is_rejected():
    with pytest.raises(ValueError, match="unknown needs"):
        Section("x", key="x", needs=("gpu",), run=lambda sizes, arch: [], lines=lambda r: [], guarded=True)


def test_guarded_section_keeps_its_failure():
    def run(sizes, arch):
        raise ImportError("no torch")

    section = Section("x", key="x", needs=(), run=run, lines=lambda r: [], guarded=True)
    assert section.measure([24], "sm_90") == [{"error": "ImportError: no torch"}]
    with pytest.raises(ImportError):
        Section("y", key="y", needs=(), run=run, lines=lambda r: [], guarded=False).measure([24], "sm_90")


def test_render_every_section():
    text = report.render("Test GPU", fake_results())
    titles = [line for line in text.splitlines() if line.startswith("## ")]
    assert len(titles) == len(NAMES)
    assert "failed: MemoryError: out of memory" in text and "failed: TypeError: x \\| y" in text
    # a section that failed before measuring anything
    assert "failed: ImportError" in report.render("Test GPU", {"chained": [{"error": "ImportError: x"}]})
    assert "failed: ImportError" in report.render("Test GPU", {"scan2d": [{"error": "ImportError: x"}]})
    # issue 19's sections: ratios and shares from the fake times
    assert "| softmax | (4096, 1024) | float32 | 2796 | 2581 (auto threads) | **92.3%** |" in text
    # the launch section's two tables: by arity, then by launch path
    assert "| 4 | 4.80 | 6.50 | 57.00 | 4.50 | **0.74x** | 0.30 / 2.00 µs |" in text
    assert "| PyTorch 1-D, `kernel[1]` | C | 6.00 | 6.50 | **0.92x** |" in text
    assert "| **1.08x** |" in text  # coop / Triton of that row
    assert "| (4096, 256) | reverse | 1398 | failed: TileTypeError" in text
    assert "| 2^28 | 3068 | 2983 (TILE 8192) | **97.2%** | 2902 (TILE 8192 × 512 threads) | **94.6%** | 1.028 |" in text
    assert "| Mamba-1 | (64, 5120, 16) | bfloat16 | failed: NotImplementedError: not available | — | 0.175 |" in text
    # issue 21's matmul: TFLOP/s, the share of the peak, the ratio to cuBLAS, a failed row
    row = "| (4096, 4096, 4096) | bfloat16 | 989 | 687, 69% of peak (128x128x32, 256 threads) | 859, 87% of peak"
    assert row in text and "| **0.80x** | failed: ImportError: no triton | — | yes / yes / — |" in text
    assert "| (8192, 8192, 1024) | float32 (tf32) | failed: RuntimeError: z |" in text
    assert "skipped 128x256x32, 256 threads (LaunchError: x)" in text
    # issue 20's backward: both bars' ratios, the limit's share, peak memory, the training step
    row = "| (8, 1536, 2048, 16) | bfloat16 | 1.000 | 1.000 (8 × 128) | 1.200 | **1.20x** | 1.500 | 1.800 | **1.20x** |"
    assert row + " 0.600 | **60%** | 300 / 400 | yes / yes |" in text
    assert "| float32 | 20.000 | 22.000 | **1.10x** |" in text and "| bfloat16 | 15.000 | failed: E: f | — |" in text


def test_render_moe():
    text = report.render("Test GPU", {"moe": fake_results()["moe"]})
    assert "| 256 | 0.005 | 0.009 | **1.80x** | 11.5 / 14.2 | yes | yes / yes |" in text
    assert "| 4096 | 0.010 | failed: RuntimeError: nvcc not found | — | — | — | yes / — |" in text
    assert "| 16384 | failed: MemoryError: out of memory |" in text


def test_moe_same_routing():
    """The `moe` section's comparison with vLLM: any order within an expert's group, nothing else."""
    from benchmarks.sections.moe import same_routing

    sys.path.insert(0, str(ROOT / "tutorials"))
    sequential = importlib.import_module("15_moe_routing").sequential
    ids = np.random.default_rng(3).integers(0, 8, (40, 2)).astype(np.int32)
    want = sequential(ids, 4, 8)
    assert same_routing(want, want, 4)
    total, (sorted_ids, experts, padded) = int(want[2][0]), want
    group = np.flatnonzero(np.repeat(experts[: total // 4], 4) == experts[0])
    shuffled = sorted_ids.copy()
    shuffled[group] = shuffled[group][::-1]  # (the first expert's routes and padding reversed)
    assert not np.array_equal(shuffled, sorted_ids) and same_routing((shuffled, experts, padded), want, 4)
    moved = sorted_ids.copy()
    moved[[group[0], group[-1] + 1]] = moved[[group[-1] + 1, group[0]]]  # (a route swapped into the next group)
    assert not same_routing((moved, experts, padded), want, 4)
    beyond = experts.copy()
    beyond[total // 4 :] = 0  # (vLLM fills the blocks past the total with 0: not compared)
    assert same_routing((sorted_ids, beyond, padded), want, 4)
    assert not same_routing((sorted_ids, experts, padded + 4), want, 4)


def test_render_draws_a_figure_for_every_section_and_embeds_it(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    results = fake_results()
    text = report.render("Test GPU", results, tmp_path / "benchmarks")
    for section in SECTIONS:
        assert section.chart is not None, f"section {section.name} has no chart (benchmarks/charts.py: declare)"
        chart = section.chart(results[section.key])
        assert chart is not None and chart.x and chart.series, section.name
        assert any(v == v for values in chart.series.values() for v in values), section.name  # something drawn
        with Image.open(tmp_path / "benchmarks" / f"{section.name}.png") as png:
            assert png.format == "PNG" and png.size[0] > 400 and png.size[1] > 300
        assert f"![{section.name}](benchmarks/{section.name}.png)" in text
    lines = text.splitlines()
    heading = next(i for i, line in enumerate(lines) if line.startswith("## Load → inclusive scan"))
    assert lines[heading + 2] == "![bandwidth](benchmarks/bandwidth.png)"  # under its heading, above the table
    # failures are gaps: the chart's values are NaN where a row or an implementation failed
    chart = by_name("linrec").chart(results["linrec"])
    assert chart.x == ["2^26", "2^28", "2^30"] and list(chart.dashed) == ["copy"]
    coop = chart.series["coop_tiles"]
    assert coop[0] == pytest.approx(12 * (1 << 26) / 0.28 / 1e6) and coop[1] != coop[1] and coop[2] != coop[2]


def test_declared_chart_gaps_and_failures(tmp_path):
    """`charts.declare`: a failed row or implementation is a gap (NaN); results with nothing to draw, or not shaped
    as `rows` expects (a section that failed before measuring), have no chart."""
    pytest.importorskip("matplotlib")
    from benchmarks.charts import declare, rate, share

    chart = declare(
        "t",
        {"ours": rate("coop", "bytes"), "theirs": share("base")},
        x=lambda r: f"{r['case']} {r['dtype']}",
        dashed={"limit": lambda r: r.get("limit")},
        rows=lambda results: results["rows"],
    )
    rows = [
        {"case": "a", "dtype": "f32", "bytes": 4e6, "limit_ms": 1.0, "coop": {"ms": 2.0}, "base": {"error": "X"}},
        {"case": "b", "dtype": "f32", "error": "MemoryError"},
        {"case": "c", "dtype": "f32", "bytes": 8e6, "limit_ms": 1.0, "coop": {"ms": 4.0}, "base": {"ms": 4.0}},
    ]
    drawn = chart({"rows": rows})
    assert drawn.x == ["a f32", "b f32", "c f32"] and drawn.plot == "bars"  # the failed row: an empty group
    ours, theirs = drawn.series["ours"], drawn.series["theirs"]
    assert ours[0] == ours[2] == 2.0 and theirs[2] == 0.25 and ours[1] != ours[1] and theirs[0] != theirs[0]  # NaN
    assert drawn.dashed == {}  # a limit with no value anywhere is left out
    drawn.draw(tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    assert chart({"rows": [{"error": "ImportError: x"}]}) is None
    assert chart([{"error": "ImportError: x"}]) is None  # a guarded section's failure, not shaped as `rows` expects
    with pytest.raises(ValueError, match="plot must be"):
        declare("t", {}, plot="pie")


def test_render_without_matplotlib_writes_the_tables_only(tmp_path, monkeypatch, capsys):
    import builtins

    real = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)
    text = report.render("Test GPU", fake_results(), tmp_path / "benchmarks")
    assert "![" not in text and not (tmp_path / "benchmarks").exists()
    assert "matplotlib is not installed" in capsys.readouterr().out


def test_compare_two_runs(tmp_path):
    old, new = fake_results(1.0), fake_results(1.1)
    new["half"][1]["sum"] = _tune(0.05)  # measured now, failed before
    text = "\n".join(
        compare.compare_lines(
            {k: [v] for k, v in old.items()},
            {k: [v] for k, v in new.items()},
            tuple(by_name(name).key for name in DOCUMENT_ORDER),
            {section.key: section.name for section in SECTIONS},
        )
    )
    assert "| bandwidth | 16 | **1.100** | 1.100 | 1.100 |  |" in text
    assert "| half | 5 | **1.100** | 1.100 | 1.100 | 1 |" in text  # bfloat16's sum only measured now
    assert "| [2^26 float16] sum ms | 0.056 | 0.0616 | **1.100** |" in text
    assert "| [2^26 bfloat16] sum ms | — | 0.05 | — |" in text
    assert "| [2^26] coop ms | 0.28 | 0.308 | **1.100** |" in text  # linrec's row
    assert "| [1 arrays] coop_us | 4.8 | 5.28 | **1.100** |" in text
    assert "| [sum 2^26 int32] fixed 512 (ms) | 0.099 | 0.1089 | **1.100** |" in text
    assert "| cold stages nvrtc (s) | 0.9 | 0.99 | **1.100** |" in text
    assert "- baseline [2^26 bfloat16] sum: failed: TypeError: x \\| y" in text
    # the command line, from two --save files
    for name, results in (("old.pkl", old), ("new.pkl", new)):
        (tmp_path / name).write_bytes(pickle.dumps({"device": "Test GPU", "results": results}))
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--compare", "old.pkl", "new.pkl"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "| mamba |" in done.stdout and "new.pkl / old.pkl" in done.stdout


def test_command_line():
    run = [sys.executable, str(ROOT / "benchmarks" / "run.py")]
    listed = subprocess.run([*run, "--list"], capture_output=True, text=True, check=True).stdout
    assert [line.split()[0] for line in listed.splitlines()[: len(NAMES)]] == list(NAMES)
    bad = subprocess.run([*run, "--only", "bandwith"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown section bandwith" in bad.stderr


@pytest.mark.parametrize(
    "name",
    [
        "compare",
        "cub",
        "device",
        "kernels",
        "report",
        "timing",
        "compile_profile",
        "sum_probe",
        "reverse_probe",
        "chained_probe",
        "state_update_probe",
        "_mamba_cuda",
        "_mamba_triton",
    ],
)
def test_module_imports(name):
    """Every benchmarks module imports without a GPU (_baselines.py needs PyTorch and Triton, which run.py imports
    only inside the measurements that use them)."""
    importlib.import_module(f"benchmarks.{name}")


def test_mamba_triton_loads_without_the_package_init(tmp_path):
    """benchmarks/_mamba_triton.py copies Mamba's Triton module and what it imports from a checkout, and imports the
    copy without `mamba_ssm/__init__.py` (here a stand-in checkout whose __init__ fails, as Mamba's does without its
    compiled extension), in a fresh process."""
    package = tmp_path / "mamba" / "mamba_ssm" / "ops" / "triton"
    package.mkdir(parents=True)
    (tmp_path / "mamba" / "mamba_ssm" / "__init__.py").write_text("raise ImportError('the compiled extension')\n")
    (package / "softplus.py").write_text("def softplus(x):\n    return x + 1\n")
    (package / "selective_state_update.py").write_text(
        "from mamba_ssm.ops.triton.softplus import softplus\n\n\n"
        "def selective_state_update(x):\n    return softplus(x)\n"
    )
    script = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from benchmarks import _mamba_triton
from pathlib import Path
_mamba_triton.ROOT_DIR = Path({str(tmp_path / "copy")!r})
_mamba_triton.prepare({str(tmp_path / "mamba")!r})
module = _mamba_triton.load()
assert module.selective_state_update(1) == 2, module
assert _mamba_triton.load() is module
print("loaded", module.__file__)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"loaded {tmp_path / 'copy'}" in done.stdout


def test_softmax_section_launches_every_kind_of_config(monkeypatch):
    """The softmax section's launches of tutorial 09's programs, one config of each kind (one row per program, a
    block of rows, chunks), run in the interpreter on a small problem, against NumPy; its configs' names are unique."""
    from benchmarks.kernels import tutorial
    from benchmarks.sections import softmax as section

    monkeypatch.setenv("COOP_TILES_INTERPRET", "1")
    ops = tutorial("09_softmax_layernorm")
    rows, cols = 5, 40
    rng = np.random.default_rng(9)
    x, w, b = rng.standard_normal((rows, cols)), rng.standard_normal(cols), rng.standard_normal(cols)
    x, w, b = x.astype(np.float32), w.astype(np.float32), b.astype(np.float32)
    softmax = ops.softmax_reference(x)
    norm, mu, rs = ops.layer_norm_reference(x, w, b, section.EPS)
    for config in (None, (section.ROWS, 2, 64), (section.CHUNKS, 16, 32)):
        chunked = config is not None and config[0] == section.CHUNKS  # (the layer norm only)
        for kernel in ("layer_norm",) if chunked else ("softmax", "layer_norm"):
            y, mean, rstd = np.zeros_like(x), np.zeros(rows, np.float32), np.zeros(rows, np.float32)
            args = (x, y) if kernel == "softmax" else (x, y, w, b, mean, rstd)
            section._coop_launch(ops, kernel, config, args, rows, cols)()
            expected = softmax if kernel == "softmax" else norm
            np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5, err_msg=f"{kernel} {config}")
            if kernel == "layer_norm":
                np.testing.assert_allclose(mean, mu, rtol=1e-4, atol=1e-6)
                np.testing.assert_allclose(rstd, rs, rtol=1e-4)
    for kernel in section.SOFTMAX_KERNELS:
        for n in section.SOFTMAX_COLS:
            names = [section._threads_name(c) for c in section.coop_configs(kernel, n)]
            assert len(set(names)) == len(names)
