"""Where a compile's time goes (issue 11), measured in fresh processes with their own cache directory.

    python benchmarks/compile_profile.py [--arch sm_90] [--runs 3] [--root DIR] [--json]

Each measurement is a new Python process given an empty (or, for the warm start, a populated)
`COOP_TILES_CACHE_DIR`, compiling the load -> scan -> store program (`benchmarks.kernels.tile_cumsum`):

- cold: `import coop_tiles`, then the compile by stage (`CompiledKernel.timings`: front end, NVRTC
  with Numba's one-time setup in a thread beside it, plan, Numba, nvJitLink) and, with a GPU,
  loading the cubin;
- warm: a new process on the cold run's cache: the import, the compile (every compiler skipped),
  loading, and the two together (the warm start);
- in one process: three compiles of new specialisations (the second creates NVRTC's in-process
  precompiled header, the third uses it);
- autotuning 8 configs (4 tile sizes x 2 block sizes) with the timer replaced, so the figure is the
  tuning's compile work, the same on a machine without a GPU.

Without a GPU, `--arch` (default sm_90) is the target. `--root` measures another checkout of
coop_tiles (stage times need `CompiledKernel.timings`). `render_lines` gives the markdown that
`run.py` writes into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent

#: the child process: measures one mode and prints a JSON line.
CHILD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import coop_tiles as ct
t1 = time.perf_counter()
sys.path[:0] = [{repo!r}]  # this tree's benchmarks (coop_tiles was imported from root, the cwd)
from benchmarks.kernels import tile_cumsum
mode, arch, gpu = {mode!r}, {arch!r}, {gpu!r}
x = np.zeros(1, np.float32)
out = {{"import_s": t1 - t0}}


def compile_timed(tile, kernel=tile_cumsum):
    start = time.perf_counter()
    k = kernel.compile(x, x, 1, TILE=tile, arch=arch)
    return k, time.perf_counter() - start


if mode in ("cold", "warm"):
    k, out["compile_s"] = compile_timed(4096)
    out["timings"] = getattr(k, "timings", {{}})
    if gpu:
        from coop_tiles.runtime import launcher
        start = time.perf_counter()
        launcher.load(k, launcher.current_device().device_id)
        out["load_s"] = time.perf_counter() - start
elif mode == "process":
    out["compiles_s"] = [compile_timed(tile)[1] for tile in (4096, 2048, 1024)]
else:
    configs = [ct.Config(block_threads=b, TILE=t) for t in (512, 1024, 2048, 4096) for b in (128, 256)]
    tuner = ct.autotune(configs=configs, key=["n"])(tile_cumsum)
    tuner.timer = lambda launch, stream, config: 1.0 / config.kwargs["TILE"]
    start = time.perf_counter()
    tuner.best_config(1, None, (x, x, 1), {{}}, device="benchmark", arch=arch)
    out["autotune_s"] = time.perf_counter() - start
print(json.dumps(out))
"""


