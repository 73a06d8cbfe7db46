"""Tile operations: what a whole thread block does to a tile, collectively.

``from coop_tiles import tile``. These are the documented signatures; they run only inside
``@ct.jit`` programs, where the front end binds each call against them and the op's
definition in `coop_tiles.ops` types, interprets and lowers it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .lang.stub import stub

__all__ = [
    "load",
    "store",
    "atomic_add",
    "atomic_max",
    "atomic_min",
    "gather",
    "scatter",
    "full",
    "zeros",
    "arange",
    "scan",
    "reduce",
    "sum",
    "max",
    "min",
    "histogram",
    "sort",
    "topk",
    "sort_key",
    "flag_heads",
    "adjacent_difference",
    "run_length_decode",
    "select",
    "partition",
    "unique",
    "run_length_encode",
    "broadcast_to",
    "reshape",
    "transpose",
    "flip",
    "argmax",
    "argmin",
    "dot",
]


@stub
def load(a: Any, offset: Any, size: Any, *, valid: Any = None, other: Any = 0, mask: Any = None) -> Any:
    """Load ``a[offset : offset + size]`` of a 1-D array or view (any stride) as a tile of its dtype,
    or with ``offset=(r, c)`` and ``size=(M, N)`` the block ``a[r:r+M, c:c+N]`` of a 2-D array or view.

    Element ``i`` with ``i >= valid`` (when given) is ``other`` and is never read; for a 2-D block
    ``valid=(vr, vc)`` counts valid rows and columns (``None`` for a whole axis). ``mask`` (a bool tile
    broadcastable to the tile's shape) also makes the elements where it is false ``other``, unread.
    Example: ``t = tile.load(x, (r, 0), (BM, N), valid=(m - r, None), other=0)``.
    """


@stub
def store(a: Any, offset: Any, t: Any, *, valid: Any = None, mask: Any = None) -> None:
    """Write tile ``t`` to ``a[offset:]`` (a 1-D array or view), converted to ``a``'s dtype,
    skipping elements ``i >= valid`` and those where ``mask`` is false; a 2-D tile goes to
    ``a[r:r+M, c:c+N]`` of a 2-D array or view (``offset=(r, c)``, ``valid=(vr, vc)``)."""


@stub
def atomic_add(a: Any, offset_or_index: Any, t: Any, *, valid: int | None = None, mask: Any = None) -> None:
    """Atomically add ``t`` (converted to ``a``'s dtype) into ``a`` element by element: at
    ``a[offset:]`` for a scalar offset (a 1-D array or view), or at ``a[index[i]]`` for an integer
    index tile (a tuple of them, one per axis, for an N-D array), every duplicate index counted.

    Elements ``i >= valid`` and those whose ``mask`` (a bool tile) is false are skipped; so are
    indices outside the array. A scalar ``t`` is added at every index (``tile.atomic_add(hist, idx,
    1)``), or once at ``offset``. ``a`` holds int32, uint32, int64, uint64, float16, bfloat16,
    float32 or float64."""


@stub
def atomic_max(a: Any, offset_or_index: Any, t: Any, *, valid: int | None = None, mask: Any = None) -> None:
    """``tile.atomic_add``'s forms with ``a[j] = max(a[j], t[i])``: int32, uint32, int64, uint64,
    float32 or float64 arrays; a NaN value makes the element NaN."""


@stub
def atomic_min(a: Any, offset_or_index: Any, t: Any, *, valid: int | None = None, mask: Any = None) -> None:
    """``tile.atomic_add``'s forms with ``a[j] = min(a[j], t[i])``: int32, uint32, int64, uint64,
    float32 or float64 arrays; a NaN value makes the element NaN."""


@stub
def gather(a: Any, index: Any, *, mask: Any = None, other: Any = 0) -> Any:
    """``a[index]`` element by element: a tile of ``a``'s dtype shaped like the integer tile
    ``index`` (into a 1-D array or view, any stride), or like a tuple of index tiles, one per axis
    of an N-D array or view. Elements whose ``mask`` (a bool tile) is false are ``other`` and are
    neither read nor bounds-checked. An index outside the array is a ``TileIndexError`` in the
    interpreter and reads ``other`` on the GPU. Example: ``v = tile.gather(table, idx)``."""


@stub
def scatter(a: Any, index: Any, t: Any, *, mask: Any = None) -> None:
    """``a[index] = t`` element by element (``t`` a tile of the index's size or a scalar, converted
    to ``a``'s dtype; ``index`` as for ``tile.gather``). Elements whose ``mask`` is false, and
    indices outside the array, are skipped; of several writes to one element, which one lands is
    unspecified."""


@stub
def full(size: Any, value: Any, dtype: Any) -> Any:
    """A tile of ``size`` (an int, or a shape ``(M, N)``) copies of ``value``: ``tile.full(256, 1.0, np.float32)``."""


@stub
def zeros(size: Any, dtype: Any) -> Any:
    """A tile of ``size`` (an int, or a shape ``(M, N)``) zeros of ``dtype``."""


@stub
def arange(size: int, dtype: Any = np.int32) -> Any:
    """The tile ``0, 1, ..., size - 1``."""


@stub
def scan(
    t: Any,
    op: Any = "add",
    *,
    axis: int = -1,
    reverse: bool = False,
    exclusive: bool = False,
    initial: Any = None,
    return_total: bool = False,
    chained: bool = False,
    dtype: Any = None,
) -> Any:
    """Block-wide scan of a tile, or of a tuple of tiles with a ``@ct.combine`` op (inclusive
    unless ``exclusive=True``).

    ``op`` is ``"add"``, ``"mul"``, ``"max"``, ``"min"``, ``"and"``, ``"or"``, ``"xor"`` or a
    ``@ct.combine`` function. Built-in ops scan in the tile's dtype (16-bit floats in float32);
    combine functions in the dtypes of the tiles. ``initial`` seeds the scan with a
    block-uniform value (a tuple for tuple scans); with ``return_total=True`` the result is
    ``(scanned, total)`` where ``total`` folds ``initial`` and every element: the carry for the
    next chunk. An exclusive scan needs ``initial`` with a combine function (there is no identity).
    Example: ``(_, h), carry = tile.scan((a, b), op=ssm, initial=carry, return_total=True)``.

    ``reverse=True`` scans from the last element to the first (a suffix scan, ``y[i]`` folds
    ``x[n-1]`` down to ``x[i]``; the later element is the left operand of a combine function):
    ``initial`` comes first (before ``x[n-1]``) and ``total`` is the fold through element 0.

    With ``chained=True`` the scan runs over the tiles of every program of a 1-D grid in program-id
    order, as over one array (single pass, decoupled look-back): ``initial`` seeds program 0 only, and
    ``total`` is the fold through this program's last element; with ``reverse=True``, from the last
    program to the first (``initial`` seeds the last program, ``total`` is the fold from the end
    through this program's first element). It must run exactly once in every
    program (at the top level, not in a loop or an ``if``). Example, a whole-array cumsum:
    ``tile.store(y, base, tile.scan(t, chained=True), valid=n - base)``.

    ``dtype`` (built-in ops): the tile is converted to it before the scan, which runs and returns in it,
    as ``torch.cumsum(dtype=)`` does: ``tile.scan(t, dtype=np.int64)`` does not wrap where int32 would.

    A 2-D tile is scanned along ``axis`` (each row for -1 or 1, each column for 0) independently;
    ``initial`` is then a scalar or a tile with one seed per row (column), and ``total`` such a tile.
    """


@stub
def reduce(t: Any, op: Any = "add", axis: int | None = None, keepdims: bool = False, *, dtype: Any = None) -> Any:
    """Block-wide reduction of a tile (or a tuple of tiles with a ``@ct.combine`` op) to a
    block-uniform scalar (or tuple); a non-commutative combine gives the in-order fold. With
    ``dtype`` (built-in ops) the tile is converted to it first, and the result has it (as
    ``torch.sum(dtype=)``). With ``axis=k`` the fold runs along axis ``k`` only and gives a tile of
    the other axis (``keepdims=True``: that axis kept with extent 1, as NumPy does)."""


@stub
def sum(t: Any, axis: int | None = None, keepdims: bool = False, *, dtype: Any = None) -> Any:  # noqa: A001
    """``tile.reduce(t, "add", axis, keepdims, dtype=dtype)``: the sum in the tile's dtype (float32 for
    16-bit floats), or in ``dtype``."""


@stub
def max(t: Any, axis: int | None = None, keepdims: bool = False, *, dtype: Any = None) -> Any:  # noqa: A001
    """``tile.reduce(t, "max", axis, keepdims, dtype=dtype)``."""


@stub
def min(t: Any, axis: int | None = None, keepdims: bool = False, *, dtype: Any = None) -> Any:  # noqa: A001
    """``tile.reduce(t, "min", axis, keepdims, dtype=dtype)``."""


@stub
def argmax(t: Any, axis: int | None = None) -> Any:
    """The index of the first largest element (NumPy's rule: the first NaN if there is one): with
    ``axis=None`` an int32 block-uniform scalar, the flat row-major index into the tile's shape; with
    ``axis=k`` an int32 tile of the other axis's indices along ``k``."""


@stub
def argmin(t: Any, axis: int | None = None) -> Any:
    """``tile.argmax``'s counterpart: the index of the first smallest element (or first NaN)."""


@stub
def broadcast_to(t: Any, shape: Any) -> Any:
    """``t`` broadcast to ``shape`` by NumPy's rules (trailing axes aligned, extents 1 repeated)."""


@stub
def reshape(t: Any, shape: Any) -> Any:
    """The elements of ``t`` in row-major order as a tile of ``shape`` (the same size)."""


@stub
def transpose(t: Any) -> Any:
    """The transpose of a 2-D tile (``t.T``); a 1-D tile is returned as it is."""


@stub
def flip(t: Any, axis: int = -1) -> Any:
    """``t`` with the order of its elements along ``axis`` reversed (``numpy.flip``)."""


@stub
def histogram(t: Any, bins: int, *, valid: int | None = None, algorithm: str = "auto") -> Any:
    """An int32 tile of ``bins`` counts of the integer tile ``t``: element ``k`` counts the
    elements equal to ``k``. Values outside ``[0, bins)`` and elements ``i >= valid`` are not
    counted. ``algorithm`` is ``"atomic"`` (shared-memory atomics), ``"sort"`` (sort, then
    count runs) or ``"auto"`` (see docs/language.md). Example:
    ``h = h + tile.histogram(t, 256, valid=n - base)``."""


@stub
def sort(
    keys: Any,
    values: Any = None,
    *,
    valid: int | None = None,
    descending: bool = False,
    begin_bit: int = 0,
    end_bit: int | None = None,
    compare: Any = None,
) -> Any:
    """Stable block sort of a tile of keys (and a payload tile, returned as ``(keys, values)``).

    Without ``compare``: a radix sort (``cub::BlockRadixSort``) of integer or float keys, by
    the bits ``[begin_bit, end_bit)`` of their order-preserving unsigned form; floats sort as
    ``numpy.sort`` does, NaNs last. With ``compare=fn`` (a ``@ct.combine`` function returning
    true when its first operand goes first; for a tuple of key tiles it takes both tuples): a
    merge sort (``cub::BlockMergeSort``). Elements ``i >= valid`` go after every valid one, in
    their original order.
    """


@stub
def topk(t: Any, k: int, values: Any = None, *, largest: bool = True, axis: int = -1, valid: Any = None) -> Any:
    """The ``k`` largest elements of a 1-D tile, largest first (``largest=False``: the ``k`` smallest,
    smallest first), or of each row of a 2-D tile (``axis=0``: of each column), with their payload
    (``(keys, values)``; ``values=tile.arange(n)`` gives their indices). Stable: ties keep their input
    order. NaNs count as larger than every number, as in ``torch.topk``. Elements past ``valid`` (a
    scalar, or one count per row) are never selected before a valid one. Built on ``tile.sort``.

    Example: ``vals, idx = tile.topk(logits, 50, tile.arange(VOCAB))``
    """


@stub
def sort_key(t: Any) -> Any:
    """The order-preserving unsigned form of each element (``uint8`` .. ``uint64``, the width of ``t``'s dtype):
    the bits ``tile.sort`` and ``tile.topk`` compare, a larger key being a larger element (NaNs above ``+inf``,
    as ``tile.topk`` counts them). For a radix select over rows longer than a tile: histogram its digits.

    Example: ``digit = (tile.sort_key(logits) >> 24).astype(np.int32)``
    """


@stub
def flag_heads(t: Any) -> Any:
    """A bool tile: true where an element differs from its predecessor (element 0 is a head)."""


@stub
def adjacent_difference(t: Any) -> Any:
    """``t[i] - t[i - 1]`` in ``t``'s dtype, with element 0 kept as it is."""


@stub
def run_length_decode(values: Any, lengths: Any, size: int) -> Any:
    """``(decoded, total)``: a tile of ``size`` items holding ``values[i]`` repeated
    ``lengths[i]`` times, in order, and the block-uniform decoded count ``sum(lengths)`` (an
    int64, counting every run even when they do not all fit). Negative lengths count as 0;
    items past ``total`` are unspecified."""


@stub
def select(t: Any, flags: Any, *, valid: Any = None, chained: bool = False) -> Any:
    """``(selected, count)``: the elements of the 1-D tile ``t`` (or of each tile of a tuple, together)
    whose bool ``flags`` are true, packed to the front in their order (CUB's select), and their
    block-uniform int32 count; items past ``count`` are unspecified. Elements ``i >= valid`` are never
    selected.

    With ``chained=True`` the result is ``(selected, count, offset)``, ``offset`` (int64) being the number
    selected by the programs before this one in program-id order (a chained scan of the counts), so that
    ``tile.store(out, offset, selected, valid=count)`` compacts a whole array in one launch.
    """


@stub
def partition(t: Any, flags: Any, *, valid: Any = None) -> Any:
    """``(partitioned, count)``: the elements of ``t`` (or of each tile of a tuple) whose ``flags`` are
    true, in order, then the others in order (a stable partition), and the int32 count of the first
    part. Elements ``i >= valid`` count as false."""


@stub
def unique(t: Any, *, valid: Any = None) -> Any:
    """``(values, count)``: the first element of each run of equal elements of ``t`` (the distinct
    values of a sorted tile), packed to the front, and their int32 count; items past ``count`` are
    unspecified, elements ``i >= valid`` are ignored."""


@stub
def run_length_encode(t: Any, *, valid: Any = None) -> Any:
    """``(values, lengths, count)``: each run of equal elements of ``t`` as its value and its int32
    length, packed to the front, and the int32 count of runs (``tile.run_length_decode`` undoes it);
    items past ``count`` are unspecified, elements ``i >= valid`` are ignored."""


def dot(a: Any, b: Any, acc: Any = None, *, allow_tf32: bool = False) -> Any:
    """The matrix product ``a @ b`` of 2-D tiles ``(M, K)`` and ``(K, N)``, plus ``acc`` when given:
    float16 and bfloat16 tiles multiply exactly and accumulate in float32 (the result is float32),
    float32 in float32 (tensor cores' tf32 only with ``allow_tf32=True``), float64 in float64;
    ``acc`` is an ``(M, N)`` tile of the result's dtype. A block GEMM of cuBLASDx on the GPU."""
