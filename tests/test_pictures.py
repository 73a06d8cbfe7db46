"""Pictures (issue 23): `ct.testing.perf_report` with and without matplotlib, the plan's drawing to
PNG and from the command line. The drawing of every test program's plan is checked where those
plans are made (tests/test_compile.py, test_2d.py and test_carve_property.py: drawing_checker.py)."""

import builtins
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.__main__ import main

BENCH = ct.testing.Benchmark(
    x_names=["n"],
    x_vals=[2**10, 2**12, 2**14],
    line_arg="provider",
    line_vals=["fast", "slow"],
    line_names=["Fast", "Slow"],
    plot_name="sweep",
    ylabel="GB/s",
    x_log=True,
    styles=[("tab:blue", "-"), ("tab:red", "--")],
    args={"scale": 2.0},
)


@ct.testing.perf_report(BENCH)
def sweep(n, provider, scale):
    """Stands for a timing: a number, or (value, low, high)."""
    value = scale * n / (1 if provider == "fast" else 4)
    return value if provider == "fast" else (value, 0.9 * value, 1.1 * value)


def without_matplotlib(monkeypatch):
    real = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)


def test_perf_report_sweeps_and_prints_the_table(capsys):
    assert sweep(4, "fast", 1.0) == 4.0  # still callable as itself
    (table,) = sweep.run(print_data=True)
    out = capsys.readouterr().out
    assert out.splitlines()[:2] == ["sweep:", "    n   Fast  Slow"]
    assert "16384  32768  8192" in out
    assert table.series()["Slow"][0] == (512.0, 512.0 * 0.9, 512.0 * 1.1)


def test_perf_report_without_matplotlib_prints_a_note_and_the_table(monkeypatch, capsys, tmp_path):
    without_matplotlib(monkeypatch)
    sweep.run(save_path=tmp_path)
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("matplotlib is not installed (pip install coop-tiles[plot])")
    assert "sweep:" in out and "16384  32768  8192" in out
    assert (tmp_path / "sweep.csv").read_text().splitlines()[:2] == ["n,Fast,Slow", "1024,2048,512"]
    assert not (tmp_path / "sweep.png").exists()


def test_perf_report_draws_with_matplotlib(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    sweep.run(save_path=tmp_path)
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "not installed" not in capsys.readouterr().out


@ct.jit
def sort_then_scan(x, y, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    s = tile.scan(tile.sort(t))
    tile.store(y, base, s, valid=n - base)


def test_plan_draws_png_through_matplotlib_and_says_what_is_missing(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    x = np.zeros(1, np.float32)
    plan = sort_then_scan.compile(x, x, 1, TILE=2048, arch="sm_90").plan
    assert plan.draw(tmp_path / "plan.png").read_bytes()[:4] == b"\x89PNG"
    without_matplotlib(monkeypatch)
    with pytest.raises(ImportError, match=r"needs matplotlib \(pip install coop-tiles\[plot\]\); a .svg name"):
        plan.draw(tmp_path / "plan2.png")
    assert plan.draw(tmp_path / "plan2.svg").exists()  # SVG needs nothing


def test_plan_command_prints_and_draws(tmp_path, capsys):
    source = tmp_path / "kernels.py"
    source.write_text(
        "import coop_tiles as ct\nfrom coop_tiles import tile\n\n"
        "@ct.jit\ndef k(x, y, n, TILE: ct.constexpr):\n"
        "    t = tile.load(x, 0, TILE, valid=n, other=0)\n"
        "    tile.store(y, 0, tile.sort(t), valid=n)\n\n"
        "if __name__ == '__main__':\n    raise SystemExit('the script part must not run')\n"
    )
    out = tmp_path / "plan.svg"
    assert main(["plan", f"{source}:k", "float32[]", "float32[]", "int32", "TILE=1024", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("plan for k: ") and f"drawn to {out}" in printed
    assert "BlockRadixSort" in out.read_text() and ET.parse(out).getroot().get("width")
    assert main(["plan", f"{source}:nope", "int32"]) == 2
    assert main(["plan", f"{source}:k", "float31[]"]) == 2
    assert "float31" in capsys.readouterr().err


def test_plan_command_imports_a_package_module_by_its_name(tmp_path, capsys):
    """A kernel in a package's module with relative imports (as coop_tiles.examples') is planned: the file is
    imported by its dotted name, not as a lone file (where `from . import` fails)."""
    package = tmp_path / "mykernels"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "sizes.py").write_text("TILE = 512\n")
    (package / "scan.py").write_text(
        "import coop_tiles as ct\nfrom coop_tiles import tile\n\nfrom .sizes import TILE\n\n"
        "@ct.jit\ndef k(x, y, n):\n"
        "    tile.store(y, 0, tile.scan(tile.load(x, 0, TILE, valid=n, other=0)), valid=n)\n"
    )
    assert main(["plan", f"{package / 'scan.py'}:k", "float32[]", "float32[]", "int32"]) == 0
    assert capsys.readouterr().out.startswith("plan for k: ")
