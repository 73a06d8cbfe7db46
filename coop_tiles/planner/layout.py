"""ThreadData layouts: how each tile is spread over the block, and which CUB algorithm runs each collective.

Tiles joined by element-wise operations must share an arrangement, so they are grouped with
a union-find. A group that an op needs BLOCKED (scans, in-order folds of combine functions;
each op says so in its `layout` hook) is BLOCKED; every other group is STRIPED, which lets
loads and stores go straight to global memory (coalesced, no shared memory); an op may also
prefer BLOCKED (loads and stores of small items, `ops/transfer.py`).

A STRIPED group may be striped in vectors (`TileLayout.vector` items: item i of thread t is
element `((i // vector) * threads + t) * vector + i % vector`), so that its loads and stores move
16-byte words (or 8, 4) and each warp instruction still reads consecutive words: loads and stores
offer a vector of 16 bytes of their array's items (`LayoutContext.offer_vector`), the group takes
the narrowest offer, at most a power of two dividing its items per thread. Only groups whose
every op allows it (`TileOp.striped_vectors`: the op reaches items only through `element_index`,
and any order of them does) are striped in vectors; such a group is STRIPED even when a transfer
preferred it BLOCKED.

Each tile is kept in registers, in shared memory or in local memory (`TileLayout.storage`):
registers up to 32 items per thread; shared memory past that, and for tiles kept alive across
several collectives when the tiles alive together would not fit the registers a thread has;
local memory (spilled by the compiler: slow, but it works) for a large tile when shared memory
is full (decided after the carve, `planner.plan`).

A library GEMM may keep its result in registers, spread over the block as the library's accumulator
(FRAGMENT, `Fragment`: `tile.dot` offers it, `LayoutContext.offer_fragment`). A group takes the offer
when every statement that touches its tiles can take items in that arrangement (`TileOp.takes_fragments`:
element-wise statements and copies can; loads, stores and fills of 2-D tiles do, item by item), so that
`acc = tile.dot(a, b, acc)` in a loop keeps `acc` in registers; such tiles stay in registers whatever
their items per thread (up to `FRAGMENT_ITEMS`). Their element map is a device function of the library,
known only to generated code: no Python map, no remap in registers. The accumulator's spread depends on the
operands' arrangements in shared memory, so one group's products all take one: the one most of them ask for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace

from ..errors import InternalError, TileValueError
from ..lang import ir
from ..lang.types import TileType
from ..ops.base import op_of
from .liveness import Liveness, liveness

BLOCKED = "blocked"
STRIPED = "striped"
#: the arrangement of 2-D tiles (and of the vectors broadcast along their rows or columns): `RowShape`
ROWS = "rows"
#: what a ROWS tile holds of its family's (m, n) block: all of it, one value per row (replicated over
#: the row's lanes) or one value per column (replicated over the row groups)
WHOLE, PER_ROW, PER_COL = "block", "per row", "per column"
#: the widest per-thread run of a row that moves as one vector (bytes)
ROW_VECTOR_BYTES = 16
#: `CollectiveChoice.sync`: the shim has a `__syncthreads()` after its first writes of its
#: TempStorage, so every access the block made before the call is complete after it
SYNCS = "syncs"
#: as SYNCS, and the same collective may run again in its region without a barrier before it
#: (what its threads still read after its last barrier is not what its next run writes first)
REENTRANT = "reentrant"
DEFAULT_BLOCK_THREADS = 256
MAX_BLOCK_THREADS = 1024
#: past this many items per thread a tile leaves registers (shared memory, else local memory), unless it is a
#: striped tile within REGISTER_ITEMS_MOST and half of `register_budget` (`fits_registers`)
REGISTER_ITEMS = 32
#: the most items per thread a tile may keep in registers (a block of threads pinned below what the tile's size
#: asks: 16384 columns at 256 threads)
REGISTER_ITEMS_MOST = 64
#: the most items per thread a tile may have anywhere
MAX_ITEMS_PER_THREAD = 256
REGISTERS, SHARED, LOCAL = "registers", "shared", "local"
#: the arrangement of a library GEMM's accumulator (`Fragment`)
FRAGMENT = "fragment"
#: the most items per thread of a FRAGMENT tile (a GEMM's accumulator kept in registers)
FRAGMENT_ITEMS = 128
#: 32-bit registers per SM; a thread's tiles may take at most three quarters of its share (and 128)
REGISTER_FILE = 65536


@dataclass(frozen=True)
class RowShape:
    """How a family of 2-D tiles of shape (m, n) is spread over the block: `lanes` threads (a power of
    two) share each row, each holding `row_items` of its columns in runs of `run` contiguous ones, the
    lanes' runs interleaved (lane `l`'s item `j` is column `((j // run) * lanes + l) * run + j % run`:
    with `run == row_items`, the contiguous columns `l * row_items + j`; with a 16-byte `run`, a warp's
    loads of one run cover contiguous memory, as Triton's layouts do); the `threads / lanes` row groups
    take `rows` consecutive rows each (group `g`: rows `g * rows + k`). Item `i` of a thread is row `k = i
    // row_items`, its item `j = i % row_items` of that row; items past the block (padding) have no
    element. With one run per row, `lanes * row_items == n` and one row per thread it is BLOCKED over the
    flat tile. A vector of the family (`holds`) keeps only the row index (PER_ROW: `rows` items, the same
    in every lane of a group) or the column index (PER_COL: `row_items` items, the same in every group).
    Ops that take a row in order (scans, combine folds) need contiguous runs (`run == row_items`)."""

    m: int
    n: int
    lanes: int
    row_items: int
    rows: int
    holds: str = WHOLE
    run: int = 0  # (0: row_items, one contiguous run)

    def __post_init__(self) -> None:
        if not self.run:
            object.__setattr__(self, "run", self.row_items)

    @property
    def contiguous(self) -> bool:
        """Whether each lane's columns of a row are one contiguous run."""
        return self.run == self.row_items

    def column(self, lane: int, j: int) -> int:
        """The column of a lane's item `j` of a row."""
        return ((j // self.run) * self.lanes + lane) * self.run + j % self.run

    def column_expr(self, lane: str, j: str, python: bool = False) -> str:
        """`column` as an expression (C++, or Python with `python`)."""
        if self.contiguous:
            return f"({lane} * {self.row_items} + {j})"
        div = "//" if python else "/"
        return f"((({j}) {div} {self.run} * {self.lanes} + {lane}) * {self.run} + ({j}) % {self.run})"

    @property
    def items(self) -> int:
        return {WHOLE: self.rows * self.row_items, PER_ROW: self.rows, PER_COL: self.row_items}[self.holds]

    def holding(self, holds: str) -> RowShape:
        return replace(self, holds=holds)

    def element(self, tid: int, i: int) -> int | None:
        """The element (row-major index into the tile) item `i` of thread `tid` holds; None for padding.
        The Python twin of `index_expr`, which generated code uses: tests check they agree."""
        group, lane = divmod(tid, self.lanes)
        if self.holds == PER_ROW:
            row = group * self.rows + i
            return row if row < self.m else None
        if self.holds == PER_COL:
            col = self.column(lane, i)
            return col if col < self.n else None
        row, col = group * self.rows + i // self.row_items, self.column(lane, i % self.row_items)
        return row * self.n + col if row < self.m and col < self.n else None

    def index_expr(self, tid: str, size: int, python: bool = False) -> str:
        """`element` of item `i` as an expression (C++, or Python with `python`), `size` for padding."""
        div, mod = ("//", "%") if python else ("/", "%")
        shift = self.lanes.bit_length() - 1
        group, lane = f"({tid} >> {shift})", f"({tid} & {self.lanes - 1})"

        def pick(cond: str, value: str) -> str:
            return f"({value} if {cond} else {size})" if python else f"(({cond}) ? {value} : {size})"

        if self.holds == PER_ROW:
            row = f"({group} * {self.rows} + i)"
            return pick(f"{row} < {self.m}", row)
        if self.holds == PER_COL:
            col = self.column_expr(lane, "i", python)
            return pick(f"{col} < {self.n}", col)
        row = f"({group} * {self.rows} + i {div} {self.row_items})"
        col = self.column_expr(lane, f"i {mod} {self.row_items}", python)
        both = f"{row} < {self.m} and {col} < {self.n}" if python else f"{row} < {self.m} && {col} < {self.n}"
        return pick(both, f"({row} * {self.n} + {col})")

    def __str__(self) -> str:
        lanes = f"{self.lanes} lane{'s' * (self.lanes > 1)}"
        runs = "" if self.contiguous else f" in runs of {self.run}"
        per = f"{self.rows} row{'s' * (self.rows > 1)}/thread"
        if self.holds == WHOLE:
            return f"rows: {lanes} x {self.row_items} items{runs}, {per}"
        what = "per row, over" if self.holds == PER_ROW else "per column, over"
        return f"{what} rows: {lanes} x {self.row_items} items{runs}, {per}"


def choose_rows(m: int, n: int, threads: int, itemsize: int, in_order: bool = True) -> RowShape:
    """The row arrangement of an (m, n) block at `threads`: lanes per row (a power of two) giving the fewest
    items per thread (least padding), then 16-byte runs per row where rows are long enough, then rows in
    one warp (no barrier for an axis op), then the fewest shuffle steps of axis ops (rows x log2 lanes).
    Unless an op takes its rows `in_order`, a lane's columns come in interleaved 16-byte runs (so that each
    load instruction of a warp reads contiguous memory) where they are several."""
    best, key = None, None
    lanes = 1
    while lanes <= threads:
        row_items = -(-n // lanes)
        rows = -(-m // (threads // lanes))
        vector = min(row_items * itemsize, ROW_VECTOR_BYTES)
        k = (rows * row_items, -vector, lanes > 32, rows * (lanes.bit_length() - 1), lanes)
        if key is None or k < key:
            best, key = RowShape(m, n, lanes, row_items, rows), k
        lanes *= 2
    run = max(1, ROW_VECTOR_BYTES // itemsize)
    if not in_order and best.row_items > run and best.row_items % run == 0:
        best = replace(best, run=run)
    return best


@dataclass(frozen=True)
class Fragment:
    """A block GEMM's accumulator of shape (m, n) as the library spreads it over the block: `items` per
    thread, item `i` of a thread holding the element the library's map (the device function `symbol`)
    gives it; items past (m, n) are padding. `function` is the generated code's map (`index_expr`), which
    the GEMM's shim defines (`ops/dot.py`)."""

    m: int
    n: int
    items: int
    symbol: str
    #: the arrangements of the GEMM's operands in shared memory that give this spread (every product of the
    #: group runs with them)
    operands: tuple[str, ...] = ()

    @property
    def function(self) -> str:
        return f"coop_fragment_{self.symbol}"

    def index_expr(self) -> str:
        """The element of item `i` of this thread (C++; `m * n` for padding)."""
        return f"{self.function}(i)"

    def __str__(self) -> str:
        return f"GEMM fragment: {self.items} items (cuBLASDx's accumulator)"


@dataclass(frozen=True)
class TileLayout:
    """Where a tile's elements live: `items_per_thread` registers per thread, in `arrangement`."""

    name: str
    dtype: str
    size: int
    items_per_thread: int
    arrangement: str
    line: int | None = None  # where the tile is first defined in the user's source
    storage: str = REGISTERS
    itemsize: int = 4
    #: how tables show the tile (`ir.label`: its name in the user's source, or `(name)`)
    label: str = ""
    shape: tuple[int, ...] = ()
    #: STRIPED in vectors of this many items (a power of two dividing `items_per_thread`; see the module's
    #: docstring and `codegen/shims.py::element_index`); 1 for plain STRIPED, BLOCKED and ROWS
    vector: int = 1
    #: the row arrangement (ROWS only)
    rows: RowShape | None = None
    #: the library's accumulator arrangement (FRAGMENT only)
    fragment: Fragment | None = None

    def element(self, tid: int, i: int, threads: int) -> int | None:
        """The element item `i` of thread `tid` holds (None: padding): the layout's map in Python."""
        if self.fragment is not None:
            raise InternalError(f"tile {self.name}: a GEMM fragment's map is known only to generated code")
        if self.rows is not None:
            return self.rows.element(tid, i)
        if self.arrangement == BLOCKED:
            e = tid * self.items_per_thread + i
        else:
            v = self.vector
            e = ((i // v) * threads + tid) * v + i % v
        return e if e < self.size else None

    @property
    def extent(self) -> str:
        """The tile's size as tables show it: its element count, or its shape (`64x64`)."""
        return str(self.size) if len(self.shape) < 2 else "x".join(str(n) for n in self.shape)

    @property
    def shown(self) -> str:
        """The arrangement as tables show it."""
        if self.fragment is not None:
            return str(self.fragment)
        if self.rows is not None:
            return str(self.rows)
        return f"{self.arrangement} x{self.vector}" if self.vector > 1 else self.arrangement

    @property
    def words(self) -> int:
        """32-bit registers each thread holds of the tile (an item takes at least one)."""
        return self.items_per_thread * -(-self.itemsize // 4)


@dataclass(frozen=True)
class CollectiveChoice:
    """The CUB primitive and algorithm chosen for one collective statement."""

    cid: int
    op: str
    primitive: str
    algorithm: str
    line: int | None
    needs_storage: bool
    #: how the shim synchronizes the block: "" (it does not), SYNCS or REENTRANT
    sync: str = ""


@dataclass(frozen=True)
class LayoutPlan:
    block_threads: int
    tiles: dict[str, TileLayout]
    collectives: dict[int, CollectiveChoice]
    #: live ranges of the program's variables (the carve reuses shared memory by them)
    liveness: Liveness | None = None
    #: the variables that threads other than thread 0 need (see `block_values`)
    block_values: frozenset[str] = frozenset()

    def __str__(self) -> str:
        """Threads per block, each tile's layout and each collective's CUB choice, one per line."""
        lines = [f"{self.block_threads} threads per block"]
        for t in self.tiles.values():
            where = f"line {t.line}" if t.line is not None else "no line"
            lines.append(
                f"tile {t.label or t.name} ({where}): {t.dtype}[{t.extent}], {t.items_per_thread} per thread, "
                f"{t.shown}, in {t.storage}"
            )
        for c in sorted(self.collectives.values(), key=lambda c: c.cid):
            storage = ", TempStorage" if c.needs_storage else ""
            lines.append(f"collective #{c.cid} (line {c.line}) {c.op}: {c.primitive} {c.algorithm}{storage}")
        return "\n".join(lines)


def choose_block_threads(program: ir.Program, pinned: int | None) -> int:
    """Threads per block: `pinned`, or min(256, the largest tile rounded up to a warp), grown
    up to 1024 when a tile would need more than 32 items per thread (so it fits in registers).

    An op may lower that default for its program (`TileOp.max_default_threads`: a chained scan), or ask for a
    power of two (`TileOp.power_of_two_threads`: a merge sort), to which it is rounded up."""
    sizes = [t.size for t in ir.tile_vars(program).values()]
    largest = max(sizes, default=1)
    if pinned is not None:
        if not isinstance(pinned, int) or pinned % 32 or not 32 <= pinned <= MAX_BLOCK_THREADS:
            raise TileValueError(f"block_threads must be a multiple of 32 between 32 and 1024, got {pinned!r}")
        threads = pinned
    else:
        threads = min(DEFAULT_BLOCK_THREADS, round_up(largest, 32))
        for s in program.walk():
            if (op := op_of(s)) is not None and (most := op.max_default_threads(s, largest)) is not None:
                threads = min(threads, most)
        if -(-largest // threads) > REGISTER_ITEMS:
            threads = min(MAX_BLOCK_THREADS, round_up(-(-largest // REGISTER_ITEMS), 32))
    pow2 = [s for s in program.walk() if (op := op_of(s)) is not None and op.power_of_two_threads(s)]
    if pow2 and threads & (threads - 1):
        if pinned is not None:
            raise TileValueError(
                f"block_threads={threads}: the sort at line {pow2[0].loc.line if pow2[0].loc else '?'} "
                "(cub::BlockMergeSort) needs a power-of-two block size"
            )
        threads = 1 << (threads - 1).bit_length()
    items = -(-largest // threads)
    if items > MAX_ITEMS_PER_THREAD:
        raise TileValueError(
            f"a tile of {largest} elements needs {items} items per thread at {threads} threads; "
            f"a tile may have at most {MAX_ITEMS_PER_THREAD} items per thread "
            f"({MAX_ITEMS_PER_THREAD * MAX_BLOCK_THREADS} elements at 1024 threads): use smaller tiles"
        )
    return threads


def round_up(n: int, m: int) -> int:
    return -(-n // m) * m


class _Groups:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


class LayoutContext:
    """What ops see of the planner: join tiles into one arrangement, ask for BLOCKED, and describe
    their CUB choice once layouts are known."""

    def __init__(
        self,
        threads: int,
        block_values: frozenset[str] = frozenset(),
        depths: dict[int, int] | None = None,
        arch: str = "sm_90",
    ):
        self.threads = threads
        self.arch = arch  # (the target: what a library GEMM's accumulator looks like depends on it)
        self.block_values = block_values
        self.depths = depths or {}  # collective id -> how many loops it is nested in
        self.groups = _Groups()
        self.blocked: set[str] = set()
        self.preferred: set[str] = set()  # tiles an op would rather have BLOCKED
        self.vector_offers: dict[str, int] = {}  # tile -> the most items per vector an op offers it
        self.scalar_items: set[str] = set()  # tiles an op needs without vectors
        self.tiles: dict[str, TileLayout] = {}
        #: (vector, 2-D tile, PER_ROW or PER_COL): vectors that would rather hold their values per row or per
        #: column of the 2-D tile's row arrangement (in program order: the first claim wins)
        self.claims: list[tuple[ir.Var, ir.Var, str]] = []
        #: tile -> (a key, the GEMM accumulator arrangement an op offers its group, made on acceptance for the
        #: operand arrangement chosen, the operand arrangement the op asks for)
        self.fragments: dict[str, tuple[Hashable, Callable[[Hashable], Fragment | None], Hashable]] = {}

    def join(self, tiles: list[ir.Var]) -> None:
        for t in tiles[1:]:
            self.groups.union(t.name, tiles[0].name)

    def join_blocked(self, tiles: list[ir.Var]) -> None:
        """Give `tiles` one arrangement, BLOCKED (what CUB scans and in-order folds need)."""
        self.join(tiles)
        self.blocked.add(tiles[0].name)

    def choice(
        self, s: ir.Collective, op: str, primitive: str, algorithm: str, storage: bool = True, sync: str = ""
    ) -> CollectiveChoice:
        return CollectiveChoice(s.cid, op, primitive, algorithm, s.loc.line if s.loc else None, storage, sync)

    def claim(self, vector: ir.Var, family: ir.Var, holds: str) -> None:
        """Ask that `vector` (one value per row of 2-D tile `family`, PER_ROW, or per column, PER_COL) be
        arranged as `family`'s rows, replicated, if every statement that touches it can take that."""
        self.claims.append((vector, family, holds))

    def offer_fragment(
        self, tile: ir.Var, key: Hashable, make: Callable[[Hashable], Fragment | None], operands: Hashable
    ) -> None:
        """Arrange `tile`'s group as a library GEMM's accumulator, `make(chosen)` (called only if taken: it may cost
        a library call, and may refuse with None; offers of one `key` are one arrangement once their operands'
        arrangement is `chosen`, the `operands` most offers of the group ask for, the first on a tie), if every
        statement touching it can take that (`TileOp.takes_fragments`): a `tile.dot` whose result may stay in
        registers."""
        self.fragments[tile.name] = (key, make, operands)

    def prefer_blocked(self, tile: ir.Var) -> None:
        """Make `tile`'s group BLOCKED unless an op needs it otherwise (no op needs STRIPED): for
        transfers that are faster blocked (`ops/transfer.py`)."""
        self.preferred.add(tile.name)

    def offer_vector(self, tile: ir.Var, items: int) -> None:
        """Stripe `tile`'s group in vectors of at most `items` items (a power of two) if it is STRIPED
        and every op of the group allows it: a transfer moving 16 bytes of its array at once."""
        self.vector_offers[tile.name] = min(items, self.vector_offers.get(tile.name, items))


def block_values(program: ir.Program, threads: int) -> frozenset[str]:
    """The variables whose value threads other than thread 0 need. The others are read only
    where thread 0 alone uses them (the value of an element write, which thread 0 performs; a
    carried scan's seed, which thread 0 shares with the block, `TileOp.thread0_reads`), directly or through copies."""
    needed: set[str] = set()
    copies: list[ir.Copy] = []
    for s in program.walk():
        if isinstance(s, ir.Copy):
            copies.append(s)
            continue
        if isinstance(s, ir.ArrayWrite):
            solo = set() if s.value in s.indices else {getattr(s.value, "name", None)}
        else:
            op = op_of(s)
            solo = op.thread0_reads(s, threads) if op is not None else set()
        needed.update(v.name for v in ir.uses(s) if v.name not in solo)
    changed = True
    while changed:
        changed = False
        for c in copies:
            if c.out.name in needed and isinstance(c.src, ir.Var) and c.src.name not in needed:
                needed.add(c.src.name)
                changed = True
    return frozenset(needed)


def loop_depths(body: list[ir.Stmt], depth: int = 0) -> dict[int, int]:
    """How many loops each collective (by id) is nested in."""
    out: dict[int, int] = {}
    for s in body:
        if isinstance(s, ir.Collective):
            out[s.cid] = depth
        inner = depth + isinstance(s, (ir.ForRange, ir.While))
        for nested in ir.regions(s):
            out.update(loop_depths(nested, inner))
    return out


def plan_layouts(program: ir.Program, pinned_block_threads: int | None = None, arch: str = "sm_90") -> LayoutPlan:
    """Choose block size, every tile's layout and every collective's CUB algorithm for `arch`."""
    threads = choose_block_threads(program, pinned_block_threads)
    tiles = ir.tile_vars(program)
    ctx = LayoutContext(threads, block_values(program, threads), loop_depths(program.body), arch)
    for s in program.walk():
        if isinstance(s, (ir.TileMap, ir.Copy)):
            srcs = s.args if isinstance(s, ir.TileMap) else (s.src,)
            ctx.join([s.out, *(a for a in srcs if isinstance(a, ir.Var) and isinstance(a.type, TileType))])
        elif (op := op_of(s)) is not None:
            op.layout(s, ctx)
            if not op.striped_vectors:
                ctx.scalar_items.update(v.name for v in (*ir.defs(s), *ir.uses(s), *ir.refs(s)) if v.name in tiles)
    vectors = group_vectors(ctx, tiles, threads)
    blocked_roots = {ctx.groups.find(n) for n in ctx.blocked} | {
        root for root in (ctx.groups.find(n) for n in ctx.preferred) if vectors.get(root, 1) == 1
    }
    fragments = fragment_groups(program, tiles, ctx)
    rows = {n: r for n, r in row_layouts(program, tiles, ctx).items() if ctx.groups.find(n) not in fragments}
    lines: dict[str, int | None] = {}
    labels: dict[str, str] = {}
    for s in program.walk():
        for out in ir.defs(s):
            if out.name in tiles and out.name not in lines:
                lines[out.name] = s.loc.line if s.loc else None
                labels[out.name] = ir.label(out)
    ctx.tiles = {
        name: TileLayout(
            name=name,
            dtype=t.dtype.name,
            size=t.size,
            items_per_thread=rows[name].items if name in rows else -(-t.size // threads),
            arrangement=ROWS if name in rows else BLOCKED if ctx.groups.find(name) in blocked_roots else STRIPED,
            line=lines.get(name),
            itemsize=t.dtype.itemsize,
            label=labels[name],
            shape=t.shape,
            rows=rows.get(name),
            vector=1
            if ctx.groups.find(name) in blocked_roots or name in rows
            else vectors.get(ctx.groups.find(name), 1),
        )
        for name, t in tiles.items()
    }
    for name, t in ctx.tiles.items():
        if (fragment := fragments.get(ctx.groups.find(name))) is not None:
            ctx.tiles[name] = replace(t, items_per_thread=fragment.items, arrangement=FRAGMENT, fragment=fragment)
    live = liveness(program)
    ctx.tiles.update(choose_storage(program, ctx.tiles, live, threads))
    collectives = {}
    for s in program.walk():
        if isinstance(s, ir.Collective):
            collectives[s.cid] = op_of(s).choose(s, ctx)
    return LayoutPlan(threads, ctx.tiles, collectives, live, ctx.block_values)


def row_layouts(program: ir.Program, tiles: dict[str, TileType], ctx: LayoutContext) -> dict[str, RowShape]:
    """The row arrangement of every 2-D tile, and of the vectors that take their family's (`claim`): a group of
    tiles joined by element-wise operations shares one; a vector group whose every statement takes
    replicated items (`TileOp.replicates`) holds one value per row or column of the first family that claims
    it (so that softmax's row maxima and layer-norm's weights broadcast in registers); every other 2-D tile
    gets the arrangement `choose_rows` picks for its shape. 1-D tiles outside claimed groups stay BLOCKED or
    STRIPED."""
    in_order = {ctx.groups.find(n) for n in ctx.blocked}
    refused = {v.name for s in program.walk() for v in (*ir.defs(s), *ir.uses(s)) if not _replicates(s, v)}
    refused_roots = {ctx.groups.find(n) for n in refused}
    families: dict[str, RowShape] = {}
    claimed: dict[str, RowShape] = {}

    def family(root: str, t: TileType) -> None:
        if root not in families and root not in claimed:
            families[root] = choose_rows(*t.shape, ctx.threads, t.dtype.itemsize, root in in_order)

    def take_claims() -> None:
        for vector, fam_tile, holds in ctx.claims:
            root, fam = ctx.groups.find(vector.name), families.get(ctx.groups.find(fam_tile.name))
            if fam is not None and root not in families and root not in claimed and root not in refused_roots:
                claimed[root] = fam.holding(holds)

    # blocks of several rows and columns first; then 2-D tiles of one row or column that no such block
    # claimed (a one-row softmax's row) are families of their own, whose vectors they may claim in turn
    for name, t in tiles.items():
        if t.ndim == 2 and min(t.shape) > 1:
            family(ctx.groups.find(name), t)
    take_claims()
    for name, t in sorted(tiles.items(), key=lambda item: -item[1].size):  # (largest first: rows before vectors)
        root = ctx.groups.find(name)
        if t.ndim == 2 and root not in families and root not in claimed:
            family(root, t)
            take_claims()
    out = {}
    for name, t in tiles.items():
        root = ctx.groups.find(name)
        if root in claimed:
            out[name] = claimed[root]
        elif t.ndim == 2 and root in families and t.shape == (families[root].m, families[root].n):
            out[name] = families[root]
        elif t.ndim == 2:
            out[name] = choose_rows(*t.shape, ctx.threads, t.dtype.itemsize, root in in_order)
    return out


def fragment_groups(program: ir.Program, tiles: dict[str, TileType], ctx: LayoutContext) -> dict[str, Fragment]:
    """The groups (by root) arranged as a GEMM's accumulator: those offered one fragment (`offer_fragment`;
    groups offered two different keys keep rows) whose every tile has its shape and every statement touching
    them takes fragment items (`TileOp.takes_fragments`), at most `FRAGMENT_ITEMS` per thread; made for the
    operand arrangement most of the group's offers ask for."""
    offers: dict[str, list[tuple[Hashable, Callable[[Hashable], Fragment | None], Hashable]]] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for name, offer in ctx.fragments.items():
        root = ctx.groups.find(name)
        offers.setdefault(root, []).append(offer)
        shapes[root] = tiles[name].shape
    refused = {
        ctx.groups.find(v.name)
        for s in program.walk()
        for v in (*ir.defs(s), *ir.uses(s), *ir.refs(s))
        if v.name in tiles and not _takes_fragments(s, v)
    }
    refused |= {ctx.groups.find(n) for n, t in tiles.items() if shapes.get(ctx.groups.find(n), t.shape) != t.shape}
    refused |= {root for root, group in offers.items() if len({key for key, _, _ in group}) > 1}
    made = {
        root: group[0][1](Counter(operands for _, _, operands in group).most_common(1)[0][0])
        for root, group in offers.items()
        if root not in refused
    }
    return {root: f for root, f in made.items() if f is not None and f.items <= FRAGMENT_ITEMS}


def _takes_fragments(s: ir.Stmt, v: ir.Var) -> bool:
    """Whether `s` can take tile `v` arranged as a GEMM's accumulator: element-wise statements and copies
    can; an op says so for its own (`TileOp.takes_fragments`)."""
    if isinstance(s, (ir.TileMap, ir.Copy)):
        return True
    op = op_of(s)
    return op is not None and op.takes_fragments(s, v)


def _replicates(s: ir.Stmt, v: ir.Var) -> bool:
    """Whether `s` takes tile `v` with replicated items (a value held by several threads): element-wise
    statements do; an op says so for its own (`TileOp.replicates`)."""
    if not isinstance(v.type, TileType) or isinstance(s, (ir.TileMap, ir.Copy)):
        return True
    op = op_of(s)
    return op is not None and op.replicates(s, v)


def group_vectors(ctx: LayoutContext, tiles: dict[str, TileType], threads: int) -> dict[str, int]:
    """Items per vector of each group (by its root) that may be striped in vectors: the narrowest offer
    of its tiles, at most the largest power of two dividing every tile's items per thread; none for a group
    that an op needs BLOCKED, with a tile that an op needs without vectors, or with a padded tile (its
    transfers are never whole, and item by item a vector's items are further apart than plain striped ones)."""
    offers: dict[str, int] = {}
    for name, items in ctx.vector_offers.items():
        root = ctx.groups.find(name)
        offers[root] = min(items, offers.get(root, items))
    barred = {ctx.groups.find(n) for n in ctx.blocked | ctx.scalar_items}
    for name, t in tiles.items():
        root = ctx.groups.find(name)
        if root in offers:
            per_thread = -(-t.size // threads)
            if per_thread * threads != t.size:  # a padded tile is never whole: it would move item by item
                barred.add(root)
            offers[root] = min(offers[root], per_thread & -per_thread)  # (the largest power of two dividing it)
    return {root: v for root, v in offers.items() if root not in barred and v > 1}


def register_budget(threads: int) -> int:
    """The 32-bit registers per thread the tiles alive together may take: three quarters of a thread's
    share of the register file, at most 128 (a shared-memory tile costs its traffic and, past a few
    kilobytes, blocks per SM: at 512 threads a row's three 32-item float32 tiles are faster in 96 registers
    than one of them in 64 KB of shared memory, measured on an H100: a layer norm of 16384 columns)."""
    return min(128, REGISTER_FILE // threads * 3 // 4)


def fits_registers(t: TileLayout, budget: int) -> bool:
    """Whether a tile may stay in registers on its own: up to REGISTER_ITEMS items per thread, or, for a striped
    tile (element-wise work, reductions, loads and stores: no CUB collective that needs its own registers for
    each item, as a scan's or a sort's blocked tiles do), up to REGISTER_ITEMS_MOST where it takes at most half
    the thread's `budget` (so that an element-wise step's operand and result fit together). Measured on an H200
    (tutorial 09, 16384 bfloat16 columns at 256 threads, 64 items per thread): the layer norm's tiles in
    registers 87 us (at most 128 registers), in 150 KB of shared memory 448 us."""
    if t.items_per_thread <= REGISTER_ITEMS:
        return True
    return t.arrangement == STRIPED and t.items_per_thread <= REGISTER_ITEMS_MOST and 2 * t.words <= budget


def choose_storage(
    program: ir.Program, tiles: dict[str, TileLayout], live: Liveness, threads: int
) -> dict[str, TileLayout]:
    """The tiles that leave registers for shared memory: those that do not `fits_registers`, then,
    wherever the tiles alive together exceed `register_budget`, those alive across the most
    collectives (largest first; shape remaps do not count) until the rest fit."""
    budget = register_budget(threads)
    moved = {
        n: replace(t, storage=SHARED) for n, t in tiles.items() if t.fragment is None and not fits_registers(t, budget)
    }
    # (a shape remap is a copy in registers or an exchange: a tile alive across it needs no more registers)
    collective_positions = [
        live.at(s) for s in program.walk() if isinstance(s, ir.Collective) and not isinstance(s, ir.TileRemap)
    ]

    def spans(name: str) -> int:
        first, last = live.ranges.get(name, (0, -1))
        return sum(first < p < last for p in collective_positions)

    for position in sorted(set(live.positions.values())):
        alive = [t for n, t in tiles.items() if n not in moved and live.live(n, position)]
        excess = sum(t.words for t in alive) - budget
        for t in sorted(alive, key=lambda t: (-spans(t.name), -t.words)):
            if excess <= 0 or spans(t.name) < 2:
                break
            if t.fragment is not None:  # (a GEMM's accumulator is what registers are for)
                continue
            moved[t.name] = replace(t, storage=SHARED)
            excess -= t.words
    return moved
