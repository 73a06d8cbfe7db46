"""A short GPU run of `coop_tiles.examples.moe_align_block_size` on the moe section's inputs (top-8 of 256 experts,
blocks of 64; benchmarks/sections/moe.py): for each num_tokens and each variant, the median of
`ct.testing.do_bench` (L2 flushed before each call, and with `flush_l2=False`), the host time per call
(perf_counter over 200 back-to-back calls, the median of 7 rounds), the GPU time of each kernel per call
(torch.profiler), and whether the outputs equal tutorial 15's sequential reference (the section's ids, and random
ids with some out of range). A table, printed and written to --out.

Variants: `new` (the module as it is), `new two-launch` / `new one-launch` (RECOUNT_CHUNKS forcing the other
path where the routes take several chunks), `new N threads` (the one-launch programs pinned to N threads per block;
`new` lets the runtime choose, by occupancy), `before` (with `--before FILE`: a copy of an older
coop_tiles/examples/moe.py, e.g. made with `git show 52817b2:coop_tiles/examples/moe.py > benchmarks/moe_before.py`
before the run; it is imported as `coop_tiles.examples.moe_before`), and `vLLM` (with `--vllm`, when
benchmarks/.vllm/moe_align.cu exists: benchmarks/_vllm_moe.py builds it; compared as the section does, routes in
any order within a group). The variants compile in parallel worker processes first (benchmarks/warm.py).

    python benchmarks/moe_probe.py --out /tmp/moe_probe.md [--before benchmarks/moe_before.py] [--vllm] \
        [--only "new,new one-launch,before,vLLM"]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

sys.path.insert(0, ".")
import numpy as np  # noqa: E402
import torch  # noqa: E402

import coop_tiles as ct  # noqa: E402
from benchmarks.kernels import tutorial  # noqa: E402
from benchmarks.sections.moe import MOE_BLOCK, MOE_EXPERTS, MOE_TOKENS, MOE_TOPK, _topk_ids, same_routing  # noqa: E402
from benchmarks.timing import failure  # noqa: E402
from benchmarks.warm import warm_in_workers  # noqa: E402
from coop_tiles.examples import moe  # noqa: E402

#: the variants of the new module: (name, module constants to set, threads per block of the one-launch programs)
NEW_VARIANTS = [
    ("new", {}, None),
    ("new two-launch", {"RECOUNT_CHUNKS": 1}, None),
    ("new one-launch", {"RECOUNT_CHUNKS": 1 << 30}, None),
    ("new 256 threads", {}, 256),
    ("new 512 threads", {}, 512),
    ("new 1024 threads", {}, 1024),
]
#: the file given with --before
BEFORE: dict[str, str] = {}
#: the variants --only names (empty: all)
ONLY: set[str] = set()
#: the one-launch programs pinned to a number of threads, made once (each keeps its compiled kernels)
_PINNED: dict[tuple[Any, int], Any] = {}


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    """The new module as variant `name` has it (constants set, one-launch programs pinned) while the block runs;
    other variants leave it as it is."""
    constants, threads = next(((c, t) for n, c, t in NEW_VARIANTS if n == name), ({}, None))
    saved, compiled = {n: getattr(moe, n) for n in constants}, dict(moe._COMPILED)
    try:
        for n, value in constants.items():
            setattr(moe, n, value)
        if threads is not None:
            for program in (moe.align_routes, moe.recount_routes):
                key = (program, threads)
                if key not in _PINNED:
                    _PINNED[key] = ct.jit(program.fn, block_threads=threads)
                moe._COMPILED[program] = _PINNED[key]
        yield
    finally:
        for n, value in saved.items():
            setattr(moe, n, value)
        moe._COMPILED.update(compiled)


def before_module(path: str) -> Any:
    """The older moe module at `path`, imported as `coop_tiles.examples.moe_before` (its relative imports work)."""
    name = "coop_tiles.examples.moe_before"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def applies(name: str, tokens: int) -> bool:
    """Whether variant `name` of the new module differs from `new` at `tokens` (the path depends on the chunks)."""
    chunks = -(-tokens * MOE_TOPK // moe.CHUNK)
    if name == "new two-launch":
        return 1 < chunks <= moe.RECOUNT_CHUNKS
    if name == "new one-launch":
        return chunks > moe.RECOUNT_CHUNKS
    if name.endswith("threads"):
        return chunks <= moe.RECOUNT_CHUNKS
    return True


def function(name: str, vllm: Any) -> Callable[[Any], Any]:
    """Variant `name`'s `moe_align_block_size(ids)` (under `variant(name)` for those of the new module)."""
    if name == "before":
        old = before_module(BEFORE["path"])
        return lambda ids: old.moe_align_block_size(ids, MOE_BLOCK, MOE_EXPERTS)
    if name == "vLLM":
        from benchmarks import _vllm_moe

        return lambda ids: _vllm_moe.align(vllm, ids, MOE_BLOCK, MOE_EXPERTS)
    return lambda ids: moe.moe_align_block_size(ids, MOE_BLOCK, MOE_EXPERTS)


