"""`@ct.autotune`: measure configurations on first use, remember the best on disk.

Timings are cached per configuration (keyed by program source, key values, argument types,
device, arch, toolchain and the config itself), so editing the config list re-measures only
the new configs, and a second process with the same key measures nothing.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import testing
from .._log import get_logger
from ..errors import LaunchError, TileError, TileTypeError, TileValueError
from ..lang.suggest import did_you_mean_among
from . import launcher, toolchain
from .cache import DiskCache, make_key

log = get_logger("autotune")


@dataclass(frozen=True)
class Config:
    """One candidate: threads per block and constexpr values, e.g. ``Config(block_threads=128, TILE=2048)``."""

    block_threads: int | None = None
    constexprs: tuple[tuple[str, Any], ...] = ()

    def __init__(self, block_threads: int | None = None, **constexprs: Any):
        object.__setattr__(self, "block_threads", block_threads)
        object.__setattr__(self, "constexprs", tuple(sorted(constexprs.items())))

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.constexprs)

    def __str__(self) -> str:
        parts = [f"block_threads={self.block_threads}"] + [f"{k}={v!r}" for k, v in self.constexprs]
        return f"Config({', '.join(parts)})"


@dataclass
class Trial:
    config: Config
    ms: float | None
    reason: str | None = None  # why the config was skipped, when it was
    cached: bool = False


def _zero(array: Any) -> None:
    if hasattr(array, "zero_"):
        array.zero_()
    elif hasattr(array, "fill"):
        array.fill(0)
    else:
        array[:] = 0


def _copy(array: Any) -> Any:
    return array.clone() if hasattr(array, "clone") else array.copy()


def _restore(array: Any, saved: Any) -> None:
    if hasattr(array, "copy_"):
        array.copy_(saved)
    else:
        array[...] = saved


@dataclass
class Autotuner:
    """Wraps a JITFunction: ``tuned[grid](*args, **constexprs)`` launches the best config for the key."""

    kernel: Any  # JITFunction
    configs: list[Config]
    key: list[str]
    reset: list[str] = field(default_factory=list)
    restore: list[str] = field(default_factory=list)
    progress: bool | None = None
    warmup: int = 3
    reps: int = 10
    #: `timer(launch, stream, config) -> ms`; replace it to test tuning without a GPU.
    timer: Callable[[Callable[[], None], int, Config], float] | None = None
    _best: dict[tuple, Config] = field(default_factory=dict, repr=False)
    _variants: dict[int | None, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.configs:
            raise TileError("ct.autotune needs at least one ct.Config")
        params = self.kernel.parsed.params
        for name in (*self.key, *self.reset, *self.restore):
            if name not in params:
                raise TileError(f"ct.autotune names {name!r}, which is not a parameter of {self.kernel.__name__}")
        for config in self.configs:
            self._check_config(config)
        self.__name__ = self.kernel.__name__
        #: the parameters the configs set, which a launch must leave to them
        self.tuned = frozenset(name for config in self.configs for name, _ in config.constexprs)

    def _check_config(self, config: Any) -> None:
        """A config sets `block_threads` and constexpr parameters of the kernel, nothing else."""
        if not isinstance(config, Config):
            raise TileTypeError(f"ct.autotune takes a list of ct.Config, got {config!r}")
        params = self.kernel.parsed.params
        kernel, constexprs = self.kernel.__name__, [p for p in params if p in self.kernel.parsed.constexprs]
        for name, value in config.constexprs:
            if name in constexprs:
                continue
            if name == "num_warps":
                threads = f"block_threads={value * 32}" if isinstance(value, int) else "block_threads"
                raise TileValueError(
                    f"{config} sets num_warps: coop_tiles counts threads, not warps; use {threads} (num_warps * 32)"
                )
            allowed = f"block_threads and the ct.constexpr parameters of {kernel} ({', '.join(constexprs) or 'none'})"
            if name in params:
                what = f"{name!r}, a runtime parameter of {kernel}"
            else:
                what = f"{name!r}, which is not a parameter of {kernel}{did_you_mean_among(name, constexprs)}"
            raise TileValueError(f"{config} sets {what}; a config sets {allowed}")

    def check_launch(self, args: tuple, kwargs: dict) -> None:
        """A LaunchError when the launch passes a parameter the configs set."""
        given = set(self.kernel.parsed.params[: len(args)]) | set(kwargs)
        clash = [name for name in self.kernel.parsed.params if name in given and name in self.tuned]
        if clash:
            names = ", ".join(repr(name) for name in clash)
            raise LaunchError(
                f"{self.__name__} is autotuned: its configs set {names}, so the launch must not pass "
                f"{'it' if len(clash) == 1 else 'them'}"
            )

    # ----- the key and the cache -------------------------------------------------------------------
    def _values(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        values = dict(zip(self.kernel.parsed.params, args))
        values.update(kwargs)
        return values

    def _key_value(self, value: Any) -> Any:
        if isinstance(value, (bool, int, float, str)) or value is None:
            return value
        dtype = getattr(value, "dtype", None)
        return f"array<{dtype}>" if dtype is not None else repr(value)

    def tuning_key(self, args: tuple, kwargs: dict, device: str, arch: str) -> tuple:
        values = self._values(args, kwargs)
        keyed = tuple((k, self._key_value(values[k])) for k in self.key)
        types = tuple(
            (name, self._key_value(v) if not isinstance(v, (int, float, bool)) else type(v).__name__)
            for name, v in values.items()
        )
        # debug launches synchronise after each kernel: their timings must not serve normal launches
        return (self.kernel.parsed.source_hash, keyed, types, device, arch, self.kernel._debugging())

    def _entry_key(self, tuning_key: tuple, config: Config) -> str:
        return make_key("autotune", tuning_key, str(config), toolchain.versions())

    # ----- choosing ------------------------------------------------------------------------------
    def variant(self, block_threads: int | None, interpret: bool = False) -> Any:
        variant = self._variants.get((block_threads, interpret))
        if variant is None:
            from ..jit import JITFunction

            variant = JITFunction(
                self.kernel.fn,
                block_threads=block_threads,
                interpret=interpret,
                debug=self.kernel.debug,
                fastmath=self.kernel.fastmath,
                max_registers=self.kernel.max_registers,
                arch=self.kernel.arch,
            )
            variant._hooks = list(self.kernel._hooks)
            variant._static_printed = self.kernel._static_printed  # one specialisation's prints, once
            variant = self._variants.setdefault((block_threads, interpret), variant)  # whichever thread made it
        return variant

    def best_config(
        self, grid: Any, stream: Any, args: tuple, kwargs: dict, *, device: str | None = None, arch: str | None = None
    ) -> Config:
        """The fastest config for these arguments: from memory, the disk cache, or by measuring on
        the device that holds the arrays (the launch's device; timings are kept per device model)."""
        device_id = None
        if device is None or arch is None:
            reason = launcher.no_gpu_reason()
            if reason is not None:
                raise TileError(
                    f"no CUDA GPU found ({reason}) to time the configs of {self.__name__} on; set "
                    "COOP_TILES_INTERPRET=1 to run its first config in the interpreter, or compile a config "
                    f'without a GPU with {self.__name__}.kernel.compile(..., arch="sm_90")'
                )
            device_id = self.kernel.launch_device(self._values(args, kwargs))
            device = device or launcher.device(device_id).name
            arch = arch or self.kernel.launch_arch(device_id)
        tuning_key = self.tuning_key(args, kwargs, device, arch)
        best = self._best.get(tuning_key)
        if best is not None:
            return best
        cache = DiskCache()
        trials, todo = [], []
        for config in self.configs:
            cached = cache.get("autotune", self._entry_key(tuning_key, config))
            if cached is not None:
                trials.append(Trial(config, cached.get("ms"), cached.get("reason"), cached=True))
            else:
                todo.append(config)
        if todo:
            keyed = {name: value for name, value in tuning_key[1]}
            with launcher.on_device(device_id) if device_id is not None else contextlib.nullcontext():
                trials += self._measure(todo, grid, stream, args, kwargs, arch, device_id)
            for t in trials[len(trials) - len(todo) :]:
                entry = {"ms": t.ms, "reason": t.reason, "kernel": self.__name__, "config": str(t.config)}
                entry.update(key=keyed, device=device, arch=arch)  # for `python -m coop_tiles tune list`
                cache.put("autotune", self._entry_key(tuning_key, t.config), entry)
        ok = [t for t in trials if t.ms is not None]
        if not ok:
            reasons = "; ".join(f"{t.config}: {t.reason}" for t in trials)
            raise TileError(f"no autotuning config of {self.__name__} could run: {reasons}")
        best = min(ok, key=lambda t: t.ms).config
        self._report(trials, best, tuning_key)
        self._best[tuning_key] = best
        return best

    def _measure(
        self, configs: list[Config], grid: Any, stream: Any, args: tuple, kwargs: dict, arch: str, device_id: int | None
    ) -> list[Trial]:
        values = self._values(args, kwargs)
        saved = {name: _copy(values[name]) for name in self.restore}
        bar = self._progress(len(configs))
        trials = []
        try:
            for config in configs:
                trials.append(self._trial(config, grid, stream, args, kwargs, values, saved, arch, device_id))
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
            for name, copy in saved.items():
                _restore(values[name], copy)
            for name in self.reset:
                _zero(values[name])
        return trials

    def _trial(
        self,
        config: Config,
        grid: Any,
        stream: Any,
        args: tuple,
        kwargs: dict,
        values: dict,
        saved: dict,
        arch: str,
        device_id: int | None,
    ) -> Trial:
        variant = self.variant(config.block_threads)
        merged = {**kwargs, **config.kwargs}

        def prepare() -> None:
            for name, copy in saved.items():
                _restore(values[name], copy)
            for name in self.reset:
                _zero(values[name])

        def launch() -> None:
            variant.run(grid, stream, args, merged)

        try:  # a config that cannot compile, load or launch is skipped, with the reason
            variant.compile(*args, arch=arch, **merged)
            handle = self._stream_handle(stream, args, device_id)
            if self.timer is not None:
                return Trial(config, self.timer(lambda: (prepare(), launch()), handle, config))
            # prepare() runs before each timed launch, outside the timed interval
            times = testing.event_times(launch, self.warmup, self.reps, stream=handle, setup=prepare)
            return Trial(config, statistics.median(times))
        except TileError as e:
            return Trial(config, None, f"{type(e).__name__}: {e.message}")

    def _stream_handle(self, stream: Any, args: tuple, device_id: int | None) -> int:
        libraries = 0
        for a in args:
            module = type(a).__module__.split(".")[0]
            libraries |= launcher.LIBRARY_BITS.get(module, 0)
        return launcher.stream_handle(stream, libraries, device_id or 0)

    def _progress(self, total: int):
        show = self.progress if self.progress is not None else sys.stderr.isatty()
        if not show:
            return None
        from tqdm import tqdm

        return tqdm(total=total, desc=f"autotuning {self.__name__}", unit="config", leave=False)

    def _report(self, trials: list[Trial], best: Config, tuning_key: tuple) -> None:
        keyed = ", ".join(f"{name}={value!r}" for name, value in tuning_key[1])
        lines = [f"autotuned {self.__name__}({keyed}) on {tuning_key[3]} ({tuning_key[4]}):"]
        for t in trials:
            result = f"{t.ms:.4f} ms" if t.ms is not None else f"skipped ({t.reason})"
            lines.append(f"  {t.config}: {result}{' (cached)' if t.cached else ''}")
        lines.append(f"  best: {best}")
        log.info("\n".join(lines))

    # ----- launching -------------------------------------------------------------------------------
    def __getitem__(self, launch: Any) -> Callable[..., None]:
        bound = self.kernel[launch]  # parses grid and stream the same way as a plain kernel
        grid, stream = bound.grid, bound.stream

        def run(*args: Any, **kwargs: Any) -> None:
            from ..jit import located_at_caller

            try:
                self.check_launch(args, kwargs)
            except TileError as e:
                raise located_at_caller(e) from None
            interpret = self.kernel.interpreting()
            if interpret:  # nothing to time: the first config, in the interpreter
                config = self.configs[0]
                log.info("%s runs in the interpreter: not tuning, running its first config %s", self.__name__, config)
            else:
                try:
                    config = self.best_config(grid, stream, args, kwargs)
                except TileError as e:
                    raise located_at_caller(e) from None
            self.variant(config.block_threads, interpret)[grid, stream](*args, **kwargs, **config.kwargs)

        return run


def autotune(
    configs: Sequence[Config],
    key: Sequence[str] = (),
    reset: Sequence[str] = (),
    restore: Sequence[str] = (),
    *,
    progress: bool | None = None,
    warmup: int = 3,
    reps: int = 10,
) -> Callable[[Any], Autotuner]:
    """Autotune a ``@ct.jit`` program over `configs`, per value of the `key` arguments.

    ``reset`` arguments are zeroed and ``restore`` arguments restored before every trial, so
    tuning never corrupts outputs; the best config per key is kept in the disk cache.
    ``progress`` shows a progress bar (default: when stderr is a terminal); every timing and
    the choice are logged at info (``COOP_TILES_LOG=info`` prints them). In the interpreter
    (``interpret=True`` or ``COOP_TILES_INTERPRET=1``) nothing is timed: the first config runs.
    """

    def wrap(kernel: Any) -> Autotuner:
        from ..jit import JITFunction, located_at_caller

        try:
            if not isinstance(kernel, JITFunction):
                raise TileError("@ct.autotune goes above @ct.jit")
            return Autotuner(kernel, list(configs), list(key), list(reset), list(restore), progress, warmup, reps)
        except TileError as e:  # located at the decorator
            raise located_at_caller(e) from None

    return wrap
