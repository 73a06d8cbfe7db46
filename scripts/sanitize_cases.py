"""Run shared test programs on the GPU once each, for compute-sanitizer (racecheck, memcheck).

    python3 scripts/sanitize_cases.py                 # the automatic selection (below)
    python3 scripts/sanitize_cases.py --all           # every case the selection takes, not one per plan
    python3 scripts/sanitize_cases.py --list          # what the selection takes, and why; launches nothing
    python3 scripts/sanitize_cases.py tile_linrec matrix_scan   # the cases whose names start so, all of them
    compute-sanitizer --tool racecheck python3 scripts/sanitize_cases.py
    bash scripts/gpu-check.sh --sanitize              # racecheck and memcheck over the selection, failing on any
                                                      # hazard or error (scripts/gpu-sanitize.sh)

The automatic selection: every case of `tests/programs.py` whose plan has a tile in shared memory,
reuses shared bytes (two regions over the same bytes, or a barrier) or runs a collective in a loop,
one per kind of plan (`plan_key`: the other cases of a program add nothing a sanitizer sees), issue
17's program (`scan_then_sort`) among them; plus Mamba's selective scan (a loop of scans over chunks),
small. `--list` needs no GPU.

`chained_repeated` (run with any prefix it starts with, such as `chained`) launches a chained scan back to
back over grids of 1, 40 and 300 programs (the grid-wide state reused, then grown), twice each.
Each case is checked against its NumPy reference; the exit status is non-zero on a mismatch.
(memcheck also reports cuda.bindings probing the driver with cuGetProcAddress at start-up, host API errors
unrelated to the kernels: `--report-api-errors no` leaves them out.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from carve_checker import plan_of  # noqa: E402
from programs import CASES, Case, chained_scan  # noqa: E402
from programs_2d import CASES_2D  # noqa: E402
from programs_select import CASES_SELECT  # noqa: E402

import coop_tiles as ct  # noqa: E402
from coop_tiles.lang import ir  # noqa: E402


def chained_repeated() -> None:
    """Back-to-back chained scans on one stream, the state reused and grown, each against numpy.cumsum."""
    import cupy as cp

    rng = np.random.default_rng(0)
    for programs in (1, 40, 300, 1, 40, 300):
        n = programs * 256 - 3
        x = rng.integers(-5, 6, n).astype(np.int32)
        y = cp.zeros(n, np.int32)
        chained_scan[programs](cp.asarray(x), y, n, TILE=256, OP="add", EXCLUSIVE=False)
        np.testing.assert_array_equal(cp.asnumpy(y), np.cumsum(x), err_msg=f"{programs} programs")


def selective_scan_small() -> None:
    """Mamba's selective scan over 300 steps in chunks (a loop of scans), 1 x 4 rows, against its reference."""
    import cupy as cp
    from test_selective_scan import MAMBA_TOL, VARIANTS, check, make_inputs

    from coop_tiles.examples import selective_scan_fwd

    kwargs, optional, softplus = VARIANTS["variable B and C, everything"]
    inputs = make_inputs(1, 4, 300, 16, np.float32, **kwargs)
    given = {k: v for k, v in inputs.items() if k in ("u", "delta", "A", "B", "C") or k in optional}
    out, last = selective_scan_fwd(
        **{k: cp.asarray(v) for k, v in given.items()}, delta_softplus=softplus, return_last_state=True
    )
    check(given, cp.asnumpy(out), cp.asnumpy(last), MAMBA_TOL[np.dtype(np.float32)], delta_softplus=softplus)


#: the shared programs of tests/programs.py, tests/programs_2d.py and tests/programs_select.py
ALL_CASES = [*CASES, *CASES_2D, *CASES_SELECT]

EXTRAS = {"chained_repeated": chained_repeated, "selective_scan": selective_scan_small}


# ----- which cases: from their plans ---------------------------------------------------------------------
def reasons(program: ir.Program, plan) -> list[str]:
    """Why a sanitizer should see this plan: shared tiles, shared bytes reused (two regions over the same
    bytes, or a barrier before reused bytes), collectives in a loop."""
    carve = plan.carve
    regions = list({id(r): r for r in [*carve.regions.values(), *carve.tiles.values()]}.values())
    overlap = [
        a.key != b.key and a.offset < b.end and b.offset < a.end
        for i, a in enumerate(regions)
        for b in regions[i + 1 :]
    ]
    # (barriers for global memory, a read after a write of one array, are not shared memory's)
    reused = any(overlap) or any("reuse" in b.reason for b in carve.barriers.values())
    found = []
    if carve.tiles:
        found.append("tile in shared memory")
    if reused:
        found.append("bytes reused")
    if _collective_in_loop(program.body):
        found.append("collectives in a loop")
    if carve.regions and any(t.ndim == 2 for t in ir.tile_vars(program).values()):
        found.append("2-D tiles with shared memory")  # (row steps, remaps through shared memory)
    return found


