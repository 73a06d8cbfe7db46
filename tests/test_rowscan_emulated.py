"""The generated code of row scans (`ops/rows.py::lower_scan`, forward and reverse) run on the CPU: the shim of each
axis scan of a compiled program, built with g++ against a block emulated by threads (one std::thread a CUDA
thread; `__shfl_sync` and `__syncthreads` through a block-wide barrier: every shim's shuffles are block-uniform),
fed each thread's items of random rows in the plan's layouts (padding items hold NaN, or a huge integer, so that
one entering a row's fold shows), against a sequential reference. No GPU needed; `test_gpu_2d` runs the programs."""

from __future__ import annotations

import atexit
import functools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.lang import ir
from coop_tiles.lang.types import TileType
from coop_tiles.ops.scan import TileScan

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (C++20)")

HARNESS = r"""
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <thread>
#include <type_traits>
#include <vector>
#define __device__
#define __host__
#define __forceinline__ inline
namespace cuda { namespace std {
using ::std::int8_t; using ::std::int16_t; using ::std::int32_t; using ::std::int64_t;
using ::std::uint8_t; using ::std::uint16_t; using ::std::uint32_t; using ::std::uint64_t;
using ::std::numeric_limits;
} }
struct coop_dim { unsigned x, y, z; };
thread_local coop_dim threadIdx;
static std::barrier<>* coop_bar;
static unsigned coop_slots[THREADS];
static void __syncthreads() { coop_bar->arrive_and_wait(); }
// the combine function of the recurrence (`linrec` below), as numba compiles it for the GPU
static void coop_combine0_linrec(float a_l, float b_l, float a_r, float b_r, float* a, float* b) {
  *a = a_r * a_l;
  *b = a_r * b_l + b_r;
}
static unsigned __shfl_sync(unsigned, unsigned v, int src) {
  const unsigned tid = threadIdx.x;
  coop_slots[tid] = v;
  coop_bar->arrive_and_wait();
  const unsigned r = coop_slots[(tid & ~31u) + unsigned(src)];
  coop_bar->arrive_and_wait();
  return r;
}
"""


#: how each emulated block is built
GXX = ["g++", "-std=c++20", "-O0", "-pthread", "-w"]


@functools.cache
def _precompiled_includes() -> tuple[str, ...]:
    """g++'s `-include` of the harness's standard headers (<barrier>, <thread>, ...) precompiled, made once per
    process: parsing them was half of each test's g++ run. Empty where g++ cannot make it (each run then parses
    them itself: the same program either way, as the harness still includes them)."""
    folder = Path(tempfile.mkdtemp(prefix="coop-rowscan-pch-"))
    atexit.register(shutil.rmtree, folder, True)
    header = folder / "harness.h"
    header.write_text("".join(line + "\n" for line in HARNESS.splitlines() if line.startswith("#include")))
    made = subprocess.run([*GXX, "-x", "c++-header", "-o", f"{header}.gch", str(header)], capture_output=True)
    return ("-include", str(header)) if made.returncode == 0 else ()


def _shim_code(source: str, names: set[str]) -> str:
    """`source` without its includes, the lines naming CUB, its kernel and the extern "C" functions not in
    `names`."""
    out, i = [], 0
    lines = source.split('extern "C" __global__')[0].splitlines(keepends=True)  # (not the kernel)
    while i < len(lines):
        line = lines[i]
        m = re.match(r'extern "C" __device__ void (\w+)\(', line)
        if m and line.rstrip().endswith(";"):  # a declaration (a combine function: the harness defines it)
            i += 1
            continue
        if m:
            j, depth = i, 0
            while True:
                depth += lines[j].count("{") - lines[j].count("}")
                if depth == 0 and "{" in "".join(lines[i : j + 1]):
                    break
                j += 1
            if m.group(1) in names:
                out += [ln.replace('extern "C" ', "") for ln in lines[i : j + 1]]
            i = j + 1
            continue
        if not line.startswith("#include") and "cub::" not in line and "coop_size_probe" not in line:
            out.append(line)
        i += 1
    return "".join(out)


def _cxx(dt: np.dtype) -> str:
    return {"int32": "std::int32_t", "int64": "std::int64_t", "float32": "float", "float64": "double"}[dt.name]


def _fill(dt: np.dtype) -> float:
    return np.nan if dt.kind == "f" else np.iinfo(dt).max // 3


