"""What a benchmark section is: its name on the command line, the key of its results, what it needs beyond coop_tiles,
how it measures and how its results are written into docs/benchmarks.md. Each module of benchmarks/sections/ declares
one, as `SECTION`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: what a section may need beyond coop_tiles and NumPy, and what that means on the GPU machine (docs/gpu.md)
NEEDS = {
    "cupy": "CuPy (arrays, copies and reductions timed as baselines)",
    "numba": "numba-cuda (a plain Numba kernel, as a baseline)",
    "torch": "PyTorch (bfloat16 data, torch.cumsum / bincount / sort as baselines)",
    "triton": "Triton (the baselines of benchmarks/_baselines.py and benchmarks/_baselines_rows.py)",
    "cub": "nvcc and the CUB headers (benchmarks/cub_baselines.cu, built at run time into benchmarks/.build/)",
    "mamba": "Mamba's CUDA sources in benchmarks/.mamba/ and ninja (benchmarks/_mamba_cuda.py)",
    "vllm": "vLLM's moe_align_block_size in benchmarks/.vllm/, nvcc and ninja (benchmarks/_vllm_moe.py)",
    "mamba_triton": "Mamba's Triton selective_state_update and ssd_combined in benchmarks/.mamba/triton/ and einops "
    "(benchmarks/_mamba_triton.py)",
}


@dataclass(frozen=True)
class Section:
    """One section of docs/benchmarks.md.

    `run(sizes, arch)` measures (sizes: the run's log2 element counts; arch: the device's `sm_XY`) and returns the
    results that `lines(results)` renders and `--save` keeps under `key`. A `guarded` section records a failure as a
    row of its table (its run goes on); the others stop the run. `chart(results)` is the figure drawn above its table:
    every section with numbers has one, declared in a few lines with `benchmarks.charts.declare` (its module docstring
    shows how)."""

    name: str
    key: str
    needs: tuple[str, ...]
    run: Callable[[list[int], str], Any]
    lines: Callable[[Any], list[str]]
    guarded: bool
    chart: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        unknown = [need for need in self.needs if need not in NEEDS]
        if unknown:
            raise ValueError(f"section {self.name!r}: unknown needs {unknown} (known: {', '.join(NEEDS)})")

    def measure(self, sizes: list[int], arch: str) -> Any:
        """run(sizes, arch); for a guarded section, a single row holding the failure when it cannot even start."""
        if not self.guarded:
            return self.run(sizes, arch)
        from benchmarks.timing import section_rows

        return section_rows(self.run, sizes, arch)