def _collective_in_loop(body: list[ir.Stmt], in_loop: bool = False) -> bool:
    for s in body:
        if in_loop and isinstance(s, ir.Collective):
            return True
        loop = in_loop or isinstance(s, (ir.ForRange, ir.While))
        for part in (getattr(s, f, None) for f in ("then", "orelse", "body", "cond_body")):
            if isinstance(part, list) and _collective_in_loop(part, loop):
                return True
    return False


def plan_key(case: Case, plan) -> tuple:
    """Cases of one program whose tiles and CUB algorithms are alike (a scan's op aside: an add or a max
    scan keep the same bytes and barriers) look the same to a sanitizer."""
    tiles = sorted((t.items_per_thread, t.itemsize, t.arrangement, t.storage) for t in plan.tiles.values())
    collectives = [(c.primitive, c.algorithm, c.needs_storage, c.sync) for _, c in sorted(plan.collectives.items())]
    return case.kernel.fn, plan.block_threads, tuple(tiles), tuple(collectives), len(plan.carve.barriers)


def select(cases: list[Case], every: bool) -> list[tuple[Case, list[str]]]:
    """The cases whose plan a sanitizer should see, one per kind of plan (`every`: all of them). Planned
    with fabricated TempStorage sizes (no NVRTC: a cold compile of every case would take minutes); what
    the selection looks at (shared tiles, reuse, loops) does not hang on the sizes."""
    chosen, seen = [], set()
    for case in cases:
        try:
            program, _, plan = plan_of(case.kernel, case.launch_args(list(case.args)), case.constexprs)
        except ct.TileError:
            continue
        why = reasons(program, plan)
        key = plan_key(case, plan)
        if why and (every or key not in seen):
            seen.add(key)
            chosen.append((case, why))
    return chosen


# ----- launching ---------------------------------------------------------------------------------------
def library(name: str):
    """(to device, to host) for CuPy, or for PyTorch (which has bfloat16: moved as its bits)."""
    if name == "cupy":
        import cupy as cp

        return cp.asarray, lambda a, dt: cp.asnumpy(a)
    import torch

    def to_device(a):
        if a.dtype == ct.bfloat16:
            return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
        return torch.from_numpy(a).cuda()

    def to_host(t, dt):
        torch.cuda.synchronize()
        if dt == ct.bfloat16:
            return t.view(torch.int16).cpu().numpy().view(ct.bfloat16)
        return t.cpu().numpy()

    return to_device, to_host


def run_case(case: Case) -> None:
    to_device, to_host = library(case.library)
    args = [to_device(a) if isinstance(a, np.ndarray) else a for a in case.args]
    case.kernel[case.grid](*case.launch_args(args), **case.constexprs)
    case.check([to_host(args[i], case.args[i].dtype) for i in case.outputs])


def run(name: str, fn) -> bool:
    try:
        fn()
    except AssertionError as e:
        print(f"FAIL {name}: {str(e).strip().splitlines()[0] if str(e).strip() else 'mismatch'}", flush=True)
        return False
    print(f"ok   {name}", flush=True)
    return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefixes", nargs="*", help="run the cases (and extras) whose names start so, all of them")
    parser.add_argument("--all", action="store_true", help="every case the selection takes, not one per plan")
    parser.add_argument("--list", action="store_true", help="print the selection and launch nothing")
    a = parser.parse_args(argv)
    if a.prefixes:
        prefixes = tuple(a.prefixes)
        chosen = [(c, ["named"]) for c in ALL_CASES if c.name.startswith(prefixes)]
        extras = [n for n in EXTRAS if any(n.startswith(p) for p in prefixes)]
    else:
        chosen = select(ALL_CASES, a.all)
        extras = ["selective_scan"]
    if a.list:
        for case, why in chosen:
            print(f"{case.name:<45} grid {case.grid!s:<10} {', '.join(why)}")
        print(*(f"{n:<45} (extra)" for n in extras), sep="\n")
        print(f"{len(chosen)} cases, {len({c.kernel.fn for c, _ in chosen})} programs, {len(extras)} extras")
        return 0
    failed = 0
    for name in extras:
        failed += not run(name, EXTRAS[name])
    for case, _ in chosen:
        failed += not run(case.name, lambda case=case: run_case(case))
    print(f"{len(chosen) + len(extras) - failed} of {len(chosen) + len(extras)} ran and matched their references")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
