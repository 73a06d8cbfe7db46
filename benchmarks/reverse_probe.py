"""Reverse scans against forward ones (issue 19's bars), in one short GPU run:

    python benchmarks/reverse_probe.py [--sizes 26,28] [--out FILE]     # CuPy; a minute or two on an H100

For each size, int32 data of 0s and 1s (1 with probability 1/32, so every sum is exact), each timed with
`ct.testing.do_bench` (L2 flushed) and checked against NumPy over the whole output:

- the copy (`cupy.copyto`), the bandwidth reference;
- the whole-array chained scan forward (`tile.scan(t, chained=True)`) and reverse (`reverse=True`: suffix sums),
  each the best of the chained section's configurations. Bars: reverse >= 90% of the copy and within 5% of forward;
- the per-tile block scan forward and reverse (one program per tile, TILE 1024 / 4096 / 8192, the runtime's block
  size), best of them. Bar: reverse within 5% of forward.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import coop_tiles as ct  # noqa: E402
from benchmarks.sections.chained import CHAINED_CONFIGS  # noqa: E402
from benchmarks.timing import cuda_time_ms  # noqa: E402
from coop_tiles import tile  # noqa: E402

BLOCK_TILES = (1024, 4096, 8192)


@ct.jit
def chained_cumsum(x, y, n, TILE: ct.constexpr, REVERSE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, tile.scan(t, reverse=REVERSE, chained=True), valid=n - base)


@ct.jit
def block_cumsum(x, y, n, TILE: ct.constexpr, REVERSE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, tile.scan(t, reverse=REVERSE), valid=n - base)


def _best(configs, launch, y, expected) -> tuple[float, object, bool]:
    """(ms, config) of the fastest config and whether every config's output equals `expected`."""
    import cupy as cp

    best, correct = None, True
    for config in configs:
        run = launch(config)
        y.fill(-1)
        run()
        correct &= bool(cp.array_equal(y, expected(config)))
        ms = cuda_time_ms(run)
        best = (ms, config) if best is None or ms < best[0] else best
    return best[0], best[1], correct


def measure(log2n: int) -> list[str]:
    import cupy as cp

    n = 1 << log2n
    host = (np.random.default_rng(11).random(n, dtype=np.float32) < 1 / 32).astype(np.int32)
    forward = cp.asarray(np.cumsum(host, dtype=np.int64).astype(np.int32))
    backward = cp.asarray(np.cumsum(host[::-1], dtype=np.int64)[::-1].astype(np.int32))
    x, y = cp.asarray(host), cp.empty(n, cp.int32)
    copy_ms = cuda_time_ms(lambda: cp.copyto(y, x))
    gbs = lambda ms: f"{8 * n / ms / 1e6:.0f}"  # noqa: E731
    rows = [f"| 2^{log2n} | copy | {copy_ms:.3f} | {gbs(copy_ms)} | 100% | — | yes |"]

    def pinned(kernel, threads):
        return kernel if threads is None else ct.jit(kernel.fn, block_threads=threads)

    chained = {}
    for reverse in (False, True):
        kernels = {c: pinned(chained_cumsum, c[1]) for c in CHAINED_CONFIGS}
        ms, config, ok = _best(
            CHAINED_CONFIGS,
            lambda c, r=reverse: lambda: kernels[c][ct.cdiv(n, c[0])](x, y, n, TILE=c[0], REVERSE=r),
            y,
            lambda _c, r=reverse: backward if r else forward,
        )
        chained[reverse] = ms
        versus = "—" if not reverse else f"{chained[False] / ms:.3f}"
        name = f"chained {'reverse' if reverse else 'forward'} ({config})"
        rows.append(f"| 2^{log2n} | {name} | {ms:.3f} | {gbs(ms)} | {copy_ms / ms:.1%} | {versus} | {_yes(ok)} |")

    def tile_reference(t: int, reverse: bool):
        chunks = host.reshape(-1, t)
        out = np.cumsum(chunks[:, ::-1], axis=1)[:, ::-1] if reverse else np.cumsum(chunks, axis=1)
        return cp.asarray(out.astype(np.int32).ravel())

    blocks = {}
    for reverse in (False, True):
        refs = {t: tile_reference(t, reverse) for t in BLOCK_TILES}
        ms, t, ok = _best(
            BLOCK_TILES,
            lambda t, r=reverse: lambda: block_cumsum[ct.cdiv(n, t)](x, y, n, TILE=t, REVERSE=r),
            y,
            lambda t: refs[t],
        )
        blocks[reverse] = ms
        versus = "—" if not reverse else f"{blocks[False] / ms:.3f}"
        name = f"per-tile {'reverse' if reverse else 'forward'} (TILE {t})"
        rows.append(f"| 2^{log2n} | {name} | {ms:.3f} | {gbs(ms)} | {copy_ms / ms:.1%} | {versus} | {_yes(ok)} |")
    return rows


def _yes(ok: bool) -> str:
    return "yes" if ok else "**NO**"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="26,28", help="log2 of the element counts (default 26,28)")
    parser.add_argument("--out", default=None, help="also write the table here (default $OUT/reverse_probe.md if set)")
    args = parser.parse_args()
    lines = [
        "| n | kernel | ms | GB/s (8 bytes per element) | of copy | forward / reverse | correct |",
        "|---|---|---|---|---|---|---|",
    ]
    for log2n in (int(v) for v in args.sizes.split(",")):
        lines += measure(log2n)
    text = "\n".join(lines) + "\n"
    print(text)
    out = args.out or (str(Path(os.environ["OUT"]) / "reverse_probe.md") if os.environ.get("OUT") else None)
    if out:
        Path(out).write_text(text)


if __name__ == "__main__":
    main()
