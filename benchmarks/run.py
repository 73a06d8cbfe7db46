"""coop_tiles benchmarks on the GPU; writes docs/benchmarks.md (never edit that file by hand).

Every figure is a median over repetitions after warm-up, timed with `ct.testing.do_bench` (kernels: CUDA events,
the L2 cache flushed before each repetition) or perf_counter over thousands of launches (host overhead), against a
baseline timed in the same run: the device copy bandwidth, CuPy, a plain Numba kernel, a CuPy RawKernel, Triton
(benchmarks/_baselines.py, benchmarks/_baselines_rows.py), torch.cumsum, torch.bincount, torch.sort, torch.softmax
and layer_norm, Mamba's Triton selective_state_update, and CUB (benchmarks/cub_baselines.cu,
built with nvcc at run time into the git-ignored benchmarks/.build/ and loaded with ctypes).

    python benchmarks/run.py [--out docs/benchmarks.md] [--quick] [--only linrec,half]
    python benchmarks/run.py --only bandwidth,launch --save a.pkl; python benchmarks/run.py --only mamba --merge a.pkl
    python benchmarks/run.py --list
    python benchmarks/run.py --baseline-tree .baseline --only bandwidth,half [--quick] [--out compare.md]
    python benchmarks/run.py --compare old.pkl new.pkl

Sections: bandwidth, launch, compile, blocks (issues 2 and 3), linrec, half, rows2d (issue 7), histogram, segsort
(issue 8), chained (issue 11), mamba (issue 9: against Mamba's own CUDA kernel, built by benchmarks/_mamba_cuda.py
from a Mamba checkout), mamba_bwd (issue 20: the backward, forward + backward, peak memory and a training step
against Mamba's CUDA backward, built by the same script), softmax, scan2d and state_update (issue 19: row softmax
and layer norm against Triton's tutorial kernels in benchmarks/_baselines_rows.py and PyTorch; scans along axis 1
and the reverse chained scan; Mamba's decode step against its own Triton kernel, copied from a Mamba checkout by
benchmarks/_mamba_triton.py). Each section from issue 7 on records its own failures as rows of the table rather than
stopping the run. Each is a module of benchmarks/sections/ (`--list` shows what each needs); this file is the
command line only.

`--baseline-tree DIR` compares with another checkout (scripts/bench-compare.sh prepares one in `.baseline/`): for
each section, DIR's own benchmarks/run.py and then this tree's run in fresh processes, one after the other, and the
times of both are set side by side with their ratios (benchmarks/compare.py).
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this tree's coop_tiles and benchmarks package, however run.py is started

from benchmarks import compare, report  # noqa: E402
from benchmarks.section import NEEDS  # noqa: E402
from benchmarks.sections import DOCUMENT_ORDER, NAMES, SECTIONS, by_name  # noqa: E402


def measure(only: tuple[str, ...], sizes: list[int], arch: str) -> dict[str, Any]:
    """The results of the sections in `only`, keyed by `Section.key` (as report.render takes them), measured in
    NAMES' order."""
    return {section.key: section.measure(sizes, arch) for section in SECTIONS if section.name in only}


