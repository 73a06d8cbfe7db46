"""A short GPU run of the SSD forward's `chunk_scan` launches: every ScanBlock of coop_tiles.examples.ssd.SCAN_BLOCKS
timed alone (CUDA-event medians after warm-up, `ct.testing.do_bench`) on the ssd section's shapes, on the inputs the
other programs make for it (captured from one `mamba_chunk_scan_combined` call), each output compared with
the default launch's (SCAN_BLOCK) and, when benchmarks/.mamba/triton holds Mamba's Triton function, the whole
forward with that launch compared with Mamba's; a table of launch, registers, shared bytes, ms and ratio to the
default, printed and written to --out; then the whole forward's kernels, coop_tiles' and Mamba's, each timed by
torch.profiler over the same calls (where the time goes), beside each whole call's time. The variants compile in
parallel worker processes first (benchmarks/warm.py; the disk cache then serves the timed process;
COOP_BENCH_WARM=0 compiles them here).

    python benchmarks/ssd_probe.py --out /tmp/ssd_probe.md     # carry benchmarks/.mamba for Mamba's comparison
"""

import argparse
import sys
import time

sys.path.insert(0, ".")
import torch  # noqa: E402

from benchmarks.sections.ssd import SSD_SHAPES, ssd_inputs  # noqa: E402
from benchmarks.timing import cuda_time_ms, failure  # noqa: E402
from benchmarks.warm import warm_in_workers  # noqa: E402
from coop_tiles.examples import mamba_chunk_scan_combined, ssd  # noqa: E402

#: the small shape the workers compile each launch at (the same headdim, dstate, chunk and dtypes as SSD_SHAPES)
WARM_SHAPE = (1, 512, 2, 64, 128, 1, 256)


def captured_scan(shape: tuple) -> tuple[dict, tuple]:
    """(the shape's inputs, the arguments `mamba_chunk_scan_combined` gave `scan_chunks` but the ScanBlock and
    interpret flag), from one call with the default launch."""
    args = ssd_inputs(shape)
    calls = []
    original = ssd.scan_chunks
    ssd.scan_chunks = lambda *a: (calls.append(a[:-2]), original(*a))  # noqa: E731
    try:
        mamba_chunk_scan_combined(**args, chunk_size=shape[-1], dt_softplus=True)
    finally:
        ssd.scan_chunks = original
    return args, calls[0]


def warm(name: str) -> None:
    """Compile launch `name` (in a worker process of `warm_in_workers`): one call at WARM_SHAPE."""
    _, scan_args = captured_scan(WARM_SHAPE)
    ssd.scan_chunks(*scan_args, ssd.SCAN_BLOCKS[name])
    torch.cuda.synchronize()


def describe(block: ssd.ScanBlock) -> str:
    """Registers, shared bytes and local memory of the launch's program as last compiled in this process."""
    kernel = list(ssd.scan_program(block, False)._kernels.values())[-1].kernel
    return f"{kernel.registers()} regs, {kernel.shared_bytes} B shared, {kernel.local_memory_bytes()} B local"


def rows(shape: tuple, mamba) -> list[str]:
    """One table row per launch at `shape`: resources, ms, ratio to the default, error against the default's
    output (and the whole forward's against Mamba's)."""
    args, scan_args = captured_scan(shape)
    out = scan_args[9]  # outh, which every launch overwrites
    theirs = None
    if mamba is not None:
        theirs = mamba(**args, chunk_size=shape[-1], dt_softplus=True).permute(0, 2, 1, 3).float()
    results, default_out, default_ms = [], None, None
    for name in [ssd.SCAN_BLOCK] + [n for n in ssd.SCAN_BLOCKS if n != ssd.SCAN_BLOCK]:
        block = ssd.SCAN_BLOCKS[name]
        try:
            run = lambda: ssd.scan_chunks(*scan_args, block)  # noqa: B023, E731
            run()
            got = out.float().clone()
            if default_out is None:
                default_out = got
            error = float((got - default_out).abs().max() / default_out.abs().max())
            cells = f"{error:.1e}"
            if theirs is not None:
                cells += f" | {float((got - theirs).abs().max() / theirs.abs().max()):.1e}"
            ms = cuda_time_ms(run)
            default_ms = default_ms or ms
            results.append(f"| {shape} | {name} | {describe(block)} | {ms:.3f} | {default_ms / ms:.2f}x | {cells} |")
        except Exception as e:  # noqa: BLE001 (one failing launch does not stop the others)
            results.append(f"| {shape} | {name} | {failure(e)} | | | |")
        torch.cuda.empty_cache()
    return results


def kernel_rows(shape: tuple, mamba) -> list[str]:
    """The whole forward at `shape` with the default launches: each kernel's device time (torch.profiler, mean of
    REPEATS calls), coop_tiles' and Mamba's, and each whole call's do_bench time."""
    args = ssd_inputs(shape)
    forwards = {"coop_tiles": mamba_chunk_scan_combined} | ({"Mamba": mamba} if mamba is not None else {})
    lines = []
    for name, forward in forwards.items():
        run = lambda: forward(**args, chunk_size=shape[-1], dt_softplus=True)  # noqa: B023, E731
        ms = cuda_time_ms(run)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(REPEATS):
                run()
            torch.cuda.synchronize()
        kernels = [(e.key, e.device_time_total / REPEATS / 1e3) for e in prof.key_averages() if e.device_time_total]
        cells = ", ".join(f"{key} {t:.3f}" for key, t in kernels)
        lines.append(f"| {shape} | {name} | {ms:.3f} | {cells} |")
    return lines


#: calls the profiler averages each kernel's time over
REPEATS = 5


def mamba_function():
    """Mamba's Triton `mamba_chunk_scan_combined`, or None when benchmarks/.mamba/triton does not hold it."""
    try:
        from benchmarks import _mamba_triton

        return _mamba_triton.load(_mamba_triton.SSD_MODULE).mamba_chunk_scan_combined
    except Exception:  # noqa: BLE001
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="write the table here too")
    options = parser.parse_args()
    started = time.time()
    warmed = dict(zip(ssd.SCAN_BLOCKS, warm_in_workers(warm, list(ssd.SCAN_BLOCKS), label="chunk_scan launches")))
    lines = [f"chunk_scan launches compiled in {time.time() - started:.0f} s (default: {ssd.SCAN_BLOCK})"]
    lines += [f"- {name} {ssd.SCAN_BLOCKS[name]}: {text or 'compiled'}" for name, text in warmed.items()]
    mamba = mamba_function()
    against = " | error vs Mamba's forward" if mamba is not None else ""
    lines += ["", f"| shape | launch | resources | ms | default / this | error vs default{against} |"]
    lines += ["|---|---|---|---|---|---|" + ("---|" if mamba is not None else "")]
    for shape in SSD_SHAPES:
        lines += rows(shape, mamba)
    lines += ["", "| shape | forward | whole call ms | each kernel's ms (profiler) |", "|---|---|---|---|"]
    for shape in SSD_SHAPES:
        lines += kernel_rows(shape, mamba)
    lines.append(f"\n(total {time.time() - started:.0f} s; errors: largest difference over the other's largest)")
    text = "\n".join(lines)
    print(text, flush=True)
    with open(options.out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
