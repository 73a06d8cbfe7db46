"""What limits the whole-array chained scan on this GPU (issue 19's reverse chained scan and issue 22's compaction
ride on it), in one short GPU run:

    python benchmarks/chained_probe.py [--log2n 28]      # CuPy; about a minute and a half on an H200

On 2^log2n int32 of 0s and 1s (1 with probability 1/32), each timed with `ct.testing.do_bench` (L2 flushed) and
checked over the whole output against CuPy's cumsum, beside the copy and the per-tile scan (no look-back, the
ceiling):

- launch shapes: (TILE, threads, register cap), forward and reverse, with registers and local memory;
- the look-back's device code varied (`coop_tiles.ops.chained.LIBRARY`, edited as text for the run): a backoff
  (`__nanosleep`) in the polling loop, and W windows of 32 predecessors read per round trip, folded in order;
- how far tickets (the program ids) fall from block indices: the prefetch guesses the block index.

Measured on an H200 (2^28, 2026-11-29): the copy 508 us; the per-tile scan 98% of it at TILE 4096; the chained
scan 83.8% (forward) and 81.3% (reverse) at TILE 4096 x 128 threads (56 registers, 9 blocks per multiprocessor),
80% at TILE 8192 x 256, 71% at 256 threads for TILE 4096, 15-51% at 64 items per thread; backoffs of 32-300 ns and
2-8 windows no better (wider windows cost registers); without the prefetch 77.9%; nearly every ticket differs
from its block index, by 73 on average.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import coop_tiles as ct  # noqa: E402
import coop_tiles.ops.chained as chain  # noqa: E402
from benchmarks.kernels import tile_cumsum  # noqa: E402
from benchmarks.reverse_probe import chained_cumsum  # noqa: E402

#: (TILE, threads or None: the runtime's, register cap or None)
SHAPES = ((4096, None, None), (4096, 128, 48), (4096, 256, None), (8192, 256, None), (8192, 256, 48), (4096, 64, None))
#: the polling loop of `chain_look_back`, which the backoff variants replace
POLL = "      if (flag == 0) flag = slots.read(q, v);\n"
#: windows of 32 predecessors per round trip: `chain_look_back` with WINDOWS loads in flight per lane
WIDE_LOOK_BACK = r"""template <class T, class Op, class Slots>
__device__ T chain_look_back(const Slots& slots, long long tile) {
  const int lane = int(threadIdx.x & 31);
  T prefix{};
  for (long long newest = tile - 1;; newest -= 32 * WINDOWS) {
    T v[WINDOWS]; unsigned flag[WINDOWS];
#pragma unroll
    for (int w = 0; w < WINDOWS; ++w) {
      const long long q = newest - 32 * w - lane;
      flag[w] = q < 0 ? CHAIN_INCLUSIVE : slots.read(q, v[w]);
      if (q < 0) v[w] = T{};
    }
#pragma unroll
    for (int w = 0; w < WINDOWS; ++w) {
      const long long q = newest - 32 * w - lane;
      while (__any_sync(0xffffffffu, flag[w] == 0)) {
        if (flag[w] == 0) flag[w] = slots.read(q, v[w]);
      }
      const unsigned inclusive = __ballot_sync(0xffffffffu, flag[w] == CHAIN_INCLUSIVE);
      const int stop = inclusive ? __ffs(int(inclusive)) - 1 : 31;
      T u = v[w];
      for (int d = 1; d < 32; d *= 2) {
        const T earlier = cub::ShuffleDown<32>(u, d, 31, 0xffffffffu);
        if (lane + d <= stop) u = Op{}(earlier, u);
      }
      prefix = (newest == tile - 1 && w == 0) ? u : Op{}(u, prefix);
      if (inclusive) return prefix;
    }
  }
}

