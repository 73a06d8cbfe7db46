"""A compiled kernel as plain data: what `kernel.compile(...)` returns and the launcher loads."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..lang import ir
from ..lang.types import ArrayType, ScalarType
from ..planner import Plan
from . import toolchain


@dataclass(frozen=True)
class Signature:
    """The specialisation key: argument types, constexpr values, block size setting, target arch,
    whether `ct.device_assert` is checked (debugging), and the code generation options of `ct.jit`
    (`fastmath`, `max_registers`)."""

    params: tuple[tuple[str, ArrayType | ScalarType], ...]
    constexprs: tuple[tuple[str, Any], ...]
    block_threads: int | None
    arch: str
    debug: bool = False
    fastmath: bool = False
    max_registers: int | None = None


@dataclass
class CompiledKernel:
    """A kernel compiled for one signature."""

    signature: Signature
    program: ir.Program
    plan: Plan
    shim_source: str
    numba_source: str
    kernel_name: str
    cubin: bytes
    _link_ptx: Callable[[], bytes] = field(repr=False)
    _ptx: bytes | None = field(default=None, repr=False)
    #: cuda.core Kernel per device id, filled by the launcher.
    loaded: dict = field(default_factory=dict, repr=False)
    #: `hook(kernel, loaded_function, device_id)` run once per device before the first launch.
    pre_launch_hooks: list[Callable[[CompiledKernel, Any, int], None]] = field(default_factory=list, repr=False)
    #: how threads per block were chosen at the first launch, when `block_threads=None`.
    block_choice: Any = field(default=None, repr=False)
    #: bytes per program of grid-wide state (a chained scan's), passed as the last parameter; None: none
    chain_bytes: int | None = None
    #: bytes of the launch's own state (cuBLASDx's device pipelines), passed after the arguments (and the chained
    #: scan's state), which kernel `prepare_name` of the same cubin fills from the same parameters before each
    #: launch; 0: none (see `runtime/launch_state.py`)
    launch_bytes: int = 0
    prepare_name: str = ""
    #: seconds per compile stage in this process ("front end", "NVRTC", "Numba setup" beside it,
    #: "plan", "Numba", "nvJitLink", "total"); stages served by the disk cache are absent.
    timings: dict[str, float] = field(default_factory=dict, repr=False)

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
            self._ptx = self._link_ptx()
        return self._ptx.decode()

    def registers(self) -> int:
        """Registers per thread of the kernel, from the cubin (no GPU needed)."""
        return toolchain.register_count(self.cubin, self.kernel_name)

    def local_memory_bytes(self) -> int:
        """Bytes of local (stack) memory per thread: `.local` arrays in the PTX, or the cubin's stack
        frame (which also holds register spills, as under `max_registers`); 0 for a well-formed kernel."""
        ptx = sum(int(m) for m in re.findall(r"\.local\s+\.align\s+\d+\s+\.b8\s+\S+\[(\d+)\]", self.ptx))
        return max(ptx, toolchain.frame_bytes(self.cubin, self.kernel_name))
