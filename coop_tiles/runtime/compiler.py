"""The compile pipeline, stage by stage: typed IR -> plan -> sources -> LTO-IR -> cubin.

Each stage is a plain function of the previous stage's output, so any of them can be run,
printed or tested on its own; `compile_kernel` runs them in order and records how long each
took (`CompiledKernel.timings`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress

from ..codegen.numba_body import BodySource, generate_body, generate_combine
from ..codegen.shims import ShimSource, generate_shims
from ..errors import CompileError
from ..lang import ir
from ..lang.frontend import build_program
from ..lang.source import parse_function
from ..ops.histogram import accumulate_in_shared_memory
from ..planner import LayoutPlan, Plan, StorageNeed, finish_plan, plan_layouts
from . import toolchain
from .cache import DiskCache, make_key
from .kernel import CompiledKernel, Signature


def build_stage(fn: Callable, sig: Signature) -> ir.Program:
    return build_program(fn, dict(sig.params), dict(sig.constexprs))


def rewrite_stage(program: ir.Program) -> ir.Program:
    """Rewrites of the typed IR for the GPU that keep its meaning (the interpreter runs it as
    built): histogram counts accumulated in shared memory through a loop."""
    accumulate_in_shared_memory(program)
    return program


def layout_stage(program: ir.Program, sig: Signature) -> LayoutPlan:
    return plan_layouts(program, sig.block_threads)


def shim_stage(program: ir.Program, layouts: LayoutPlan) -> ShimSource:
    return generate_shims(program, layouts)


class StageTimer:
    """Seconds per stage of one compile, in the order the stages started."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.timings.setdefault(name, 0.0)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start

    def run_quietly(self, name: str, fn: Callable, *args) -> None:
        """`fn(*args)` as stage `name`; its failure is left for the stage that needs it to meet."""
        with self.stage(name), suppress(Exception):
            fn(*args)


def nvrtc_stage(
    shims: ShimSource, arch: str, cache: DiskCache, timer: StageTimer | None = None
) -> tuple[bytes, dict[int, StorageNeed]]:
    """The shims' LTO-IR and each collective's TempStorage size and alignment, from one NVRTC
    run (the sizes through the shims' size probes), cached by source.

    While NVRTC runs (it releases the GIL), Numba's one-time setup runs in a thread, if this
    process has not done it yet: a cold compile needs Numba next."""
    timer = timer if timer is not None else StageTimer()
    key = make_key("shims", shims.source, arch, toolchain.CXX_STD, toolchain.DEFINES, toolchain.versions())
    found = cache.get("shims", key)
    if found is None:
        with ThreadPoolExecutor(1) as pool, timer.stage("NVRTC"):
            toolchain.import_cuda_core()  # before the thread: Numba imports it too
            if not toolchain.numba_ready():
                pool.submit(timer.run_quietly, "Numba setup", toolchain.prepare_numba, arch)
            ltoir, lowered = toolchain.nvrtc_compile(shims.source, arch, shims.size_probes)
        try:
            needs = shims.storage_needs(lowered)
        except ValueError as e:
            raise CompileError(str(e)) from None
        found = (ltoir, {cid: (n.size, n.align) for cid, n in needs.items()})
        cache.put("shims", key, found)
    ltoir, sizes = found
    return ltoir, {cid: StorageNeed(*size) for cid, size in sizes.items()}


def body_stage(program: ir.Program, plan: Plan, shims: ShimSource) -> list[BodySource]:
    """The program body, then each combine function, as Numba source."""
    body = generate_body(program, plan, shims.calls, function="body", abi_name=shims.body_name)
    return [body, *(generate_combine(c) for c in program.combines.values())]


def numba_stage(bodies: list[BodySource], arch: str) -> list[tuple[str, bytes]]:
    """Each body's LTO-IR, named by its C symbol."""
    return [
        (b.abi_name, toolchain.numba_compile(b.source, b.function, b.abi_name, b.shims, b.param_types, arch))
        for b in bodies
    ]


def compile_kernel(fn: Callable, sig: Signature, cache: DiskCache | None = None) -> CompiledKernel:
    """Run every stage for `sig`; NVRTC's output and the cubin come from the disk cache when the
    sources match.

    Mistakes in the program are located at its lines by the front end; the planner's errors
    (block size, tile too large) are left for the caller to locate at the launch."""
    cache = cache if cache is not None else DiskCache()
    timer = StageTimer()
    start = time.perf_counter()
    with timer.stage("front end"):
        parsed = parse_function(fn)
        program = rewrite_stage(build_stage(fn, sig))
        layouts = layout_stage(program, sig)
        shims = shim_stage(program, layouts)
    try:
        shim_ltoir, needs = nvrtc_stage(shims, sig.arch, cache, timer)
        with timer.stage("plan"):
            plan = finish_plan(program, layouts, needs)
            bodies = body_stage(program, plan, shims)
        key = make_key(
            "kernel",
            shims.source,
            [b.source for b in bodies],
            [[vars(s) for s in b.shims] for b in bodies],
            sig.arch,
            toolchain.versions(),
        )
        cubin = cache.get("kernel", key)
        if cubin is None:
            with timer.stage("Numba"):
                modules = [("coop_shims", shim_ltoir), *numba_stage(bodies, sig.arch)]
            with timer.stage("nvJitLink"):
                cubin = toolchain.link(modules, sig.arch)
            cache.put("kernel", key, cubin)
    except CompileError as e:
        e.locate(parsed.loc(parsed.tree))
        e.message += " (generated code was rejected: this is a coop_tiles bug, please report it)"
        raise
    timer.timings["total"] = time.perf_counter() - start

    def ltoirs() -> list[tuple[str, bytes]]:
        return [("coop_shims", nvrtc_stage(shims, sig.arch, cache)[0]), *numba_stage(bodies, sig.arch)]

    source = "\n".join(b.source for b in bodies)
    return CompiledKernel(
        sig, program, plan, shims.source, source, shims.kernel_name, cubin, ltoirs, timings=timer.timings
    )