def _section_names(text: str) -> tuple[str, ...]:
    """--only's comma list, checked against the sections' names."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown section {', '.join(unknown) or '(none)'}: use {', '.join(NAMES)}")
    return names


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        default=None,
        help="the markdown file to write (default docs/benchmarks.md; with --only, none: the markdown is printed "
        "and docs/benchmarks.md is left alone)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="only 2^24 elements (a smoke run: histograms capped at 2^24; rows2d and segsort keep their sizes)",
    )
    parser.add_argument(
        "--only", type=_section_names, default=None, help=f"comma list of sections to run, of {', '.join(NAMES)}"
    )
    parser.add_argument(
        "--save", default=None, help="also keep the measured results in this file (pickle), for --merge"
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        action="extend",
        default=[],
        help="results saved by earlier --save runs on the same device, rendered together with this run's "
        "(one document from a run split over several commands)",
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="measure nothing: render the --merge files alone (later files win a section measured twice); no GPU",
    )
    parser.add_argument("--list", action="store_true", help="list the sections and what each needs, and exit")
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        default=None,
        metavar="DIR",
        help="another checkout (e.g. .baseline/, see scripts/bench-compare.sh): run its benchmarks and this tree's "
        "section by section in fresh processes, and print both side by side with ratios (--out: the comparison's "
        "markdown, with both trees' pages and results beside it)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --baseline-tree: measure each section this many times per tree, alternating which tree goes "
        "first, and compare the medians (default 1)",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        default=None,
        metavar=("OLD", "NEW"),
        help="print two --save files side by side with ratios, and exit (no GPU needed)",
    )
    return parser.parse_args()


def _list_sections() -> str:
    lines = []
    for section in SECTIONS:
        needs = ", ".join(section.needs) or "coop_tiles only"
        lines.append(f"{section.name:12} results '{section.key}'; needs {needs}")
    lines += ["", *(f"{need}: {what}" for need, what in NEEDS.items())]
    return "\n".join(lines)


def _saved_on(path: str) -> str:
    """When a saved results file was written (its modification time, UTC)."""
    import datetime

    stamp = datetime.datetime.fromtimestamp(Path(path).stat().st_mtime, datetime.timezone.utc)
    return stamp.strftime("%Y-%m-%d %H:%M UTC")


def _load(path: Path) -> dict[str, Any]:
    return pickle.loads(Path(path).read_bytes())


def _compare_text(baseline: dict[str, list[Any]], current: dict[str, list[Any]], titles: tuple[str, str]) -> str:
    order = tuple(by_name(name).key for name in DOCUMENT_ORDER)
    names = {section.key: section.name for section in SECTIONS}
    extra = tuple(key for key in {**baseline, **current} if key not in order)  # a section this tree does not have
    return "\n".join(compare.compare_lines(baseline, current, order + extra, names, titles))


def _run_tree(tree: Path, name: str, quick: bool, work: Path, tag: str, log: Any) -> tuple[dict[str, Any], float]:
    """One section of one tree's benchmarks/run.py in a fresh process (that tree's coop_tiles, its own compile cache):
    its saved results and the seconds it took."""
    saved, page = work / f"{tag}-{name}.pkl", work / f"{tag}-{name}.md"
    command = [sys.executable, str(tree / "benchmarks" / "run.py"), "--only", name, "--save", str(saved)]
    command += ["--out", str(page)] + (["--quick"] if quick else [])
    cache = os.environ.get("COOP_TILES_CACHE_DIR") or str(Path.home() / ".cache" / "coop_tiles")
    path = os.pathsep.join([str(tree), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])
    tree_cache = f"{cache}-{tag.rstrip('0123456789')}"  # one per tree, kept across rounds
    env = dict(os.environ, COOP_TILES_CACHE_DIR=tree_cache, PYTHONPATH=path)
    start = time.perf_counter()
    print(f"[{tag}] {name} ...", file=sys.stderr, flush=True)
    done = subprocess.run(command, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    print(f"[{tag}] {name}: {seconds:.1f} s, exit {done.returncode}", file=sys.stderr, flush=True)
    if done.returncode != 0 or not saved.exists():  # the section's failure, in its place in the comparison
        failed = {"error": f"{tree.name}/benchmarks/run.py --only {name}: exit {done.returncode} (see {log.name})"}
        return {"device": None, "results": {by_name(name).key: failed}}, seconds
    return _load(saved), seconds


def _baseline_comparison(args: argparse.Namespace) -> None:
    """--baseline-tree: section by section, both trees in fresh processes (alternating which goes first when there
    are several rounds); after each section the comparison so far is written, so a run cut short keeps what it
    measured."""
    tree = args.baseline_tree.resolve()
    if not (tree / "benchmarks" / "run.py").is_file():
        raise SystemExit(f"{tree} has no benchmarks/run.py: not a coop_tiles checkout")
    out = Path(args.out) if args.out else Path(os.environ.get("OUT") or "bench-compare") / "compare.md"
    work = out.parent / (out.stem + "-runs")
    work.mkdir(parents=True, exist_ok=True)
    trees = {"baseline": tree, "current": ROOT}
    runs: dict[str, dict[str, list[Any]]] = {"baseline": {}, "current": {}}
    first: dict[str, dict[str, Any]] = {"baseline": {}, "current": {}}
    devices: set[str] = set()
    seconds: list[str] = []
    with open(work / "runs.log", "w") as log:
        for name in args.only or NAMES:
            for round_ in range(args.rounds):
                order = ("baseline", "current") if round_ % 2 == 0 else ("current", "baseline")
                for tag in order:
                    log.write(f"\n===== {tag} {name} round {round_ + 1}\n")
                    log.flush()
                    saved, took = _run_tree(trees[tag], name, args.quick, work, f"{tag}{round_ + 1}", log)
                    seconds.append(f"{tag} {name} round {round_ + 1}: {took:.1f} s")
                    if saved.get("device"):
                        devices.add(saved["device"])
                    for key, results in saved["results"].items():
                        runs[tag].setdefault(key, []).append(results)
                        if saved.get("device"):  # measured (not a process that failed): for the tree's page
                            first[tag].setdefault(key, results)
            text = _compare_text(runs["baseline"], runs["current"], ("baseline", "current"))
            device = ", ".join(sorted(devices)) or "no device"
            text += f"\nDevice: {device}; baseline tree {tree}; wall time per run: " + "; ".join(seconds) + ".\n"
            out.write_text(text)
            for tag in trees:
                Path(work / f"{tag}.pkl").write_bytes(pickle.dumps({"device": device, "results": first[tag]}))
                try:  # this tree's page from the other tree's results: the same format, unless they changed shape
                    page = report.render(device, first[tag])
                except Exception as error:
                    page = f"not rendered: {type(error).__name__}: {error} (see {tag}*.md, each run's own page)"
                (work / f"{tag}.md").write_text(page)
    if len(devices) > 1:
        print(f"warning: the runs were measured on different devices ({', '.join(sorted(devices))})", file=sys.stderr)
    print(text)


def main() -> None:
    args = _parse_args()
    if args.list:
        print(_list_sections())
        return
    if args.compare:
        old, new = (_load(path) for path in args.compare)
        if old["device"] != new["device"]:
            print(f"warning: measured on {old['device']} and on {new['device']}", file=sys.stderr)
        baseline = {key: [results] for key, results in old["results"].items()}
        current = {key: [results] for key, results in new["results"].items()}
        text = _compare_text(baseline, current, (args.compare[0].name, args.compare[1].name))
        if args.out:
            Path(args.out).write_text(text)
        print(text)
        return
    if args.baseline_tree:
        _baseline_comparison(args)
        return
    if args.render_only:
        device, results = _load(args.merge[0])["device"], {}
    else:
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(0)
        device = props["name"].decode()
        arch = f"sm_{props['major']}{props['minor']}"
        results = measure(args.only or NAMES, [24] if args.quick else [26, 28], arch)
    if args.save:
        Path(args.save).write_bytes(pickle.dumps({"device": device, "results": results}))
    provenance = (
        [f"This page merges {len(args.merge) + (not args.render_only)} commands on this device:"] if args.merge else []
    )
    if args.merge and not args.render_only:
        provenance.append(f"- this command: {', '.join(results)}")
    for path in args.merge:
        saved = pickle.loads(Path(path).read_bytes())
        provenance.append(f"- {Path(path).name} (saved {_saved_on(path)}): {', '.join(saved['results'])}")
        if saved["device"] != device:
            raise SystemExit(f"{path} was measured on {saved['device']}, not {device}: ratios come from one device")
        results = {**saved["results"], **results} if not args.render_only else {**results, **saved["results"]}
    out = args.out or (None if args.only else str(ROOT / "docs" / "benchmarks.md"))
    # the figures beside the page: docs/benchmarks.md -> docs/benchmarks/<section>.png
    text = report.render(device, results, Path(out).with_suffix("") if out else None, provenance)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
