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
    TileIndexError,
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
    erf,
    exp,
    exp2,
    log,
    log1p,
    log2,
    maximum,
    minimum,
    num_programs,
    program_id,
    rsqrt,
    sigmoid,
    sin,
    softplus,
    sqrt,
    static_assert,
    static_print,
    tanh,
    where,
)
from .lang.combine import CombineFunction, combine
from .runtime.autotune import Autotuner, Config, autotune
from .runtime.kernel import CompiledKernel

#: The dtypes, as Triton and NumPy users spell them: NumPy's scalar types (`ct.int32` is
#: `np.int32`), except `ct.bfloat16`, which is ml_dtypes' (NumPy arrays of it in the interpreter,
#: torch.bfloat16 tensors on the GPU).
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
float16, float32, float64 = _np.float16, _np.float32, _np.float64
bfloat16 = _ml_dtypes.bfloat16
bool_ = _np.bool_

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
    "TileIndexError",
    "TileSyntaxError",
    "TileTypeError",
    "TileValueError",
    "abs",
    "autotune",
    "bfloat16",
    "bool_",
    "cdiv",
    "combine",
    "constexpr",
    "cos",
    "device_assert",
    "device_print",
    "erf",
    "exp",
    "exp2",
    "float16",
    "float32",
    "float64",
    "int16",
    "int32",
    "int64",
    "int8",
    "jit",
    "log",
    "log1p",
    "log2",
    "maximum",
    "minimum",
    "num_programs",
    "ops",
    "program_id",
    "rsqrt",
    "sigmoid",
    "sin",
    "softplus",
    "sqrt",
    "static_assert",
    "static_print",
    "tanh",
    "testing",
    "tile",
    "uint16",
    "uint32",
    "uint64",
    "uint8",
    "where",
]
