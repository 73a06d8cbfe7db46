"""The package's import structure: no import cycle, and the stages know the ops only through
`coop_tiles/ops/base.py` (docs/internals.md, "Two rules")."""

from __future__ import annotations

import ast
from pathlib import Path

import coop_tiles

PACKAGE = Path(coop_tiles.__file__).parent
#: the modules that may import nothing from `coop_tiles.ops` but `coop_tiles.ops.base`
STAGES = ("coop_tiles.planner", "coop_tiles.codegen", "coop_tiles.runtime.compiler")


def module_files(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its `__init__.py`)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules `module` imports anywhere in its source (under `if TYPE_CHECKING:` and
    inside functions too); `from pkg import name` counts as `pkg.name` when that is a module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:  # an attribute of a module, or outside the package
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {m: imported(m, p, modules) for m, p in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (its modules in order, the first repeated last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return path[path.index(d) :] + [d]
            if d not in state and (cycle := visit(d)) is not None:
                return cycle
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)) is not None:
            return cycle
    return None


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_cycles(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    modules = module_files(pkg)
    graph = {m: imported(m, p, modules) for m, p in modules.items()}
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.a"]


def test_stages_import_only_the_op_interface():
    stage_imports = {
        (m, d)
        for m, deps in import_graph().items()
        if m.startswith(STAGES)
        for d in deps
        if d.startswith("coop_tiles.ops") and d != "coop_tiles.ops.base"
    }
    assert not stage_imports, "stages importing op modules: " + ", ".join(
        f"{m} imports {d}" for m, d in sorted(stage_imports)
    )


#: the module-level mutable state the package keeps on purpose, each with its reason
KNOWN_STATE = {
    ("coop_tiles.ops.base", "BY_PUBLIC"): "the op registry, filled once by @register at import",
    ("coop_tiles.ops.base", "BY_STMT"): "the op registry, filled once by @register at import",
    ("coop_tiles.lang.source", "_cache"): "parsed functions, a memo of a pure function",
    ("coop_tiles.runtime.cache", "_totals"): "each cache directory's byte total, per process",
    ("coop_tiles.examples.selective_scan", "_by_threads"): "an example's kernels by block size",
    ("coop_tiles.examples.state_update", "_by_threads"): "an example's kernels by block size",
    ("coop_tiles.examples.state_update", "_PLANS"): "checked launch plans by argument signature (a memo)",
    (
        "coop_tiles.examples.selective_scan_backward",
        "_by_launch",
    ): "an example's kernels by block size and register cap",
}
MUTATORS = {"append", "add", "update", "setdefault", "pop", "clear", "extend", "insert", "remove", "discard"}


def module_state(path: Path) -> set[str]:
    """Names of the module-level dicts, lists and sets `path` mutates anywhere, and its `global` names."""
    tree = ast.parse(path.read_text())
    containers = set()
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        target = node.target if isinstance(node, ast.AnnAssign) and node.value is not None else target
        value = getattr(node, "value", None)
        made = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) or (
            isinstance(value, ast.Call) and getattr(value.func, "id", "") in ("dict", "list", "set")
        )
        if isinstance(target, ast.Name) and made:
            containers.add(target.id)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found.update(node.names)
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Subscript) and getattr(target.value, "id", None) in containers:
                    found.add(target.value.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            if getattr(node.func.value, "id", None) in containers:
                found.add(node.func.value.id)
    return found


def test_no_module_level_mutable_registries():
    """Argument classification and the rest keep their state in objects (`runtime/classify.py`'s
    Classifier, one per kernel), not in module-level dicts or `global`s."""
    state = {(m, name) for m, path in module_files().items() for name in module_state(path)}
    assert state - set(KNOWN_STATE) == set(), f"module-level mutable state: {sorted(state - set(KNOWN_STATE))}"
    assert set(KNOWN_STATE) <= state, f"gone, remove from KNOWN_STATE: {sorted(set(KNOWN_STATE) - state)}"


def protocol_members(protocol: type) -> set[str]:
    """The attributes and methods a protocol of `ops/base.py` declares."""
    return set(getattr(protocol, "__annotations__", {})) | {
        n for n, v in vars(protocol).items() if callable(v) and not n.startswith("_")
    }


def test_stage_objects_have_what_their_protocol_declares(monkeypatch):
    """Each hook gets an object with every member its protocol in ops/base.py names."""
    import numpy as np

    from coop_tiles import tile
    from coop_tiles.ops import base
    from coop_tiles.ops.construct import Full
    from coop_tiles.ops.scan import Scan

    seen: dict[str, object] = {}
    hooks = [(Scan, hook, 1) for hook in ("interpret", "layout", "choose", "lower")]
    for op, hook, position in [(Scan, "build", 0), *hooks, (Full, "item_value", 1)]:
        original = getattr(op, hook)

        def spy(self, *args, _hook=hook, _position=position, _original=original, **kwargs):
            seen[_hook] = args[_position]
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(op, hook, spy)

    @coop_tiles.jit
    def k(x, y, n, TILE: coop_tiles.constexpr):
        t = tile.load(x, 0, TILE, valid=n)
        tile.store(y, 0, tile.scan(t + tile.zeros(TILE, np.int32)), valid=n)

    x = np.arange(8, dtype=np.int32)
    k.compile(x, x, 8, TILE=8, arch="sm_90")
    coop_tiles.jit(k.fn, interpret=True)[1](x, x.copy(), 8, TILE=8)
    expected = {
        "build": base.Building,
        "interpret": base.Running,
        "layout": base.Planning,
        "choose": base.Planning,
        "lower": base.Lowering,
        "item_value": base.BodyWriting,
    }
    for hook, protocol in expected.items():
        missing = sorted(m for m in protocol_members(protocol) if not hasattr(seen[hook], m))
        assert not missing, f"{type(seen[hook]).__name__} (passed to {hook}) lacks {missing} of {protocol.__name__}"


def _stub_and_op(build):
    """A public stub `histo(t, bins, *, valid=None)` and an op class whose builder is `build`."""
    from coop_tiles.lang.stub import stub
    from coop_tiles.ops.base import TileOp

    @stub
    def histo(t, bins, *, valid=None):
        """A stand-in public function."""

    return histo, type("Histo", (TileOp,), {"publics": (histo,), "build": build})


def test_builders_take_their_stubs_parameters_by_name():
    from coop_tiles.ops.base import check_builder

    def good(self, b, public, t, bins, *, valid):
        return None

    def good_with_extra(self, b, public, t, bins, algorithm="auto", *, valid):
        return None

    for build in (good, good_with_extra):
        stub, op = _stub_and_op(build)
        check_builder(op, stub)


def test_a_builder_that_disagrees_with_its_stub_is_refused_at_registration():
    import pytest

    from coop_tiles.ops.base import BY_PUBLIC, register

    def renamed(self, b, public, t, count, *, valid):
        return None

    def reordered(self, b, public, bins, t, *, valid):
        return None

    def extra_without_default(self, b, public, t, bins, algorithm, *, valid):
        return None

    def old_style(self, b, a, public):
        return None

    expected = {
        renamed: "no parameter bins",
        reordered: "not in the stub's order",
        extra_without_default: "algorithm not in the stub need a default",
        old_style: "no parameter t, bins, valid",
    }
    for build, message in expected.items():
        stub, op = _stub_and_op(build)
        with pytest.raises(TypeError, match=message):
            register(op)
        assert stub not in BY_PUBLIC
