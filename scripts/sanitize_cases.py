"""Run shared test programs on the GPU once each, for compute-sanitizer:

    compute-sanitizer --tool memcheck python3 scripts/sanitize_cases.py [name-prefix ...]
    compute-sanitizer --tool racecheck python3 scripts/sanitize_cases.py tile_linrec matrix_scan
    compute-sanitizer --tool memcheck python3 scripts/sanitize_cases.py chained   # chained scans, and:

`chained_repeated` (run with any prefix it starts with, such as `chained`) launches a chained scan back to
back over grids of 1, 40 and 300 programs (the grid-wide state reused, then grown), twice each.
Each case is checked against its NumPy reference; the exit status is non-zero on a mismatch.
(memcheck also reports cuda.bindings probing the driver with cuGetProcAddress at start-up, host API errors
unrelated to the kernels: `--report-api-errors no` leaves them out.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from programs import CASES, chained_scan  # noqa: E402


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


def main(prefixes: list[str]) -> int:
    import cupy as cp

    failed = 0
    if not prefixes or any("chained_repeated".startswith(p) for p in prefixes):
        try:
            chained_repeated()
            print("ok   chained_repeated")
        except AssertionError as e:
            failed += 1
            print(f"FAIL chained_repeated: {str(e).splitlines()[0]}")
    for case in CASES:
        if case.library != "cupy" or (prefixes and not case.name.startswith(tuple(prefixes))):
            continue
        args = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in case.args]
        case.kernel[case.grid](*case.launch_args(args), **case.constexprs)
        try:
            case.check([cp.asnumpy(args[i]) for i in case.outputs])
            print(f"ok   {case.name}")
        except AssertionError as e:
            failed += 1
            print(f"FAIL {case.name}: {str(e).splitlines()[0]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
