"""`python -m coop_tiles`: the demo, and commands to inspect the installation and the disk cache.

python -m coop_tiles                        run the demo (a tile program on the GPU, else in the interpreter)
python -m coop_tiles --version              coop_tiles, its toolchain, the launch paths and the device
python -m coop_tiles cache info             where the disk cache is, its cap, entries and bytes by kind
python -m coop_tiles cache list [--kind K]  every entry: kind, key, size, last use
python -m coop_tiles cache clear [--kind K] remove entries (all, or one kind)
python -m coop_tiles tune list              autotuning results: kernel, key, device, config, time
python -m coop_tiles tune clear [--kernel NAME]
python -m coop_tiles plan FILE.py:KERNEL TYPE... [NAME=VALUE...] [--arch sm_90] [--out plan.svg]
                                            a kernel's plan, printed and drawn, compiled without a GPU
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from coop_tiles.runtime.cache import KINDS, MAX_BYTES_ENV, DiskCache, Entry, format_bytes, max_bytes

AUTOTUNE = "autotune"


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.version:
        return show_version()
    if args.command in (None, "demo"):
        from coop_tiles import demo

        return demo.main()
    return args.run(args)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m coop_tiles",
        description="coop_tiles: block-level tile programs for CUDA, compiled to CUB. "
        "Without a command, runs a demo program (on the GPU if there is one).",
    )
    p.add_argument("--version", action="store_true", help="versions of coop_tiles and its toolchain, and the device")
    commands = p.add_subparsers(dest="command", title="commands")
    commands.add_parser("demo", help="run the demo (what no command does)")

    cache = commands.add_parser("cache", help="the disk cache of compiled artefacts and autotuning results")
    actions = cache.add_subparsers(dest="action", required=True, title="actions")
    actions.add_parser("info", help="location, size cap, entries and bytes by kind").set_defaults(run=cache_info)
    for name, run, text in (("list", cache_list, "list entries"), ("clear", cache_clear, "remove entries")):
        action = actions.add_parser(name, help=f"{text} (all, or of one kind)")
        action.add_argument("--kind", help=f"only this kind: {', '.join(KINDS)} (as `cache info` shows them)")
        action.set_defaults(run=run)

    tune = commands.add_parser("tune", help="autotuning results kept in the disk cache")
    actions = tune.add_subparsers(dest="action", required=True, title="actions")
    actions.add_parser("list", help="every timing: kernel, key, device, config, time").set_defaults(run=tune_list)
    clear = actions.add_parser("clear", help="remove autotuning results, so the next launch retunes")
    clear.add_argument("--kernel", help="only this kernel's results")
    clear.set_defaults(run=tune_clear)

    plan = commands.add_parser(
        "plan",
        help="print a kernel's plan and draw its shared memory (compiles for --arch; no GPU needed)",
        description="Compile FILE.py's KERNEL for the argument types given and print its plan; with --out, "
        "draw its shared memory (.svg needs nothing; .png needs matplotlib: pip install coop-tiles[plot]).",
    )
    plan.add_argument("target", metavar="FILE.py:KERNEL", help="the file and the @ct.jit kernel in it")
    plan.add_argument(
        "args",
        nargs="*",
        metavar="ARG",
        help="each runtime argument's type in order: an array as its dtype with one [] per dimension "
        "(float32[], int8[][]), a scalar as its dtype (int32, float32); then the constexprs as NAME=VALUE (TILE=4096)",
    )
    plan.add_argument("--arch", default="sm_90", help="the architecture to compile for (default sm_90)")
    plan.add_argument("--out", help="draw the shared memory to this file (.svg, .png, .pdf)")
    plan.set_defaults(run=plan_command)
    return p


# ----- --version ---------------------------------------------------------------------------------
def show_version() -> int:
    import coop_tiles
    from coop_tiles.runtime import fastpath, launcher, toolchain

    rows = [("coop_tiles", coop_tiles.__version__), ("imported from", str(Path(coop_tiles.__file__).parent))]
    for dist in ("numba-cuda", "numba", "cuda-core", "cuda-bindings", "cupy-cuda13x", "cupy-cuda12x", "torch"):
        try:
            rows.append((dist, metadata.version(dist)))
        except metadata.PackageNotFoundError:
            pass
    try:
        versions = toolchain.versions()
        rows += [("NVRTC", versions["nvrtc"]), ("nvJitLink", versions["nvjitlink"])]
        cccl = toolchain.include_dirs()[0]
        rows.append(("CUB (CCCL)", f"{cccl_version(Path(cccl))} in {cccl}"))
    except Exception as e:  # a broken toolchain is what this command is for finding
        rows.append(("toolchain", f"not usable: {e}"))
    if fastpath.C_LAUNCH_MISSING is None:
        rows.append(("C launch path", f"built: {fastpath.C_LAUNCH_FILE} (used for launches with CuPy arrays)"))
    else:
        rows.append(("C launch path", f"not built: {fastpath.C_LAUNCH_MISSING}; launches go through Python"))
    rows.append(
        ("programmatic launch", "on for sm_90 and later (COOP_TILES_PDL=0 turns it off)")
        if launcher.programmatic_enabled()
        else ("programmatic launch", "off (COOP_TILES_PDL=0)")
    )
    reason = launcher.no_gpu_reason()
    if reason is None:
        device = launcher.current_device()
        rows.append(("device", f"{device.name} ({launcher.device_arch(device.device_id)})"))
    else:
        rows.append(("device", f'no GPU ({reason}); compile with arch="sm_90", run with COOP_TILES_INTERPRET=1'))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0


def cccl_version(include_dir: Path) -> str:
    """CCCL's version (CUB is part of it) from its `CCCL_VERSION` macro, e.g. 3005000 -> "3.5.0"."""
    header = include_dir / "cuda" / "std" / "__cccl" / "version.h"
    try:
        match = re.search(r"#define CCCL_VERSION (\d+)", header.read_text())
    except OSError:
        match = None
    if match is None:
        return "unknown"
    v = int(match.group(1))
    return f"{v // 1000000}.{v // 1000 % 1000}.{v % 1000}"


