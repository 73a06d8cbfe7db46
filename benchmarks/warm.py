"""Compiling a section's kernels before it is timed: each item's `function(item)` runs in a spawn-context worker
process (each with its own CUDA context), so that the compiles run side by side and land in the disk caches that the
timing process then reads (coop_tiles' `COOP_TILES_CACHE_DIR`, Triton's own cache). A warm-up only saves time: its
failures are logged, never raised, and the timed run records its own failures as it always did.
`COOP_BENCH_WARM=0` turns it off (everything then compiles in the timing process, one kernel after the other).

A worker's function launches exactly what the timed run will launch (the same dtypes, constexprs, block sizes and
configs, at the section's shapes where a constexpr depends on them): what it does not launch is not warmed."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from types import ModuleType
from typing import Any

from benchmarks.timing import failure

#: the environment variable that turns the warm-up off ("0", "false", "no" or "off")
ENV = "COOP_BENCH_WARM"
#: the most worker processes a warm-up starts (each holds a CUDA context and compiles on one core)
MAX_WORKERS = 12


def enabled() -> bool:
    """Whether `COOP_BENCH_WARM` leaves the warm-up on (it is on unless set to 0, false, no or off)."""
    return os.environ.get(ENV, "").strip().lower() not in ("0", "false", "no", "off")


def worker_count(items: int, workers: int | None = None) -> int:
    """The processes for `items` items: `workers` (default MAX_WORKERS), at most MAX_WORKERS, one core fewer than
    the machine's and one per item."""
    cores = (os.cpu_count() or 1) - 1
    return max(0, min(MAX_WORKERS if workers is None else workers, MAX_WORKERS, cores, items))


def attempt(function: Callable[[Any], Any], item: Any) -> str | None:
    """function(item): None, or its failure as `timing.failure` writes it (what a worker sends back)."""
    try:
        function(item)
        return None
    except Exception as error:
        return failure(error)


def warm_in_workers(
    function: Callable[[Any], Any],
    items: Iterable[Any],
    workers: int | None = None,
    *,
    then: Iterable[Any] = (),
    label: str | None = None,
) -> list[str | None]:
    """Run the module-level `function(item)` for each of `items`, then of `then` (items whose kernels share some
    with the first, e.g. a program that only the first compile), in a spawn pool of `worker_count` processes (0 or
    1: in this process). Returns per item (`items` then `then`) None, or the failure text; never raises. Logs to
    stderr how long it took and each failure; with COOP_BENCH_WARM=0 runs nothing and returns None per item."""
    rounds = [list(items), list(then)]
    everything = rounds[0] + rounds[1]
    name = label or getattr(function, "__qualname__", "warm-up")
    if not enabled():
        _log(f"warm-up of {name}: off ({ENV}=0)")
        return [None] * len(everything)
    count = worker_count(max(map(len, rounds)), workers)
    started = time.perf_counter()
    if count <= 1:
        results = [attempt(function, item) for item in everything]
    else:
        results = _in_pool(function, rounds, count)
    failed = [(item, text) for item, text in zip(everything, results) if text is not None]
    where = f"{count} worker processes" if count > 1 else "this process"
    _log(
        f"warm-up of {name}: {len(everything)} items in {where}, {time.perf_counter() - started:.1f} s"
        + (f", {len(failed)} failed" if failed else "")
    )
    for item, text in failed:
        _log(f"  {item!r}: {text}")
    return results


def _in_pool(function: Callable[[Any], Any], rounds: Sequence[list[Any]], count: int) -> list[str | None]:
    """Each round's items in one spawn pool, a round once the one before has finished; a worker that dies (a
    fault, the pool broken) fails its items, and the pool failing to start fails them all."""
    results: list[str | None] = []
    try:
        with ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn")) as pool:
            for items in rounds:
                futures = [pool.submit(attempt, function, item) for item in items]
                for future in futures:
                    try:
                        results.append(future.result())
                    except Exception as error:
                        results.append(failure(error))
    except Exception as error:
        text = failure(error)
        results += [text] * (sum(map(len, rounds)) - len(results))
    return results


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def triton_autotuners(modules: Iterable[ModuleType]) -> dict[str, Any]:
    """The Triton autotuners (`triton.autotune` kernels) that `modules` hold, by attribute name."""
    from triton.runtime.autotuner import Autotuner

    return {name: value for module in modules for name, value in vars(module).items() if isinstance(value, Autotuner)}


@contextlib.contextmanager
def one_triton_config(modules: Iterable[ModuleType], target: str, index: int) -> Iterator[None]:
    """Within: the Triton autotuner `target` of `modules` keeps only its config `index` (Triton then compiles and
    launches that one and times none) and every other autotuner there launches nothing, so that a worker compiles
    one config of one kernel into Triton's cache. KeyError for a target that is not there."""
    tuners = triton_autotuners(modules)
    tuner = tuners[target]
    saved = tuner.configs
    others = [other for name, other in tuners.items() if other is not tuner]
    tuner.configs = [saved[index]]
    for other in others:
        other.run = _launch_nothing
    try:
        yield
    finally:
        tuner.configs = saved
        for other in others:
            vars(other).pop("run", None)


def _launch_nothing(*args: Any, **kwargs: Any) -> None:
    """What another kernel's launch does while one config compiles: nothing (its outputs stay as allocated)."""
