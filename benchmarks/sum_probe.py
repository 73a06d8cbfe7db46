"""Why `tile.sum` of 2^26 16-bit floats reaches about 84% of the copy's read rate and 99% at 2^28 (issue 17): one short
GPU run that tests the explanation in docs/benchmarks.md's terms.

    python benchmarks/sum_probe.py [--sizes 26,28] [--out FILE]     # CuPy; about a minute on an H100

The explanation to test. Fitted over the bandwidth and 16-bit rows of one H100 run, every `tile.sum` time is
14 µs + bytes / 3.19 TB/s (float16, bfloat16, int32 and float32 alike: the time per block is nothing, the time per
launch is all) and every copy 5 µs + bytes moved / 3.02 TB/s. The sum's rate is 106% of the copy's per byte, but its
14 µs per launch against the copy's 5 weigh on 42 µs of reading at 2^26 (float16) and hardly on 168 µs at 2^28. The
9 µs more would be the L2 flush's (`ct.testing.do_bench` writes a buffer twice the L2's size before each timed call):
its dirty lines are written back to memory while the next kernel reads, about 29 MB at 3.2 TB/s. A copy pays the same
and leaves as many of its own written lines dirty in L2 when it ends, unpaid, so it comes out even; a kernel that only
reads pays them all. And the bar's reference, half the copy's time, halves the copy's 5 µs per launch as well.

So this measures, for each size and dtype, under three flushes: `memset` (as do_bench: the L2 left full of dirty
lines), `clean` (the same memset, then a read of the buffer, so the lines left are clean; both outside the timing),
`none` (no flush: the data of the previous repetition may be in L2):

- the copy (`cupy.copyto`, 2 × bytes) and its read rate (half its time), as the bar uses it;
- the benchmark's `tile_sum` (TILE 4096, one program per tile, a float32 per tile written; no atomics, no second pass);
- `tile_sum` with TILE 8192 and 16384 (fewer, larger programs), and a persistent one (SMs × 4 programs, each summing
  its tiles in a loop): whether the grid or the work per program changes anything;
- `read_sum`, a hand-written CUDA kernel (CuPy RawKernel: 16-byte loads, a grid-stride loop over SMs × 8 blocks,
  warp shuffles, a float per block): what a kernel that only reads reaches, as a read-only reference.

If the explanation holds: under `memset`, tile_sum and read_sum fall short of the copy's read rate alike at 2^26 (the
shortfall is not tile_sum's) and none of the variants gains; under `clean` both gain about 9 µs; and tile_sum / read_sum
stays near 100% throughout.
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
from benchmarks.device import sm_count  # noqa: E402
from benchmarks.kernels import tile_sum  # noqa: E402
from coop_tiles import tile  # noqa: E402

FLUSHES = ("memset", "clean", "none")
DTYPES = ("float16", "float32")
PERSISTENT_WAVES = 4  # programs per SM of the persistent tile_sum
READ_SUM_WAVES = 8  # blocks per SM of read_sum


@ct.jit
def tile_sum_persistent(x, partial, n, TILE: ct.constexpr):
    """Each program sums every num_programs-th tile of x, and writes one float."""
    pid = ct.program_id(0)
    acc = 0.0
    for base in range(pid * TILE, n, ct.num_programs(0) * TILE):
        acc += tile.sum(tile.load(x, base, TILE, valid=n - base, other=0))
    partial[pid] = acc


READ_SUM = r"""
#include <cuda_fp16.h>
template <class T> __device__ __forceinline__ float sum16(uint4 w);
template <> __device__ __forceinline__ float sum16<__half>(uint4 w) {
    const unsigned u[4] = {w.x, w.y, w.z, w.w};
    float s = 0.f;
    for (int i = 0; i < 4; ++i) { float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u[i])); s += f.x + f.y; }
    return s;
}
template <> __device__ __forceinline__ float sum16<float>(uint4 w) {
    return __uint_as_float(w.x) + __uint_as_float(w.y) + __uint_as_float(w.z) + __uint_as_float(w.w);
}
// Each block strides over x in 16-byte words (n16 of them; n a multiple of the words' item count) and writes a float.
template <class T> __device__ void read_sum(const uint4* __restrict__ x, long long n16, float* partial) {
    float s = 0.f;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n16; i += stride)
        s += sum16<T>(__ldg(x + i));
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    __shared__ float warp[32];
    if ((threadIdx.x & 31) == 0) warp[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < blockDim.x / 32 ? warp[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) partial[blockIdx.x] = s;
    }
}
extern "C" __global__ void read_sum_f16(const uint4* x, long long n16, float* p) { read_sum<__half>(x, n16, p); }
extern "C" __global__ void read_sum_f32(const uint4* x, long long n16, float* p) { read_sum<float>(x, n16, p); }
"""


class Flush:
    """The L2 flush before each timed call: a buffer of twice the L2's size, written (memset) and, for `clean`, then
    read by read_sum, on CuPy's current stream (which ct.testing.do_bench times on, when only CuPy is loaded)."""

    def __init__(self, mode: str, read_sum: dict):
        import cupy as cp

        l2 = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["l2CacheSize"]
        self.mode, self.count = mode, 0
        self.buffer = cp.empty(2 * l2 // 4, cp.int32)
        self.scratch = cp.empty(1 << 16, cp.float32)
        self.read = read_sum["float32"]
        self.blocks = min(len(self.scratch), sm_count() * READ_SUM_WAVES)

    def __call__(self) -> None:
        if self.mode == "none":
            return
        self.count += 1
        self.buffer.fill(self.count)  # a different value each time: no write is skipped
        if self.mode == "clean":
            n16 = self.buffer.nbytes // 16
            self.read((self.blocks,), (256,), (self.buffer, np.int64(n16), self.scratch))


def time_ms(fn, flush: Flush) -> float:
    return ct.testing.do_bench(fn, flush_l2=False, setup=flush)


def probe(log2n: int, dtype: str, read_sum: dict) -> list[dict]:
    import cupy as cp

    n = 1 << log2n
    x = cp.random.RandomState(0).random_sample(n, dtype=cp.float32).astype(dtype)
    y = cp.empty_like(x)
    sms = sm_count()
    partial = cp.empty(max(ct.cdiv(n, 4096), sms * READ_SUM_WAVES), cp.float32)
    expected = float(cp.asnumpy(x).astype(np.float64).sum())
    nbytes = x.nbytes

    def tiles(tile_size: int):
        return lambda: tile_sum[ct.cdiv(n, tile_size)](x, partial, n, TILE=tile_size)

    grid_p, grid_r = sms * PERSISTENT_WAVES, sms * READ_SUM_WAVES
    kernels = {
        "tile_sum TILE 4096 (the benchmark's)": (tiles(4096), ct.cdiv(n, 4096)),
        "tile_sum TILE 8192": (tiles(8192), ct.cdiv(n, 8192)),
        "tile_sum TILE 16384": (tiles(16384), ct.cdiv(n, 16384)),
        f"persistent tile_sum, SMs x {PERSISTENT_WAVES}, TILE 4096": (
            lambda: tile_sum_persistent[grid_p](x, partial, n, TILE=4096),
            grid_p,
        ),
        f"read_sum (CUDA), SMs x {READ_SUM_WAVES}": (
            lambda: read_sum[dtype]((grid_r,), (256,), (x, np.int64(nbytes // 16), partial)),
            grid_r,
        ),
    }
    rows = []
    for mode in FLUSHES:
        flush = Flush(mode, read_sum)
        copy_ms = time_ms(lambda: cp.copyto(y, x), flush)
        row = {"n": f"2^{log2n}", "dtype": dtype, "flush": mode, "copy_ms": copy_ms, "kernels": {}}
        for name, (launch, grid) in kernels.items():
            partial.fill(0)
            ms = time_ms(launch, flush)
            total = float(cp.asnumpy(partial[:grid]).astype(np.float64).sum())
            correct = abs(total - expected) <= 1e-3 * abs(expected)
            row["kernels"][name] = {"ms": ms, "correct": correct}
        rows.append(row)
        flush.buffer = None
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def render(rows: list[dict], device: str) -> str:
    lines = [
        f"# tile.sum against the copy's read rate, by L2 flush ({device})",
        "",
        "*of copy read*: half the copy's time over the kernel's (the bandwidth and 16-bit sections' bar); "
        "*of read_sum*: the hand-written read-only kernel's time over the kernel's; times in µs.",
        "",
        "| n | dtype | flush | copy µs | kernel | µs | of copy read | of read_sum | correct |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        reference = next(k for name, k in r["kernels"].items() if name.startswith("read_sum"))
        for name, k in r["kernels"].items():
            lines.append(
                f"| {r['n']} | {r['dtype']} | {r['flush']} | {r['copy_ms'] * 1e3:.1f} | {name} | {k['ms'] * 1e3:.1f} | "
                f"**{r['copy_ms'] / 2 / k['ms']:.1%}** | {reference['ms'] / k['ms']:.1%} | "
                f"{'yes' if k['correct'] else 'NO'} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="26,28", help="comma list of log2 element counts (default 26,28)")
    parser.add_argument("--out", default=None, help="also write the table here (default $OUT/sum_probe.md if set)")
    args = parser.parse_args()
    import cupy as cp

    module = cp.RawModule(code=READ_SUM, options=("-std=c++17",))
    read_sum = {"float16": module.get_function("read_sum_f16"), "float32": module.get_function("read_sum_f32")}
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = []
    for log2n in (int(s) for s in args.sizes.split(",")):
        for dtype in DTYPES:
            rows += probe(log2n, dtype, read_sum)
    text = render(rows, device)
    out = args.out or (str(Path(os.environ["OUT"]) / "sum_probe.md") if os.environ.get("OUT") else None)
    if out:
        Path(out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
