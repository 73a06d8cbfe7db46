"""The tile ops, each defined once (see `base.TileOp`); importing this package registers them all."""

from . import atomic, construct, histogram, memory, neighbors, reduce, run_length, scalars, scan, sort

__all__ = ["atomic", "construct", "histogram", "memory", "neighbors", "reduce", "run_length", "scalars", "scan", "sort"]
