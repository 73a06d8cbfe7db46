"""The untyped side of the front end: a tile program's parsed source, built once per function."""

from __future__ import annotations

import ast
import builtins
import hashlib
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import SourceLocation, TileSyntaxError


@dataclass
class ParsedFunction:
    """A Python function's AST plus what is needed to resolve names and locate errors."""

    fn: Callable
    tree: ast.FunctionDef
    filename: str
    first_line: int
    indent: int
    lines: list[str]
    params: list[str]
    constexprs: frozenset[str]
    assigned: frozenset[str]
    single_top_level: frozenset[str]
    source_hash: str
    closure: dict[str, Any] = field(default_factory=dict)
    #: the parameters' default values (Python's: a launch may leave those parameters out)
    defaults: dict[str, Any] = field(default_factory=dict)

    def loc(self, node: ast.AST) -> SourceLocation:
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0) + self.indent
        end_col = getattr(node, "end_col_offset", None)
        if end_col is not None and getattr(node, "end_lineno", line) == line:
            end_col += self.indent
        else:
            end_col = None
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return SourceLocation(self.filename, self.first_line + line - 1, col, end_col, text)

    def resolve_global(self, name: str) -> tuple[bool, Any]:
        """Look `name` up as Python would for this function: closure, globals, builtins."""
        if name in self.closure:
            return True, self.closure[name]
        g = self.fn.__globals__
        if name in g:
            return True, g[name]
        if hasattr(builtins, name):
            return True, getattr(builtins, name)
        return False, None


_cache: dict[Callable, ParsedFunction] = {}


def parse_function(fn: Callable) -> ParsedFunction:
    """Parse `fn` once (cached): its AST, parameters, and which names it assigns where."""
    cached = _cache.get(fn)
    if cached is not None:
        return cached
    try:
        lines, first_line = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or "<unknown>"
    except (OSError, TypeError) as e:
        raise TileSyntaxError(f"cannot read the source of {fn!r}: {e}") from None
    raw = "".join(lines)
    dedented = textwrap.dedent(raw)
    indent = len(lines[0]) - len(dedented.splitlines(keepends=True)[0]) if lines else 0
    module = ast.parse(dedented)
    tree = module.body[0]
    if not isinstance(tree, ast.FunctionDef):
        raise TileSyntaxError(f"{fn!r} is not a plain function")
    args = tree.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        raise TileSyntaxError(
            "tile programs take plain positional parameters (no *args, **kwargs or keyword-only)",
            loc=SourceLocation(filename, first_line, indent, None, lines[0] if lines else ""),
        )
    params = [a.arg for a in args.args]
    annotations = getattr(fn, "__annotations__", {})
    constexprs = frozenset(p for p in params if _is_constexpr(annotations.get(p)))
    closure = {}
    if fn.__closure__:
        closure = {n: c.cell_contents for n, c in zip(fn.__code__.co_freevars, fn.__closure__)}
    source_hash = hashlib.sha256(dedented.encode()).hexdigest()
    parsed = ParsedFunction(
        fn=fn,
        tree=tree,
        filename=filename,
        first_line=first_line,
        indent=indent,
        lines=raw.splitlines(),
        params=params,
        constexprs=constexprs,
        assigned=frozenset(_assigned_names(tree.body)),
        single_top_level=frozenset(_single_top_level(tree.body)),
        source_hash=source_hash,
        closure=closure,
        defaults=dict(zip(reversed(params), reversed(fn.__defaults__ or ()))),
    )
    _cache[fn] = parsed
    return parsed


def _is_constexpr(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation.split(".")[-1] == "constexpr"
    return getattr(annotation, "__name__", None) == "constexpr" and "coop_tiles" in getattr(
        annotation, "__module__", ""
    )


def _target_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _target_names(e)]
    return []


def _assigned_names(body: list[ast.stmt]) -> list[str]:
    names: list[str] = []
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.Assign):
            names += [n for t in node.targets for n in _target_names(t)]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
            names += _target_names(node.target)
    return names


def _single_top_level(body: list[ast.stmt]) -> list[str]:
    """Names assigned exactly once in the whole function, by a top-level statement.

    Only these may stay compile-time constants (e.g. ``N = TILE * 2`` used as a tile size).
    """
    counts: dict[str, int] = {}
    for name in _assigned_names(body):
        counts[name] = counts.get(name, 0) + 1
    top = [n for s in body if isinstance(s, (ast.Assign, ast.AnnAssign)) for n in _assigned_names([s])]
    return [n for n in top if counts.get(n) == 1]
