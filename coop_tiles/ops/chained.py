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
`blockIdx.x` and relies on blocks starting in that order, which CUDA does not promise.)

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


def check_placement(b: Any) -> None:
    """Raise unless a chained scan built now runs exactly once in every program (module docstring)."""
    if b.stmts is not b.root:
        raise TileSyntaxError(
            "tile.scan(..., chained=True) must run exactly once in every program: call it at the top level "
            "of the program, not inside a loop or an `if`"
        )
    for s in ir.walk(b.root):
        if isinstance(s, ir.Return):
            line = f" (line {s.loc.line})" if s.loc is not None else ""
            raise TileSyntaxError(
                "tile.scan(..., chained=True) must run in every program, so it can't come after a `return` "
                f"that some programs may take{line}"
            )
        if getattr(s, "chained", False):
            raise TileSyntaxError(
                "a program can run one chained scan; to chain several values, scan a tuple of tiles with a "
                "@ct.combine function"
            )


def check_grid(grid: tuple[int, int, int]) -> None:
    """A chained scan orders the programs of a 1-D grid."""
    if grid[1] != 1 or grid[2] != 1:
        raise LaunchError(
            "tile.scan(..., chained=True) scans the programs of a 1-D grid in order; this launch's grid is "
            f"{grid[0]} x {grid[1]} x {grid[2]}: launch a 1-D grid"
        )


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

// The kernel entry's first step: this block's program id (a ticket) and the launch's epoch, in one atomic.
__device__ __forceinline__ void coop_chain_begin(unsigned char* state) {
  if (threadIdx.x == 0) {
    const unsigned long long word = coop::fetch_add(state, 1ull);  // epoch << 32 | ticket
    const unsigned long long epoch = word >> 32, ticket = word & 0xffffffffull;
    if (ticket == gridDim.x - 1) coop::st_relaxed(state, (epoch + 1) << 32);  // the last: ready the next launch
    coop_chain = coop::chain_ctx{state + coop::CHAIN_HEADER, epoch, (long long)ticket};
  }
  __syncthreads();
}
extern "C" __device__ long long coop_chain_tile() { return coop_chain.tile; }
"""


def lower(s: Any, w: Any, item: str, op: str, pack: Any, init: str | None, exclusive: bool) -> str:
    """The body of a chained scan's shim over the items `y` (blocked) of the tile, with `init` the C++
    expression that seeds program 0 (None: unseeded), leaving the scanned items in `y` and, visible to
    every thread, the fold through this program's last element in `s.total`."""
    lay = w.layout(s.srcs[0])
    items, threads, size = lay.items_per_thread, w.threads, lay.size
    kind = "Exclusive" if exclusive else "Inclusive"
    alias = f"coop_scan_{s.cid}_t"
    seed = f"true, {init}" if init is not None else f"false, {item}{{}}"
    body = (
        f"  coop::chain_prefix<{item}, {op}> cb{{{{coop_chain.descriptors, coop_chain.epoch}}, coop_chain.tile, "
        f"{seed}, &s.total}};\n"
    )
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