def run_shims(k, inputs: dict[str, np.ndarray], scalars: dict[str, float], tmp_path) -> dict:
    """Run every row-scan shim of compiled kernel `k` on the CPU: the 2-D sources from `inputs` (by the scan's
    position among the program's axis scans, `f"{n}.src{i}"`), tile seeds from `inputs[f"{n}.init{i}"]`, scalar
    seeds from `scalars`. Returns per scan its outputs (`out{i}`: 2-D) and totals (`total{i}`)."""
    plan, threads = k.plan, k.block_threads
    scans = [s for s in k.program.walk() if isinstance(s, TileScan) and s.axis is not None]
    names = {f"coop_rowscan_{s.cid}" for s in scans}
    code = HARNESS.replace("THREADS", str(threads)) + _shim_code(k.shim_source, names)
    main = ["int main() {", f"  std::barrier<> bar({threads}); coop_bar = &bar;"]
    main.append("  static unsigned char smem[1 << 17]; std::vector<std::thread> ts;")
    layouts = {}

    def arr(name: str, v: ir.Var, values: np.ndarray | None) -> str:
        lay = plan.tiles[v.name]
        layouts[name] = (v, lay)
        items = lay.items_per_thread
        data = np.full((threads, items), _fill(v.type.dtype), v.type.dtype)
        if values is not None:
            flat = values.reshape(-1)
            for t in range(threads):
                for i in range(items):
                    e = lay.element(t, i, threads)
                    if e is not None:
                        data[t, i] = flat[e]
        body = ", ".join("NAN" if np.isnan(float(x)) else repr(x.item()) for x in data.reshape(-1))
        main.append(f"  static {_cxx(v.type.dtype)} {name}[{threads}][{items}] = {{{body}}};")
        return f"{name}[tid]"

    calls = []
    for n, s in enumerate(scans):
        args = [arr(f"s{n}_src{i}", v, inputs[f"{n}.src{i}"]) for i, v in enumerate(s.srcs)]
        args += [arr(f"s{n}_out{i}", v, None) for i, v in enumerate(s.outs)]
        for i, v in enumerate(s.initial or ()):
            if isinstance(v, ir.Var) and isinstance(v.type, TileType):
                args.append(arr(f"s{n}_init{i}", v, inputs[f"{n}.init{i}"]))
            else:
                main.append(f"  static const {_cxx(v.type.dtype)} s{n}_init{i} = {scalars[f'{n}.init{i}']!r};")
                args.append(f"s{n}_init{i}")
        args += [arr(f"s{n}_total{i}", v, None) for i, v in enumerate(s.totals or ())]
        calls.append(f"    coop_rowscan_{s.cid}({', '.join(args)}, smem, 0); __syncthreads();")
    main.append(f"  for (unsigned tid = 0; tid < {threads}; ++tid) ts.emplace_back([&, tid] {{")
    main.append("    threadIdx = {tid, 0, 0};")
    main += calls
    main.append("  });\n  for (auto& t : ts) t.join();")
    for name, (v, lay) in layouts.items():
        if "_src" in name or "_init" in name:
            continue
        fmt = "%.17g" if v.type.dtype.kind == "f" else "%lld"
        cast = "(double)" if v.type.dtype.kind == "f" else "(long long)"
        main.append(
            f"  for (int t = 0; t < {threads}; ++t) for (int i = 0; i < {lay.items_per_thread}; ++i) "
            f'printf("{name} %d %d {fmt}\\n", t, i, {cast}{name}[t][i]);'
        )
    main.append("  return 0;\n}")
    src = tmp_path / "emulated.cpp"
    src.write_text(code + "\n".join(main) + "\n")
    exe = tmp_path / "emulated"
    subprocess.run([*GXX, *_precompiled_includes(), "-o", str(exe), str(src)], check=True)
    text = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    results: dict[int, dict[str, np.ndarray]] = {}
    grids = {}
    for name, (v, lay) in layouts.items():
        if "_out" in name or "_total" in name:
            grids[name] = np.full(v.type.size, np.nan)
    for line in text.splitlines():
        name, t, i, value = line.split()
        v, lay = layouts[name]
        e = lay.element(int(t), int(i), threads)
        if e is not None:
            grids[name][e] = float(value)
    for name, flat in grids.items():
        n, what = name[1:].split("_")
        v, _ = layouts[name]
        results.setdefault(int(n), {})[what] = flat.reshape(v.type.shape)
    return results


