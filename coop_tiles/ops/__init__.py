"""The tile ops, each defined once (see `base.TileOp`); importing this package registers them all."""

from . import (
    argmax,
    atomic,
    construct,
    debug,
    histogram,
    indexed,
    memory,
    memory2d,
    neighbors,
    reduce,
    rows,
    run_length,
    scalars,
    scan,
    shape,
    sort,
)

__all__ = [
    "argmax",
    "atomic",
    "construct",
    "debug",
    "histogram",
    "indexed",
    "memory",
    "memory2d",
    "rows",
    "neighbors",
    "reduce",
    "run_length",
    "scalars",
    "scan",
    "shape",
    "sort",
]
