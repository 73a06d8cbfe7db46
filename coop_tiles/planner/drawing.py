"""The shared-memory plan as a picture: bytes up, the program's statements across.

Each tile kept in shared memory and each collective's TempStorage is a box over its bytes and its
live range (in statement steps, `planner.liveness`: a column per statement, its left half where
it reads its operands, its right half where an element-wise statement writes its result), each
`__syncthreads()` of the plan a solid vertical line before its statement, each collective whose
shim synchronises the block itself a dotted line inside its column, and the total against the
device's limit a dashed line. A legend lists every region (name, CUB primitive, bytes, lines) and
the tiles kept in registers or local memory.

The picture is one list of shapes in pixels, written as SVG text (no dependency) or through
matplotlib (PNG, PDF: `pip install coop-tiles[plot]`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from .carve import Region

#: a `planner.plan.Plan` (not imported: the plan imports this module to draw itself)
Plan = Any

#: pixels per step (a statement is two steps), between these bounds by the program's length
STEP_PX = (4.0, 14.0)
PLOT_WIDTH_PX = 720
PLOT_HEIGHT_PX = 360
LEFT, TOP, BOTTOM, GAP = 80.0, 56.0, 56.0, 28.0
LEGEND_WIDTH_PX = 460
LINE_PX = 16.0
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
TILE_COLOR = "#9ecae1"
STORAGE_COLORS = ("#fdae6b", "#a1d99b", "#bcbddc", "#fc9272", "#fdd0a2", "#c7e9c0", "#dadaeb", "#d9d9d9")
BARRIER_COLOR, SYNC_COLOR, LIMIT_COLOR = "#cb181d", "#6a51a3", "#252525"
#: laid over a box where a statement touches its bytes (the rest of the box only keeps them)
ACCESS_COLOR, ACCESS_OPACITY = "#000000", 0.2


@dataclass(frozen=True)
class Box:
    """One region as drawn: its bytes [offset, offset + size), steps [start, stop] and label."""

    key: int | str
    name: str
    primitive: str
    offset: int
    size: int
    start: int
    stop: int
    lines: str
    #: the steps of the statements that touch the bytes
    accesses: frozenset[int] = frozenset()

    @property
    def label(self) -> str:
        return f"{self.name} · {self.primitive} · {self.size} B"

    @property
    def where(self) -> str:
        return f"bytes {self.offset}-{self.offset + self.size}, {self.lines}"


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    fill: str
    kind: str  # "tile", "storage" (regions), "plot", "swatch"
    title: str = ""


@dataclass(frozen=True)
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    stroke: str
    kind: str  # "barrier", "sync", "limit", "total", "axis", "tick"
    dash: str = ""
    title: str = ""


@dataclass(frozen=True)
class Text:
    x: float
    y: float
    text: str
    size: float = 11.0
    anchor: str = "start"  # "start", "middle", "end"
    bold: bool = False


Shape = Rect | Line | Text


def boxes(plan: Plan) -> list[Box]:
    """Every region of the carve once (collectives sharing one region are one box)."""
    out = []
    for name, r in plan.carve.tiles.items():
        t = plan.tiles[name]
        out.append(_box(r, t.label or name, f"tile {t.dtype}[{t.extent}]", plan.carve.accesses.get(name, frozenset())))
    members: dict[int | str, list[int]] = {}
    regions: dict[int | str, Region] = {}
    for cid, r in sorted(plan.carve.regions.items()):
        members.setdefault(r.key, []).append(cid)
        regions[r.key] = r
    for key, cids in members.items():
        ops = dict.fromkeys(plan.collectives[c].op for c in cids)
        primitives = dict.fromkeys(plan.collectives[c].primitive for c in cids)
        name = f"{'/'.join(ops)} #{key}"
        accesses = plan.carve.accesses.get(key, frozenset())
        out.append(_box(regions[key], name, "/".join(primitives), accesses))
    return out


def _box(r: Region, name: str, primitive: str, accesses: frozenset[int]) -> Box:
    start = r.start if r.start is not None else 0
    stop = r.stop if r.stop is not None else start + 1
    lines = f"line {r.first}" if r.first == r.last else f"lines {r.first or '?'}-{r.last or '?'}"
    return Box(r.key, name, primitive, r.offset, r.size, start, stop, lines, accesses)


def _color(i: int, b: Box) -> str:
    return TILE_COLOR if isinstance(b.key, str) else STORAGE_COLORS[i % len(STORAGE_COLORS)]


@dataclass(frozen=True)
class _Frame:
    """Where the plot lies: pixels per step, its width, and the bytes its height spans."""

    steps: int
    step_px: float
    width: float
    top_bytes: int

    def x(self, step: float) -> float:
        return LEFT + step * self.step_px

    def y(self, byte: float) -> float:
        return TOP + PLOT_HEIGHT_PX - byte * PLOT_HEIGHT_PX / self.top_bytes


def _frame(plan: Plan) -> _Frame:
    live = plan.carve.live
    steps = 2 * len(live.positions) if live is not None else 2
    step_px = min(STEP_PX[1], max(STEP_PX[0], PLOT_WIDTH_PX / max(steps, 1)))
    top_bytes = max(plan.shared_bytes, 16)
    if plan.shared_limit and plan.shared_limit <= 1.25 * top_bytes:
        top_bytes = plan.shared_limit  # close enough to show
    return _Frame(steps, step_px, max(steps * step_px, 240.0), top_bytes)


def column_x(plan: Plan, step: float) -> float:
    """The x coordinate (pixels) of the left edge of `step` in the picture of `plan`."""
    return _frame(plan).x(step)


def shapes(plan: Plan) -> tuple[float, float, list[Shape]]:
    """(width, height, shapes) of the picture of `plan`, in pixels (y down)."""
    frame = _frame(plan)
    x, y, plot_w = frame.x, frame.y, frame.width
    live = plan.carve.live
    limit, total = plan.shared_limit, plan.shared_bytes
    out: list[Shape] = []
    of = f" of {plan.arch or 'the device'}'s {limit} ({100 * total / limit:.1f}%)" if limit else ""
    title = f"shared memory of {plan.program}: {plan.block_threads} threads per block, {total} bytes{of}"
    out.append(Text(LEFT, 22, title, 14, bold=True))
    out.append(Rect(LEFT, TOP, plot_w, PLOT_HEIGHT_PX, "#ffffff", "plot"))
    drawn = boxes(plan)
    for i, b in enumerate(drawn):
        w, h = x(b.stop + 1) - x(b.start), y(0) - y(b.size)
        kind = "tile" if isinstance(b.key, str) else "storage"
        rect = Rect(x(b.start), y(b.offset + b.size), w, h, _color(i, b), kind, f"{b.label}, {b.where}")
        out.append(rect)
        for step in sorted(b.accesses):  # the statement's column, within the live range
            left, right = max(x(step), rect.x), min(x(step + 2), rect.x + rect.width)
            out.append(Rect(left, rect.y, right - left, h, ACCESS_COLOR, "access"))
        if h >= 13 and w >= 7 * len(b.name):
            out.append(Text(rect.x + rect.width / 2, rect.y + min(h, 40) / 2 + 4, b.name, 11, "middle"))
    for barrier in plan.carve.barriers.values():
        step = live.positions.get(barrier.before) if live is not None else None
        if step is not None:
            out.append(_vertical(x(step), BARRIER_COLOR, "barrier", "", f"__syncthreads() before line "
                                 f"{barrier.line or '?'}: {barrier.reason}"))  # fmt: skip
    for cid, step in sorted(plan.carve.collective_steps.items()):
        c = plan.collectives.get(cid)
        if c is not None and c.sync:
            out.append(_vertical(x(step + 0.5), SYNC_COLOR, "sync", "2,3", f"{c.op} ({c.primitive}) synchronises"))
    out += _axes(plan, frame)
    legend, legend_h = _legend(plan, drawn, LEFT + plot_w + GAP)
    out += legend
    width = LEFT + plot_w + GAP + LEGEND_WIDTH_PX
    height = max(TOP + PLOT_HEIGHT_PX + BOTTOM, TOP + legend_h + 10)
    return width, height, out


def _vertical(at: float, color: str, kind: str, dash: str, title: str) -> Line:
    return Line(at, TOP, at, TOP + PLOT_HEIGHT_PX, color, kind, dash, title)


def _axes(plan: Plan, frame: _Frame) -> Iterator[Shape]:
    x, y, plot_w, top_bytes = frame.x, frame.y, frame.width, frame.top_bytes
    limit, total = plan.shared_limit, plan.shared_bytes
    bottom = TOP + PLOT_HEIGHT_PX
    yield Line(LEFT, bottom, LEFT + plot_w, bottom, "#000000", "axis")
    yield Line(LEFT, TOP, LEFT, bottom, "#000000", "axis")
    for value in _ticks(top_bytes):
        yield Line(LEFT - 4, y(value), LEFT, y(value), "#000000", "tick")
        yield Text(LEFT - 7, y(value) + 4, f"{value:,}", 10, "end")
    yield Text(16, TOP - 10, "bytes", 11)
    live = plan.carve.live
    shown_at = -1e9
    previous = None
    for step, line in sorted(live.lines.items()) if live is not None else ():
        at = x(step + 1)
        if line is not None and line != previous and at - shown_at >= 24:
            yield Line(at, bottom, at, bottom + 4, "#000000", "tick")
            yield Text(at, bottom + 16, str(line), 10, "middle")
            shown_at = at
        previous = line
    yield Text(LEFT + plot_w / 2, bottom + 36, "statements in program order (labelled by source line)", 11, "middle")
    if total:
        yield Line(LEFT, y(total), LEFT + plot_w, y(total), LIMIT_COLOR, "total", "1,3", f"total {total} bytes")
    if limit and limit <= top_bytes:
        yield Line(LEFT, y(limit), LEFT + plot_w, y(limit), LIMIT_COLOR, "limit", "6,4", f"limit {limit} bytes")
        yield Text(LEFT + plot_w - 4, y(limit) - 4, f"{plan.arch or 'device'} limit {limit:,} B", 10, "end")
    elif limit:
        yield Text(LEFT + plot_w - 4, TOP - 6, f"{plan.arch or 'device'} limit {limit:,} B: above the plot", 10, "end")


def _ticks(top: int) -> list[int]:
    """Round byte values from 0 to `top`, four to eight of them."""
    step = 1
    while top / step > 8:
        for factor in (2, 2.5, 2):
            step = int(step * factor)
            if top / step <= 8:
                break
    return list(range(0, top + 1, step))


def _legend(plan: Plan, drawn: list[Box], left: float) -> tuple[list[Shape], float]:
    out: list[Shape] = [Text(left, TOP + 4, "shared memory", 12, bold=True)]
    at = TOP + 4 + LINE_PX
    for i, b in enumerate(drawn):
        out.append(Rect(left, at - 9, 10, 10, _color(i, b), "swatch"))
        out.append(Text(left + 14, at, f"{b.label}, {b.where}", 10))
        at += LINE_PX
    if not drawn:
        out.append(Text(left, at, "none", 10))
        at += LINE_PX
    others = [t for t in plan.tiles.values() if t.name not in plan.carve.tiles]
    at += LINE_PX / 2
    out.append(Text(left, at, "tiles in registers or local memory", 12, bold=True))
    at += LINE_PX
    for t in others:
        where = f"line {t.line}, " if t.line else ""
        what = f"{t.label or t.name}: {t.dtype}[{t.extent}], {where}{t.items_per_thread}/thread, {t.storage}"
        out.append(Text(left, at, what, 10))
        at += LINE_PX
    if not others:
        out.append(Text(left, at, "none", 10))
        at += LINE_PX
    at += LINE_PX / 2
    out.append(Rect(left + 4, at - 9, 10, 10, "#cccccc", "swatch"))  # the band's shade over white
    out.append(Text(left + 24, at, "a statement touches the bytes (elsewhere they are only kept)", 10))
    at += LINE_PX
    for color, dash, what in (
        (BARRIER_COLOR, "", "__syncthreads() of the plan"),
        (SYNC_COLOR, "2,3", "a collective's own __syncthreads()"),
        (LIMIT_COLOR, "1,3", "total"),
    ):
        out.append(Line(left, at - 4, left + 18, at - 4, color, "key", dash))
        out.append(Text(left + 24, at, what, 10))
        at += LINE_PX
    return out, at - TOP


# ----- writers -----------------------------------------------------------------------------------
def svg(plan: Plan) -> str:
    """The picture of `plan` as SVG text."""
    width, height, drawn = shapes(plan)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="{FONT}">',
        f'<rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="#fafafa"/>',
    ]
    for s in drawn:
        if isinstance(s, Rect):
            stroke = {"plot": ' stroke="#bdbdbd"', "access": f' fill-opacity="{ACCESS_OPACITY}"'}.get(
                s.kind, ' stroke="#525252" stroke-width="0.6"'
            )
            title = f"<title>{escape(s.title)}</title>" if s.title else ""
            out.append(
                f'<rect class="{s.kind}" x="{s.x:.4f}" y="{s.y:.4f}" width="{s.width:.4f}" height="{s.height:.4f}" '
                f'fill="{s.fill}"{stroke}>{title}</rect>'
            )
        elif isinstance(s, Line):
            dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
            title = f"<title>{escape(s.title)}</title>" if s.title else ""
            out.append(
                f'<line class="{s.kind}" x1="{s.x1:.4f}" y1="{s.y1:.4f}" x2="{s.x2:.4f}" y2="{s.y2:.4f}" '
                f'stroke="{s.stroke}" stroke-width="{1.5 if s.kind == "barrier" else 1}"{dash}>{title}</line>'
            )
        else:
            weight = ' font-weight="bold"' if s.bold else ""
            out.append(
                f'<text x="{s.x:.1f}" y="{s.y:.1f}" font-size="{s.size:g}" text-anchor="{s.anchor}"{weight}>'
                f"{escape(s.text)}</text>"
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def draw(plan: Plan, path: str | Path) -> Path:
    """Write the picture of `plan` to `path`: SVG for a `.svg` name (no dependency), else any
    format matplotlib writes (`.png`, `.pdf`; needs ``pip install coop-tiles[plot]``)."""
    path = Path(path)
    if path.suffix.lower() in (".svg", ""):
        path = path.with_suffix(".svg")
        path.write_text(svg(plan))
        return path
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ImportError(
            f"drawing {path.name} needs matplotlib (pip install coop-tiles[plot]); a .svg name needs nothing"
        ) from None
    from matplotlib.figure import Figure  # not pyplot: no backend or global figure state is touched
    from matplotlib.patches import Rectangle

    width, height, drawn = shapes(plan)
    dpi = 100
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.axis("off")
    anchors = {"start": "left", "middle": "center", "end": "right"}
    for s in drawn:
        if isinstance(s, Rect):
            edge = {"plot": "#bdbdbd", "access": "none"}.get(s.kind, "#525252")
            alpha = ACCESS_OPACITY if s.kind == "access" else 1.0
            ax.add_patch(Rectangle((s.x, s.y), s.width, s.height, facecolor=s.fill, edgecolor=edge, linewidth=0.6,
                                   alpha=alpha))  # fmt: skip
        elif isinstance(s, Line):
            style = (0, tuple(float(v) for v in s.dash.split(","))) if s.dash else "solid"
            ax.plot([s.x1, s.x2], [s.y1, s.y2], color=s.stroke, linestyle=style, linewidth=1)
        else:
            weight = "bold" if s.bold else "normal"
            # font sizes in pixels, as SVG gives them; matplotlib takes points (1/72 in)
            ax.text(s.x, s.y, s.text, fontsize=s.size * 72 / dpi, ha=anchors[s.anchor], va="baseline", weight=weight)
    fig.savefig(path, dpi=dpi)
    return path
