"""A catalogue of user mistakes, each checked in both modes with one parametrised test.

Every entry is a small tile program (or a launch of one) with one mistake in it. The
contract (*Errors*): each raises a `ct.TileError` subclass naming the user's line, and the
interpreter (`@ct.jit(interpret=True)`) and the compiler (`kernel.compile(..., arch="sm_90")`)
raise the same class with the same message at the same line.

- Program mistakes are located at the line marked `# HERE` (in the program, or in the helper
  or combine function named by `at`). Messages may refer to other marked lines as `{IF}`,
  `{FOR}`: the line of `# IF`, `# FOR` in the same function.
- Runtime-only mistakes (indices and ranges outside an array) exist in the interpreter only.
- Launch mistakes are located at the launch (`kernel[grid](...)`) or `.compile(...)` line in
  `provoke` below.

Expected messages are written out here by hand. A case the library gets wrong is kept,
marked `xfail(strict=True)` with what is wrong, for the library to fix.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile

INTERPRET, COMPILE = "interpret", "compile"
BOTH = (INTERPRET, COMPILE)
NO_GRID = object()  # launch without `[grid]`: kernel(*args)

X = np.zeros(16, np.float32)
XI8 = np.zeros(16, np.int8)
M = np.zeros((4, 8), np.float32)
TABLE = np.arange(4.0)  # a global array a program must not read
SUPPORTED = "int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32, float64, bool"
TILE_SIZE_NOT_CONSTANT = (
    "must be a compile-time constant (a literal, a ct.constexpr parameter, or an expression of them), "
    "got a runtime int64 (python scalar)"
)
DIVERGENT = (
    "is a tile, so it differs between threads and tile collectives under it would diverge; use ct.where "
    "for per-element choices or reduce the tile to a scalar (tile.max(t) > 0)"
)
COMBINE_ONLY_SCALARS = "@ct.combine functions compute on their scalar operands only; "
CHAINED_AT_TOP = (
    "tile.scan(..., chained=True) must run exactly once in every program: call it at the top level of the program, "
    "not inside a loop or an `if`"
)


@dataclass
class Mistake:
    name: str
    program: Callable
    error: type[ct.TileError]
    message: str
    args: tuple = (X, 16)
    constexprs: dict[str, Any] = field(default_factory=lambda: {"T": 8})
    grid: Any = 1
    jit: dict[str, Any] = field(default_factory=dict)  # options of ct.jit (block_threads)
    at: Callable | None = None  # the function holding `# HERE` (default: the program)
    launch: bool = False  # located at the launch line instead of `# HERE`
    modes: tuple[str, ...] = BOTH
    xfail: dict[str, str] = field(default_factory=dict)  # mode -> what the library gets wrong


def line_of(fn: Callable, marker: str) -> int:
    lines, first = inspect.getsourcelines(inspect.unwrap(fn))  # (a @ct.combine function wraps its own)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def provoke(m: Mistake, mode: str) -> ct.TileError:
    """Run `m` in `mode` and return the TileError it raises."""
    try:
        if mode == INTERPRET:
            kernel = ct.jit(m.program, interpret=True, **m.jit)
            (kernel if m.grid is NO_GRID else kernel[m.grid])(*m.args, **m.constexprs)  # INTERPRET
        else:
            kernel = ct.jit(m.program, **m.jit)
            kernel.compile(*m.args, arch="sm_90", **m.constexprs)  # COMPILE
    except ct.TileError as e:
        return e
    pytest.fail(f"{m.name}: no TileError in {mode} mode")


# ================================================================================================
# Unsupported statements
# ================================================================================================
def uses_lambda(x, n, T: ct.constexpr):
    f = lambda v: v * 2  # HERE  # noqa: E731
    tile.store(x, 0, f(tile.load(x, 0, T)))


def uses_try(x, n, T: ct.constexpr):
    try:  # HERE
        tile.store(x, 0, tile.load(x, 0, T))
    except Exception:
        pass


def uses_with(x, n, T: ct.constexpr):
    with open("/dev/null"):  # HERE
        tile.store(x, 0, tile.load(x, 0, T))


def uses_yield(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    yield t  # HERE


def uses_del(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    del t  # HERE


def uses_global(x, n, T: ct.constexpr):
    global COUNTER  # HERE
    COUNTER = n


def make_nonlocal_program():
    count = 0

    def uses_nonlocal(x, n, T: ct.constexpr):
        nonlocal count  # HERE
        count = n

    return uses_nonlocal


def uses_assert(x, n, T: ct.constexpr):
    assert n > 0  # HERE
    tile.store(x, 0, tile.load(x, 0, T))


def uses_raise(x, n, T: ct.constexpr):
    if n > 16:
        raise ValueError("too long")  # HERE


def imports_inside(x, n, T: ct.constexpr):
    import operator  # HERE

    tile.store(x, 0, operator.neg(tile.load(x, 0, T)))


def defines_class(x, n, T: ct.constexpr):
    class Acc:  # HERE
        pass


def defines_function(x, n, T: ct.constexpr):
    def double(v):  # HERE
        return v * 2

    tile.store(x, 0, double(tile.load(x, 0, T)))


def uses_break(x, n, T: ct.constexpr):
    for i in range(n):
        if i > 2:
            break  # HERE


def uses_continue(x, n, T: ct.constexpr):
    for i in range(n):
        if i > 2:
            continue  # HERE
        x[i] = 1.0


def uses_for_else(x, n, T: ct.constexpr):
    for i in range(n):  # HERE
        x[i] = 1.0
    else:
        x[0] = 2.0


def loops_over_tuple(x, n, T: ct.constexpr):
    for i in (0, 1, 2):  # HERE
        x[i] = 1.0


def unpacks_loop_variable(x, n, T: ct.constexpr):
    for i, j in range(n):  # HERE
        x[i] = 1.0


def bare_annotation(x, n, T: ct.constexpr):
    t: int  # HERE  # noqa: F842
    tile.store(x, 0, tile.load(x, 0, T))


def returns_a_value(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    return tile.sum(t)  # HERE


def star_parameters(x, *rest):  # HERE
    tile.store(x, 0, tile.zeros(8, np.float32))


# ================================================================================================
# Unsupported expressions
# ================================================================================================
def list_literal(x, n, T: ct.constexpr):
    offsets = [0, 8]  # HERE
    tile.store(x, 0, tile.load(x, 0, T))


def dict_literal(x, n, T: ct.constexpr):
    options = {"valid": n}  # HERE
    tile.store(x, 0, tile.load(x, 0, T))


def set_literal(x, n, T: ct.constexpr):
    seen = {0, 1}  # HERE
    tile.store(x, 0, tile.load(x, 0, T))


def list_comprehension(x, n, T: ct.constexpr):
    parts = [tile.load(x, i * T, T) for i in range(2)]  # HERE
    tile.store(x, 0, parts[0])


def f_string(x, n, T: ct.constexpr):
    label = f"n = {n}"  # HERE
    tile.store(x, 0, tile.load(x, 0, T))


def walrus(x, n, T: ct.constexpr):
    if (m := n - 1) > 0:  # HERE
        x[m] = 1.0


def matmul_operator(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, t @ t)  # HERE


def in_operator(x, n, T: ct.constexpr):
    if n in (8, 16):  # HERE
        x[0] = 1.0


def starred_call(x, n, T: ct.constexpr):
    where = (x, 0, T)
    t = tile.load(*where)  # HERE
    tile.store(x, 0, t)


def slices_an_array(x, n, T: ct.constexpr):
    head = x[0:T]  # HERE
    tile.store(head, 0, tile.zeros(T, np.float32))


# ================================================================================================
# Names, attributes and calls
# ================================================================================================
def unknown_name(x, n, T: ct.constexpr):
    tile.store(x, 0, tile.load(x, 0, T) + undefined_thing)  # HERE  # noqa: F821


def reads_global_array(x, n, T: ct.constexpr):
    v = TABLE[0]  # HERE
    tile.store(x, 0, tile.full(T, v, np.float32))


def unknown_tile_attribute(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    shape = t.shapes  # HERE


def unknown_tile_op(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, tile.cumsum(t))  # HERE


def misspells_load(x, n, T: ct.constexpr):
    t = tile.laod(x, 0, T)  # HERE
    tile.store(x, 0, t)


def load_from_ct(x, n, T: ct.constexpr):
    t = ct.load(x, 0, T)  # HERE
    tile.store(x, 0, t)


def numpy_exp_of_a_tile(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, np.exp(t))  # HERE


def calls_numpy(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, np.clip(t, 0, 1))  # HERE


def calls_math(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, math.exp(t))  # HERE


@ct.jit
def jitted_helper(t):
    return t * 2


def calls_a_kernel(x, n, T: ct.constexpr):
    tile.store(x, 0, jitted_helper(tile.load(x, 0, T)))  # HERE


def calls_print(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    print(t)  # HERE


def calls_len(x, n, T: ct.constexpr):
    t = tile.load(x, 0, len(x))  # HERE
    tile.store(x, 0, t)


def calls_a_scalar(x, n, T: ct.constexpr):
    v = n(2)  # HERE
    x[0] = v


def unknown_keyword(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T, masked=n)  # HERE
    tile.store(x, 0, t)


def missing_argument(x, n, T: ct.constexpr):
    t = tile.load(x, 0)  # HERE
    tile.store(x, 0, t)


def too_many_arguments(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, ct.exp(t, 2))  # HERE


def scale_by(t, factor):
    return t * factor


def helper_missing_argument(x, n, T: ct.constexpr):
    t = scale_by(tile.load(x, 0, T))  # HERE
    tile.store(x, 0, t)


def int_of_tile(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    x[0] = int(t)  # HERE


def python_min_of_tiles(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, min(t, t * 2))  # HERE


def recurse(t):
    return recurse(t * 2)  # HERE


def calls_recursive_helper(x, n, T: ct.constexpr):
    tile.store(x, 0, recurse(tile.load(x, 0, T)))


def returns_early(t, n):
    if n > 4:  # HERE
        return t
    return t * 2


def calls_helper_returning_early(x, n, T: ct.constexpr):
    tile.store(x, 0, returns_early(tile.load(x, 0, T), n))


def code_after_return(t):
    return t * 2
    t = t + 1  # HERE


def calls_helper_with_code_after_return(x, n, T: ct.constexpr):
    tile.store(x, 0, code_after_return(tile.load(x, 0, T)))


# ================================================================================================
# Tile sizes, and what a variable may hold
# ================================================================================================
def runtime_tile_size(x, n, T: ct.constexpr):
    t = tile.load(x, 0, n)  # HERE
    tile.store(x, 0, t)


def zero_tile_size(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)  # HERE
    tile.store(x, 0, t)


def float_tile_size(x, n, T: ct.constexpr):
    t = tile.zeros(T / 2, np.float32)  # HERE
    tile.store(x, 0, t)


def tile_size_by_zero(x, n, T: ct.constexpr):
    t = tile.zeros(T // 0, np.float32)  # HERE
    tile.store(x, 0, t)


def mismatched_tile_sizes(x, n, T: ct.constexpr):
    a = tile.load(x, 0, T)
    b = tile.load(x, 0, T * 2)
    tile.store(x, 0, a + b)  # HERE


def variable_changes_tile_size(x, n, T: ct.constexpr):
    t = tile.zeros(T, np.float32)
    for i in range(n):
        t = tile.zeros(T * 2, np.float32)  # HERE
    tile.store(x, 0, t)


def variable_tile_then_scalar(x, n, T: ct.constexpr):
    v = tile.zeros(T, np.float32)
    for i in range(n):
        v = 1.0  # HERE
    x[0] = 1.0


def variable_bool_then_int(x, n, T: ct.constexpr):
    flag = n > 4
    for i in range(n):
        flag = 1  # HERE
    x[0] = flag


def cast_undone_by_promotion(x, n, T: ct.constexpr):
    c = tile.load(x, 0, T)
    c = c.astype(np.float16)  # HERE
    for i in range(n):
        c = tile.load(x, 0, T) * 2.0
    tile.store(x, 0, c)


def string_in_arithmetic(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, t + "1")  # HERE


def array_in_arithmetic(x, n, T: ct.constexpr):
    y = x * 2.0  # HERE
    tile.store(y, 0, tile.load(x, 0, T))


def int_negative_power(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, t**-1)  # HERE


def fill_out_of_range(x, n, T: ct.constexpr):
    tile.store(x, 0, tile.full(T, 300, np.int8))  # HERE


def int_beyond_int64(x, n, T: ct.constexpr):
    x[0] = n + 2**70  # HERE


# ================================================================================================
# Control flow
# ================================================================================================
def if_on_tile(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    if t > 0:  # HERE
        tile.store(x, 0, t)


def while_on_tile(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    while t > 0:  # HERE
        t = t - 1.0
    tile.store(x, 0, t)


def ternary_on_tile(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    v = 1.0 if t > 0 else 0.0  # HERE
    x[0] = v


def ternary_of_tiles(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, t if n > 4 else t * 2)  # HERE


def and_of_tiles(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    inside = (t > 0) and (t < 1)  # HERE
    tile.store(x, 0, ct.where(inside, t, 0.0))


def not_of_tile(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    outside = not (t > 0)  # HERE
    tile.store(x, 0, ct.where(outside, t, 0.0))


def assigned_in_one_branch(x, n, T: ct.constexpr):
    if n > 4:  # IF
        t = tile.load(x, 0, T)
    tile.store(x, 0, t)  # HERE


def assigned_in_loop(x, n, T: ct.constexpr):
    for i in range(n):  # FOR
        s = tile.load(x, 0, T)
    tile.store(x, 0, s)  # HERE


def while_true(x, n, T: ct.constexpr):
    while True:  # HERE
        tile.store(x, 0, tile.load(x, 0, T))


def range_of_float(x, n, T: ct.constexpr):
    for i in range(n / 2):  # HERE
        x[i] = 1.0


def range_step_zero(x, n, T: ct.constexpr):
    for i in range(0, n, 0):  # HERE
        x[i] = 1.0


def program_id_axis_3(x, n, T: ct.constexpr):
    base = ct.program_id(3) * T  # HERE
    tile.store(x, base, tile.load(x, base, T))


# ================================================================================================
# Scans, reductions and @ct.combine functions
# ================================================================================================
@ct.combine
def add_pairs(a_l, b_l, a_r, b_r):
    return a_l + a_r, b_l + b_r


def add_plain(a, b):  # not decorated with @ct.combine
    return a + b


@ct.combine
def takes_three(a_l, b_l, a_r):
    return a_l, b_l


@ct.combine
def returns_one(a_l, b_l, a_r, b_r):
    return a_r * a_l  # HERE


@ct.combine
def combines_with_tile_op(a, b):
    return a + tile.sum(tile.full(4, b, np.float32))  # HERE


@ct.combine
def combines_with_if(a, b):
    r = a
    if b > a:  # HERE
        r = b
    return r


def xor_scan_of_floats(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, tile.scan(t, op="xor"))  # HERE


def xor_of_float_tiles(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, t ^ t)  # HERE


def invert_of_float_tile(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, ~t)  # HERE


def sum_of_bools(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    x[0] = tile.sum(t > 0)  # HERE


def sum_of_scalar(x, n, T: ct.constexpr):
    x[0] = tile.sum(n)  # HERE


def unknown_scan_op(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, tile.scan(t, op="cumsum"))  # HERE


def undecorated_combine(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, tile.scan(t, op=add_plain))  # HERE


def tuple_scan_without_combine(x, n, T: ct.constexpr):
    a = tile.load(x, 0, T)
    s, u = tile.scan((a, a * 2))  # HERE
    tile.store(x, 0, s + u)


def tuple_scan_of_mixed_sizes(x, n, T: ct.constexpr):
    a = tile.load(x, 0, T)
    s, u = tile.scan((a, tile.load(x, 0, T * 2)), op=add_pairs)  # HERE
    tile.store(x, 0, s)


def combine_wrong_arity(x, n, T: ct.constexpr):
    a = tile.load(x, 0, T)
    s, u = tile.scan((a, a * 2), op=takes_three)  # HERE
    tile.store(x, 0, s + u)


def combine_wrong_count(x, n, T: ct.constexpr):
    a = tile.load(x, 0, T)
    s, u = tile.scan((a, a * 2), op=returns_one)
    tile.store(x, 0, s + u)


def combine_tile_op(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, tile.scan(t, op=combines_with_tile_op))


def combine_if(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    x[0] = tile.reduce(t, op=combines_with_if)


def calls_combine(x, n, T: ct.constexpr):
    s, u = add_pairs(1.0, 2.0, 3.0, 4.0)  # HERE
    x[0] = s


def exclusive_combine_without_initial(x, n, T: ct.constexpr):
    a = tile.load(x, 0, T)
    s, u = tile.scan((a, a * 2), op=add_pairs, exclusive=True)  # HERE
    tile.store(x, 0, s + u)


def initial_wrong_count(x, n, T: ct.constexpr):
    a = tile.load(x, 0, T)
    s, u = tile.scan((a, a * 2), op=add_pairs, initial=1.0)  # HERE
    tile.store(x, 0, s + u)


def return_total_not_bool(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    s, total = tile.scan(t, return_total=1)  # HERE
    tile.store(x, 0, s)


def scan_dtype_not_a_dtype(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, tile.scan(t, dtype="int33"))  # HERE


def sum_dtype_at_run_time(x, n, T: ct.constexpr):
    x[0] = tile.sum(tile.load(x, 0, T), dtype=n)  # HERE


def unpacks_too_many(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    s, total, extra = tile.scan(t, return_total=True)  # HERE
    tile.store(x, 0, s)


def unpacks_a_tile(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    a, b = t  # HERE
    tile.store(x, 0, a)


def tuple_index_out_of_range(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    pair = (t, t * 2)
    tile.store(x, 0, pair[2])  # HERE


# ================================================================================================
# Arrays, loads and stores, dtypes
# ================================================================================================
def loads_2d_array(m, n, T: ct.constexpr):
    t = tile.load(m, 0, T)  # HERE
    tile.store(m[0], 0, t)


def too_many_indices(x, n, T: ct.constexpr):
    v = x[0, 1]  # HERE
    x[0] = v


def element_write_too_few_indices(m, n, T: ct.constexpr):
    m[0] = 1.0  # HERE


def float_array_index(x, n, T: ct.constexpr):
    x[n / 2] = 1.0  # HERE


def shape_index_out_of_range(x, n, T: ct.constexpr):
    rows = x.shape[1]  # HERE
    x[0] = rows


def writes_tile_element(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    t[0] = 1.0  # HERE
    tile.store(x, 0, t)


def reads_tile_element(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    x[0] = t[0]  # HERE


def assigns_tile_attribute(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    t.size = 4  # HERE
    tile.store(x, 0, t)


def loads_from_scalar(x, n, T: ct.constexpr):
    t = tile.load(n, 0, T)  # HERE
    tile.store(x, 0, t)


def stores_scalar(x, n, T: ct.constexpr):
    tile.store(x, 0, 1.0)  # HERE


def gathers_with_tile_offset(x, n, T: ct.constexpr):
    t = tile.load(x, tile.arange(T), T)  # HERE
    tile.store(x, 0, t)


def astype_not_a_dtype(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, t.astype("banana"))  # HERE


def astype_complex(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, 0, t.astype(np.complex64))  # HERE


def full_with_runtime_dtype(x, dtype, T: ct.constexpr):
    t = tile.full(T, 1.0, dtype)  # HERE
    tile.store(x, 0, t)


# ----- mistakes only a run can see (the interpreter checks them; a compiled kernel masks them) ----
def reads_past_the_end(x, n, T: ct.constexpr):
    v = x[n]  # HERE
    tile.store(x, 0, tile.full(T, v, np.float32))


def reads_negative_index(x, n, T: ct.constexpr):
    v = x[n - 17]  # HERE
    tile.store(x, 0, tile.full(T, v, np.float32))


def writes_past_the_row(m, n, T: ct.constexpr):
    m[1, n] = 1.0  # HERE


def views_past_the_end(m, n, T: ct.constexpr):
    row = m[n]  # HERE
    tile.store(row, 0, tile.zeros(T, np.float32))


def loads_past_the_end(x, n, T: ct.constexpr):
    t = tile.load(x, n - 4, T)  # HERE
    tile.store(x, 0, t)


def stores_before_the_start(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    tile.store(x, -4, t)  # HERE


# ================================================================================================
# Launch mistakes (located at the launch or compile line)
# ================================================================================================
def copy_tile(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T, valid=n)
    tile.store(x, 0, t, valid=n)


# ================================================================================================
# The block toolbox: histogram, atomics, sort, neighbours
# ================================================================================================
I = np.zeros(16, np.int32)
B = np.zeros(16, np.bool_)
I8 = np.zeros(16, np.int8)


def histogram_of_floats(x, n, T: ct.constexpr):
    h = tile.histogram(tile.load(x, 0, T), 4)  # HERE
    tile.store(x, 0, h)


def histogram_runtime_bins(x, n, T: ct.constexpr):
    h = tile.histogram(tile.load(x, 0, T), n)  # HERE
    tile.store(x, 0, h)


def histogram_zero_bins(x, n, T: ct.constexpr):
    h = tile.histogram(tile.load(x, 0, T), 0)  # HERE
    tile.store(x, 0, h)


def histogram_unknown_algorithm(x, n, T: ct.constexpr):
    h = tile.histogram(tile.load(x, 0, T), 4, algorithm="radix")  # HERE
    tile.store(x, 0, h)


def atomic_add_int8(x, n, T: ct.constexpr):
    tile.atomic_add(x, 0, tile.load(x, 0, T))  # HERE


def atomic_add_array(x, n, T: ct.constexpr):
    tile.atomic_add(x, 0, x)  # HERE


def atomic_max_float16(x, n, T: ct.constexpr):
    tile.atomic_max(x, tile.arange(T), tile.load(x, 0, T))  # HERE


def atomic_min_float_index(x, n, T: ct.constexpr):
    tile.atomic_min(x, tile.load(x, 0, T), 1.0)  # HERE


def atomic_add_mask_size(x, n, T: ct.constexpr):
    tile.atomic_add(x, tile.arange(T), 1, mask=tile.arange(T * 2) > 0)  # HERE


# ================================================================================================
# Gathers and scatters
# ================================================================================================
def gather_float_index(x, n, T: ct.constexpr):
    t = tile.gather(x, tile.load(x, 0, T))  # HERE
    tile.store(x, 0, t)


def gather_bool_index(x, n, T: ct.constexpr):
    t = tile.gather(x, tile.arange(T) > 2)  # HERE
    tile.store(x, 0, t)


def gather_scalar_index(x, n, T: ct.constexpr):
    t = tile.gather(x, n)  # HERE


def gather_one_index_of_2d(m, n, T: ct.constexpr):
    t = tile.gather(m, tile.arange(T))  # HERE


def gather_three_indices_of_2d(m, n, T: ct.constexpr):
    i = tile.arange(T)
    t = tile.gather(m, (i, i, i))  # HERE


def gather_index_sizes(m, n, T: ct.constexpr):
    t = tile.gather(m, (tile.arange(T), tile.arange(T * 2)))  # HERE


def gather_int_mask(x, n, T: ct.constexpr):
    t = tile.gather(x, tile.arange(T), mask=tile.arange(T))  # HERE


def gather_scalar_mask(x, n, T: ct.constexpr):
    t = tile.gather(x, tile.arange(T), mask=n > 0)  # HERE


def gather_mask_size(x, n, T: ct.constexpr):
    t = tile.gather(x, tile.arange(T), mask=tile.arange(T * 2) > 0)  # HERE


def gather_outside(x, n, T: ct.constexpr):
    t = tile.gather(x, tile.arange(T) * 3 - 1)  # HERE
    tile.store(x, 0, t)


def gather_outside_2d(m, n, T: ct.constexpr):
    i = tile.arange(T)
    t = tile.gather(m, (i // 2, i))  # HERE


def scatter_value_size(x, n, T: ct.constexpr):
    tile.scatter(x, tile.arange(T), tile.load(x, 0, T * 2))  # HERE


def scatter_array_value(x, n, T: ct.constexpr):
    tile.scatter(x, tile.arange(T), x)  # HERE


def scatter_float_index(x, n, T: ct.constexpr):
    tile.scatter(x, tile.arange(T).astype(np.float32), 1.0)  # HERE


def sort_bools(x, n, T: ct.constexpr):
    s = tile.sort(tile.load(x, 0, T))  # HERE
    tile.store(x, 0, s)


def sort_payload_size_mismatch(x, n, T: ct.constexpr):
    k, v = tile.sort(tile.load(x, 0, T), tile.arange(T * 2))  # HERE
    tile.store(x, 0, k)


def sort_bad_bits(x, n, T: ct.constexpr):
    s = tile.sort(tile.load(x, 0, T), end_bit=40)  # HERE
    tile.store(x, 0, s)


def sort_tuple_without_compare(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    a, b = tile.sort((t, t))  # HERE
    tile.store(x, 0, a)


@ct.combine
def not_a_comparison(a, b):
    return a - b  # HERE


def sort_compare_not_bool(x, n, T: ct.constexpr):
    s = tile.sort(tile.load(x, 0, T), compare=not_a_comparison)  # HERE
    tile.store(x, 0, s)


@ct.combine
def less(a, b):
    return a < b


def sort_compare_and_descending(x, n, T: ct.constexpr):
    s = tile.sort(tile.load(x, 0, T), compare=less, descending=True)  # HERE
    tile.store(x, 0, s)


def sort_key_of_bools(x, n, T: ct.constexpr):
    k = tile.sort_key(tile.load(x, 0, T))  # HERE
    tile.store(x, 0, k)


def adjacent_difference_of_bools(x, n, T: ct.constexpr):
    d = tile.adjacent_difference(tile.load(x, 0, T))  # HERE
    tile.store(x, 0, d)


def run_lengths_of_floats(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    d, total = tile.run_length_decode(t, t, 16)  # HERE
    tile.store(x, 0, d)


def run_lengths_size_mismatch(x, n, T: ct.constexpr):
    d, total = tile.run_length_decode(tile.load(x, 0, T), tile.arange(T * 2), 16)  # HERE
    tile.store(x, 0, d)


# --- chained scans -------------------------------------------------------------------------------------
def chained_in_loop(x, n, T: ct.constexpr):
    for i in range(n):
        tile.store(x, 0, tile.scan(tile.load(x, 0, T), chained=True))  # HERE


def chained_under_if(x, n, T: ct.constexpr):
    if n > 3:
        tile.store(x, 0, tile.scan(tile.load(x, 0, T), chained=True))  # HERE


def chained_scan_helper(t):
    return tile.scan(t, chained=True)  # HERE


def chained_helper_in_loop(x, n, T: ct.constexpr):
    for i in range(n):
        tile.store(x, 0, chained_scan_helper(tile.load(x, 0, T)))


def chained_after_return(x, n, T: ct.constexpr):
    if n > 3:
        return  # RET
    tile.store(x, 0, tile.scan(tile.load(x, 0, T), chained=True))  # HERE


def two_chained_scans(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    s = tile.scan(t, chained=True)
    tile.store(x, 0, tile.scan(s, op="max", chained=True))  # HERE


def chained_not_constant(x, n, T: ct.constexpr):
    tile.store(x, 0, tile.scan(tile.load(x, 0, T), chained=n > 0))  # HERE


def chained_copy(x, n, T: ct.constexpr):
    tile.store(x, 0, tile.scan(tile.load(x, 0, T, valid=n), chained=True), valid=n)


def launch(name: str, error: type[ct.TileError], message: str, **kw: Any) -> Mistake:
    return Mistake(name, copy_tile, error, message, launch=True, **kw)


def grid_mistake(name: str, grid: Any, message: str) -> Mistake:
    return launch(name, ct.LaunchError, message, grid=grid, modes=(INTERPRET,))


GRID_SHAPE = "grid must be an int or a tuple of 1 to 3 ints (or a callable returning one), got "
NOT_A_NUMBER = "argument 'n' must be an array or a number, got "
NOT_CHECKED_BY_INTERPRETER = "the interpreter does not plan the block, so it accepts what the compiler rejects"


# ================================================================================================
# Debugging: print, breakpoint, ct.device_print, ct.device_assert
# ================================================================================================
def calls_breakpoint(x, n, T: ct.constexpr):
    breakpoint()  # HERE


def device_print_without_prefix(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    ct.device_print(t)  # HERE


def device_print_runtime_prefix(x, n, T: ct.constexpr):
    ct.device_print(n, n)  # HERE


def device_print_array(x, n, T: ct.constexpr):
    ct.device_print("x =", x)  # HERE


def device_print_dtype(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    ct.device_print("dtype", t.dtype)  # HERE


@ct.combine
def prints_in_combine(a, b):
    ct.device_print("a", a)  # HERE
    return a + b


def device_print_in_combine(x, n, T: ct.constexpr):
    tile.store(x, 0, tile.scan(tile.load(x, 0, T), op=prints_in_combine))


def device_assert_float_tile(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    ct.device_assert(t, "t must be nonzero")  # HERE


def device_assert_array(x, n, T: ct.constexpr):
    ct.device_assert(x, "x is empty")  # HERE


def device_assert_runtime_message(x, n, T: ct.constexpr):
    ct.device_assert(n > 0, n)  # HERE


def device_assert_fails(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    ct.device_assert(t >= ct.program_id(0), "t is below the program id")  # HERE


def static_assert_fails(x, n, T: ct.constexpr):
    ct.static_assert(T % 32 == 0, "T must be a multiple of 32")  # HERE
    tile.store(x, 0, tile.load(x, 0, T))


def static_assert_fails_without_message(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    ct.static_assert(t.size > 8)  # HERE


def static_assert_of_a_runtime_value(x, n, T: ct.constexpr):
    ct.static_assert(n > 0)  # HERE


def static_assert_runtime_message(x, n, T: ct.constexpr):
    ct.static_assert(T > 0, n)  # HERE


# ================================================================================================
# The catalogue
# ================================================================================================
SYNTAX, TYPE, VALUE, DIVERGENCE = ct.TileSyntaxError, ct.TileTypeError, ct.TileValueError, ct.DivergenceError
NOT_SUPPORTED = "are not supported in tile programs"


# ================================================================================================
# 2-D tiles
# ================================================================================================
def adds_tiles_of_shapes_that_dont_broadcast(x, n, T: ct.constexpr):
    a = tile.zeros((4, 8), np.float32)
    b = tile.zeros((8, 4), np.float32)
    tile.store(x, (0, 0), a + b)  # HERE


def three_d_shape(x, n, T: ct.constexpr):
    t = tile.zeros((2, 2, 2), np.float32)  # HERE


def runtime_extent(x, n, T: ct.constexpr):
    t = tile.zeros((n, 8), np.float32)  # HERE


def reduce_bad_axis(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8))
    tile.store(x, (0, 0), tile.sum(t, axis=2))  # HERE


def reshape_other_size(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8))
    u = tile.reshape(t, (5, 7))  # HERE


def broadcast_bad_shape(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8))
    u = tile.broadcast_to(t, (8, 8))  # HERE


def load_2d_of_1d(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 4))  # HERE


def load_1d_of_2d(x, n, T: ct.constexpr):
    t = tile.load(x, 0, 8)  # HERE


def offset_of_three(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0, 0), (4, 8))  # HERE


def valid_of_one(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8), valid=(4,))  # HERE


def mask_wrong_shape(x, n, T: ct.constexpr):
    m = tile.arange(3) < 2
    t = tile.load(x, (0, 0), (4, 8), mask=m)  # HERE


def mask_not_bool(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8), mask=tile.arange(8))  # HERE


def histogram_of_2d(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8)).astype(np.int32)
    h = tile.histogram(t, 8)  # HERE


def chained_scan_of_2d(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8))
    tile.store(x, (0, 0), tile.scan(t, chained=True))  # HERE


def row_sort_valid_of_wrong_length(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8))
    tile.store(x, (0, 0), tile.sort(t, valid=tile.arange(3)))  # HERE


def row_sort_payload_of_wrong_shape(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8))
    k, v = tile.sort(t, tile.zeros((8, 4), np.int32))  # HERE


def topk_k_past_the_axis(x, n, T: ct.constexpr):
    v = tile.topk(tile.load(x, 0, T), T + 1)  # HERE
    tile.store(x, 0, v)


def topk_tuple_payload(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    v, i = tile.topk(t, 2, (tile.arange(T), tile.arange(T)))  # HERE


def sort_1d_valid_tile(x, n, T: ct.constexpr):
    s = tile.sort(tile.load(x, 0, T), valid=tile.arange(T))  # HERE
    tile.store(x, 0, s)


def dot_of_mismatched_shapes(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8))
    tile.store(x, (0, 0), tile.dot(t, t))  # HERE


def dot_of_mixed_dtypes(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8))
    u = tile.load(x, (0, 0), (8, 4)).astype(np.float16)
    tile.store(x, (0, 0), tile.dot(t, u))  # HERE


def dot_of_ints(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 4)).astype(np.int32)
    tile.store(x, (0, 0), tile.dot(t, t))  # HERE


def dot_of_1d(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8))
    tile.store(x, (0, 0), tile.dot(tile.reshape(t, 32), t))  # HERE


def dot_acc_of_wrong_dtype(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 4)).astype(np.float16)
    tile.store(x, (0, 0), tile.dot(t, t, t))  # HERE


def index_a_tile(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    u = t[1]  # HERE


def scan_initial_of_wrong_length(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8))
    tile.store(x, (0, 0), tile.scan(t, axis=1, initial=tile.zeros(8, np.float32)))  # HERE


def keepdims_without_axis(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8))
    s = tile.sum(t, keepdims=True)  # HERE


# --- selection (issue 22) ---------------------------------------------------------------------------
def select_of_2d(x, n, T: ct.constexpr):
    t = tile.load(x, (0, 0), (4, 8))
    s, c = tile.select(t, t > 0)  # HERE


def select_by_ints(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    s, c = tile.select(t, tile.arange(T))  # HERE


def select_flags_of_other_size(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    s, c = tile.partition(t, tile.arange(2 * T) > 3)  # HERE


def select_tiles_of_other_sizes(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    s, c = tile.select((t, tile.arange(2 * T)), t > 0)  # HERE


def unique_of_a_tuple(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T)
    u, c = tile.unique((t, t))  # HERE


def chained_select_in_loop(x, n, T: ct.constexpr):
    for i in range(n):
        t = tile.load(x, 0, T)
        s, c, o = tile.select(t, t > 0, chained=True)  # HERE


def chained_select_copy(x, n, T: ct.constexpr):
    t = tile.load(x, 0, T, valid=n)
    s, c, o = tile.select(t, t > 0, valid=n, chained=True)
    tile.store(x, o, s, valid=c)


CATALOGUE: list[Mistake] = [
    # --- statements ---------------------------------------------------------------------------
    Mistake("lambda", uses_lambda, SYNTAX, f"`Lambda` expressions {NOT_SUPPORTED}"),
    Mistake("try", uses_try, SYNTAX, f"`Try` statements {NOT_SUPPORTED}"),
    Mistake("with", uses_with, SYNTAX, f"`With` statements {NOT_SUPPORTED}"),
    Mistake("yield", uses_yield, SYNTAX, f"`Yield` expressions {NOT_SUPPORTED}"),
    Mistake("del", uses_del, SYNTAX, f"`Delete` statements {NOT_SUPPORTED}"),
    Mistake("global", uses_global, SYNTAX, f"`Global` statements {NOT_SUPPORTED}"),
    Mistake("nonlocal", make_nonlocal_program(), SYNTAX, f"`Nonlocal` statements {NOT_SUPPORTED}"),
    Mistake(
        "assert",
        uses_assert,
        SYNTAX,
        "`assert` is not supported in tile programs; check a condition with ct.device_assert(cond, msg)",
    ),
    Mistake("raise", uses_raise, SYNTAX, f"`Raise` statements {NOT_SUPPORTED}"),
    Mistake("import", imports_inside, SYNTAX, f"`Import` statements {NOT_SUPPORTED}"),
    Mistake("class_def", defines_class, SYNTAX, f"`ClassDef` statements {NOT_SUPPORTED}"),
    Mistake("nested_def", defines_function, SYNTAX, f"`FunctionDef` statements {NOT_SUPPORTED}"),
    Mistake(
        "break", uses_break, SYNTAX, "`break` is not supported in tile programs; restructure the loop with a condition"
    ),
    Mistake(
        "continue",
        uses_continue,
        SYNTAX,
        "`continue` is not supported in tile programs; restructure the loop with a condition",
    ),
    Mistake("for_else", uses_for_else, SYNTAX, "`for ... else` is not supported"),
    Mistake("for_over_tuple", loops_over_tuple, SYNTAX, "tile programs loop with `for i in range(...)` only"),
    Mistake("for_unpacking", unpacks_loop_variable, SYNTAX, "the loop variable must be a single name"),
    Mistake("bare_annotation", bare_annotation, SYNTAX, "a bare annotation without a value is not supported"),
    Mistake(
        "return_value", returns_a_value, SYNTAX, "a tile program can't return a value; store results with tile.store"
    ),
    Mistake(
        "star_parameters",
        star_parameters,
        SYNTAX,
        "tile programs take plain positional parameters (no *args, **kwargs or keyword-only)",
        args=(X, 1, 2),
        constexprs={},
    ),
    # --- expressions --------------------------------------------------------------------------
    Mistake("list_literal", list_literal, SYNTAX, f"`List` expressions {NOT_SUPPORTED}"),
    Mistake("dict_literal", dict_literal, SYNTAX, f"`Dict` expressions {NOT_SUPPORTED}"),
    Mistake("set_literal", set_literal, SYNTAX, f"`Set` expressions {NOT_SUPPORTED}"),
    Mistake("list_comprehension", list_comprehension, SYNTAX, f"`ListComp` expressions {NOT_SUPPORTED}"),
    Mistake(
        "f_string",
        f_string,
        SYNTAX,
        "f-strings are not supported in tile programs",
    ),
    Mistake("walrus", walrus, SYNTAX, f"`NamedExpr` expressions {NOT_SUPPORTED}"),
    Mistake("matmul", matmul_operator, SYNTAX, "operator MatMult is not supported"),
    Mistake("in_operator", in_operator, SYNTAX, "comparison In is not supported"),
    Mistake("starred_call", starred_call, SYNTAX, "*args and **kwargs in calls are not supported"),
    Mistake(
        "array_slice",
        slices_an_array,
        SYNTAX,
        "arrays are indexed by integers; use tile.load for ranges",
    ),
    # --- names, attributes and calls ------------------------------------------------------------
    Mistake("unknown_name", unknown_name, SYNTAX, "name 'undefined_thing' is not defined"),
    Mistake(
        "global_array",
        reads_global_array,
        TYPE,
        "global 'TABLE' is a NumPy array; tile programs read arrays passed as arguments only",
    ),
    Mistake(
        "tile_attribute", unknown_tile_attribute, SYNTAX, "attribute 'shapes' of tile<float32, 8> is not supported"
    ),
    Mistake(
        "unknown_tile_op",
        unknown_tile_op,
        SYNTAX,
        "module 'coop_tiles.tile' has no attribute 'cumsum'; did you mean tile.scan?",
    ),
    Mistake(
        "misspelt_tile_op",
        misspells_load,
        SYNTAX,
        "module 'coop_tiles.tile' has no attribute 'laod'; did you mean tile.load?",
    ),
    Mistake(
        "tile_op_from_ct",
        load_from_ct,
        SYNTAX,
        "module 'coop_tiles' has no attribute 'load'; did you mean tile.load?",
    ),
    Mistake("numpy_exp", numpy_exp_of_a_tile, SYNTAX, "'exp' can't be called in a tile program; use ct.exp"),
    Mistake(
        "numpy_call",
        calls_numpy,
        SYNTAX,
        "'clip' can't be called in a tile program; use ct.minimum(ct.maximum(t, low), high)",
    ),
    Mistake("math_call", calls_math, SYNTAX, "'exp' can't be called in a tile program; use ct.exp"),
    Mistake(
        "kernel_call", calls_a_kernel, SYNTAX, "<coop_tiles kernel jitted_helper> can't be called in a tile program"
    ),
    Mistake(
        "print_call",
        calls_print,
        SYNTAX,
        "print() can't run inside a tile program: use ct.static_print(...) to print types, constexprs and tile "
        "sizes at compile time, or ct.device_print(prefix, ...) to print values as the program runs",
    ),
    Mistake("len_call", calls_len, SYNTAX, "'len' can't be called in a tile program"),
    Mistake("call_a_scalar", calls_a_scalar, TYPE, "only functions can be called, not int64 (python scalar)"),
    Mistake("unknown_keyword", unknown_keyword, TYPE, "bad call of load: got an unexpected keyword argument 'masked'"),
    Mistake("missing_argument", missing_argument, TYPE, "bad call of load: missing a required argument: 'size'"),
    Mistake("too_many_arguments", too_many_arguments, TYPE, "bad call of exp: too many positional arguments"),
    Mistake(
        "helper_missing_argument",
        helper_missing_argument,
        TYPE,
        "bad call of scale_by: missing a required argument: 'factor'",
    ),
    Mistake("int_of_tile", int_of_tile, TYPE, "int() of a tile; use t.astype(int)"),
    Mistake("python_min_of_tiles", python_min_of_tiles, TYPE, "use ct.minimum for tiles, or tile.min to reduce one"),
    Mistake(
        "recursion",
        calls_recursive_helper,
        SYNTAX,
        "helpers nested deeper than 16 calls (recursion?)",
        at=recurse,
    ),
    Mistake(
        "helper_early_return",
        calls_helper_returning_early,
        SYNTAX,
        "a helper's `return` must be its last statement, not inside an `if`",
        at=returns_early,
    ),
    Mistake(
        "helper_code_after_return",
        calls_helper_with_code_after_return,
        SYNTAX,
        "a helper's `return` must be its last statement",
        at=code_after_return,
    ),
    # --- tile sizes and variables ----------------------------------------------------------------
    Mistake("runtime_tile_size", runtime_tile_size, VALUE, f"tile size {TILE_SIZE_NOT_CONSTANT}"),
    Mistake("zero_tile_size", zero_tile_size, VALUE, "tile size must be positive, got 0", constexprs={"T": 0}),
    Mistake("float_tile_size", float_tile_size, VALUE, "tile size must be of type int, got 4.0"),
    Mistake(
        "compile_time_division_by_zero",
        tile_size_by_zero,
        VALUE,
        "compile-time evaluation failed: integer division or modulo by zero",
    ),
    Mistake(
        "tile_size_mismatch",
        mismatched_tile_sizes,
        TYPE,
        "tiles of different sizes in one element-wise operation: tile<float32, 8>, tile<float32, 16>",
    ),
    Mistake(
        "variable_changes_tile_size",
        variable_changes_tile_size,
        TYPE,
        "variable 't' is assigned tiles of different sizes: tile<float32, 8> and tile<float32, 16>; use two names",
    ),
    Mistake(
        "variable_tile_then_scalar",
        variable_tile_then_scalar,
        TYPE,
        "variable 'v' is assigned both a tile (tile<float32, 8>) and a scalar (float64 (python scalar))",
    ),
    Mistake(
        "variable_bool_then_int",
        variable_bool_then_int,
        TYPE,
        "variable 'flag' is assigned both bool and int64 (python scalar)",
    ),
    Mistake(
        "cast_undone_by_promotion",
        cast_undone_by_promotion,
        TYPE,
        "variable 'c' is float32 (the promotion of every value assigned to it), so this astype(float16) would be "
        "undone: give the float16 value a name of its own, or assign 'c' only float16 values",
    ),
    Mistake("string_in_arithmetic", string_in_arithmetic, TYPE, "value must be a number or a tile, got '1'"),
    Mistake(
        "array_in_arithmetic",
        array_in_arithmetic,
        TYPE,
        "arrays can't be used in arithmetic; load a tile or index an element",
    ),
    Mistake(
        "int_negative_power",
        int_negative_power,
        VALUE,
        "integers to negative integer powers are not allowed",
        args=(XI8, 16),
    ),
    Mistake(
        "constant_out_of_dtype_range",
        fill_out_of_range,
        VALUE,
        "300 does not fit in int8",
        args=(XI8, 16),
    ),
    Mistake(
        "int_beyond_int64",
        int_beyond_int64,
        VALUE,
        "1180591620717411303424 does not fit in int64",
        args=(XI8, 16),
    ),
    # --- control flow -----------------------------------------------------------------------------
    Mistake("if_on_tile", if_on_tile, DIVERGENCE, f"the condition of this `if` {DIVERGENT}"),
    Mistake("while_on_tile", while_on_tile, DIVERGENCE, f"the condition of this `while` {DIVERGENT}"),
    Mistake("ternary_on_tile", ternary_on_tile, DIVERGENCE, f"the condition of this `if expression` {DIVERGENT}"),
    Mistake(
        "ternary_of_tiles", ternary_of_tiles, TYPE, "`x if c else y` needs scalars; use ct.where(c, x, y) for tiles"
    ),
    Mistake("and_of_tiles", and_of_tiles, TYPE, "`and`/`or`/`not` need scalars; combine boolean tiles with & and |"),
    Mistake("not_of_tile", not_of_tile, TYPE, "the operand of `not` must be a block-uniform scalar, got tile<bool, 8>"),
    Mistake(
        "assigned_in_one_branch",
        assigned_in_one_branch,
        SYNTAX,
        "variable 't' is not assigned on every path before this use: "
        "it is assigned in only one branch of the `if` at line {IF}",
    ),
    Mistake(
        "assigned_in_loop",
        assigned_in_loop,
        SYNTAX,
        "variable 's' is not assigned on every path before this use: "
        "it is first assigned inside the loop at line {FOR}, which may not run",
    ),
    Mistake("while_true", while_true, SYNTAX, "`while True` loops need `break`, which tile programs don't support"),
    Mistake("range_of_float", range_of_float, TYPE, "a range() bound must be an integer, got float64 (python scalar)"),
    Mistake("range_step_zero", range_step_zero, VALUE, "range() step must not be zero"),
    Mistake("program_id_axis_3", program_id_axis_3, VALUE, "grid axis must be 0, 1 or 2, got 3"),
    # --- scans, reductions, combine functions -------------------------------------------------------
    Mistake("xor_scan_of_floats", xor_scan_of_floats, TYPE, "operator 'xor' needs an integer tile, got float32"),
    Mistake(
        "xor_of_float_tiles",
        xor_of_float_tiles,
        TYPE,
        "operation not defined for tile<float32, 8>, tile<float32, 8>: ufunc 'bitwise_xor' not supported for "
        "the input types, and the inputs could not be safely coerced to any supported types according to the "
        "casting rule ''safe''",
    ),
    Mistake("invert_of_float_tile", invert_of_float_tile, TYPE, "operator ~ is not defined for tile<float32, 8>"),
    Mistake(
        "sum_of_bools",
        sum_of_bools,
        TYPE,
        "scans and reductions of bool tiles are not supported; convert with t.astype(np.int32)",
    ),
    Mistake(
        "sum_of_scalar", sum_of_scalar, TYPE, "tile.sum expects a tile or a tuple of tiles, got int64 (python scalar)"
    ),
    Mistake(
        "unknown_scan_op",
        unknown_scan_op,
        VALUE,
        "unknown operator 'cumsum'; expected one of add, mul, max, min, and, or, xor or a @ct.combine function",
    ),
    Mistake(
        "undecorated_combine",
        undecorated_combine,
        VALUE,
        "op must be one of 'add', 'mul', 'max', 'min', 'and', 'or', 'xor' or a @ct.combine function, "
        "got the plain function add_plain; decorate it with @ct.combine",
    ),
    Mistake(
        "tuple_scan_without_combine",
        tuple_scan_without_combine,
        TYPE,
        "tile.scan of a tuple of tiles needs a @ct.combine function as op",
    ),
    Mistake(
        "tuple_scan_of_mixed_sizes",
        tuple_scan_of_mixed_sizes,
        TYPE,
        "tile.scan of tiles of different sizes: tile<float32, 8>, tile<float32, 16>",
    ),
    Mistake(
        "combine_wrong_arity",
        combine_wrong_arity,
        TYPE,
        "@ct.combine function takes_three must take 4 scalars for a tuple of 2 tiles "
        "(the earlier element's 2, then the later one's), it takes 3",
    ),
    Mistake(
        "combine_wrong_count",
        combine_wrong_count,
        TYPE,
        "@ct.combine function returns_one must return 2 scalar(s), it returns 1 value",
        at=returns_one,
    ),
    Mistake(
        "combine_tile_op",
        combine_tile_op,
        SYNTAX,
        COMBINE_ONLY_SCALARS + "tile ops can't be used in them (use ct.where for choices)",
        at=combines_with_tile_op,
    ),
    Mistake(
        "combine_if",
        combine_if,
        SYNTAX,
        COMBINE_ONLY_SCALARS
        + "control flow on values, arrays or program ids can't be used in them (use ct.where for choices)",
        at=combines_with_if,
    ),
    Mistake(
        "call_combine",
        calls_combine,
        TYPE,
        "@ct.combine function add_pairs is called by tile.scan/tile.reduce (op=...)",
    ),
    Mistake(
        "exclusive_combine_without_initial",
        exclusive_combine_without_initial,
        VALUE,
        "an exclusive scan with a @ct.combine function needs initial= (there is no identity)",
    ),
    Mistake("initial_wrong_count", initial_wrong_count, TYPE, "initial must have 2 values, one per tile"),
    Mistake("return_total_not_bool", return_total_not_bool, VALUE, "return_total must be of type bool, got 1"),
    Mistake("scan_dtype_not_a_dtype", scan_dtype_not_a_dtype, TYPE, "'int33' is not a dtype"),
    Mistake(
        "sum_dtype_at_run_time",
        sum_dtype_at_run_time,
        VALUE,
        "dtype must be a compile-time constant (a literal, a ct.constexpr parameter, or an expression of them), "
        "got a runtime int64 (python scalar)",
    ),
    Mistake("unpack_too_many", unpacks_too_many, TYPE, "can't unpack 2 values into 3 names"),
    Mistake("unpack_a_tile", unpacks_a_tile, TYPE, "can't unpack tile<float32, 8> into 2 names"),
    Mistake("tuple_index_out_of_range", tuple_index_out_of_range, VALUE, "tuple index 2 out of range for a tuple of 2"),
    # --- arrays, loads, stores, dtypes ----------------------------------------------------------------
    Mistake(
        "load_2d_array",
        loads_2d_array,
        TYPE,
        "tile.load's first argument must be a 1-D array or view, got a 2-d array; index it down to one axis "
        "first (a[i] is the row i of a 2-d array)",
        args=(M, 4),
    ),
    Mistake("too_many_indices", too_many_indices, TYPE, "too many indices (2) for a 1-d array"),
    Mistake(
        "element_write_too_few_indices",
        element_write_too_few_indices,
        TYPE,
        "an element write needs 2 indices for a 2-d array, got 1",
        args=(M, 4),
    ),
    Mistake(
        "float_array_index", float_array_index, TYPE, "an array index must be an integer, got float64 (python scalar)"
    ),
    Mistake("shape_index_out_of_range", shape_index_out_of_range, VALUE, "shape index 1 out of range for a 1-d array"),
    Mistake(
        "write_tile_element",
        writes_tile_element,
        TYPE,
        "the target of an element write must be an array argument, got tile<float32, 8>",
    ),
    Mistake(
        "read_tile_element",
        reads_tile_element,
        SYNTAX,
        "a tile is subscripted only to add axes (t[:, None], t[None, :]); to read elements by index use "
        "tile.gather, for per-element choices ct.where, to fold it tile.sum/tile.max",
    ),
    Mistake("assign_tile_attribute", assigns_tile_attribute, SYNTAX, "can't assign to Attribute"),
    Mistake(
        "load_from_scalar",
        loads_from_scalar,
        TYPE,
        "tile.load's first argument must be an array argument, got int64 (python scalar)",
    ),
    Mistake("store_scalar", stores_scalar, TYPE, "the stored value must be a tile, got 1.0"),
    Mistake(
        "gather_with_tile_offset",
        gathers_with_tile_offset,
        TYPE,
        "the offset must be a block-uniform scalar, got tile<int32, 8>",
    ),
    Mistake("astype_not_a_dtype", astype_not_a_dtype, TYPE, "'banana' is not a dtype"),
    Mistake("astype_complex", astype_complex, TYPE, f"dtype complex64 is not supported; use one of {SUPPORTED}"),
    Mistake("full_runtime_dtype", full_with_runtime_dtype, VALUE, f"the dtype {TILE_SIZE_NOT_CONSTANT}", args=(X, 3)),
    # --- runtime-only: outside an array (interpreter) ---------------------------------------------------
    Mistake(
        "element_read_out_of_range",
        reads_past_the_end,
        VALUE,
        "index 16 is outside an array of 16 elements",
        modes=(INTERPRET,),
    ),
    Mistake(
        "negative_element_index",
        reads_negative_index,
        VALUE,
        "index -1 is outside an array of 16 elements",
        modes=(INTERPRET,),
    ),
    Mistake(
        "element_write_out_of_range",
        writes_past_the_row,
        VALUE,
        "index 8 is outside axis 1 of an array of 8 elements",
        args=(M, 8),
        modes=(INTERPRET,),
    ),
    Mistake(
        "view_index_out_of_range",
        views_past_the_end,
        VALUE,
        "index 4 is outside axis 0 of an array of 4 elements",
        args=(M, 4),
        modes=(INTERPRET,),
    ),
    Mistake(
        "load_past_the_end",
        loads_past_the_end,
        VALUE,
        "tile.load touches elements [12, 20) of an array of 16 elements",
        modes=(INTERPRET,),
    ),
    Mistake(
        "store_before_the_start",
        stores_before_the_start,
        VALUE,
        "tile.store touches elements [-4, 4) of an array of 16 elements",
        modes=(INTERPRET,),
    ),
    # --- launches ---------------------------------------------------------------------------------------
    launch("too_many_arguments_at_launch", ct.LaunchError, "copy_tile takes 3 arguments, got 4", args=(X, 16, 8, 1)),
    launch("missing_argument_at_launch", ct.LaunchError, "copy_tile is missing arguments: n", args=(X,)),
    launch(
        "unknown_constexpr",
        ct.LaunchError,
        "copy_tile has no parameter 'TILE'",
        constexprs={"T": 8, "TILE": 8},
    ),
    launch("two_values_for_one_parameter", ct.LaunchError, "copy_tile got two values for 'T'", args=(X, 16, 8)),
    launch("unhashable_constexpr", ct.LaunchError, "constexpr 'T' must be hashable, got list", constexprs={"T": [8]}),
    launch("list_argument", ct.LaunchError, NOT_A_NUMBER + "list", args=(X, [16])),
    launch("string_argument", ct.LaunchError, NOT_A_NUMBER + "str", args=(X, "16")),
    launch("dict_argument", ct.LaunchError, NOT_A_NUMBER + "dict", args=(X, {"n": 16})),
    launch("none_argument", ct.LaunchError, NOT_A_NUMBER + "NoneType", args=(X, None)),
    launch(
        "int_too_large",
        ct.LaunchError,
        "argument 'n' = 1180591620717411303424 does not fit in int64",
        args=(X, 2**70),
    ),
    launch(
        "zero_d_array",
        ct.LaunchError,
        "argument 'x' is a 0-d array; pass a number, or an array of at least one dimension",
        args=(np.array(1.0, np.float32), 16),
    ),
    launch(
        "complex_array",
        ct.LaunchError,
        f"argument 'x' has dtype complex64, which is not supported; use one of {SUPPORTED}",
        args=(np.zeros(16, np.complex64), 16),
    ),
    grid_mistake("grid_string", "big", GRID_SHAPE + "'big'"),
    grid_mistake("grid_4_tuple", (1, 1, 1, 1), GRID_SHAPE + "(1, 1, 1, 1)"),
    grid_mistake("grid_float", 2.0, GRID_SHAPE + "2.0"),
    grid_mistake("grid_negative", -1, "grid dimensions must be non-negative, got (-1,)"),
    launch(
        "launch_without_grid",
        ct.LaunchError,
        "launch a tile program with a grid: copy_tile[grid](...)",
        grid=NO_GRID,
        modes=(INTERPRET,),
    ),
    launch(
        "block_threads_not_multiple_of_32",
        ct.TileValueError,
        "block_threads must be a multiple of 32 between 32 and 1024, got 100",
        jit={"block_threads": 100},
    ),
    launch(
        "block_threads_too_large",
        ct.TileValueError,
        "block_threads must be a multiple of 32 between 32 and 1024, got 2048",
        jit={"block_threads": 2048},
    ),
    launch(
        "tile_too_large_for_block",
        ct.TileValueError,
        "a tile of 300000 elements needs 293 items per thread at 1024 threads; a tile may have at most "
        "256 items per thread (262144 elements at 1024 threads): use smaller tiles",
        constexprs={"T": 300000},
    ),
    # --- the block toolbox -------------------------------------------------------------------------
    Mistake(
        "histogram_of_floats",
        histogram_of_floats,
        TYPE,
        "tile.histogram counts the values of an integer tile, got tile<float32, 8>; convert it first "
        "(t.astype(np.int32)): values outside [0, bins) are not counted",
    ),
    Mistake(
        "histogram_runtime_bins",
        histogram_runtime_bins,
        VALUE,
        "bins must be a compile-time constant (a literal, a ct.constexpr parameter, or an expression of them), "
        "got a runtime int64 (python scalar)",
        args=(I, 16),
    ),
    Mistake("histogram_zero_bins", histogram_zero_bins, VALUE, "bins must be a positive int, got 0", args=(I, 16)),
    Mistake(
        "histogram_unknown_algorithm",
        histogram_unknown_algorithm,
        VALUE,
        "algorithm must be 'auto', 'atomic' or 'sort', got 'radix'",
        args=(I, 16),
    ),
    Mistake(
        "atomic_add_int8",
        atomic_add_int8,
        TYPE,
        "tile.atomic_add into an array of int8 is not supported; use one of int32, uint32, int64, uint64, float32, "
        "float64, float16, bfloat16",
        args=(I8, 16),
    ),
    Mistake("atomic_add_array", atomic_add_array, TYPE, "the value must be a tile or a scalar, got array<float32, 1d>"),
    Mistake(
        "atomic_max_float16",
        atomic_max_float16,
        TYPE,
        "tile.atomic_max into an array of float16 is not supported; use one of int32, uint32, int64, uint64, float32, "
        "float64",
        args=(np.zeros(16, np.float16), 16),
    ),
    Mistake(
        "atomic_min_float_index",
        atomic_min_float_index,
        TYPE,
        "the index of tile.atomic_min must be an integer tile, got tile<float32, 8>; convert it with astype",
    ),
    Mistake(
        "atomic_add_mask_size",
        atomic_add_mask_size,
        TYPE,
        "the mask of shape (16,) does not broadcast to the tile's shape (8,)",
    ),
    Mistake(
        "gather_float_index",
        gather_float_index,
        TYPE,
        "the index of tile.gather must be an integer tile, got tile<float32, 8>; convert it with astype",
    ),
    Mistake(
        "gather_bool_index",
        gather_bool_index,
        TYPE,
        "the index of tile.gather must be an integer tile, got tile<bool, 8>; convert it with astype",
    ),
    Mistake("gather_scalar_index", gather_scalar_index, TYPE, "the index must be a tile, got int64 (python scalar)"),
    Mistake(
        "gather_one_index_of_2d",
        gather_one_index_of_2d,
        TYPE,
        "tile.gather into a 2-d array needs 2 index tiles, got one index tile (a tuple of index tiles takes one "
        "per axis)",
        args=(M, 16),
    ),
    Mistake(
        "gather_three_indices_of_2d",
        gather_three_indices_of_2d,
        TYPE,
        "tile.gather into a 2-d array needs 2 index tiles, got a tuple of 3 index tiles",
        args=(M, 16),
    ),
    Mistake(
        "gather_index_sizes",
        gather_index_sizes,
        TYPE,
        "the index tiles of tile.gather have shapes (8,) and (16,), which do not broadcast together",
        args=(M, 16),
    ),
    Mistake(
        "gather_int_mask",
        gather_int_mask,
        TYPE,
        "the mask must be a bool tile (a comparison), got tile<int32, 8>",
    ),
    Mistake("gather_scalar_mask", gather_scalar_mask, TYPE, "the mask must be a tile, got bool"),
    Mistake(
        "gather_mask_size",
        gather_mask_size,
        TYPE,
        "the mask of shape (16,) does not broadcast to the tile's shape (8,)",
    ),
    Mistake(
        "gather_outside",
        gather_outside,
        ct.TileIndexError,
        "tile.gather reads index -1 (element 0 of the index) of an array of 16 elements",
        modes=(INTERPRET,),
    ),
    Mistake(
        "gather_outside_2d",
        gather_outside_2d,
        ct.TileIndexError,
        "tile.gather reads index (4, 8) (element 8 of the index) of an array of shape (4, 8)",
        args=(M, 16),
        constexprs={"T": 16},
        modes=(INTERPRET,),
    ),
    Mistake(
        "scatter_value_size",
        scatter_value_size,
        TYPE,
        "the scattered value has 16 elements and the index 8",
    ),
    Mistake(
        "scatter_array_value",
        scatter_array_value,
        TYPE,
        "the scattered value must be a tile or a scalar, got array<float32, 1d>",
    ),
    Mistake(
        "scatter_float_index",
        scatter_float_index,
        TYPE,
        "the index of tile.scatter must be an integer tile, got tile<float32, 8>; convert it with astype",
    ),
    Mistake(
        "sort_bools",
        sort_bools,
        TYPE,
        "tile.sort of a bool tile is not supported; convert it with t.astype(np.uint8)",
        args=(B, 16),
    ),
    Mistake(
        "sort_payload_size_mismatch",
        sort_payload_size_mismatch,
        TYPE,
        "the payload has shape (16,) and the keys (8,)",
    ),
    Mistake(
        "sort_bad_bits",
        sort_bad_bits,
        VALUE,
        "the sorted bits [begin_bit, end_bit) must satisfy 0 <= begin_bit < end_bit <= 32 for float32 keys, "
        "got [0, 40)",
    ),
    Mistake(
        "sort_tuple_without_compare",
        sort_tuple_without_compare,
        TYPE,
        "sorting a tuple of key tiles needs a comparison: tile.sort(keys, compare=fn)",
    ),
    Mistake(
        "sort_compare_not_bool",
        sort_compare_not_bool,
        TYPE,
        "a sort's compare function must return a bool (a comparison such as a < b), not_a_comparison returns float32",
        at=not_a_comparison,
    ),
    Mistake(
        "sort_compare_and_descending",
        sort_compare_and_descending,
        VALUE,
        "descending, begin_bit and end_bit belong to the radix sort; with compare= the comparison says the order",
    ),
    # --- chained scans -------------------------------------------------------------------------------
    Mistake("chained_in_loop", chained_in_loop, SYNTAX, CHAINED_AT_TOP),
    Mistake("chained_under_if", chained_under_if, SYNTAX, CHAINED_AT_TOP),
    Mistake("chained_helper_in_loop", chained_helper_in_loop, SYNTAX, CHAINED_AT_TOP, at=chained_scan_helper),
    Mistake(
        "chained_after_return",
        chained_after_return,
        SYNTAX,
        "tile.scan(..., chained=True) must run in every program, so it can't come after a `return` that some "
        "programs may take (line {RET})",
    ),
    Mistake(
        "two_chained_scans",
        two_chained_scans,
        SYNTAX,
        "a program can run one chained scan; to chain several values, scan a tuple of tiles with a @ct.combine "
        "function",
    ),
    Mistake(
        "chained_not_constant",
        chained_not_constant,
        VALUE,
        "chained must be a compile-time constant (a literal, a ct.constexpr parameter, or an expression of them), "
        "got a runtime bool",
    ),
    Mistake(
        "chained_2d_grid",
        chained_copy,
        ct.LaunchError,
        "tile.scan(..., chained=True) scans the programs of a 1-D grid in order; this launch's grid is 2 x 3 x 1: "
        "launch a 1-D grid",
        grid=(2, 3),
        launch=True,
        modes=(INTERPRET,),
    ),
    Mistake(
        "run_lengths_of_floats",
        run_lengths_of_floats,
        TYPE,
        "the run lengths must be an integer tile, got tile<float32, 8>",
    ),
    Mistake("run_lengths_size_mismatch", run_lengths_size_mismatch, TYPE, "8 run values but 16 run lengths"),
    Mistake(
        "sort_key_of_bools",
        sort_key_of_bools,
        TYPE,
        "tile.sort_key of a bool tile is not supported; convert it with t.astype(np.uint8)",
        args=(B, 16),
    ),
    Mistake(
        "adjacent_difference_of_bools",
        adjacent_difference_of_bools,
        TYPE,
        "tile.adjacent_difference of a bool tile is not defined; use tile.flag_heads",
        args=(B, 16),
    ),
    # --- debugging ------------------------------------------------------------------------------
    Mistake(
        "breakpoint_call",
        calls_breakpoint,
        SYNTAX,
        "breakpoint() can't stop a tile program (the interpreter runs its typed IR, not the Python function): "
        "print values with ct.device_print(prefix, ...) or ct.static_print(...), or check them with "
        "ct.device_assert(cond, msg)",
    ),
    Mistake(
        "device_print_without_prefix",
        device_print_without_prefix,
        TYPE,
        'ct.device_print takes a string prefix, then the values to print (ct.device_print("x =", x)); '
        "got tile<float32, 8> as the prefix",
    ),
    Mistake(
        "device_print_runtime_prefix",
        device_print_runtime_prefix,
        TYPE,
        'ct.device_print takes a string prefix, then the values to print (ct.device_print("x =", x)); '
        "got int64 (python scalar) as the prefix",
    ),
    Mistake(
        "device_print_array",
        device_print_array,
        TYPE,
        "ct.device_print prints scalars and tiles, not arrays; load a tile (tile.load) or read an element",
    ),
    Mistake(
        "device_print_dtype",
        device_print_dtype,
        TYPE,
        "ct.device_print prints runtime values (scalars and tiles); print dtype('float32') with ct.static_print",
    ),
    Mistake(
        "device_print_in_combine",
        device_print_in_combine,
        SYNTAX,
        COMBINE_ONLY_SCALARS + "tile ops can't be used in them (use ct.where for choices)",
        at=prints_in_combine,
    ),
    Mistake(
        "device_assert_float_tile",
        device_assert_float_tile,
        TYPE,
        "the condition of ct.device_assert must be a bool tile (every element must hold) or a scalar, "
        "got tile<float32, 8>; compare it (t > 0)",
    ),
    Mistake(
        "device_assert_array",
        device_assert_array,
        TYPE,
        "the condition of ct.device_assert must be a bool tile or a scalar, got array<float32, 1d>",
    ),
    Mistake(
        "device_assert_runtime_message",
        device_assert_runtime_message,
        TYPE,
        "the message of ct.device_assert must be a string, got int64 (python scalar)",
    ),
    Mistake(
        "device_assert_fails",
        device_assert_fails,
        ct.TileAssertionError,
        "assertion failed in program (1, 0, 0): t is below the program id",
        grid=2,
        modes=(INTERPRET,),
    ),
    Mistake(
        "static_assert_fails",
        static_assert_fails,
        ct.TileAssertionError,
        "static assertion failed: T must be a multiple of 32",
    ),
    Mistake(
        "static_assert_fails_without_message",
        static_assert_fails_without_message,
        ct.TileAssertionError,
        "static assertion failed: t.size > 8",
    ),
    Mistake(
        "static_assert_of_a_runtime_value",
        static_assert_of_a_runtime_value,
        VALUE,
        "ct.static_assert checks a compile-time condition (of constexprs, tile sizes, dtypes), got a runtime "
        "bool; check runtime values with ct.device_assert(cond, msg)",
    ),
    Mistake(
        "static_assert_runtime_message",
        static_assert_runtime_message,
        TYPE,
        "the message of ct.static_assert must be a string, got int64 (python scalar)",
    ),
    # --- 2-D tiles ---------------------------------------------------------------------------------
    Mistake(
        "shapes_dont_broadcast",
        adds_tiles_of_shapes_that_dont_broadcast,
        TYPE,
        "tiles of different sizes in one element-wise operation: tile<float32, (4, 8)>, tile<float32, (8, 4)>",
        args=(M, 16),
    ),
    Mistake("three_d_shape", three_d_shape, VALUE, "a tile has one or two axes; the tile shape (2, 2, 2) has 3"),
    Mistake(
        "runtime_extent",
        runtime_extent,
        VALUE,
        "each extent of the tile shape must be a compile-time constant (a literal, a ct.constexpr parameter, or an "
        "expression of them), got a runtime int64 (python scalar)",
    ),
    Mistake(
        "reduce_bad_axis",
        reduce_bad_axis,
        VALUE,
        "axis 2 is out of range for tile.sum of a tile of shape (4, 8)",
        args=(M, 16),
    ),
    Mistake(
        "reshape_other_size",
        reshape_other_size,
        VALUE,
        "tile.reshape of a tile of shape (4, 8) (32 elements) to the shape (5, 7) (35 elements): the sizes differ",
        args=(M, 16),
    ),
    Mistake(
        "broadcast_bad_shape",
        broadcast_bad_shape,
        VALUE,
        "tile.broadcast_to: a tile of shape (4, 8) does not broadcast to (8, 8)",
        args=(M, 16),
    ),
    Mistake(
        "load_2d_of_1d",
        load_2d_of_1d,
        TYPE,
        "tile.load's first argument must be a 2-D array or view for a 2-D block, got a 1-d array; use a 1-D tile "
        "(an int offset and size)",
    ),
    Mistake(
        "load_1d_of_2d",
        load_1d_of_2d,
        TYPE,
        "tile.load's first argument must be a 1-D array or view, got a 2-d array; index it down to one axis first "
        "(a[i] is the row i of a 2-d array)",
        args=(M, 16),
    ),
    Mistake(
        "offset_of_three",
        offset_of_three,
        TYPE,
        "the offset of a 2-D block must be a pair (one per axis), got (0, 0, 0)",
        args=(M, 16),
    ),
    Mistake(
        "valid_of_one", valid_of_one, TYPE, "valid of a 2-D block must be a pair (one per axis), got (4,)", args=(M, 16)
    ),
    Mistake(
        "mask_wrong_shape",
        mask_wrong_shape,
        TYPE,
        "the mask of shape (3,) does not broadcast to the tile's shape (4, 8)",
        args=(M, 16),
    ),
    Mistake(
        "mask_not_bool",
        mask_not_bool,
        TYPE,
        "the mask must be a bool tile (a comparison), got tile<int32, 8>",
        args=(M, 16),
    ),
    Mistake(
        "histogram_of_2d",
        histogram_of_2d,
        TYPE,
        "tile.histogram takes a 1-D tile, got a tile of shape (4, 8); reshape it first (tile.reshape(t, 32))",
        args=(M, 16),
    ),
    Mistake(
        "chained_scan_of_2d",
        chained_scan_of_2d,
        TYPE,
        "tile.scan(..., chained=True) takes a 1-D tile, got a tile of shape (4, 8); reshape it first "
        "(tile.reshape(t, 32))",
        args=(M, 16),
    ),
    Mistake(
        "row_sort_valid_of_wrong_length",
        row_sort_valid_of_wrong_length,
        TYPE,
        "valid of a row-wise tile.sort must be a scalar or a tile of 4 integer counts (one per row), "
        "got tile<int32, 3>",
        args=(M, 16),
    ),
    Mistake(
        "row_sort_payload_of_wrong_shape",
        row_sort_payload_of_wrong_shape,
        TYPE,
        "the payload has shape (8, 4) and the keys (4, 8)",
        args=(M, 16),
    ),
    Mistake(
        "topk_k_past_the_axis",
        topk_k_past_the_axis,
        VALUE,
        "k must be a compile-time int between 1 and 8 (the length of the axis), got 9",
    ),
    Mistake(
        "topk_tuple_payload",
        topk_tuple_payload,
        TYPE,
        "tile.topk carries one payload tile; to carry several, select their indices (values=tile.arange(n)) and "
        "gather each",
    ),
    Mistake(
        "sort_1d_valid_tile",
        sort_1d_valid_tile,
        TYPE,
        "valid of tile.sort of a 1-D tile must be a scalar, got tile<int32, 8>",
    ),
    Mistake(
        "index_a_tile",
        index_a_tile,
        SYNTAX,
        "a tile is subscripted only to add axes (t[:, None], t[None, :]); to read elements by index use "
        "tile.gather, for per-element choices ct.where, to fold it tile.sum/tile.max",
    ),
    Mistake(
        "scan_initial_of_wrong_length",
        scan_initial_of_wrong_length,
        TYPE,
        "initial must be a scalar or a tile of 4 seeds (one per row scanned), got tile<float32, 8>",
        args=(M, 16),
    ),
    Mistake(
        "keepdims_without_axis",
        keepdims_without_axis,
        VALUE,
        "tile.sum(..., keepdims=True) needs axis=k: with axis=None the result is a scalar",
        args=(M, 16),
    ),
    # --- selection (issue 22) -------------------------------------------------------------------
    Mistake(
        "select_of_2d",
        select_of_2d,
        TYPE,
        "tile.select takes a 1-D tile, got a tile of shape (4, 8); reshape it first (tile.reshape(t, 32))",
        args=(M, 16),
    ),
    Mistake(
        "select_by_ints",
        select_by_ints,
        TYPE,
        "the flags must be a bool tile, got tile<int32, 8>; compare it (t > 0)",
    ),
    Mistake(
        "select_flags_of_other_size", select_flags_of_other_size, TYPE, "the flags have 16 elements and the tile 8"
    ),
    Mistake(
        "select_tiles_of_other_sizes",
        select_tiles_of_other_sizes,
        TYPE,
        "tile.select of tiles of different sizes: tile<float32, 8>, tile<int32, 16>",
    ),
    Mistake("unique_of_a_tuple", unique_of_a_tuple, TYPE, "tile.unique takes a tile, got a tuple of 2"),
    Mistake(
        "chained_select_in_loop",
        chained_select_in_loop,
        SYNTAX,
        "tile.select(..., chained=True) must run exactly once in every program: call it at the top level of the "
        "program, not inside a loop or an `if`",
    ),
    Mistake(
        "chained_select_2d_grid",
        chained_select_copy,
        ct.LaunchError,
        "tile.select(..., chained=True) scans the programs of a 1-D grid in order; this launch's grid is 2 x 3 x 1: "
        "launch a 1-D grid",
        grid=(2, 3),
        launch=True,
        modes=(INTERPRET,),
    ),
    Mistake(
        "dot_of_mismatched_shapes",
        dot_of_mismatched_shapes,
        TYPE,
        "tile.dot of shapes (4, 8) and (4, 8): a's columns must be b's rows",
        args=(M, 16),
    ),
    Mistake(
        "dot_of_mixed_dtypes",
        dot_of_mixed_dtypes,
        TYPE,
        "tile.dot needs a and b of one dtype, got float32 and float16",
        args=(M, 16),
    ),
    Mistake(
        "dot_of_ints",
        dot_of_ints,
        TYPE,
        "tile.dot multiplies float16, bfloat16, float32, float64 tiles, got int32",
        args=(M, 16),
    ),
    Mistake(
        "dot_of_1d",
        dot_of_1d,
        TYPE,
        "tile.dot multiplies 2-D tiles, got shapes (32,) and (4, 8)",
        args=(M, 16),
    ),
    Mistake(
        "dot_acc_of_wrong_dtype",
        dot_acc_of_wrong_dtype,
        TYPE,
        "tile.dot's acc must be a float32 tile of shape (4, 4), got a float16 tile of shape (4, 4)",
        args=(M, 16),
    ),
]


def expected_message(m: Mistake) -> str:
    """`m.message` with each `{MARKER}` replaced by the line of `# MARKER` in the program."""
    return re.sub(r"\{([A-Z]+)\}", lambda g: str(line_of(m.at or m.program, f"# {g[1]}")), m.message)


def _params() -> list:
    names = [m.name for m in CATALOGUE]
    assert len(names) == len(set(names)), "duplicate entry names"
    out = []
    for m in CATALOGUE:
        for mode in m.modes:
            marks = [pytest.mark.xfail(strict=True, reason=m.xfail[mode])] if mode in m.xfail else []
            out.append(pytest.param(m, mode, id=f"{m.name}-{mode}", marks=marks))
    return out


@pytest.mark.parametrize("mistake, mode", _params())
def test_mistake_is_reported_at_the_users_line(mistake: Mistake, mode: str) -> None:
    err = provoke(mistake, mode)
    text = str(err)
    assert type(err) is mistake.error, f"{type(err).__name__}: {text}"
    assert err.message == expected_message(mistake), text
    assert err.loc is not None, f"no location: {text}"
    if mistake.launch:
        where = (__file__, line_of(provoke, f"# {mode.upper()}"))
    else:
        fn = mistake.at or mistake.program
        where = (inspect.getsourcefile(inspect.unwrap(fn)), line_of(fn, "# HERE"))
    assert (err.loc.filename, err.loc.line) == where, text
    assert "coop_tiles/lang" not in text and "coop_tiles/runtime" not in text, text