# ----- cache -------------------------------------------------------------------------------------
def cache_info(args: argparse.Namespace) -> int:
    cache = DiskCache()
    entries = cache.entries()
    print(f"cache directory: {cache.root} (COOP_TILES_CACHE_DIR moves it)")
    print(f"size cap: {format_bytes(max_bytes())} ({MAX_BYTES_ENV}; least recently used entries go first)")
    print(f"total: {len(entries)} entries, {format_bytes(sum(e.size for e in entries))}")
    rows = []
    for kind in cache.kinds():
        of_kind = [e for e in entries if e.kind == kind]
        what = KINDS.get(kind, "left by another version of coop_tiles")
        rows.append((kind, str(len(of_kind)), format_bytes(sum(e.size for e in of_kind)), what))
    print(table(("kind", "entries", "size", "holds"), rows))
    return 0


def unknown_kind(cache: DiskCache, kind: str | None) -> bool:
    """Whether `--kind` names a kind `cache info` does not show (then said on stderr)."""
    if kind is None or kind in cache.kinds():
        return False
    kinds = ", ".join(cache.kinds())
    print(f"python -m coop_tiles cache: unknown kind {kind!r}; the kinds are {kinds}", file=sys.stderr)
    return True


def cache_list(args: argparse.Namespace) -> int:
    cache = DiskCache()
    if unknown_kind(cache, args.kind):
        return 2
    entries = sorted(cache.entries(args.kind), key=lambda e: -e.last_used)
    if not entries:
        print("no entries" + (f" of kind {args.kind!r}" if args.kind else ""))
        return 0
    now = time.time()
    rows = [(e.kind, e.key[:16], format_bytes(e.size), age(now - e.last_used)) for e in entries]
    print(table(("kind", "key", "size", "last used"), rows))
    return 0


def cache_clear(args: argparse.Namespace) -> int:
    cache = DiskCache()
    if unknown_kind(cache, args.kind):
        return 2
    count, freed = cache.remove(cache.entries(args.kind))
    what = f"{args.kind} entries" if args.kind else "entries"
    print(f"removed {count} {what} ({format_bytes(freed)}) from {cache.root}")
    return 0


# ----- tune --------------------------------------------------------------------------------------
def tuning_results(cache: DiskCache) -> list[tuple[Entry, dict]]:
    """Each autotuning entry with its value (entries too damaged to read are left out)."""
    found = [(e, cache.read(e)) for e in cache.entries(AUTOTUNE)]
    return [(e, value) for e, value in found if isinstance(value, dict)]


def tune_list(args: argparse.Namespace) -> int:
    results = tuning_results(DiskCache())
    if not results:
        print("no autotuning results")
        return 0
    now = time.time()
    rows = []
    for e, v in results:
        key = ", ".join(f"{k}={val!r}" for k, val in v.get("key", {}).items())
        device = f"{v['device']} ({v['arch']})" if "device" in v else "?"
        ms = v.get("ms")
        result = f"{ms:.4f} ms" if ms is not None else f"skipped: {v.get('reason')}"
        order = (v.get("kernel", "?"), key, device, ms if ms is not None else float("inf"))
        rows.append((order, (*order[:3], v.get("config", "?"), result, age(now - e.last_used))))
    rows = [row for _, row in sorted(rows)]  # fastest first within a kernel, key and device
    print(table(("kernel", "key", "device", "config", "time", "last used"), rows))
    if any(row[0] == "?" for row in rows):
        print("(? : tuned by a coop_tiles version that did not record it)")
    return 0


def tune_clear(args: argparse.Namespace) -> int:
    cache = DiskCache()
    if args.kernel is None:
        chosen = cache.entries(AUTOTUNE)  # unreadable ones too
    else:
        chosen = [e for e, v in tuning_results(cache) if v.get("kernel") == args.kernel]
    count, _ = cache.remove(chosen)
    print(f"removed {count} autotuning results" + (f" of {args.kernel}" if args.kernel else ""))
    return 0


# ----- plan --------------------------------------------------------------------------------------
def plan_command(args: argparse.Namespace) -> int:
    from coop_tiles import inspect_plan
    from coop_tiles.errors import TileError

    try:
        kernel = inspect_plan.load_kernel(args.target)
        runtime, constexprs = inspect_plan.parse_args(args.args)
    except ValueError as e:
        print(f"python -m coop_tiles plan: {e}", file=sys.stderr)
        return 2
    try:
        compiled = kernel.compile(*runtime, arch=args.arch, **constexprs)
    except TileError as e:  # the program's mistake, located at its line
        print(f"python -m coop_tiles plan: {e}", file=sys.stderr)
        return 1
    print(compiled.plan)
    if args.out:
        print(f"drawn to {compiled.plan.draw(args.out)}")
    return 0


# ----- formatting --------------------------------------------------------------------------------
def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(f"{cell!s:<{w}}" for cell, w in zip(row, widths)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines)


def age(seconds: float) -> str:
    """How long ago, roughly: "12 s ago", "5 min ago", "3 h ago", "2 d ago"."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{max(0, int(seconds))} s ago"


if __name__ == "__main__":
    sys.exit(main())
