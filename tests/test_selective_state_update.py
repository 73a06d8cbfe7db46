"""Mamba's decode step (coop_tiles.examples.selective_state_update): the interpreter against the NumPy reference of
Mamba's function (tests/ssm_references.py) for both layouts and every option, its argument checks, and the same
on the GPU with PyTorch tensors at Mamba's own tests' tolerances."""

from __future__ import annotations

import re

import numpy as np
import pytest
from ssm_references import selective_state_update as reference

import coop_tiles as ct
from coop_tiles.examples import selective_state_update
from coop_tiles.examples.state_update import kernel_for, launch_choice, prepare

BF16 = np.dtype(ct.bfloat16)
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
#: (rtol, atol) of the state and out against the float64 reference, by input dtype: the interpreter's (float32
#: arithmetic, outputs rounded once) and Mamba's own tests' (test_selective_state_update.py), for the GPU
INTERPRETER_TOL = {F32: (1e-5, 1e-5), F16: (2e-3, 2e-3), BF16: (1e-2, 1e-2)}
MAMBA_TOL = {F32: (3e-4, 1e-3), F16: (5e-3, 3e-2), BF16: (1e-2, 1e-1)}


def make_inputs(
    batch: int,
    nheads: int | None,
    dim: int,
    dstate: int,
    ngroups: int = 1,
    dtype: np.dtype = F32,
    state_dtype: np.dtype = F32,
    tie: bool = False,
    seed: int = 0,
) -> dict:
    """Arguments drawn as Mamba's tests draw them (A = -(uniform + 1), dt_bias = uniform - 4, the rest standard
    normal): Mamba-1's layout when nheads is None, else Mamba-2's; x, dt, B, C, z in `dtype`, A, D, dt_bias in
    float32. With `tie`, A, dt and dt_bias are broadcast over each head (stride 0), as Mamba-2's decode passes them.
    """
    rng = np.random.default_rng(seed)
    lead = (batch,) if nheads is None else (batch, nheads)
    head = () if nheads is None else (nheads,)
    groups = (batch, dstate) if nheads is None else (batch, ngroups, dstate)
    args = {
        "state": rng.standard_normal((*lead, dim, dstate)).astype(state_dtype),
        "x": rng.standard_normal((*lead, dim)).astype(dtype),
        "dt": rng.standard_normal((*lead, dim)).astype(dtype),
        "A": (-rng.random((*head, dim, dstate)) - 1).astype(np.float32),
        "B": rng.standard_normal(groups).astype(dtype),
        "C": rng.standard_normal(groups).astype(dtype),
        "D": rng.standard_normal((*head, dim)).astype(np.float32),
        "z": rng.standard_normal((*lead, dim)).astype(dtype),
        "dt_bias": (rng.random((*head, dim)) - 4).astype(np.float32),
    }
    if tie:
        args["dt"] = np.broadcast_to(args["dt"][..., :1], args["dt"].shape)
        args["A"] = np.broadcast_to(args["A"][..., :1, :1], args["A"].shape)
        args["dt_bias"] = np.broadcast_to(args["dt_bias"][..., :1], args["dt_bias"].shape)
    return args


def run_both(args: dict, update=selective_state_update, **options) -> tuple:
    """(state, out) from `update` and from the reference, each on its own copy of the initial state."""
    state, expected_state = args["state"].copy(), args["state"].copy()
    out = update(**{**args, "state": state}, **options)
    expected_out = reference(**{**args, "state": expected_state}, **options)
    return state, out, expected_state, expected_out


def check(state, out, expected_state, expected_out, tol) -> None:
    rtol, atol = tol
    assert out.dtype == expected_out.dtype and out.shape == expected_out.shape
    np.testing.assert_allclose(state.astype(np.float64), expected_state.astype(np.float64), rtol=rtol, atol=atol)
    np.testing.assert_allclose(out.astype(np.float64), expected_out.astype(np.float64), rtol=rtol, atol=atol)


