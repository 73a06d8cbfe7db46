"""Timing shared by every section: CUDA-event medians (`ct.testing.do_bench`), host time per launch, the best of
several configurations, and failures kept as results so that one missing baseline does not stop a run."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import coop_tiles as ct


def cuda_time_ms(fn, before: Callable[[], None] | None = None, *, host_ahead: bool = False) -> float:
    """Median milliseconds per fn() call from `ct.testing.do_bench`: CUDA events on the current stream, the L2
    cache flushed before each call. `before()` (resetting an output that fn accumulates into) runs before every
    call, outside the timed interval; `host_ahead`: the GPU's time alone, the host's time to queue the call's work
    left out (do_bench's `host_ahead`)."""
    return ct.testing.do_bench(fn, setup=before, host_ahead=host_ahead)


def host_overheads_us(launches: dict[str, Callable[[], None]], count: int = 2000, reps: int = 15) -> dict:
    """Median host time per launch of each callable, over `reps` rounds of `count` launches that
    take turns (so drifting clocks and caches affect them alike)."""
    import cupy as cp

    for launch in launches.values():
        for _ in range(200):
            launch()
    cp.cuda.runtime.deviceSynchronize()
    times: dict[str, list[float]] = {name: [] for name in launches}
    for _ in range(reps):
        for name, launch in launches.items():
            t0 = time.perf_counter()
            for _ in range(count):
                launch()
            times[name].append((time.perf_counter() - t0) / count * 1e6)
            cp.cuda.runtime.deviceSynchronize()
    return {name: statistics.median(t) for name, t in times.items()}


def tune(
    configs: Any,
    launch: Callable,
    reset: Callable[[], None],
    check: Callable[[Any], bool],
    *,
    reset_each_rep: bool = False,
) -> dict:
    """Time `launch(config)()` for each config on an output poisoned by `reset()`, then `check(config)` what it
    wrote: the fastest config, its time, every config's time, and whether every config was correct. With
    `reset_each_rep`, reset() runs before every repetition, outside the timing (for kernels that accumulate into
    their output)."""
    times, correct = {}, True
    for config in configs:
        reset()
        times[config] = cuda_time_ms(launch(config), before=reset if reset_each_rep else None)
        correct = bool(check(config)) and correct
    best = min(times, key=times.get)
    return {"best": best, "ms": times[best], "times": times, "correct": correct}


def tune_working(
    configs: Any,
    launch: Callable,
    reset: Callable[[], None],
    check: Callable[[Any], bool],
) -> dict:
    """`tune` over the configs whose first launch works (the others, a block size too large for a tile's shared
    memory or a block shape Triton refuses, are listed under `skipped` with their failures); raises the first failure
    when none works."""
    working, skipped = [], {}
    for config in configs:
        try:
            reset()
            launch(config)()
            working.append(config)
        except Exception as error:
            skipped[config] = failure(error)
    if not working:
        raise RuntimeError(f"every config failed; {next(iter(skipped.values()))}")
    return {**tune(working, launch, reset, check), "skipped": skipped}


def failure(error: BaseException) -> str:
    """`Type: first line of the message`, short and safe inside a markdown table cell."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    if len(text) > 160:
        text = text[:157] + "..."
    return text.replace("|", "\\|")


def guarded(measure: Callable[..., dict], *args: Any) -> dict:
    """measure(*args), or {"error": ...} when it raises, so that a failure (Triton missing, a feature the
    library does not have yet) shows in its own cell or row and the run goes on."""
    try:
        return measure(*args)
    except Exception as error:
        return {"error": failure(error)}


def section_rows(rows: Callable[..., list[dict]], *args: Any) -> list[dict]:
    """rows(*args), or a single row holding the failure when the section cannot even start (no PyTorch, ...)."""
    try:
        return rows(*args)
    except Exception as error:
        return [{"error": failure(error)}]
