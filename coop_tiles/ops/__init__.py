"""The tile ops, each defined once (see `base.TileOp`); importing this package registers them all."""

from . import construct, memory, reduce, scalars, scan

__all__ = ["construct", "memory", "reduce", "scalars", "scan"]