def variants(tokens: int, vllm: Any) -> list[str]:
    """The variants timed at `tokens`."""
    names = [name for name, _, _ in NEW_VARIANTS if applies(name, tokens)]
    names += ["before"] * ("path" in BEFORE) + ["vLLM"] * (vllm is not None)
    return [name for name in names if not ONLY or name in ONLY]


def warm(item: tuple[int, str, str | None]) -> None:
    """Compile variant `item[1]` at `item[0]` tokens (in a worker of `warm_in_workers`; `item[2]`: --before)."""
    tokens, name, before = item
    if before is not None:
        BEFORE["path"] = before
    with variant(name):
        function(name, None)(_topk_ids(tokens))
    torch.cuda.synchronize()


def threads() -> str:
    """Threads per block of each program compiled so far in this process (the variant's, as `variant` set them)."""
    seen = {}
    for program in moe._COMPILED.values():
        for prepared in program._kernels.values():
            seen[program.__name__] = prepared.kernel.block_threads
    return ", ".join(f"{name} {count}" for name, count in seen.items())


def host_us(call: Callable[[], Any], count: int = 200, reps: int = 7) -> float:
    """Median host microseconds per call over `reps` rounds of `count` back-to-back calls."""
    for _ in range(count):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(count):
            call()
        times.append((time.perf_counter() - t0) / count * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def kernel_us(call: Callable[[], Any], calls: int = 50) -> str:
    """Each GPU kernel's microseconds per call (torch.profiler), `name time` joined by `+`."""
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    parts = []
    for event in prof.key_averages():
        total = getattr(event, "device_time_total", None)
        total = event.cuda_time_total if total is None else total
        if total > 0:
            parts.append(f"{event.key.split('(')[0][:40]} {total / calls:.1f}")
    return " + ".join(parts) or "—"


def correct(call: Callable[[], Any], ids: Any, exact: bool) -> str:
    """Whether call's outputs on `ids` equal the sequential reference (exactly, or as vLLM's routing may)."""
    sequential = tutorial("15_moe_routing").sequential
    want = sequential(ids.cpu().numpy(), MOE_BLOCK, MOE_EXPERTS)
    got = tuple(a.cpu().numpy() for a in call())
    if exact:
        return "yes" if all(np.array_equal(a, b) for a, b in zip(got, want)) else "NO"
    return "yes" if same_routing(got, want, MOE_BLOCK) else "NO"


def random_ids(tokens: int) -> Any:
    """Random expert ids, every 17th out of range and every 23rd -1 (tests/test_moe.py's `routes`)."""
    ids = np.random.default_rng(tokens).integers(0, MOE_EXPERTS, (tokens, MOE_TOPK)).astype(np.int32)
    ids.reshape(-1)[::17] = MOE_EXPERTS + 3
    ids.reshape(-1)[5::23] = -1
    return torch.from_numpy(ids).cuda()


def rows(tokens: int, vllm: Any) -> list[str]:
    """One table row per variant at `tokens`."""
    ids, other = _topk_ids(tokens), random_ids(tokens)
    out = []
    for name in variants(tokens, vllm):
        align = function(name, vllm)

        def call(align=align) -> Any:
            return align(ids)

        try:
            with variant(name):
                exact = name != "vLLM"
                # (vLLM's kernels index shared counters by any id below num_experts: a negative one faults the GPU)
                random = correct(lambda: align(other), other, exact) if exact else "n/a"
                right = correct(call, ids, exact) + " / " + random
                flushed = 1e3 * ct.testing.do_bench(call)
                warm_l2 = 1e3 * ct.testing.do_bench(call, flush_l2=False)
                cells = [f"{flushed:.1f}", f"{warm_l2:.1f}", f"{host_us(call):.1f}", kernel_us(call), right]
                cells.append(threads() if name.startswith("new") else "")
        except Exception as error:  # (one variant failing does not stop the others)
            cells = [failure(error), "", "", "", "", ""]
        out.append(f"| {tokens} | {name} | " + " | ".join(cells) + " |")
        print(out[-1], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="/tmp/moe_probe.md")
    parser.add_argument("--before", help="an older coop_tiles/examples/moe.py to time as `before`")
    parser.add_argument("--vllm", action="store_true", help="also vLLM's CUDA op (benchmarks/.vllm/moe_align.cu)")
    parser.add_argument("--only", default="", help="the variants to time, comma-separated (default: all)")
    args = parser.parse_args()
    ONLY.update(name.strip() for name in args.only.split(",") if name.strip())
    if args.before:
        BEFORE["path"] = args.before
    vllm = None
    if args.vllm:
        from benchmarks import _vllm_moe

        try:
            vllm = _vllm_moe.load()
        except Exception as error:
            print(f"vLLM: {failure(error)}", file=sys.stderr)
    items = [(n, name, args.before) for n in MOE_TOKENS for name in variants(n, None)]
    warm_in_workers(warm, items, label="moe probe")
    lines = [
        f"MoE align probe: top-{MOE_TOPK} of {MOE_EXPERTS} experts, block {MOE_BLOCK}; {torch.cuda.get_device_name()}",
        "",
        "| tokens | variant | do_bench µs | no flush µs | host µs/call | kernels µs/call | correct (top-k / random) "
        "| threads per block (programs compiled so far) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for tokens in MOE_TOKENS:
        lines += rows(tokens, vllm)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