SHAPES = {  # name: (batch, nheads, dim, dstate, ngroups)
    "mamba1": (2, None, 40, 16, 1),
    "mamba1-dstate-6-partial-rows": (3, None, 700, 6, 1),
    "mamba2": (2, 4, 16, 32, 1),
    "mamba2-groups-2": (2, 4, 12, 8, 2),
    "mamba2-groups-4-dstate-128": (1, 4, 8, 128, 4),
}


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=lambda d: d.name)
@pytest.mark.parametrize("shape", SHAPES)
def test_interpreter_matches_reference(shape, dtype):
    args = make_inputs(*SHAPES[shape], dtype=dtype)
    check(*run_both(args, dt_softplus=True), INTERPRETER_TOL[dtype])


OPTIONALS = {  # name: (the optional arguments given, softplus)
    "nothing optional": ((), False),
    "D only": (("D",), False),
    "z only, softplus": (("z",), True),
    "dt_bias without softplus": (("dt_bias",), False),
    "everything": (("D", "z", "dt_bias"), True),
}


@pytest.mark.parametrize("tie", [False, True], ids=["per-row", "tied"])
@pytest.mark.parametrize("optional", OPTIONALS)
def test_interpreter_optional_inputs(optional, tie):
    given, softplus = OPTIONALS[optional]
    args = make_inputs(2, 3, 20, 8, tie=tie)
    args = {k: v for k, v in args.items() if k not in ("D", "z", "dt_bias") or k in given}
    check(*run_both(args, dt_softplus=softplus), INTERPRETER_TOL[F32])


@pytest.mark.parametrize("dtype", [F32, BF16], ids=lambda d: d.name)
@pytest.mark.parametrize("nheads", [None, 2], ids=["mamba1", "mamba2"])
def test_interpreter_state_batch_indices_with_padding(nheads, dtype):
    """Batch b updates state[indices[b]]; a negative index (padding) gives out 0 and touches no state."""
    args = make_inputs(4, nheads, 24, 8, dtype=dtype)
    states = np.random.default_rng(1).standard_normal((9, *args["state"].shape[1:])).astype(np.float32)
    indices = np.array([7, -1, 0, 3], np.int32)
    state, out, expected_state, expected_out = run_both({**args, "state": states}, state_batch_indices=indices)
    check(state, out, expected_state, expected_out, INTERPRETER_TOL[dtype])
    assert not out[1].any()
    untouched = [i for i in range(9) if i not in indices]
    np.testing.assert_array_equal(state[untouched], states[untouched])


@pytest.mark.parametrize("state_dtype", [F16, BF16], ids=lambda d: d.name)
def test_interpreter_16_bit_state(state_dtype):
    """A state of the inputs' dtype (as Mamba's tests have it) is updated in float32 and rounded once."""
    args = make_inputs(2, 2, 16, 16, dtype=state_dtype, state_dtype=state_dtype)
    check(*run_both(args, dt_softplus=True), INTERPRETER_TOL[state_dtype])


def test_interpreter_non_contiguous_views():
    """The state a permuted slice of a larger buffer, x strided, B reversed: the state is updated where it lives and
    nothing else in the buffer is written."""
    args = make_inputs(2, 3, 20, 16)
    buffer = np.random.default_rng(2).standard_normal((3, 20, 2, 40)).astype(np.float32)  # (nheads, dim, batch, _)
    before = buffer.copy()
    args["state"] = buffer[:, :, :, 4:20].transpose(2, 0, 1, 3)  # (batch, nheads, dim, dstate)
    args["x"] = np.stack([args["x"], args["x"]], -1)[..., 0]
    args["B"] = args["B"][:, :, ::-1]
    expected_state = args["state"].copy()
    out = selective_state_update(**args, dt_softplus=True)
    expected_out = reference(**{**args, "state": expected_state}, dt_softplus=True)
    check(args["state"], out, expected_state, expected_out, INTERPRETER_TOL[F32])
    np.testing.assert_array_equal(buffer[..., :4], before[..., :4])
    np.testing.assert_array_equal(buffer[..., 20:], before[..., 20:])


