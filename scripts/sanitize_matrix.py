"""Run every program of the option matrix (tests/option_matrix.py) once on the GPU, for compute-sanitizer:

    compute-sanitizer --tool memcheck --error-exitcode 1 --report-api-errors no python3 scripts/sanitize_matrix.py

Each allowed combination of every tile op's options runs once (in the program it is packed into), and
its outputs are checked against the interpreter's and the NumPy reference; the exit status is non-zero
on a mismatch or a failed launch (compute-sanitizer's `--error-exitcode` makes it so on a device error).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from option_matrix import GROUPS, check, group_source, interpret, run_on_gpu, warm_cache  # noqa: E402


def main() -> int:
    warm_cache()  # compiles in worker processes (no GPU work there); a warm cache makes it quick
    failed = 0
    for g, combinations in enumerate(GROUPS):
        source = group_source(g)
        try:
            got, want = run_on_gpu(source), interpret(source)
            for c in combinations:
                check(source, c, got, against=want)
                check(source, c, got)
            print(f"ok   {source.name}: {len(combinations)} combinations")
        except Exception as e:  # noqa: BLE001 - reported, and the run goes on
            failed += 1
            print(f"FAIL {source.name}: {', '.join(map(str, combinations))}\n{traceback.format_exception_only(e)[-1]}")
    print(f"{sum(map(len, GROUPS))} combinations in {len(GROUPS)} programs, {failed} programs failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
