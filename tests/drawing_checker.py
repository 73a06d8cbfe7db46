"""A check of the plan's drawing, read back from its SVG: the carve's property, drawn.

From the parsed SVG only (and the plan's names, to look for): the picture has a size and holds
everything inside it; there is one box per region of the carve, titled with its name, CUB
primitive and size; and no two boxes that share bytes share columns, nor follow one another
without a line between them: a barrier of the plan, or the dotted line of a collective that
synchronises the block itself. Two tiles over exactly the same bytes need none (each thread
touches only its own items), and boxes in the two arms of an `if` never meet: the program's
`if` statements are the one thing taken from outside the picture.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from coop_tiles.lang import ir

SVG = "{http://www.w3.org/2000/svg}"
EPS = 1e-3  # pixels: the SVG's coordinates have four decimals


@dataclass
class Drawn:
    kind: str
    title: str
    x0: float
    x1: float
    y0: float
    y1: float
    #: the columns where statements touch its bytes (the darker bands over it)
    accesses: list[tuple[float, float]] = field(default_factory=list)

    def same_bytes(self, other: Drawn) -> bool:
        return abs(self.y0 - other.y0) < EPS and abs(self.y1 - other.y1) < EPS


def drawing_problems(plan, path: Path, program: ir.Program | None = None) -> list[str]:
    """What is wrong with `plan.draw(path)` (an .svg path): empty when the drawing is sound."""
    written = plan.draw(path)
    text = written.read_text()
    root = ET.fromstring(text)
    width, height = float(root.get("width")), float(root.get("height"))
    problems = []
    if not (200 <= width <= 20000 and 200 <= height <= 20000):
        problems.append(f"size {width} x {height}")
    boxes, bands, lines = [], [], {"barrier": [], "sync": []}
    for e in root.iter():
        tag = e.tag.removeprefix(SVG)
        if tag == "rect" and e.get("class") in ("tile", "storage"):
            x, y, w, h = (float(e.get(a)) for a in ("x", "y", "width", "height"))
            title = e.find(f"{SVG}title")
            boxes.append(Drawn(e.get("class"), title.text if title is not None else "", x, x + w, y, y + h))
            if x < 0 or y < 0 or x + w > width + EPS or y + h > height + EPS:
                problems.append(f"box {boxes[-1].title} outside the picture")
        elif tag == "rect" and e.get("class") == "access":
            x, y, w, h = (float(e.get(a)) for a in ("x", "y", "width", "height"))
            bands.append((x, x + w, y, y + h))
        elif tag == "line" and e.get("class") in lines:
            lines[e.get("class")].append(float(e.get("x1")))
    problems += _labels(plan, boxes)
    for x0, x1, y0, y1 in bands:
        owners = [
            b for b in boxes if abs(b.y0 - y0) < EPS and abs(b.y1 - y1) < EPS and b.x0 - EPS <= x0 < x1 <= b.x1 + EPS
        ]
        if len(owners) != 1:
            problems.append(f"an access band at x {x0:.1f}-{x1:.1f} lies over {len(owners)} boxes")
        else:
            owners[0].accesses.append((x0, x1))
    separators = sorted(lines["barrier"] + lines["sync"])
    exclusive = _arms(plan, program) if program is not None else []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if min(a.y1, b.y1) - max(a.y0, b.y0) <= EPS:
                continue  # no bytes in common
            if min(a.x1, b.x1) - max(a.x0, b.x0) > EPS:
                problems.append(f"boxes share bytes and columns: {a.title} | {b.title}")
                continue
            first, second = (a, b) if a.x1 <= b.x0 + EPS else (b, a)
            if first.kind == second.kind == "tile" and first.same_bytes(second):
                continue
            if not first.accesses or not second.accesses:
                continue  # never touched: nothing to order
            # from the end of the first one's last access on a path to the second one's first access
            start = min(second.accesses)
            ends = [band[1] for band in first.accesses if not any(_apart(band, start, arms) for arms in exclusive)]
            if not ends or any(max(ends) - EPS <= x <= start[0] + EPS for x in separators):
                continue
            problems.append(f"boxes share bytes with no barrier between them: {first.title} | {second.title}")
    return problems


def _labels(plan, boxes: list[Drawn]) -> list[str]:
    """Every region has a box titled with its name, CUB primitive and size."""
    titles = [b.title for b in boxes]
    expected = [(plan.tiles[name].label or name, "tile", r.size) for name, r in plan.carve.tiles.items()]
    keys = {}
    for cid, r in plan.carve.regions.items():
        keys.setdefault(r.key, (plan.collectives[cid].op, plan.collectives[cid].primitive, r.size))
    expected += keys.values()
    problems = [] if len(titles) == len(expected) else [f"{len(titles)} boxes for {len(expected)} regions"]
    for name, primitive, size in expected:
        if not any(name in t and primitive in t and f"{size} B" in t for t in titles):
            problems.append(f"no box titled {name}, {primitive}, {size} B")
    return problems


def _arms(plan, program: ir.Program) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """The x ranges of the two arms of each `if` (from the plan's steps, as the drawing places them)."""
    from coop_tiles.planner.drawing import column_x

    live = plan.carve.live

    def span(body: list[ir.Stmt]) -> tuple[float, float]:
        steps = [live.positions[s.sid] for s in ir.walk(body)]  # nested statements included
        return column_x(plan, min(steps)), column_x(plan, max(steps) + 2)

    arms = []
    for s in program.walk():
        if isinstance(s, ir.If) and s.then and s.orelse:
            arms.append((span(s.then), span(s.orelse)))
    return arms


def _apart(a: tuple[float, float], b: tuple[float, float], arms) -> bool:
    """Whether columns `a` and `b` lie in the two arms of one `if` (no path runs through both)."""

    def within(band: tuple[float, float], span: tuple[float, float]) -> bool:
        return span[0] - EPS <= band[0] and band[1] <= span[1] + EPS

    then, orelse = arms
    return (within(a, then) and within(b, orelse)) or (within(a, orelse) and within(b, then))