# ----- references: sequential scans of each row, from the last column with reverse ----------------------------
def ref_scan(x: np.ndarray, op, seed, exclusive: bool, reverse: bool):
    """Rows of `x` (a tuple of arrays for a combine) scanned one by one; `op(earlier, later)` in scan order;
    `seed[r]` (None: no seed) first. Returns (outputs, totals)."""
    xs = x if isinstance(x, tuple) else (x,)
    m, n = xs[0].shape
    outs = tuple(np.zeros((m, n)) for _ in xs)
    totals = tuple(np.zeros(m) for _ in xs)
    order = range(n - 1, -1, -1) if reverse else range(n)
    for r in range(m):
        acc = None if seed is None else seed[r]
        for c in order:
            e = tuple(a[r, c] for a in xs)
            new = e if acc is None else op(acc, e)
            res = acc if exclusive else new
            for o, v in zip(outs, res):
                o[r, c] = v
            acc = new
        for t, v in zip(totals, acc):
            t[r] = v
    return outs, totals


def add(a, b):
    return (a[0] + b[0],)


def vmax(a, b):
    return (b[0] if b[0] > a[0] else a[0],)


def affine(a, b):  # (a_l, b_l) earlier in scan order: h = a * h_prev + b
    return (b[0] * a[0], b[0] * a[1] + b[1])


@ct.combine
def linrec(a_l, b_l, a_r, b_r):
    return a_r * a_l, a_r * b_l + b_r


def _kernels(reverse: bool):
    @ct.jit
    def seeded_add(x, y, tot, seeds, BM: ct.constexpr, BN: ct.constexpr):
        t = tile.load(x, (0, 0), (BM, BN))
        s, total = tile.scan(t, axis=1, reverse=reverse, initial=tile.load(seeds, 0, BM), return_total=True)
        tile.store(y, (0, 0), s)
        tile.store(tot, 0, total)

    @ct.jit
    def exclusive_add(x, y, tot, BM: ct.constexpr, BN: ct.constexpr):
        t = tile.load(x, (0, 0), (BM, BN))
        s, total = tile.scan(t, axis=1, reverse=reverse, exclusive=True, return_total=True)
        tile.store(y, (0, 0), s)
        tile.store(tot, 0, total)

    @ct.jit
    def exclusive_seeded(x, y, tot, seeds, BM: ct.constexpr, BN: ct.constexpr):
        t = tile.load(x, (0, 0), (BM, BN))
        sd = tile.load(seeds, 0, BM)
        s, total = tile.scan(t, axis=1, reverse=reverse, exclusive=True, initial=sd, return_total=True)
        tile.store(y, (0, 0), s)
        tile.store(tot, 0, total)

    @ct.jit
    def running_max(x, y, BM: ct.constexpr, BN: ct.constexpr):
        t = tile.load(x, (0, 0), (BM, BN))
        tile.store(y, (0, 0), tile.scan(t, "max", axis=1, reverse=reverse))

    @ct.jit
    def recurrence(a, b, h, ta_out, tb_out, ca, cb, BM: ct.constexpr, BN: ct.constexpr):
        ta = tile.load(a, (0, 0), (BM, BN))
        tb = tile.load(b, (0, 0), (BM, BN))
        carry = (tile.load(ca, 0, BM), tile.load(cb, 0, BM))
        (_, hs), (t1, t2) = tile.scan((ta, tb), linrec, axis=1, reverse=reverse, initial=carry, return_total=True)
        tile.store(h, (0, 0), hs)
        tile.store(ta_out, 0, t1)
        tile.store(tb_out, 0, t2)

    @ct.jit
    def recurrence_unseeded(a, b, h, BM: ct.constexpr, BN: ct.constexpr):
        ta = tile.load(a, (0, 0), (BM, BN))
        tb = tile.load(b, (0, 0), (BM, BN))
        _, hs = tile.scan((ta, tb), linrec, axis=1, reverse=reverse)
        tile.store(h, (0, 0), hs)

    return locals()


KERNELS = {False: _kernels(False), True: _kernels(True)}

#: (rows, columns, block threads): 1, 2, 16, 32 lanes and rows across warps; padding columns (a lane's partial run,
#: whole padded lanes and warps) and rows
SHAPES = [
    (64, 4, 64),  # 1 lane x 4 items
    (16, 4, 32),  # 2 lanes x 2
    (4, 13, 64),  # 16 lanes x 1, 3 padded lanes
    (16, 13, 64),  # 4 lanes x 4, the last lane's run partly padding
    (8, 100, 256),  # 32 lanes x 4, padded lanes
    (3, 300, 128),  # padded rows and columns
    (4, 498, 128),  # 32 lanes x 16 in interleaved runs of 4, a partial run and padded lanes in the last segment
    (2, 2048, 256),  # 128 lanes across 4 warps x 16 items
    (1, 601, 256),  # 256 lanes x 3: a partial run, padded lanes and a padded warp
    (1, 8001, 256),  # 256 lanes x 32 in runs of 4 over 8 warps, padding in the last segment
]


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(7)


