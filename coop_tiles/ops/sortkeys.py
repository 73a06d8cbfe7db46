"""The order-preserving unsigned form of sort keys (the bits a radix sort compares), in NumPy and in C++:
unsigned integers as they are, signed ones with the sign bit flipped, floats with the sign bit flipped when
positive and every bit flipped when negative, NaNs first made the one NaN that sorts last. Shared by
`tile.sort` (1-D and row-wise) and `tile.topk`."""

from __future__ import annotations

import numpy as np

from ..dtypes import cxx_name, is_float, storage_dtype

#: exponent and mantissa masks of each float width (bits), to find NaNs among stored bits
_NAN_MASKS = {
    "float16": (0x7C00, 0x03FF),
    "bfloat16": (0x7F80, 0x007F),
    "float32": (0x7F800000, 0x007FFFFF),
    "float64": (0x7FF0000000000000, 0x000FFFFFFFFFFFFF),
}


def low_nan(s) -> bool:
    """Whether a sort statement `s` makes NaN keys the NaN of the lowest form (last when descending), not
    the one of the highest form (above +inf: last when ascending, first when descending, as `tile.topk` of the
    largest wants them)."""
    return s.descending and not s.nan_largest


def order_bits(keys: np.ndarray, low: bool) -> np.ndarray:
    """The order-preserving unsigned form of `keys` (as uint64), NaNs made the NaN of the lowest form
    (`low`) or of the highest."""
    dt = keys.dtype
    bits = dt.itemsize * 8
    u = np.dtype(f"uint{bits}")
    r = keys.view(u).astype(np.uint64)
    sign = np.uint64(1 << (bits - 1))
    full = np.uint64((1 << bits) - 1)
    if is_float(dt):
        exp, mant = (np.uint64(m) for m in _NAN_MASKS[np.dtype(dt).name])
        nan = (r & exp) == exp
        nan &= (r & mant) != 0
        r = np.where(nan, full if low else full >> np.uint64(1), r)
        return np.where(r & sign, ~r & full, r | sign)
    if dt.kind == "i":
        return r ^ sign
    return r


def from_order_bits(ordered: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Keys of dtype `dt` back from their order-preserving form."""
    bits = dt.itemsize * 8
    sign = np.uint64(1 << (bits - 1))
    full = np.uint64((1 << bits) - 1)
    if is_float(dt):
        r = np.where(ordered & sign, ordered ^ sign, ~ordered & full)
    elif dt.kind == "i":
        r = ordered ^ sign
    else:
        r = ordered
    return r.astype(np.dtype(f"uint{bits}")).view(dt)


def unsigned_cxx(dt: np.dtype) -> str:
    """The unsigned C++ type of `dt`'s width: the type of its order-preserving form."""
    return f"cuda::std::uint{dt.itemsize * 8}_t"


def pad_code(dt: np.dtype, descending: bool) -> str:
    """The order-preserving form that sorts last (C++): what elements past `valid` are given."""
    u = unsigned_cxx(dt)
    return "0" if descending else f"{u}(~{u}(0))"


def ordered_code(dt: np.dtype, low: bool, x: str) -> str:
    """C++ statements defining `r`, the order-preserving form of key `x` (NaNs made the NaN of the lowest
    form, `low`, or of the highest): the C++ twin of `order_bits`. Branch-free, in few instructions (a sort key
    is made per element, often in a loop over a whole row): a NaN is a magnitude above the exponent mask, and
    the flip is an XOR with the sign bit spread by an arithmetic shift (all bits when negative), then the sign."""
    bits = dt.itemsize * 8
    u = unsigned_cxx(dt)
    sign = f"({u}(1) << {bits - 1})"
    raw = {"float32": f"__float_as_uint({x})", "float64": f"(cuda::std::uint64_t)__double_as_longlong({x})"}
    if is_float(dt):
        exp, _ = _NAN_MASKS[dt.name]
        nan = f"{u}(~{u}(0))" if low else f"({u}(~{u}(0)) >> 1)"
        spread = f"{u}(cuda::std::int{bits}_t(r) >> {bits - 1})"
        return (
            f"    {u} r = {raw.get(dt.name, f'{u}({x})')};\n"
            f"    r = {u}(r & ~{sign}) > {u}({exp}ull) ? {nan} : r;\n"
            f"    r = {u}(r ^ ({spread} | {sign}));\n"
        )
    if dt.kind == "i":
        return f"    {u} r = {u}({x}) ^ {sign};\n"
    return f"    {u} r = {x};\n"


def key_code(dt: np.dtype, ordered: str) -> str:
    """The key of dtype `dt` whose order-preserving form is `ordered` (a C++ expression): the twin of
    `from_order_bits`."""
    bits = dt.itemsize * 8
    u = unsigned_cxx(dt)
    sign = f"({u}(1) << {bits - 1})"
    if is_float(dt):
        r = f"(({ordered}) & {sign} ? {u}(({ordered}) ^ {sign}) : {u}(~({ordered})))"
        back = {"float32": f"__uint_as_float({r})", "float64": f"__longlong_as_double((long long){r})"}
        return back.get(dt.name, r)
    if dt.kind == "i":
        return f"{cxx_name(dt)}(({ordered}) ^ {sign})"
    return ordered


def compare_item(w, s, item_t: str, less: str, row_field: str = "", by_row: str = "") -> str:
    """The C++ item of a `compare=` sort (one field per key tile, `ok`: the item is valid, then `row_field`) and
    its `less` functor: invalid items last, `by_row` first where rows are sorted together, then the combine
    function `s.compare` on the two items' keys."""
    k = len(s.keys)
    types = [cxx_name(storage_dtype(v.type.dtype)) for v in s.keys]
    fn = w.combine_symbol(s.compare)
    fields = " ".join(f"{t} f{i};" for i, t in enumerate(types))
    params = ", ".join([*types, *types, "bool*"])
    operands = ", ".join([*(f"a.f{i}" for i in range(k)), *(f"b.f{i}" for i in range(k)), "&r"])
    return (
        f"struct {item_t} {{ {fields} bool ok;{row_field} }};\n"
        f'extern "C" __device__ void {fn}({params});\n'
        f"struct {less} {{ __device__ __forceinline__ bool operator()(const {item_t}& a, const {item_t}& b) "
        f"const {{ {by_row}if (!a.ok) return false; if (!b.ok) return true; bool r; {fn}({operands}); "
        "return r; } };\n"
    )
