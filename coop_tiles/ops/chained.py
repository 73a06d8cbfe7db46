"""Chained scans, `tile.scan(..., chained=True)`: one scan over the tiles of every program of a 1-D
grid, in program-id order, in a single pass (the decoupled look-back of Merrill and Garland, 2016,
as CUB's device scan runs it). This module holds what `ops/scan.py` needs for them: where a chained
scan may stand, the grid-wide state's layout, and the device code of the look-back.

**Program ids.** A block does not play the program of its `blockIdx`: at its start (the kernel
entry, before the body) its thread 0 takes a ticket from a counter in the grid-wide state, and the
ticket is its program id (what `ct.program_id(0)` returns). A program only ever waits for programs
with smaller ids, and those took their tickets earlier, from blocks that were already running and
keep running until they have published; by induction from program 0, which waits for nothing,
every program finishes, whatever order the hardware starts blocks in. (CUB's device scan takes
`blockIdx.x` and relies on blocks starting in that order, which CUDA does not promise.) A reverse
chained scan runs from the last program to the first: its program id is the grid's count minus 1
minus the ticket, and nothing else changes (tickets stay the scan's order, for the look-back and the
descriptors; the interpreter runs the programs from the last, `TileOp.descending_programs`).

**Prefetch while the ticket is in flight.** Nothing can load before the ticket's round trip to
L2 returns, and under a full memory system that trip is long. So a program's first loads (the
top-level `tile.load`s of unit-stride arrays before its chained scan, whose offset and valid
count are plain arithmetic on parameters and the program id) are asked of L2 first, for the
program id the block would have if tickets followed block indices (`prefetched_loads`; counted
from the last block for a reverse scan): they nearly do (on an H200, 2^28 int32 at TILE 4096,
nearly every block's ticket differs from its index, by 73 on average and at most about 800), and
every resident block's tile is read by some resident block within microseconds, so the lines are
in L2 when the real loads come. A prefetch is only a hint: a wrong guess costs a little bandwidth,
never a wrong result. (2^28 int32, TILE 4096 x 128 threads: on an H100 88% -> 95% of the copy
bandwidth, on an H200 78% -> 84%.)

**The state.** `HEADER_BYTES` of header, whose first 64-bit word holds the launch's epoch (high
32 bits) and the ticket counter (low 32 bits), then one descriptor per program. The runtime
(`runtime/chain.py`) allocates it zeroed, one per stream, and every launch on that stream reuses
it without clearing anything: a block takes its ticket and reads the epoch in one atomic add (one
round trip to L2), and the block that takes the last ticket moves the word to the next epoch with
the counter at 0 (no ticket is taken after it in this launch, and the next launch on the stream
starts after this one ends). Descriptors carry the epoch of the launch that wrote them, so a
reader ignores anything left by an earlier launch, and zeroed memory is "not yet published". The
runtime replaces a state before its epoch could wrap around (`MAX_LAUNCHES`), so an old descriptor
can never carry the current epoch.

**Descriptors.** An item of at most 8 bytes (every built-in op; a combine function over at most 8
bytes of dtypes, such as float32 pairs) is published with its tag in one 16-byte word, written and
read with single 128-bit accesses (`st/ld.relaxed.gpu.b128`), so a reader sees a tag and a value
from the same store; nothing else is published through it, so no fence is needed. A larger item
uses CUB's scheme for large types: a status word, then an aggregate slot and an inclusive slot
(never overwritten in a launch, so a reader never sees a half-written value): the value is
written first and the status with release semantics, read with acquire semantics before the value.

**Where it may stand.** Every program must run its chained scan exactly once, or its successors
would wait for it forever: so it must be at the top level of the program (not under a loop or an
`if`; a helper called at the top level is fine), not after a `return` that some programs may
take, and there is one per program (chain several values with a tuple scan).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import storage_dtype
from ..errors import LaunchError, TileSyntaxError
from ..lang import ir
from ..lang.types import TileType
from ..planner.layout import REGISTER_ITEMS, round_up
from .base import ArrayArg, BodyStart, Lowering, ShimCall, ValueArg, valid_arg

#: the fewest threads the default block size gives a program with a chained scan, which aims at
#: REGISTER_ITEMS items per thread: each block holds its tile while it waits on its predecessors'
#: look-back, so what keeps the memory system busy is the tile bytes resident per multiprocessor,
#: which registers bound, not the warps (whole-array cumsum of 2^28 int32 at TILE 4096: on an H100
#: 95% of the copy bandwidth at 128 threads, 86% at 256; on an H200 84% and 71%, and no better with
#: 64 items per thread, a register cap, a backoff in the look-back's polling, or two to eight windows
#: of predecessors read per round trip)
MIN_THREADS = 128
#: bytes of the grid-wide state before the first descriptor
HEADER_BYTES = 64
#: launches a state serves before the runtime replaces it: its 32-bit epoch never wraps around
MAX_LAUNCHES = 2**32 - 1
#: items up to this size are published with their tag in one 16-byte word
PACKED_ITEM_BYTES = 8


def item_bytes(dtypes: tuple[np.dtype, ...] | list[np.dtype]) -> int:
    """sizeof the C++ item of a scan over `dtypes` (a struct of them for a tuple, C layout rules)."""
    return np.dtype([(f"f{i}", storage_dtype(dt)) for i, dt in enumerate(dtypes)], align=True).itemsize


def descriptor_bytes(dtypes: tuple[np.dtype, ...] | list[np.dtype]) -> int:
    """Bytes of grid-wide state per program: a 16-byte word, or a status word and two value slots."""
    size = item_bytes(dtypes)
    if size <= PACKED_ITEM_BYTES:
        return 16
    return 8 + 2 * (-(-size // 8) * 8)


def max_default_threads(largest: int) -> int:
    """The most threads the default block size gives a program with a chained scan (`MIN_THREADS`)."""
    return max(MIN_THREADS, round_up(-(-largest // REGISTER_ITEMS), 32))


SCAN = "tile.scan(..., chained=True)"


def check_placement(b: Any, what: str = SCAN) -> None:
    """Raise unless a chained op (`what`: a scan, or a select) built now runs exactly once in every program
    (module docstring)."""
    if b.stmts is not b.root:
        raise TileSyntaxError(
            f"{what} must run exactly once in every program: call it at the top level "
            "of the program, not inside a loop or an `if`"
        )
    for s in ir.walk(b.root):
        if isinstance(s, ir.Return):
            line = f" (line {s.loc.line})" if s.loc is not None else ""
            raise TileSyntaxError(
                f"{what} must run in every program, so it can't come after a `return` that some programs may take{line}"
            )
        if getattr(s, "chained", False):
            raise TileSyntaxError(
                "a program can run one chained scan; to chain several values, scan a tuple of tiles with a "
                "@ct.combine function"
            )


def check_grid(grid: tuple[int, int, int], what: str = SCAN) -> None:
    """A chained scan (or select: `what`) orders the programs of a 1-D grid."""
    if grid[1] != 1 or grid[2] != 1:
        raise LaunchError(
            f"{what} scans the programs of a 1-D grid in order; this launch's grid is "
            f"{grid[0]} x {grid[1]} x {grid[2]}: launch a 1-D grid"
        )


#: statements the prefetch of a load may repeat: scalar arithmetic on parameters and the program id
PREFETCH_SLICE = (ir.Param, ir.ScalarOp, ir.Copy, ir.ProgramId, ir.ArrayView, ir.ArrayShape)


def prefetched_loads(program: ir.Program) -> tuple[list[Any], list[ir.Stmt]]:
    """The loads a chained program prefetches (module docstring) and the statements, in program order,
    that compute their arrays, offsets and valid counts: top-level loads of unit-stride arrays before
    the chained scan whose operands come from top-level `PREFETCH_SLICE` statements, each defining a
    variable assigned nowhere else (so the value is the one the load will see). Parameters are not
    among the statements (the body has them already)."""
    from .memory import TileLoad

    assignments: dict[str, int] = {}
    for s in program.walk():
        for out in ir.defs(s):
            assignments[out.name] = assignments.get(out.name, 0) + 1
    position = {id(s): i for i, s in enumerate(program.body)}
    defined: dict[str, ir.Stmt] = {}
    loads, needed = [], {}
    for s in program.body:
        if getattr(s, "chained", False):
            break
        if isinstance(s, TileLoad) and s.array.type.unit_stride:
            found = _slice([s.array, s.offset, s.valid], defined, assignments)
            if found is not None:
                loads.append(s)
                needed.update({id(d): d for d in found})
        for out in ir.defs(s):
            defined[out.name] = s
    return loads, sorted(needed.values(), key=lambda d: position[id(d)])


def _slice(values: list[Any], defined: dict[str, ir.Stmt], assignments: dict[str, int]) -> list[ir.Stmt] | None:
    """The statements (no parameters) that compute `values`, or None when one is not a `PREFETCH_SLICE`
    statement at the top level, is assigned more than once, or computes a tile."""
    found: dict[int, ir.Stmt] = {}
    pending = [v for v in values if isinstance(v, ir.Var)]
    while pending:
        v = pending.pop()
        d = defined.get(v.name)
        if d is None or assignments.get(v.name) != 1 or not isinstance(d, PREFETCH_SLICE):
            return None
        if isinstance(v.type, TileType) or (isinstance(d, ir.Param) and v.type.dtype == np.bool_):
            return None  # (a bool parameter becomes a variable in the body's statements, after the prefetch)
        if isinstance(d, ir.Param) or id(d) in found:
            continue
        found[id(d)] = d
        pending += list(ir.uses(d))
    return list(found.values())


def prefetch_call(load: Any) -> ShimCall:
    """The shim call that prefetches what `load` will read (the same for the shims and the body)."""
    return ShimCall(
        f"coop_prefetch_{load.cid}",
        (ArrayArg(load.array, "a"), ValueArg(load.offset, "offset"), valid_arg(load.valid, load.out.type.size)),
    )


def define_prefetches(program: ir.Program, w: Lowering) -> None:
    """Define in `w` the shim of each load the program prefetches (`prefetch_call`)."""
    for load in prefetched_loads(program)[0]:
        call = prefetch_call(load)
        a = call.args[0]  # (its ArrayArg)
        fetch = f"  coop::chain_prefetch({a.parts.ptr} + {a.parts.offset(['offset'])}, v);\n"
        w.define(call, "", w.clamp(load.out.type.size, a) + fetch)


def body_start(program: ir.Program, reverse: bool) -> BodyStart:
    """The body's start (module docstring): the prefetches, for program id = block index (counted from
    the last block when `reverse`), then the ticket."""
    loads, stmts = prefetched_loads(program)
    program_id = "coop_chain_tile_reverse" if reverse else "coop_chain_tile"
    return BodyStart(tuple(stmts), tuple(loads), prefetch_call, "coop_chain_begin", program_id, descending=reverse)


#: the look-back's device code, in the translation unit of a kernel with a chained scan
LIBRARY = r"""
namespace coop {
// Grid-wide state of a chained scan (coop_tiles/ops/chained.py explains the protocol).
constexpr int CHAIN_HEADER = 64;
constexpr unsigned CHAIN_AGGREGATE = 1, CHAIN_INCLUSIVE = 2;  // a descriptor's flag; 0: not published
struct chain_ctx { unsigned char* descriptors; unsigned long long epoch; long long tile; };
__device__ __forceinline__ unsigned long long ld_acquire(const void* p) {
  unsigned long long v; asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ void st_relaxed(void* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory"); }
__device__ __forceinline__ void st_release(void* p, unsigned long long v) {
  asm volatile("st.release.gpu.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory"); }
__device__ __forceinline__ unsigned long long fetch_add(void* p, unsigned long long v) {
  unsigned long long old;
  asm volatile("atom.relaxed.gpu.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old; }
// one 128-bit access, not two 64-bit ones: a reader sees both words of the same store
__device__ __forceinline__ void ld_pair(const void* p, unsigned long long& a, unsigned long long& b) {
  asm volatile("{ .reg .b128 t; ld.relaxed.gpu.b128 t, [%2]; mov.b128 {%0, %1}, t; }"
               : "=l"(a), "=l"(b) : "l"(p) : "memory"); }
__device__ __forceinline__ void st_pair(void* p, unsigned long long a, unsigned long long b) {
  asm volatile("{ .reg .b128 t; mov.b128 t, {%0, %1}; st.relaxed.gpu.b128 [%2], t; }"
               :: "l"(a), "l"(b), "l"(p) : "memory"); }

// The descriptors of items of up to 8 bytes: {tag, value} in one 16-byte word per program.
template <class T, bool Packed = (sizeof(T) <= 8)> struct chain_slots {
  unsigned char* base; unsigned long long epoch;
  __device__ __forceinline__ void publish(long long tile, unsigned flag, const T& v) const {
    unsigned long long bits = 0; memcpy(&bits, &v, sizeof(T));
    st_pair(base + 16 * tile, (epoch << 2) | flag, bits); }
  __device__ __forceinline__ unsigned read(long long tile, T& v) const {
    unsigned long long tag, bits; ld_pair(base + 16 * tile, tag, bits);
    if ((tag >> 2) != epoch) return 0;  // left by an earlier launch, or zero: not published yet
    memcpy(&v, &bits, sizeof(T)); return unsigned(tag & 3); }
};
// Larger items: a status word, then an aggregate and an inclusive slot; value first, status released after.
template <class T> struct chain_slots<T, false> {
  static constexpr int VALUE = (sizeof(T) + 7) / 8 * 8, STRIDE = 8 + 2 * VALUE;
  unsigned char* base; unsigned long long epoch;
  __device__ __forceinline__ T* slot(long long tile, unsigned flag) const {
    return reinterpret_cast<T*>(base + STRIDE * tile + 8 + (flag == CHAIN_INCLUSIVE ? VALUE : 0)); }
  __device__ __forceinline__ void publish(long long tile, unsigned flag, const T& v) const {
    *slot(tile, flag) = v; st_release(base + STRIDE * tile, (epoch << 2) | flag); }
  __device__ __forceinline__ unsigned read(long long tile, T& v) const {
    const unsigned long long tag = ld_acquire(base + STRIDE * tile);
    if ((tag >> 2) != epoch) return 0;
    const unsigned flag = unsigned(tag & 3); v = *slot(tile, flag); return flag; }
};

// The exclusive prefix of `tile` (> 0), computed by the first warp (lane 0's result is the one):
// windows of 32 predecessors, newest first, folded until one holds an inclusive prefix.
template <class T, class Op, class Slots> __device__ T chain_look_back(const Slots& slots, long long tile) {
  const int lane = int(threadIdx.x & 31);
  T prefix{};
  for (long long newest = tile - 1;; newest -= 32) {
    const long long q = newest - lane;  // lane 0 holds the newest predecessor
    T v{};
    unsigned flag = q < 0 ? CHAIN_INCLUSIVE : slots.read(q, v);  // below program 0: never folded
    while (__any_sync(0xffffffffu, flag == 0)) {
      if (flag == 0) flag = slots.read(q, v);
    }
    const unsigned inclusive = __ballot_sync(0xffffffffu, flag == CHAIN_INCLUSIVE);
    const int stop = inclusive ? __ffs(int(inclusive)) - 1 : 31;  // fold lanes stop..0, the earlier on the left
    for (int d = 1; d < 32; d *= 2) {
      const T earlier = cub::ShuffleDown<32>(v, d, 31, 0xffffffffu);
      if (lane + d <= stop) v = Op{}(earlier, v);
    }
    prefix = newest == tile - 1 ? v : Op{}(v, prefix);
    if (inclusive) return prefix;
  }
}

// Block prefix callback of a chained scan (warp 0 calls it with the tile's aggregate): publishes the
// aggregate, looks back, publishes the inclusive prefix (also to *total) and returns the exclusive one.
// Program 0 starts from `seed` when `seeded`; without a seed its return value is meaningless.
template <class T, class Op> struct chain_prefix {
  chain_slots<T> slots; long long tile; bool seeded; T seed; T* total;
  __device__ __forceinline__ T operator()(T aggregate) {
    const bool lead = (threadIdx.x & 31) == 0;
    T exclusive = seed, inclusive = aggregate;
    if (tile > 0) {
      if (lead) slots.publish(tile, CHAIN_AGGREGATE, aggregate);
      exclusive = chain_look_back<T, Op>(slots, tile);
      inclusive = Op{}(exclusive, aggregate);
    } else if (seeded) {
      inclusive = Op{}(seed, aggregate);
    }
    if (lead) { slots.publish(tile, CHAIN_INCLUSIVE, inclusive); *total = inclusive; }
    return exclusive;
  }
};
}  // namespace coop

__shared__ coop::chain_ctx coop_chain;  // this block's program id and its launch's state

namespace coop {
// Ask L2 for the 128-byte lines of the `count` items at `p`, spread over the block's threads (a hint: no wait).
template <class T> __device__ __forceinline__ void chain_prefetch(const T* p, long long count) {
  if (count <= 0) return;
  const unsigned long long end = reinterpret_cast<unsigned long long>(p + count);
  for (unsigned long long line = (reinterpret_cast<unsigned long long>(p) & ~127ull) + 128ull * threadIdx.x; line < end;
       line += 128ull * blockDim.x)
    asm volatile("prefetch.global.L2 [%0];" :: "l"(line));
}
}  // namespace coop

// The body's first step after its prefetches: this block's program id (a ticket) and the launch's epoch, in one
// atomic.
extern "C" __device__ void coop_chain_begin(unsigned char* state) {
  if (threadIdx.x == 0) {
    const unsigned long long word = coop::fetch_add(state, 1ull);  // epoch << 32 | ticket
    const unsigned long long epoch = word >> 32, ticket = word & 0xffffffffull;
    if (ticket == gridDim.x - 1) coop::st_relaxed(state, (epoch + 1) << 32);  // the last: ready the next launch
    coop_chain = coop::chain_ctx{state + coop::CHAIN_HEADER, epoch, (long long)ticket};
  }
  __syncthreads();
}
extern "C" __device__ long long coop_chain_tile() { return coop_chain.tile; }
// A reverse chained scan's program id: its tickets go from the last program to the first.
extern "C" __device__ long long coop_chain_tile_reverse() { return (long long)gridDim.x - 1 - coop_chain.tile; }
"""


def callback(item: str, op: str, init: str | None, total: str) -> str:
    """C++ declaration of `cb`, the block prefix callback of a chained scan over `item` with functor `op`,
    `init` the expression that seeds the first program (None: unseeded), its inclusive prefix written to
    `total` (an lvalue in shared memory)."""
    seed = f"true, {init}" if init is not None else f"false, {item}{{}}"
    return (
        f"  coop::chain_prefix<{item}, {op}> cb{{{{coop_chain.descriptors, coop_chain.epoch}}, coop_chain.tile, "
        f"{seed}, &{total}}};\n"
    )


def lower(s: Any, w: Any, item: str, op: str, pack: Any, init: str | None, exclusive: bool) -> str:
    """The body of a chained scan's shim over the items `y` (blocked) of the tile, with `init` the C++
    expression that seeds program 0 (None: unseeded), leaving the scanned items in `y` and, visible to
    every thread, the fold through this program's last element in `s.total`."""
    lay = w.layout(s.srcs[0])
    items, threads, size = lay.items_per_thread, w.threads, lay.size
    kind = "Exclusive" if exclusive else "Inclusive"
    alias = f"coop_scan_{s.cid}_t"
    body = callback(item, op, init, "s.total")
    if threads * items == size:
        # CUB's own idiom: the callback runs inside the block scan, once the tile's aggregate is known
        call = f"  {alias}(s.temp).{kind}Scan(y, y, {op}{{}}, cb);\n"
        if init is None:  # program 0 without a seed: a plain scan, whose aggregate is its inclusive prefix
            call = (
                f"  if (coop_chain.tile == 0) {{\n    {item} agg;\n"
                f"    {alias}(s.temp).InclusiveScan(y, y, {op}{{}}, agg);\n"
                "    if (threadIdx.x == 0) { cb.slots.publish(0, coop::CHAIN_INCLUSIVE, agg); s.total = agg; }\n"
                f"  }} else {{\n  {call}  }}\n"
            )
        return body + call + ("  __syncthreads();\n" if s.totals is not None else "")  # (before reading s.total)
    # padding items past the tile's end: the aggregate is the fold through the last real element
    thread, slot = (size - 1) // items, (size - 1) % items
    last = f"{op}{{}}(y[{slot}], x_item)" if exclusive else f"y[{slot}]"
    first = "(threadIdx.x == 0 && i == 0) ? p : " if exclusive else ""
    seeded = "true" if init is not None else "false"
    return body + (
        f"  {alias}(s.temp).{kind}Scan(y, y, {op}{{}});\n"
        f"  if (int(threadIdx.x) == {thread}) {{ {item} x_item; {pack('x_item', f'x{{}}[{slot}]')} s.agg = {last}; }}\n"
        "  __syncthreads();\n"
        "  if (threadIdx.x < 32) { const auto p = cb(s.agg); if (threadIdx.x == 0) s.prefix = p; }\n"
        "  __syncthreads();\n"
        f"  if (coop_chain.tile > 0 || {seeded}) {{\n"
        f"    const {item} p = s.prefix;\n"
        f"    for (int i = 0; i < {items}; ++i) y[i] = {first}{op}{{}}(p, y[i]);\n  }}\n"
    )