def gpu_arch() -> str | None:
    """The arch of GPU 0, or None without a GPU (asked in a child, so this process stays bare)."""
    code = (
        "from coop_tiles.runtime import launcher\n"
        "print(launcher.device_arch(launcher.current_device().device_id) if launcher.gpu_available() else '')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    return out.stdout.strip() or None


def _child(mode: str, arch: str, gpu: bool, cache: str, root: Path) -> dict[str, Any]:
    code = CHILD.format(repo=str(ROOT), mode=mode, arch=arch, gpu=gpu)
    env = dict(os.environ, COOP_TILES_CACHE_DIR=cache)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root)
    if done.returncode != 0:
        raise RuntimeError(f"the {mode} measurement failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(arch: str | None = None, runs: int = 3, root: Path = ROOT) -> dict[str, Any]:
    """Medians over `runs` fresh processes of every measurement (see the module docstring)."""
    found = gpu_arch()
    gpu = found is not None
    arch = found or arch or "sm_90"
    cold, warm, process, tune = [], [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="coop_tiles_compile_") as cache:
            cold.append(_child("cold", arch, gpu, cache, root))
            warm.append(_child("warm", arch, gpu, cache, root))
        with tempfile.TemporaryDirectory(prefix="coop_tiles_compile_") as cache:
            process.append(_child("process", arch, gpu, cache, root))
        with tempfile.TemporaryDirectory(prefix="coop_tiles_compile_") as cache:
            tune.append(_child("autotune", arch, gpu, cache, root))

    def median(rows: list[dict], key: str) -> float | None:
        values = [r[key] for r in rows if key in r]
        return statistics.median(values) if values else None

    stages = sorted({s for r in cold for s in r["timings"]}, key=lambda s: list(cold[0]["timings"]).index(s))
    return {
        "arch": arch,
        "gpu": gpu,
        "cpus": os.cpu_count(),
        "runs": runs,
        "cold": {
            "import_s": median(cold, "import_s"),
            "compile_s": median(cold, "compile_s"),
            "load_s": median(cold, "load_s"),
            "stages": {s: statistics.median(r["timings"].get(s, 0.0) for r in cold) for s in stages},
        },
        "warm": {
            **{k: median(warm, k) for k in ("import_s", "compile_s", "load_s")},
            "start_s": statistics.median(r["import_s"] + r["compile_s"] + r.get("load_s", 0.0) for r in warm),
        },
        "process_s": [statistics.median(r["compiles_s"][i] for r in process) for i in range(3)],
        "autotune_s": median(tune, "autotune_s"),
    }


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e3:.0f} ms"


def render_lines(result: dict[str, Any]) -> list[str]:
    """The markdown section for docs/benchmarks.md."""
    cold, warm = result["cold"], result["warm"]
    stages = {name: t for name, t in cold["stages"].items() if name != "total"}
    load = " + load" if result["gpu"] else ""
    return [
        "",
        f"## Compile time (load → scan → store, {result['arch']}, fresh processes, {result['cpus']} CPU cores, "
        f"median of {result['runs']})",
        "",
        "| | time | bar (issue 11) |",
        "|---|---|---|",
        f"| cold compile (empty cache) | **{_s(cold['compile_s'])}** | ≤ 1.5 s on the GPU machine |",
        f"| warm compile (populated cache, new process) | **{_ms(warm['compile_s'])}** | ≤ 60 ms |",
        f"| warm start: `import coop_tiles` + compile{load} | {_ms(warm['start_s'])} | |",
        f"| `import coop_tiles` | {_ms(warm['import_s'])} | |",
        f"| loading the cubin | {_ms(cold['load_s']) if result['gpu'] else 'no GPU'} | |",
        f"| 2nd compile in a process (creates NVRTC's in-process PCH) | {_s(result['process_s'][1])} | |",
        f"| 3rd compile in a process (uses it) | {_s(result['process_s'][2])} | |",
        f"| autotuning 8 configs (compile work, timer replaced), fresh process | {_s(result['autotune_s'])} | |",
        "",
        "The cold compile by stage (Numba's one-time setup runs in a thread beside NVRTC, whose time includes "
        "importing cuda.core):",
        "",
        "| " + " | ".join(stages) + " | total |",
        "|" + "---|" * (len(stages) + 1),
        "| " + " | ".join(_ms(t) for t in stages.values()) + f" | {_ms(cold['stages'].get('total'))} |",
        "",
        f"Warm / cold: **{warm['compile_s'] / cold['compile_s']:.3f}** (bar, issue 2: under 0.2). NVRTC's "
        "precompiled headers cannot outlive a process (a PCH records the address of the PCH heap of the process "
        "that made it), so a cold compile in a new process parses CUB once; from the second compile in a process "
        "on, NVRTC makes and uses one (autotuning, new specialisations).",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default=None, help="target without a GPU (default sm_90)")
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per measurement (default 3)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the coop_tiles checkout to measure")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of markdown")
    args = parser.parse_args()
    result = measure(args.arch, args.runs, args.root.resolve())
    print(json.dumps(result, indent=1) if args.json else "\n".join(render_lines(result)))


if __name__ == "__main__":
    main()
