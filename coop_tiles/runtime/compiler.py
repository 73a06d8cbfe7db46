"""The compile pipeline, stage by stage: typed IR -> plan -> sources -> LTO-IR -> cubin.

`STAGES` lists the stages in order; each is a plain function of the previous stage's
output, so any of them can be run, printed or tested on its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..codegen.numba_body import BodySource, generate_body
from ..codegen.shims import ShimSource, generate_shims, storage_query_source
from ..errors import CompileError, TileError
from ..lang import ir
from ..lang.frontend import build_program
from ..lang.source import parse_function
from ..lang.types import ArrayType, ScalarType
from ..planner import LayoutPlan, Plan, StorageNeed, finish_plan, plan_layouts
from . import toolchain
from .cache import DiskCache, make_key


@dataclass(frozen=True)
class Signature:
    """The specialisation key: argument types, constexpr values, block size setting and target arch."""

    params: tuple[tuple[str, ArrayType | ScalarType], ...]
    constexprs: tuple[tuple[str, Any], ...]
    block_threads: int | None
    arch: str


@dataclass
class CompiledKernel:
    """A kernel compiled for one signature; what `kernel.compile(...)` returns."""

    signature: Signature
    program: ir.Program
    plan: Plan
    shim_source: str
    numba_source: str
    kernel_name: str
    cubin: bytes
    _ltoirs: Callable[[], list[tuple[str, bytes]]] = field(repr=False)
    _ptx: bytes | None = field(default=None, repr=False)
    #: cuda.core Kernel per device id, filled by the launcher.
    loaded: dict = field(default_factory=dict, repr=False)
    #: `hook(kernel, loaded_function, device_id)` run once per device before the first launch.
    pre_launch_hooks: list[Callable[[CompiledKernel, Any, int], None]] = field(default_factory=list, repr=False)

    #: how threads per block were chosen at the first launch, when `block_threads=None`.
    block_choice: Any = field(default=None, repr=False)

    def add_pre_launch_hook(self, hook: Callable[[CompiledKernel, Any, int], None]) -> None:
        """Run `hook(kernel, function, device_id)` once on each device, before the first launch there
        (the runtime's own dynamic shared memory opt-in is such a hook)."""
        self.pre_launch_hooks.append(hook)

    @property
    def shared_bytes(self) -> int:
        """Bytes of dynamic shared memory (the TempStorage carve) each block needs."""
        return self.plan.shared_bytes

    @property
    def block_threads(self) -> int:
        return self.plan.block_threads

    @property
    def arch(self) -> str:
        return self.signature.arch

    @property
    def ptx(self) -> str:
        """The linked, optimised PTX of the whole kernel (computed on first access)."""
        if self._ptx is None:
            self._ptx = toolchain.link(self._ltoirs(), self.arch, output="ptx")
        return self._ptx.decode()

    def local_memory_bytes(self) -> int:
        """Bytes of `.local` (stack/spill) memory in the PTX; 0 for a well-formed kernel."""
        return sum(int(m) for m in re.findall(r"\.local \.align \d+ \.b8 \S+\[(\d+)\]", self.ptx))


def build_stage(fn: Callable, sig: Signature) -> ir.Program:
    return build_program(fn, dict(sig.params), dict(sig.constexprs))


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
        sizes = toolchain.read_storage_sizes(toolchain.nvrtc_compile(storage_query_source(missing), arch, "ptx"))
        for cid in missing:
            try:
                found[cid] = StorageNeed(sizes[f"coop_bytes_{cid}"], sizes[f"coop_align_{cid}"])
            except KeyError:
                raise CompileError(f"TempStorage size of collective {cid} missing from the PTX") from None
            cache.put("storage", keys[cid], found[cid])
    return found


def body_stage(program: ir.Program, plan: Plan, shims: ShimSource) -> BodySource:
    return generate_body(program, plan, function="body")


def shim_ltoir(shims: ShimSource, arch: str, cache: DiskCache) -> bytes:
    key = make_key("ltoir", shims.source, arch, toolchain.versions())
    blob = cache.get("ltoir", key)
    if blob is None:
        blob = toolchain.nvrtc_compile(shims.source, arch, "ltoir")
        cache.put("ltoir", key, blob)
    return blob


STAGES: dict[str, Callable] = {
    "typed_ir": build_stage,
    "layouts": layout_stage,
    "shim_source": shim_stage,
    "storage": storage_stage,
    "numba_source": body_stage,
    "shim_ltoir": shim_ltoir,
    "body_ltoir": toolchain.numba_compile,
    "cubin": toolchain.link,
}


def compile_kernel(fn: Callable, sig: Signature, cache: DiskCache | None = None) -> CompiledKernel:
    """Run every stage for `sig`; the cubin comes from the disk cache when the sources match."""
    cache = cache if cache is not None else DiskCache()
    parsed = parse_function(fn)
    program = build_stage(fn, sig)
    layouts = layout_stage(program, sig)
    shims = shim_stage(program, layouts)
    try:
        needs = storage_stage(shims, sig.arch, cache)
        plan = finish_plan(program, layouts, needs)
        body = body_stage(program, plan, shims)

        def ltoirs() -> list[tuple[str, bytes]]:
            body_ir = toolchain.numba_compile(
                body.source, body.function, shims.body_name, body.shims, body.param_types, sig.arch
            )
            return [("coop_shims", shim_ltoir(shims, sig.arch, cache)), ("coop_body", body_ir)]

        key = make_key(
            "kernel", shims.source, body.source, [vars(s) for s in body.shims], sig.arch, toolchain.versions()
        )
        cubin = cache.get("kernel", key)
        if cubin is None:
            cubin = toolchain.link(ltoirs(), sig.arch)
            cache.put("kernel", key, cubin)
    except TileError as e:
        e.locate(parsed.loc(parsed.tree))
        if isinstance(e, CompileError):
            e.message += " (generated code was rejected: this is a coop_tiles bug, please report it)"
        raise
    kernel = CompiledKernel(sig, program, plan, shims.source, body.source, shims.kernel_name, cubin, ltoirs)
    from .launcher import opt_in_dynamic_shared_memory

    kernel.add_pre_launch_hook(opt_in_dynamic_shared_memory)
    return kernel
