"""The `coop_tiles` logger, and `COOP_TILES_LOG=info|debug` to send it to stderr.

Compiles, cache hits and misses, block-size choices and autotuning are logged under the
`coop_tiles` logger (children per component: `coop_tiles.compile`, `coop_tiles.cache`, ...),
so applications configure them with the standard `logging` module. Setting `COOP_TILES_LOG`
to a level name installs a stderr handler at import, for scripts that configure nothing.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("coop_tiles")
logger.addHandler(logging.NullHandler())  # a library logs nothing unless the application asks

ENV = "COOP_TILES_LOG"
LEVELS = ("debug", "info", "warning", "error")
FORMAT = "[coop_tiles %(levelname)s] %(message)s"


def get_logger(component: str) -> logging.Logger:
    """The logger of one component, e.g. ``get_logger("compile")`` -> ``coop_tiles.compile``."""
    return logger.getChild(component)


def install_stderr_handler(level: str) -> logging.Handler | None:
    """Send coop_tiles' records at `level` and above to stderr (what `COOP_TILES_LOG` does);
    an unknown level name is reported as a warning and treated as "info"."""
    name = level.strip().lower()
    if not name or name in ("0", "off", "none"):
        return None
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    logger.addHandler(handler)
    logger.propagate = False  # printed once, even when the application also logs to stderr
    logger.setLevel(name.upper() if name in LEVELS else logging.INFO)
    if name not in LEVELS:
        logger.warning("%s=%r is not one of %s; logging at info", ENV, level, ", ".join(LEVELS))
    return handler


install_stderr_handler(os.environ.get(ENV, ""))
