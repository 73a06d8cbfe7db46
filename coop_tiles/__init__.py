"""coop_tiles: block-level tile programs for CUDA in Python, compiled to CUB-backed kernels.

import coop_tiles as ct
from coop_tiles import tile

@ct.jit
def cumsum(x, y, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, tile.scan(t), valid=n - base)

cumsum[ct.cdiv(n, 4096)](x, y, n, TILE=4096)
"""

import ml_dtypes as _ml_dtypes
import numpy as _np

from . import _log, ops, testing, tile  # noqa: F401 - _log first: COOP_TILES_LOG applies to all that follows
from .errors import (
    CompileError,
    DivergenceError,
    LaunchError,
    SharedMemoryError,
    TileAssertionError,
    TileError,
    TileSyntaxError,
    TileTypeError,
    TileValueError,
)
from .jit import JITFunction, jit
from .lang.builtins import (
    abs,
    cdiv,
    constexpr,
    cos,
    device_assert,
    device_print,
    exp,
    exp2,
    log,
    log1p,
    maximum,
    minimum,
    num_programs,
    program_id,
    sigmoid,
    sin,
    softplus,
    sqrt,
    static_print,
    where,
)
from .lang.combine import CombineFunction, combine
from .runtime.autotune import Autotuner, Config, autotune
from .runtime.kernel import CompiledKernel

#: 16-bit floats: `ct.bfloat16` is ml_dtypes' bfloat16 scalar type (NumPy arrays of it in the
#: interpreter, torch.bfloat16 tensors on the GPU); `ct.float16` is NumPy's.
bfloat16 = _ml_dtypes.bfloat16
float16 = _np.float16

__version__ = "0.1.0"

__all__ = [
    "Autotuner",
    "CombineFunction",
    "CompileError",
    "Config",
    "CompiledKernel",
    "DivergenceError",
    "JITFunction",
    "LaunchError",
    "SharedMemoryError",
    "TileAssertionError",
    "TileError",
    "TileSyntaxError",
    "TileTypeError",
    "TileValueError",
    "abs",
    "autotune",
    "bfloat16",
    "cdiv",
    "combine",
    "constexpr",
    "cos",
    "device_assert",
    "device_print",
    "exp",
    "exp2",
    "float16",
    "jit",
    "log",
    "log1p",
    "maximum",
    "minimum",
    "num_programs",
    "ops",
    "program_id",
    "sigmoid",
    "sin",
    "softplus",
    "sqrt",
    "static_print",
    "testing",
    "tile",
    "where",
]
