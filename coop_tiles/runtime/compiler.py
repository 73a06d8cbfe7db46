"""The compile pipeline, stage by stage: typed IR -> plan -> sources -> LTO-IR -> cubin.

Each stage is a plain function of the previous stage's output, so any of them can be run,
printed or tested on its own; `compile_kernel` runs them in order.
"""

from __future__ import annotations

from collections.abc import Callable

from ..codegen.numba_body import BodySource, generate_body, generate_combine
from ..codegen.shims import ShimSource, generate_shims, storage_query_source
from ..errors import CompileError
from ..lang import ir
from ..lang.frontend import build_program
from ..lang.source import parse_function
from ..ops.histogram import accumulate_in_shared_memory
from ..ops.memory import load_converted
from ..planner import LayoutPlan, Plan, StorageNeed, finish_plan, plan_layouts
from . import toolchain
from .cache import DiskCache, make_key
from .kernel import CompiledKernel, Signature


def build_stage(fn: Callable, sig: Signature) -> ir.Program:
    return build_program(fn, dict(sig.params), dict(sig.constexprs))


def rewrite_stage(program: ir.Program) -> ir.Program:
    """Rewrites of the typed IR for the GPU that keep its meaning (the interpreter runs it as
    built): histogram counts accumulated in shared memory through a loop, 16-bit float loads
    converted to float32 as they arrive."""
    accumulate_in_shared_memory(program)
    load_converted(program)
    return program


def layout_stage(program: ir.Program, sig: Signature) -> LayoutPlan:
    return plan_layouts(program, sig.block_threads)


def shim_stage(program: ir.Program, layouts: LayoutPlan) -> ShimSource:
    return generate_shims(program, layouts)


def storage_stage(shims: ShimSource, arch: str, cache: DiskCache) -> dict[int, StorageNeed]:
    """Each collective's TempStorage size and alignment, read from PTX.

    Sizes are cached per TempStorage declaration (CUB type, arch, toolchain), so the PTX
    query only compiles the declarations never seen before.
    """
    keys = {cid: make_key("storage", decl, arch, toolchain.versions()) for cid, decl in shims.storage_decls.items()}
    found = {cid: cache.get("storage", key) for cid, key in keys.items()}
    missing = {cid: shims.storage_decls[cid] for cid, need in found.items() if need is None}
    if missing:
        sizes = toolchain.read_storage_sizes(
            toolchain.nvrtc_compile(storage_query_source(missing, shims.headers), arch, "ptx")
        )
        for cid in missing:
            try:
                found[cid] = StorageNeed(sizes[f"coop_bytes_{cid}"], sizes[f"coop_align_{cid}"])
            except KeyError:
                raise CompileError(f"TempStorage size of collective {cid} missing from the PTX") from None
            cache.put("storage", keys[cid], found[cid])
    return found


def body_stage(program: ir.Program, plan: Plan, shims: ShimSource) -> list[BodySource]:
    """The program body, then each combine function, as Numba source."""
    body = generate_body(program, plan, shims.calls, function="body", abi_name=shims.body_name)
    return [body, *(generate_combine(c) for c in program.combines.values())]


def shim_ltoir(shims: ShimSource, arch: str, cache: DiskCache) -> bytes:
    key = make_key("ltoir", shims.source, arch, toolchain.versions())
    blob = cache.get("ltoir", key)
    if blob is None:
        blob = toolchain.nvrtc_compile(shims.source, arch, "ltoir")
        cache.put("ltoir", key, blob)
    return blob


def compile_kernel(fn: Callable, sig: Signature, cache: DiskCache | None = None) -> CompiledKernel:
    """Run every stage for `sig`; the cubin comes from the disk cache when the sources match.

    Mistakes in the program are located at its lines by the front end; the planner's errors
    (block size, tile too large) are left for the caller to locate at the launch."""
    cache = cache if cache is not None else DiskCache()
    parsed = parse_function(fn)
    program = rewrite_stage(build_stage(fn, sig))
    layouts = layout_stage(program, sig)
    shims = shim_stage(program, layouts)
    try:
        needs = storage_stage(shims, sig.arch, cache)
        plan = finish_plan(program, layouts, needs)
        bodies = body_stage(program, plan, shims)

        def ltoirs() -> list[tuple[str, bytes]]:
            modules = [("coop_shims", shim_ltoir(shims, sig.arch, cache))]
            for b in bodies:
                blob = toolchain.numba_compile(
                    b.source, b.function, b.abi_name, b.shims, b.param_types, sig.arch, sig.fastmath
                )
                modules.append((b.abi_name, blob))
            return modules

        key = make_key(
            "kernel",
            shims.source,
            [b.source for b in bodies],
            [[vars(s) for s in b.shims] for b in bodies],
            sig.arch,
            sig.fastmath,
            sig.max_registers,
            toolchain.versions(),
        )
        cubin = cache.get("kernel", key)
        if cubin is None:
            cubin = toolchain.link(ltoirs(), sig.arch, max_registers=sig.max_registers)
            cache.put("kernel", key, cubin)
    except CompileError as e:
        e.locate(parsed.loc(parsed.tree))
        e.message += " (generated code was rejected: this is a coop_tiles bug, please report it)"
        raise
    source = "\n".join(b.source for b in bodies)
    return CompiledKernel(sig, program, plan, shims.source, source, shims.kernel_name, cubin, ltoirs)
