"""The tile ops, each defined once (see `base.TileOp`); importing this package registers them all."""

from . import atomic, construct, debug, histogram, indexed, memory, neighbors, reduce, run_length, scalars, scan, sort

__all__ = [
    "atomic",
    "construct",
    "debug",
    "histogram",
    "indexed",
    "memory",
    "neighbors",
    "reduce",
    "run_length",
    "scalars",
    "scan",
    "sort",
]