"""
#: counts, in the state's header words 1-3, the blocks whose ticket is not their index, the sum and the largest
#: distance
TICKET_COUNT = """    if (ticket != blockIdx.x) {
      const long long d = (long long)ticket - (long long)blockIdx.x;
      const unsigned long long far = (unsigned long long)(d < 0 ? -d : d);
      atomicAdd(reinterpret_cast<unsigned long long*>(state + 8), 1ull);
      atomicAdd(reinterpret_cast<unsigned long long*>(state + 16), far);
      atomicMax(reinterpret_cast<unsigned long long*>(state + 24), far);
    }
    coop_chain = coop::chain_ctx"""


def library_variants() -> dict[str, str]:
    """The look-back's device code per variant name, the library's own first."""
    lib = chain.LIBRARY
    start, end = (
        lib.index("template <class T, class Op, class Slots> __device__ T chain_look_back"),
        lib.index("// Block prefix callback"),
    )
    assert POLL in lib and "    coop_chain = coop::chain_ctx" in lib, "chained.py's look-back changed: update the probe"
    out = {"library": lib}
    out.update(
        {
            f"backoff {ns} ns": lib.replace(
                POLL, f"      if (flag == 0) {{ __nanosleep({ns}); flag = slots.read(q, v); }}\n"
            )
            for ns in (32, 100, 300)
        }
    )
    out.update({f"{w} windows": lib[:start] + WIDE_LOOK_BACK.replace("WINDOWS", str(w)) + lib[end:] for w in (2, 4)})
    out["ticket count"] = lib.replace("    coop_chain = coop::chain_ctx", TICKET_COUNT, 1)
    return out


def main() -> None:
    import cupy as cp

    from coop_tiles.runtime.chain import STATES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, default=28)
    n = 1 << parser.parse_args().log2n
    x = (cp.random.default_rng(1).random(n, dtype=cp.float32) < 1 / 32).astype(cp.int32)
    y = cp.empty_like(x)
    want = {False: cp.cumsum(x, dtype=cp.int32), True: cp.cumsum(x[::-1], dtype=cp.int32)[::-1]}
    copy = ct.testing.do_bench(lambda: cp.copyto(y, x))
    plain = ct.testing.do_bench(lambda: tile_cumsum[n // 4096](x, y, n, TILE=4096))
    print(f"copy {copy * 1e3:.1f} us; per-tile scan at TILE 4096 {copy / plain:.1%} of copy")

    def run(name: str, shape: tuple, reverse: bool) -> None:
        tile_size, threads, registers = shape
        # (a new JIT function per run: a variant's library text is read when it compiles)
        kernel = ct.jit(chained_cumsum.fn, block_threads=threads, max_registers=registers)
        launch = lambda: kernel[ct.cdiv(n, tile_size)](x, y, n, TILE=tile_size, REVERSE=reverse)  # noqa: E731
        y.fill(0)
        launch()
        ok = bool(cp.array_equal(y, want[reverse]))
        compiled = kernel.compile(x, y, n, TILE=tile_size, REVERSE=reverse)
        ms = ct.testing.do_bench(launch)
        print(
            f"{name}, {'reverse' if reverse else 'forward'}, TILE {tile_size} x {threads or 'auto'} threads x "
            f"{registers or 'any'} registers ({compiled.registers()}, local {compiled.local_memory_bytes()} B): "
            f"{copy / ms:.1%} of copy, correct {ok}",
            flush=True,
        )

    variants = library_variants()
    try:
        for shape in SHAPES:
            for reverse in (False, True):
                run("library", shape, reverse)
        for name, code in variants.items():
            if name in ("library", "ticket count"):
                continue
            chain.LIBRARY = code
            run(name, SHAPES[0], False)
        chain.LIBRARY = variants["ticket count"]
        run("ticket count", SHAPES[0], False)
        for (stream, _), (ptr, _, _) in STATES._buffers._buffers.items():  # every launch since the state's first
            words = cp.ndarray(4, cp.uint64, cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(ptr, 32, None), 0)).get()
            print(
                f"tickets not their block index (stream {stream}, counted launches): {words[1]}, "
                f"{words[2] / max(words[1], 1):.0f} apart on average, at most {words[3]}"
            )
    finally:
        chain.LIBRARY = variants["library"]


if __name__ == "__main__":
    main()