def test_interpreter_mixed_forms():
    """As in Mamba, each argument may come with or without its head (or group) axis: B and C (batch, dstate) with a
    4-D state are one group; a 3-D state with the other arguments given one head gives out without a head axis."""
    args = make_inputs(2, 4, 8, 16)
    flat_bc = {**args, "B": args["B"][:, 0], "C": args["C"][:, 0]}
    state, expected_state = args["state"].copy(), args["state"].copy()
    out = selective_state_update(**{**flat_bc, "state": state}, dt_softplus=True)
    expected_out = reference(**{**args, "state": expected_state}, dt_softplus=True)
    check(state, out, expected_state, expected_out, INTERPRETER_TOL[F32])

    one_head = make_inputs(2, 1, 8, 16)
    flat = {k: v[0] if k in ("A", "D", "dt_bias") else v[:, 0] for k, v in one_head.items()}  # Mamba-1's forms
    state, expected_state = flat["state"].copy(), flat["state"].copy()
    out = selective_state_update(**{**one_head, "state": state}, dt_softplus=True)
    expected_out = reference(**{**flat, "state": expected_state}, dt_softplus=True)
    check(state, out, expected_state, expected_out, INTERPRETER_TOL[F32])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"state": np.zeros((2, 3), np.float32)}, "state must have 3 or 4 dimensions"),
        ({"x": np.zeros((2, 9), np.float32)}, r"x must be \(2, 8\)"),
        ({"dt": np.zeros((2, 8, 1), np.float32)}, r"dt must be \(2, 1, 8\) .* \(a 3-D state taken as one head"),
        ({"A": np.zeros((8, 5), np.float32)}, r"A must be \(8, 16\)"),
        ({"C": np.zeros((3, 16), np.float32)}, r"C must be \(2, 16\)"),
        ({"D": np.zeros(7, np.float32)}, r"D must be \(8,\)"),
        ({"x": np.zeros((2, 8), np.int32)}, "x must be of a float dtype"),
        ({"state_batch_indices": np.zeros(2, np.float32)}, "state_batch_indices must be int32 or int64"),
        ({"state_batch_indices": np.zeros(3, np.int32)}, r"state_batch_indices must be \(2,\)"),
        ({"state": np.zeros((1, 8, 16), np.float32)}, "state holds 1 states for a batch of 2"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_arguments_are_named(change, message):
    args = {**make_inputs(2, None, 8, 16), **change}
    with pytest.raises(ValueError, match=message):
        selective_state_update(**args)


def test_each_signature_is_checked_before_its_plan_is_kept():
    """A call whose arguments fit keeps its plan; one of another signature (here a bad x) is checked afresh, and the
    good one still runs from its plan (the same result as the reference)."""
    args = make_inputs(2, None, 8, 16)
    check(*run_both(args, dt_softplus=True), INTERPRETER_TOL[F32])
    with pytest.raises(ValueError, match=r"x must be \(2, 8\)"):
        selective_state_update(**{**args, "x": np.zeros((2, 9), np.float32)})
    with pytest.raises(ValueError, match=r"x must be \(2, 8\)"):  # (a failed check keeps no plan)
        selective_state_update(**{**args, "x": np.zeros((2, 9), np.float32)})
    check(*run_both(args, dt_softplus=True), INTERPRETER_TOL[F32])


def test_groups_must_divide_heads():
    args = make_inputs(2, 4, 8, 16, ngroups=3)
    with pytest.raises(ValueError, match=r"nheads \(4\) must be a multiple of ngroups \(3"):
        selective_state_update(**args)


def test_launch_choice():
    """About 2048 elements of state per program, 8 per thread; no more rows than dim needs."""
    assert launch_choice(5120, 16) == (64, 16, 128)  # (8 states a thread)
    assert launch_choice(64, 128) == (16, 128, 128)  # (16 states a thread)
    assert launch_choice(20, 6) == (32, 8, 32)  # (rows of 8, as many as dim's power of two; a warp at least)
    assert launch_choice(3, 4096) == (1, 4096, 256)  # (one row)


def _benchmark_like(case: str, dtype: np.dtype) -> dict:
    """NumPy arguments of the forms benchmarks/sections/state_update.py passes (batch 2 of its shapes): Mamba-1 with
    z, D and dt_bias; Mamba-2 with A, dt, dt_bias and D broadcast over each head (stride 0), one group, no z."""
    if case == "Mamba-1":
        return make_inputs(2, None, 5120, 16, dtype=dtype)
    args = make_inputs(2, 80, 64, 128, dtype=dtype, tie=True)
    args["D"] = np.broadcast_to(args["D"][:, :1], args["D"].shape)
    del args["z"]
    return args


@pytest.mark.parametrize("dtype", [F32, BF16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", ["Mamba-1", "Mamba-2"])
def test_compiles_for_sm90(case, dtype):
    """The program as the entry point launches it for the benchmark's shapes, compiled to an sm_90 cubin without a
    GPU: the state block moves in 16-byte words (vector loads and stores in the PTX), nothing in shared or local
    memory, the sum along each row is per-thread work and warp shuffles, and Mamba-2's tied A and dt give one decay
    per head (no 2-D tile of A)."""
    launch = prepare(**_benchmark_like(case, dtype), dt_softplus=True)
    compiled = kernel_for(launch.threads, False).compile(*launch.args, **launch.constexprs, arch="sm_90")
    plan = str(compiled.plan)
    assert compiled.block_threads == launch.threads and compiled.shared_bytes == 0
    assert compiled.local_memory_bytes() == 0
    assert "load 2-D, 16-byte words per row run" in plan and "store 2-D, 16-byte words per row run" in plan
    assert "ld.global.v4" in compiled.ptx and re.search(r"st\.global(\.wb)?\.v4", compiled.ptx)
    assert "reduce[add] axis=1: thread-sequential" in plan and "BlockReduce" not in compiled.shim_source
    assert ("Av" in plan) == (case == "Mamba-1")


# ----- GPU ---------------------------------------------------------------------------------------------------
def _torch_args(args: dict, torch) -> dict:
    """The arguments as CUDA tensors of the same dtypes and strides (broadcast ones broadcast again)."""
    out = {}
    for k, v in args.items():
        base = np.ascontiguousarray(v)
        t = torch.from_numpy(base.view(np.int16)).view(torch.bfloat16) if v.dtype == BF16 else torch.from_numpy(base)
        t = t.cuda()
        if any(s == 0 for s in v.strides):  # a stride-0 view: rebuild it on the device
            t = t.as_strided(v.shape, [s // v.itemsize for s in v.strides])
        out[k] = t
    return out


def _to_host(t) -> np.ndarray:
    """A tensor as a NumPy array of its dtype (bfloat16 as ml_dtypes')."""
    return t.float().cpu().numpy().astype(BF16) if str(t.dtype) == "torch.bfloat16" else t.cpu().numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("state_dtype", ["float32", "input"], ids=["f32-state", "input-dtype-state"])
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=lambda d: d.name)
@pytest.mark.parametrize("has_z", [False, True], ids=["no-z", "z"])
@pytest.mark.parametrize("tie", [False, True], ids=["per-row", "tied"])
@pytest.mark.parametrize(
    "shape",
    [(2, None, 2048, 16, 1), (2, None, 2064, 64, 1), (2, 32, 64, 16, 1), (2, 32, 64, 64, 2), (2, 64, 64, 128, 4)],
    ids=lambda s: "x".join(str(n) for n in s if n is not None),
)
def test_gpu_matches_reference(shape, tie, has_z, dtype, state_dtype):
    """Mamba's own test matrix (its shapes, z on and off, tied A and dt, groups), state float32 or of the inputs'
    dtype (as Mamba's tests have it), against the float64 reference at Mamba's tolerances."""
    torch = pytest.importorskip("torch")
    if tie and shape[1] is None:
        pytest.skip("tied A and dt are Mamba-2's")
    held = F32 if state_dtype == "float32" else dtype
    args = make_inputs(*shape, dtype=dtype, state_dtype=held, tie=tie)
    if not has_z:
        del args["z"]
    device = _torch_args(args, torch)
    out = selective_state_update(**device, dt_softplus=True)
    expected_state = args["state"].copy()
    expected_out = reference(**{**args, "state": expected_state}, dt_softplus=True)
    check(_to_host(device["state"]), _to_host(out), expected_state, expected_out, MAMBA_TOL[dtype])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("case", ["Mamba-1", "Mamba-2"])
def test_gpu_benchmark_arguments(case, dtype):
    """The arguments benchmarks/sections/state_update.py passes (Mamba-2's A, dt, dt_bias and D broadcast with
    stride 0, no z), at its shapes, against the NumPy reference."""
    pytest.importorskip("torch")
    from benchmarks.sections.state_update import STATE_UPDATE_SHAPES, STATE_UPDATE_TOLERANCE, state_update_inputs

    shape = next(tuple(s) for name, *s in STATE_UPDATE_SHAPES if name == case)
    device = state_update_inputs(case, shape, dtype)
    host = {k: None if v is None else _to_host(v) for k, v in device.items()}
    out = selective_state_update(**device, dt_softplus=True)
    expected_state = host["state"].copy()
    expected_out = reference(**{**host, "state": expected_state}, dt_softplus=True)
    check(_to_host(device["state"]), _to_host(out), expected_state, expected_out, STATE_UPDATE_TOLERANCE[dtype])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [F32, BF16], ids=lambda d: d.name)
@pytest.mark.parametrize("nheads", [None, 16], ids=["mamba1", "mamba2"])
def test_gpu_state_batch_indices_with_padding(nheads, dtype):
    torch = pytest.importorskip("torch")
    args = make_inputs(16, nheads, 1024, 16, dtype=dtype, state_dtype=dtype)
    rng = np.random.default_rng(5)
    args["state"] = rng.standard_normal((160, *args["state"].shape[1:])).astype(dtype)
    indices = rng.permutation(160)[:16].astype(np.int32)
    indices[3] = -1
    device = _torch_args({**args, "indices": indices}, torch)
    indices_t = device.pop("indices")
    out = selective_state_update(**device, dt_softplus=True, state_batch_indices=indices_t)
    expected_state = args["state"].copy()
    expected_out = reference(**{**args, "state": expected_state}, dt_softplus=True, state_batch_indices=indices)
    rtol, atol = (6e-2, 6e-2) if dtype == BF16 else MAMBA_TOL[dtype]  # Mamba's batch-indices test's
    check(_to_host(device["state"]), _to_host(out), expected_state, expected_out, (rtol, atol))


@pytest.mark.gpu
def test_gpu_non_contiguous_state():
    """The state as a permuted slice of a larger buffer: updated in place, nothing else written."""
    torch = pytest.importorskip("torch")
    args = make_inputs(4, 8, 64, 32)
    device = _torch_args(args, torch)
    buffer = torch.randn(8, 64, 4, 48, device="cuda")
    before = buffer.clone()
    view = buffer[:, :, :, 8:40].permute(2, 0, 1, 3)
    view.copy_(device["state"])
    out = selective_state_update(**{**device, "state": view}, dt_softplus=True)
    expected_state = args["state"].copy()
    expected_out = reference(**{**args, "state": expected_state}, dt_softplus=True)
    check(view.cpu().numpy(), out.cpu().numpy(), expected_state, expected_out, MAMBA_TOL[F32])
    assert torch.equal(buffer[..., :8], before[..., :8]) and torch.equal(buffer[..., 40:], before[..., 40:])
