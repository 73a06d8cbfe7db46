"""Choosing threads per block (`block_threads=None`) from the compiled kernel and the occupancy API.

The rule, per specialisation, at its first launch on a device:

1. Compile with the planner's default (min(256, largest tile rounded up to a warp), more
   threads when a tile would need over 32 items per thread; 32 items per thread, at least 128
   threads, for a chained scan: `choose_block_threads`), load it, and read its
   registers per thread, its TempStorage bytes and, from the occupancy API, how many blocks
   fit on a multiprocessor.
2. If those blocks keep at least half of the multiprocessor's thread slots busy, keep it:
   enough warps are resident to hide memory latency, and more items per thread means more
   independent loads in flight per thread.
3. Otherwise (registers or shared memory limit residency) also compile each other power of
   two from 64 to 1024 threads that keeps at most 32 items per thread, and take the one with
   the highest occupancy among those that do not spill registers to local memory (ties go to the
   size closest to the default; a spilling size only when every one spills): more threads means
   fewer registers each, and a program that needs many (a `tile.dot`'s accumulator and operands)
   spills at high thread counts, which costs far more than the occupancy gains (an H200, Mamba-2's
   chunk states: 1024 threads at 64 registers, 50% occupancy and 2.4 million spill requests, against
   256 threads at 164 registers without). Not for a chained scan:
   its blocks hold their tiles while they wait on the look-back, and more warps of fewer items
   each hold fewer bytes (an H100, whole-array linear recurrence of float32 pairs at TILE 4096:
   89% of its memory-traffic limit at the default 128 threads, 85% at 256). Nor for a program whose
   tiles are all STRIPED (element-wise math and reductions: softmax, layer norm) when registers, not
   shared memory, limit its residency and it does not spill: it issues every load of a tile at once, so
   its items per thread are its loads in flight, and more threads per block only make its reductions
   wait on more warps (an H200, 4096 rows of 8192 bfloat16, one row per program: layer norm 44.5 us at
   the default 256 threads, 59.7 at 512 and 67.9 at the 1024 that occupancy chose; 16384 columns: 126
   at the default 512 against 135.6 at 1024; softmax, which the default already kept, alike).

The choice and the numbers behind it are kept on the kernel (`kernel.block_choice`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .._log import get_logger
from ..errors import TileError
from ..planner.layout import REGISTER_ITEMS, STRIPED
from . import launcher
from .kernel import CompiledKernel, Signature

log = get_logger("blockdims")

MIN_OCCUPANCY = 0.5
CANDIDATES = (64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class Measured:
    block_threads: int
    registers: int
    shared_bytes: int
    blocks_per_sm: int
    occupancy: float  # resident threads / the multiprocessor's maximum
    local_bytes: int = 0  # local memory per thread (spilled registers)
    register_blocks: int = 0  # blocks per multiprocessor if shared memory set no limit (registers, threads do)


@dataclass(frozen=True)
class BlockChoice:
    block_threads: int
    reason: str
    measured: tuple[Measured, ...]

    def __str__(self) -> str:
        rows = ", ".join(
            f"{m.block_threads} threads: {m.registers} regs, {m.shared_bytes} B smem, {m.occupancy:.0%} occupancy"
            + (f", {m.local_bytes} B local" if m.local_bytes else "")
            for m in self.measured
        )
        return f"{self.block_threads} threads per block ({self.reason}; {rows})"


def measure(kernel: CompiledKernel, function: Any, device: Any) -> Measured:
    regs = function.attributes.num_regs
    regs = regs() if callable(regs) else regs
    blocks = function.occupancy.max_active_blocks_per_multiprocessor(kernel.block_threads, kernel.shared_bytes)
    occupancy = blocks * kernel.block_threads / device.properties.max_threads_per_multiprocessor
    register_blocks = function.occupancy.max_active_blocks_per_multiprocessor(kernel.block_threads, 0)
    return Measured(
        kernel.block_threads,
        int(regs),
        kernel.shared_bytes,
        blocks,
        occupancy,
        kernel.local_memory_bytes(),
        register_blocks,
    )


def select(jit: Any, sig: Signature, device: Any) -> CompiledKernel:
    """The kernel for `sig` (whose block_threads is None) with threads per block chosen by the rule."""
    default = jit._compile(sig)
    first = measure(default, launcher.load(default, device.device_id), device)
    kept = "default rule, occupancy is enough" if first.occupancy >= MIN_OCCUPANCY else None
    if default.chain_bytes is not None:
        kept = "default rule for a chained scan: resident tile bytes, not occupancy"
    elif kept is None and first.local_bytes == 0 and first.register_blocks <= first.blocks_per_sm:
        if all(t.arrangement == STRIPED for t in default.plan.tiles.values()):
            kept = "default rule for striped tiles limited by registers: items per thread, not occupancy"
    if kept is not None:
        default.block_choice = BlockChoice(first.block_threads, kept, (first,))
        log.info("%s: %s", default.program.name, default.block_choice)
        return default
    largest = max((t.size for t in default.plan.tiles.values()), default=1)
    measured, kernels = [first], {first.block_threads: default}
    for threads in CANDIDATES:
        if threads == first.block_threads or -(-largest // threads) > REGISTER_ITEMS:
            continue
        if threads > max(32, -(-largest // 32) * 32):
            continue
        try:
            candidate = jit._compile(replace(sig, block_threads=threads))
            measured.append(measure(candidate, launcher.load(candidate, device.device_id), device))
            kernels[threads] = candidate
        except TileError as e:
            log.debug("%s: %d threads per block cannot run: %s", default.program.name, threads, e.message)
            continue  # e.g. more shared memory than the device has at this size
    best = max(measured, key=lambda m: (m.local_bytes == 0, m.occupancy, -abs(m.block_threads - first.block_threads)))
    chosen = kernels[best.block_threads]
    chosen.block_choice = BlockChoice(best.block_threads, "highest occupancy", tuple(measured))
    log.info("%s: %s", chosen.program.name, chosen.block_choice)
    return chosen
