"""The compile pipeline, stage by stage: typed IR -> plan -> sources -> LTO-IR -> cubin.

Each stage is a plain function of earlier stages' outputs, so any of them can be run, printed or
tested on its own. `STAGES` declares them in order (name, inputs, function, how its output
prints); `compile_kernel` runs them, records how long each took (`CompiledKernel.timings`) and
shows the outputs `COOP_TILES_DUMP` asks for (`runtime/dump.py`).
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from typing import Any

from .._log import get_logger
from ..codegen.numba_body import BodySource, generate_body, generate_combine
from ..codegen.shims import ShimOrigin, ShimSource, generate_shims
from ..errors import CompileError
from ..lang import ir
from ..lang.frontend import build_program
from ..lang.source import parse_function
from ..lang.stub import public_name
from ..ops.base import op_of, rewriting_ops
from ..planner import LayoutPlan, Plan, StorageNeed, finish_plan, plan_layouts
from . import dump, gemm_pipeline, mathdx, toolchain
from .arch import check_supported
from .cache import DiskCache, make_key
from .kernel import CompiledKernel, Signature

log = get_logger("compile")


class CompileLog:
    """Seconds per stage of one kernel's compile (in the order they started; "total" when done),
    and the "compiling ..." line a cold compile logs (at info) before its first compiler runs,
    so that a long compile is never silent."""

    def __init__(self, name: str, sig: Signature | None = None):
        self.name, self.sig = name, sig
        self.seconds: dict[str, float] = {}
        self.cold = False
        self.start = time.perf_counter()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.seconds.setdefault(name, 0.0)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def run_quietly(self, name: str, fn: Callable, *args) -> None:
        """`fn(*args)` as stage `name`; its failure is left for the stage that needs it to meet."""
        with self.stage(name), suppress(Exception):
            fn(*args)

    def compiling(self) -> None:
        if not self.cold and self.sig is not None:
            self.cold = True
            params = ", ".join(f"{n}: {t}" for n, t in self.sig.params)
            consts = "".join(f", {n}={v!r}" for n, v in self.sig.constexprs)
            log.info("compiling %s(%s%s) for %s", self.name, params, consts, self.sig.arch)

    def done(self) -> None:
        total = self.seconds["total"] = time.perf_counter() - self.start
        stages = ", ".join(f"{name} {s:.2f} s" for name, s in self.seconds.items())
        if self.cold:
            log.info("compiled %s for %s in %.2f s", self.name, self.sig.arch, total)
        else:
            log.info("%s for %s: cubin from the disk cache in %.2f s", self.name, self.sig.arch, total)
        log.debug("%s stage timings: %s", self.name, stages)


def build_stage(fn: Callable, sig: Signature) -> ir.Program:
    return build_program(fn, dict(sig.params), dict(sig.constexprs))


def rewrite_stage(program: ir.Program, debug: bool = False, arch: str = "sm_90") -> ir.Program:
    """Rewrites of the typed IR for the GPU that keep its meaning (the interpreter runs it as
    built), each owned by its op (`TileOp.rewrite`): histogram counts accumulated in shared memory
    through a loop, dot operands given as `u.T` read from `u` in place, 16-bit float loads converted to
    float32 as they arrive, and, without `debug`, `ct.device_assert` dropped; `arch` is the target's. The IR
    is verified after each when COOP_TILES_VERIFY_IR is set."""
    for op in rewriting_ops():
        op.rewrite(program, debug, arch)
        ir.verify_if_asked(program, f"rewrite by {type(op).__name__}")
    return program


def layout_stage(program: ir.Program, sig: Signature) -> LayoutPlan:
    return plan_layouts(program, sig.block_threads, sig.arch)


def shim_stage(
    program: ir.Program, layouts: LayoutPlan, max_registers: int | None = None, arch: str = "sm_90"
) -> ShimSource:
    return generate_shims(program, layouts, max_registers, arch)


def nvrtc_stage(
    shims: ShimSource, arch: str, cache: DiskCache, clock: CompileLog | None = None
) -> tuple[bytes, dict[int, StorageNeed]]:
    """The shims' LTO-IR and each collective's TempStorage size and alignment, from one NVRTC
    run (the sizes through the shims' size probes), cached by source.

    While NVRTC runs (it releases the GIL), Numba's one-time setup runs in a thread, if this
    process has not done it yet: a cold compile needs Numba next."""
    clock = clock if clock is not None else CompileLog("shims")
    key = make_key("shims", shims.source, arch, toolchain.CXX_STD, toolchain.DEFINES, toolchain.versions())
    found = cache.get("shims", key)
    if found is None:
        check_supported(arch)
        clock.compiling()
        with ThreadPoolExecutor(1) as pool, clock.stage("NVRTC"):
            toolchain.import_cuda_core()  # before the thread: Numba imports it too
            if not toolchain.numba_ready():
                pool.submit(clock.run_quietly, "Numba setup", toolchain.prepare_numba, arch)
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


def library_ltoirs(shims: ShimSource) -> list[tuple[str, bytes]]:
    """The LTO-IR of the library code the shims call (cuBLASDx's GEMMs, pipelined or not), named by symbol."""
    pipelined = [gemm_pipeline.pipeline_gemm(spec) for spec in shims.pipelines]
    return [mathdx.library_code(spec, registers) for spec, registers in shims.gemms] + [
        (traits.execute, ltoir) for traits, ltoir in pipelined
    ]


#: The bodies' LTO-IR of the last kernels Numba compiled in this process, by everything that makes it: a kernel's
#: PTX (`CompiledKernel.ptx`, which `local_memory_bytes` reads) is linked from the same modules as its cubin, and
#: after a cold compile takes them from here instead of compiling the bodies again.
_numba_ltoirs: OrderedDict[str, list[tuple[str, bytes]]] = OrderedDict()
_NUMBA_LTOIRS_KEPT = 16
_numba_ltoirs_lock = threading.Lock()


def numba_stage(bodies: list[BodySource], arch: str, fastmath: bool) -> list[tuple[str, bytes]]:
    """Each body's LTO-IR, named by its C symbol (`fastmath`: Numba's fast math)."""
    key = make_key(
        "numba", [(b.source, b.function, b.abi_name, [vars(s) for s in b.shims], b.param_types) for b in bodies], arch,
        fastmath, toolchain.versions(),
    )  # fmt: skip
    with _numba_ltoirs_lock:
        if key in _numba_ltoirs:
            _numba_ltoirs.move_to_end(key)
            return _numba_ltoirs[key]
    found = [
        (b.abi_name, toolchain.numba_compile(b.source, b.function, b.abi_name, b.shims, b.param_types, arch, fastmath))
        for b in bodies
    ]
    with _numba_ltoirs_lock:
        _numba_ltoirs[key] = found
        while len(_numba_ltoirs) > _NUMBA_LTOIRS_KEPT:
            _numba_ltoirs.popitem(last=False)
    return found


def built_ir(fn: Callable, sig: Signature, on_built: Callable[[ir.Program], None] | None) -> ir.Program:
    """`build_stage`, then `on_built(program)` (see `compile_kernel`)."""
    program = build_stage(fn, sig)
    if on_built is not None:
        on_built(program)
    return program


def rewritten_ir(program: ir.Program, sig: Signature) -> ir.Program:
    return rewrite_stage(program, sig.debug, sig.arch)


def shims_for(program: ir.Program, layouts: LayoutPlan, sig: Signature) -> ShimSource:
    return shim_stage(program, layouts, sig.max_registers, sig.arch)


def shims_ltoir(
    shims: ShimSource, sig: Signature, cache: DiskCache, clock: CompileLog
) -> tuple[bytes, dict[int, StorageNeed]]:
    return nvrtc_stage(shims, sig.arch, cache, clock)


def plan_stage(
    program: ir.Program, layouts: LayoutPlan, nvrtc: tuple[bytes, dict[int, StorageNeed]], sig: Signature
) -> Plan:
    """The plan: the layouts, and the carve of shared memory with NVRTC's TempStorage sizes."""
    return finish_plan(program, layouts, nvrtc[1], sig.arch)


def kernel_key(shims: ShimSource, bodies: list[BodySource], sig: Signature) -> str:
    """The disk-cache key of what the kernel's sources link to (its cubin, and its PTX when asked for)."""
    return make_key(
        "kernel",
        shims.source,
        [b.source for b in bodies],
        [[vars(s) for s in b.shims] for b in bodies],
        sig.arch,
        sig.fastmath,
        toolchain.versions(),
    )


def kernel_modules(shim_ltoir: bytes, shims: ShimSource, bodies: list[BodySource], sig: Signature) -> list:
    """What nvJitLink links into the kernel (its cubin, or its PTX): the shims', the libraries' and the bodies'
    LTO-IR, by name."""
    return [("coop_shims", shim_ltoir), *library_ltoirs(shims), *numba_stage(bodies, sig.arch, sig.fastmath)]


def cubin_stage(
    shims: ShimSource,
    nvrtc: tuple[bytes, dict[int, StorageNeed]],
    bodies: list[BodySource],
    sig: Signature,
    cache: DiskCache,
    clock: CompileLog,
) -> bytes:
    """The cubin: from the disk cache when the sources match, else the bodies compiled by Numba and
    linked with the shims' LTO-IR by nvJitLink."""
    key = kernel_key(shims, bodies, sig)
    cubin = cache.get("kernel", key)
    if cubin is None:
        clock.compiling()
        with clock.stage("Numba"):
            modules = kernel_modules(nvrtc[0], shims, bodies, sig)
        with clock.stage("nvJitLink"):
            cubin = toolchain.link(modules, sig.arch)
        cache.put("kernel", key, cubin)
    return cubin


def show_shims(shims: ShimSource) -> str:
    return shims.source


def show_bodies(bodies: list[BodySource]) -> str:
    return "\n".join(b.source for b in bodies)


def show_cubin(cubin: bytes) -> str:
    return f"cubin: {len(cubin)} bytes"


def show_nvrtc(nvrtc: tuple[bytes, dict[int, StorageNeed]]) -> str:
    ltoir, needs = nvrtc
    sizes = "".join(f"\n  collective #{cid}: {n.size} bytes, aligned to {n.align}" for cid, n in sorted(needs.items()))
    return f"LTO-IR of the shims: {len(ltoir)} bytes; TempStorage:{sizes or ' none'}"


@dataclass(frozen=True)
class Stage:
    """One stage of the compile: `run` takes the outputs (or the compile's own values: fn, sig,
    cache, clock, on_built) named by `inputs`, in order, and its output is named `name`."""

    name: str
    inputs: tuple[str, ...]
    run: Callable[..., Any]
    show: Callable[[Any], str]
    #: the timing it counts in (`CompiledKernel.timings`); None: it times its backend runs itself
    clock: str | None
    #: the file name suffix of its dump
    suffix: str = ".txt"


STAGES: tuple[Stage, ...] = (
    Stage("ir", ("fn", "sig", "on_built"), built_ir, str, "front end", ".ir"),
    Stage("rewritten", ("ir", "sig"), rewritten_ir, str, "front end", ".ir"),
    Stage("layouts", ("rewritten", "sig"), layout_stage, str, "plan"),
    Stage("shims", ("rewritten", "layouts", "sig"), shims_for, show_shims, "plan", ".cu"),
    Stage("nvrtc", ("shims", "sig", "cache", "clock"), shims_ltoir, show_nvrtc, None),
    Stage("plan", ("rewritten", "layouts", "nvrtc", "sig"), plan_stage, str, "plan"),
    Stage("body", ("rewritten", "plan", "shims"), body_stage, show_bodies, "plan", ".py"),
    Stage("cubin", ("shims", "nvrtc", "body", "sig", "cache", "clock"), cubin_stage, show_cubin, None),
)


def failing_shim(e: CompileError, shims: ShimSource | None) -> ShimOrigin | None:
    """The shim a backend failure is about: the first line of the shims NVRTC's log points at, else
    the first shim nvJitLink's message or log names; None when neither says."""
    if shims is None:
        return None
    text = f"{e.message}\n{e.details.log or ''}"
    for line in toolchain.shim_lines(text):
        if (origin := shims.origin_of_line(line)) is not None:
            return origin
    named = (o for o in shims.origins if re.search(rf"\b{re.escape(o.shim)}\b", text))
    return next(named, None)


def show_interpreted_ir(kernel: str, key: object, program: ir.Program) -> None:
    """Dump the IR stage's output for an interpreted launch when COOP_TILES_DUMP asks for it (the
    interpreter runs that IR; no later stage runs)."""
    if "ir" in dump.requested(tuple(stage.name for stage in STAGES)):
        dump.write(kernel, key, "ir", ".ir", str(program))


def compile_kernel(
    fn: Callable,
    sig: Signature,
    cache: DiskCache | None = None,
    on_built: Callable[[ir.Program], None] | None = None,
) -> CompiledKernel:
    """Run every stage for `sig`; the cubin comes from the disk cache when the sources match.
    `on_built(program)` runs as soon as the front end has built the program (its
    `ct.static_print` lines are then shown even if a later stage fails).

    Mistakes in the program are located at its lines by the front end; the planner's errors
    (block size, tile too large) are left for the caller to locate at the launch."""
    cache = cache if cache is not None else DiskCache()
    parsed = parse_function(fn)
    clock = CompileLog(fn.__name__, sig)
    shown = dump.requested(tuple(stage.name for stage in STAGES))
    out: dict[str, Any] = {"fn": fn, "sig": sig, "cache": cache, "clock": clock, "on_built": on_built}
    try:
        for stage in STAGES:
            with clock.stage(stage.clock) if stage.clock is not None else nullcontext():
                out[stage.name] = stage.run(*(out[name] for name in stage.inputs))
            if stage.name in shown:
                dump.write(fn.__name__, sig, stage.name, stage.suffix, stage.show(out[stage.name]))
        clock.done()
    except CompileError as e:
        origin = failing_shim(e, out.get("shims"))
        if origin is not None:  # at the line of the op that wrote the shim, through the helpers it was inlined from
            if origin.stmt.loc is not None:
                e.locate(origin.stmt.loc)
            for site in reversed(origin.stmt.inlined):
                e.add_call_site(site)
            op = op_of(origin.stmt)
            what = public_name(op.publics[0]) if op is not None and op.publics else type(origin.stmt).__name__
            e.message += f" in the shim of {what} ({origin.shim}, lines {origin.first}-{origin.last} of the shims)"
        e.locate(parsed.loc(parsed.tree))
        e.message += " (generated code was rejected: this is a coop_tiles bug, please report it)"
        raise
    program, shims, bodies = out["rewritten"], out["shims"], out["body"]

    def ptx() -> bytes:  # (from the disk cache, as the cubin: a kernel loaded from it need not compile its bodies)
        def link() -> bytes:
            modules = kernel_modules(nvrtc_stage(shims, sig.arch, cache)[0], shims, bodies, sig)
            return toolchain.link(modules, sig.arch, output="ptx")

        return cache.get_or_make("ptx", kernel_key(shims, bodies, sig), link)

    source = "\n".join(b.source for b in bodies)
    return CompiledKernel(
        sig,
        program,
        out["plan"],
        shims.source,
        source,
        shims.kernel_name,
        out["cubin"],
        ptx,
        chain_bytes=shims.chain_bytes,
        launch_bytes=shims.launch_bytes,
        prepare_name=shims.prepare_name,
        timings=clock.seconds,
    )
