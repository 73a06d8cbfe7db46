"""A short GPU run of issue 20's backward: `selective_scan_bwd` with 1, 2 and 4 channels per program (each at its
default launch, `LAUNCHES`) against Mamba's CUDA backward at the mamba_bwd section's shapes and dtypes, each gradient
compared with Mamba's (largest difference over Mamba's largest magnitude). The section
(benchmarks/sections/mamba_bwd.py) also checks a float64 reference, tries every launch, and measures peak memory and a
training step; this fits beside other work in one 10-minute GPU call. Prints a table and writes it to `--out`.

    python benchmarks/bwd_probe.py --out /tmp/bwd_probe.md   # carry benchmarks/.mamba (benchmarks/_mamba_cuda.py
                                                             # builds Mamba's op)
    python benchmarks/bwd_probe.py --channels 1 2 --dtypes bfloat16 --launch 4:4:None   # a subset, another launch
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, ".")

MAMBA_GRADS = ("u", "delta", "A", "B", "C", "D", "delta_bias", "z")  # the order of Mamba's binding's results
HEADER = (
    "shape",
    "dtype",
    "channels",
    "launch",
    "ours ms",
    "Mamba ms",
    "Mamba / ours",
    "largest difference from Mamba",
)


def parse_launch(text: str) -> tuple[int, tuple[int, int | None]]:
    """`CHANNELS:ITEMS:REGISTERS` (registers `None` for no cap) as (channels, launch)."""
    channels, items, registers = text.split(":")
    return int(channels), (int(items), None if registers == "None" else int(registers))


def variants(channels: list[int], extra: list[str]) -> list[tuple[int, tuple[int, int | None]]]:
    """(channels, launch) pairs timed: each of `channels` at its default launch, then the `extra` ones."""
    from coop_tiles.examples.selective_scan_backward import LAUNCHES

    return [(c, LAUNCHES[c]) for c in channels] + [parse_launch(e) for e in extra]


def markdown(rows: list[tuple]) -> str:
    """The rows as a Markdown table under HEADER."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    return "\n".join([*lines, *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)])


def rows_for(ext, shape: tuple[int, ...], dtype: str, pairs: list) -> list[tuple]:
    """Mamba's backward and ours at each (channels, launch) on one shape and dtype, with each gradient's largest
    difference from Mamba's; a variant that fails is a row saying why."""
    import torch

    from benchmarks.sections.mamba import _mamba_inputs
    from benchmarks.sections.mamba_bwd import GRADS
    from benchmarks.timing import cuda_time_ms
    from coop_tiles.examples.selective_scan import forward
    from coop_tiles.examples.selective_scan_backward import selective_scan_bwd

    x = _mamba_inputs(shape, dtype)
    args = [x[k] for k in GRADS]
    dout = torch.randn_like(x["u"])
    _, states = forward(*args[:5], x["D"], x["z"], x["delta_bias"], True)
    out, mamba_states, _ = ext.fwd(*args, True)

    def theirs():
        return ext.bwd(*args, dout, mamba_states, out, True)

    reference = dict(zip(MAMBA_GRADS, theirs()))
    t_theirs = cuda_time_ms(theirs)
    rows = []
    for channels, launch in pairs:
        head = (shape, dtype, channels, launch)
        try:

            def ours(channels=channels, launch=launch):
                return selective_scan_bwd(dout, *args[:5], states, x["D"], x["z"], x["delta_bias"], True,
                                          launch=launch, channels=channels)  # fmt: skip

            mine = ours()
            diffs = ", ".join(
                f"{k} {float((mine[k].float() - v.float()).abs().max() / v.float().abs().max().clamp(min=1e-6)):.1e}"
                for k, v in reference.items()
            )
            t_ours = cuda_time_ms(ours)
            rows.append((*head, f"{t_ours:.3f}", f"{t_theirs:.3f}", f"{t_theirs / t_ours:.2f}x", diffs))
        except Exception as e:  # a variant that fails is reported, not a crash
            rows.append((*head, "failed", f"{t_theirs:.3f}", "-", f"{type(e).__name__}: {str(e)[:200]}"))
        print("| " + " | ".join(str(c) for c in rows[-1]) + " |", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="where to write the table (Markdown)")
    parser.add_argument("--channels", type=int, nargs="+", default=[1, 2, 4], help="channels per program timed")
    parser.add_argument("--dtypes", nargs="+", default=None, help="dtypes (default: the section's)")
    parser.add_argument("--launch", nargs="*", default=[], help="extra CHANNELS:ITEMS:REGISTERS variants")
    options = parser.parse_args()

    import torch

    from benchmarks import _mamba_cuda
    from benchmarks.sections.mamba import MAMBA_DTYPES, MAMBA_SHAPES

    started = time.time()
    extension = _mamba_cuda.load()
    print(f"Mamba's op built or loaded in {time.time() - started:.0f} s", flush=True)
    pairs = variants(options.channels, options.launch)
    rows = []
    print(markdown([]), flush=True)
    for shape in MAMBA_SHAPES:
        for dtype in options.dtypes or MAMBA_DTYPES:
            rows += rows_for(extension, shape, dtype, pairs)
            torch.cuda.empty_cache()
    table = markdown(rows)
    print(f"\n{table}\n\n{time.time() - started:.0f} s in all", flush=True)
    if options.out:
        options.out.write_text(f"{torch.cuda.get_device_name()}\n\n{table}\n")


if __name__ == "__main__":
    main()