def _run(name, reverse, shape, tmp_path, rng):
    m, n, threads = shape
    kern = KERNELS[reverse][name]
    k = ct.jit(kern.fn, block_threads=threads)
    f32 = np.float32
    x = rng.integers(-9, 10, (m, n)).astype(np.int32)
    seeds = rng.integers(-50, 50, m).astype(np.int32)
    if name == "seeded_add":
        c = k.compile(x, x, seeds, seeds, BM=m, BN=n, arch="sm_90")
        got = run_shims(c, {"0.src0": x, "0.init0": seeds}, {}, tmp_path)[0]
        outs, totals = ref_scan(x, add, [(v,) for v in seeds], False, reverse)
        return c, [(got["out0"], outs[0]), (got["total0"], totals[0])]
    if name == "exclusive_add":
        c = k.compile(x, x, seeds, BM=m, BN=n, arch="sm_90")
        got = run_shims(c, {"0.src0": x}, {"0.init0": 0}, tmp_path)[0]
        outs, totals = ref_scan(x, add, [(0,)] * m, True, reverse)
        return c, [(got["out0"], outs[0]), (got["total0"], totals[0])]
    if name == "exclusive_seeded":
        c = k.compile(x, x, seeds, seeds, BM=m, BN=n, arch="sm_90")
        got = run_shims(c, {"0.src0": x, "0.init0": seeds}, {}, tmp_path)[0]
        outs, totals = ref_scan(x, add, [(v,) for v in seeds], True, reverse)
        return c, [(got["out0"], outs[0]), (got["total0"], totals[0])]
    if name == "running_max":
        xf = rng.standard_normal((m, n)).astype(f32)
        c = k.compile(xf, xf, BM=m, BN=n, arch="sm_90")
        got = run_shims(c, {"0.src0": xf}, {}, tmp_path)[0]
        outs, _ = ref_scan(xf, vmax, None, False, reverse)
        return c, [(got["out0"], outs[0])]
    a = rng.uniform(0.5, 1.0, (m, n)).astype(f32)
    b = rng.standard_normal((m, n)).astype(f32)
    if name == "recurrence":
        ca, cb = rng.uniform(0.5, 1, m).astype(f32), rng.standard_normal(m).astype(f32)
        c = k.compile(a, b, a, ca, ca, ca, cb, BM=m, BN=n, arch="sm_90")
        got = run_shims(c, {"0.src0": a, "0.src1": b, "0.init0": ca, "0.init1": cb}, {}, tmp_path)[0]
        outs, totals = ref_scan((a, b), affine, list(zip(ca, cb)), False, reverse)
        pairs = [(got["out1"], outs[1]), (got["total0"], totals[0]), (got["total1"], totals[1])]
        return c, pairs
    c = k.compile(a, b, a, BM=m, BN=n, arch="sm_90")
    got = run_shims(c, {"0.src0": a, "0.src1": b}, {}, tmp_path)[0]
    outs, _ = ref_scan((a, b), affine, None, False, reverse)
    return c, [(got["out1"], outs[1])]


NAMES = ["seeded_add", "exclusive_add", "exclusive_seeded", "running_max", "recurrence", "recurrence_unseeded"]


#: every shape in reverse; the forward scan (run on the GPU by tests/test_gpu_2d.py) at three, to keep CI short, and
#: (one code for both directions) two of them at interleaved runs (several segments) and rows across warps
RUNS = (
    [(name, shape, True) for name in NAMES for shape in SHAPES]
    + [(name, shape, False) for name in NAMES for shape in SHAPES[:3]]
    + [(name, shape, False) for name in ("seeded_add", "exclusive_seeded") for shape in (SHAPES[6], SHAPES[9])]
)


@pytest.mark.parametrize(
    "name, shape, reverse",
    RUNS,
    ids=["{}-{}x{}-{}t-{}".format(n, *s, "reverse" if r else "forward") for n, s, r in RUNS],
)
def test_row_scan_code_on_an_emulated_block(name, shape, reverse, tmp_path, rng):
    _, pairs = _run(name, reverse, shape, tmp_path, rng)
    for got, want in pairs:
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
