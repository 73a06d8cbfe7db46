"""Every combination of every tile op's declared options (tests/option_matrix.py): the allowed ones
run in the interpreter against NumPy and compile to an sm_90 cubin; the forbidden ones raise their
declared error, located at the call, in both modes."""

import inspect

import pytest
from option_matrix import (
    ALLOWED,
    FORBIDDEN,
    HARNESSES,
    alone_source,
    check,
    compile_source,
    interpret,
    outcome,
    warm_cache,
)

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.ops.base import BY_PUBLIC

_interpreted: dict = {}
_compiled: dict = {}


@pytest.mark.parametrize("c", ALLOWED, ids=str)
def test_interpreter_matches_numpy(c):
    source, got = outcome(interpret, c, _interpreted)
    check(source, c, got)


@pytest.fixture(scope="module")
def cubins_cached():
    warm_cache()


@pytest.mark.parametrize("c", ALLOWED, ids=str)
def test_compiles_to_cubin(c, cubins_cached):
    _, kernel = outcome(compile_source, c, _compiled)
    assert kernel.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("mode", ["interpret", "compile"])
@pytest.mark.parametrize("c", FORBIDDEN, ids=str)
def test_forbidden_combination_raises_located_error(c, mode):
    source = alone_source(c)
    with pytest.raises(ct.TileError) as info:
        interpret(source) if mode == "interpret" else compile_source(source)
    err = info.value
    assert type(err) is c.rule.error, str(err)
    assert err.message == c.rule.message(f"tile.{c.public.__name__}", c.options), str(err)
    assert (err.loc.filename, err.loc.line) == (source.filename, source.call_lines[str(c)]), str(err)


def test_every_op_and_option_is_in_the_matrix():
    """Each op of `tile` has a harness, and each harness knows every option its op declares."""
    for name in tile.__all__:
        public = getattr(tile, name)
        assert public in HARNESSES, f"tile.{name} has no harness in tests/option_matrix.py"
        declared = {o.name for o in BY_PUBLIC[public].options} & set(inspect.signature(public).parameters)
        unknown = declared - HARNESSES[public].knows
        assert not unknown, f"tile.{name}'s harness does not know the options {sorted(unknown)}"
