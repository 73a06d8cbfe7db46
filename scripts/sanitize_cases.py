"""Run shared test programs on the GPU once each, for compute-sanitizer:

    compute-sanitizer --tool memcheck python3 scripts/sanitize_cases.py [name-prefix ...]
    compute-sanitizer --tool racecheck python3 scripts/sanitize_cases.py tile_linrec matrix_scan

Each case is checked against its NumPy reference; the exit status is non-zero on a mismatch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from programs import CASES  # noqa: E402


def main(prefixes: list[str]) -> int:
    import cupy as cp

    failed = 0
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
