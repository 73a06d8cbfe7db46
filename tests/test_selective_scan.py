"""Mamba's selective scan (coop_tiles.examples): the interpreter and the GPU against a float64 sequential
NumPy reference for every variant, and the compiled kernel's plan (no GPU)."""

import inspect

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles.examples import selective_scan_fwd, selective_scan_reference
from coop_tiles.examples.selective_scan import kernel_for, launch_choice, selective_scan

INTERPRETED = ct.jit(selective_scan.fn, interpret=True)
BF16 = np.dtype(ct.bfloat16)
#: (rtol, atol) of out against the float64 reference; last_state is float32 whatever the inputs
INTERPRETER_TOL = {np.dtype(np.float32): (1e-4, 1e-4), np.dtype(np.float16): (5e-3, 5e-3), BF16: (2e-2, 2e-2)}
MAMBA_TOL = {np.dtype(np.float32): (6e-4, 2e-3), np.dtype(np.float16): (3e-3, 5e-3), BF16: (3e-2, 5e-2)}


def make_inputs(batch, dim, L, dstate, dtype=np.float32, B_kind="variable", C_kind="variable", groups=1, seed=0):
    """Inputs drawn as Mamba's own tests draw them; B and C fixed (dim, dstate) float32, variable (batch, dstate,
    L) or grouped (batch, groups, dstate, L) in the input dtype."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)

    def weights(kind):
        if kind == "fixed":
            return rng.standard_normal((dim, dstate)).astype(np.float32)
        shape = (batch, dstate, L) if kind == "variable" else (batch, groups, dstate, L)
        return rng.standard_normal(shape).astype(dtype)

    return {
        "u": rng.standard_normal((batch, dim, L)).astype(dtype),
        "delta": (0.5 * rng.random((batch, dim, L))).astype(dtype),
        "A": (-0.5 * rng.random((dim, dstate))).astype(np.float32),
        "B": weights(B_kind),
        "C": weights(C_kind),
        "D": rng.standard_normal(dim).astype(np.float32),
        "z": rng.standard_normal((batch, dim, L)).astype(dtype),
        "delta_bias": (0.5 * rng.random(dim)).astype(np.float32),
    }


def check(inputs, out, last_state, tol, **options):
    expected_out, expected_last = selective_scan_reference(**inputs, **options)
    assert out.dtype == inputs["u"].dtype and out.shape == inputs["u"].shape
    assert last_state.dtype == np.float32 and last_state.shape == expected_last.shape
    rtol, atol = tol
    np.testing.assert_allclose(out.astype(np.float64), expected_out, rtol=rtol, atol=atol)
    np.testing.assert_allclose(last_state, expected_last, rtol=1e-4, atol=1e-4)


VARIANTS = {  # name: (make_inputs keywords, which optional inputs, softplus)
    "fixed B and C, nothing optional": ({"B_kind": "fixed", "C_kind": "fixed"}, (), False),
    "variable B and C, everything": ({}, ("D", "z", "delta_bias"), True),
    "grouped B and C": ({"B_kind": "grouped", "C_kind": "grouped", "groups": 2}, ("D", "z", "delta_bias"), True),
    "variable B, fixed C": ({"C_kind": "fixed"}, ("D",), True),
    "fixed B, grouped C": ({"B_kind": "fixed", "C_kind": "grouped", "groups": 2}, ("z",), False),
    "delta_bias without softplus": ({}, ("delta_bias",), False),
}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("L", [37, 300], ids=["L=37", "L=300 in chunks of 128"])
def test_interpreter_matches_reference(variant, L):
    kwargs, optional, softplus = VARIANTS[variant]
    inputs = make_inputs(2, 4, L, 8, **kwargs)
    given = {k: v for k, v in inputs.items() if k in ("u", "delta", "A", "B", "C") or k in optional}
    if L == 37:  # the entry point: one chunk of 64
        out, last = selective_scan_fwd(**given, delta_softplus=softplus, return_last_state=True)
    else:  # the program itself, three chunks of 128 (the last one partial)
        out, last = launch(given, softplus, chunk=128)
    check(given, out, last, INTERPRETER_TOL[np.dtype(np.float32)], delta_softplus=softplus)


def launch(inputs, softplus, chunk):
    """The interpreted program with an explicit chunk, as selective_scan_fwd launches it."""
    u, A = inputs["u"], inputs["A"]
    B, C = (X[:, None] if X.ndim == 3 else X for X in (inputs["B"], inputs["C"]))
    out = np.empty_like(u)
    states = np.empty((u.shape[0], u.shape[1], -(-u.shape[2] // chunk), A.shape[1]), np.float32)
    D, bias, z = (inputs.get(k) for k in ("D", "delta_bias", "z"))
    INTERPRETED[(u.shape[1], u.shape[0])](
        u, inputs["delta"], A, B, C, A if D is None else D, A if bias is None else bias, u if z is None else z,
        out, states, HAS_D=D is not None, HAS_DELTA_BIAS=bias is not None, HAS_Z=z is not None, SOFTPLUS=softplus,
        CHUNK=chunk,
    )  # fmt: skip
    return out, states[:, :, -1]


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_interpreter_16_bit_inputs(dtype):
    inputs = make_inputs(2, 4, 300, 8, dtype, groups=2, B_kind="grouped", C_kind="variable")
    out, last = launch(inputs, True, chunk=128)
    check(inputs, out, last, INTERPRETER_TOL[np.dtype(dtype)], delta_softplus=True)


def strided(inputs):
    """The inputs as strided views, as Mamba's callers pass them: u, delta and z transposed from (batch, L, dim)
    (unit stride along dim, not L), B and C every other element of wider arrays, A transposed."""
    views = dict(inputs)
    for k in ("u", "delta", "z"):
        views[k] = np.ascontiguousarray(inputs[k].transpose(0, 2, 1)).transpose(0, 2, 1)
    for k in ("B", "C"):
        wide = np.zeros((*inputs[k].shape[:-1], 2 * inputs[k].shape[-1]), inputs[k].dtype)
        wide[..., ::2] = inputs[k]
        views[k] = wide[..., ::2]
    views["A"] = np.ascontiguousarray(inputs["A"].T).T
    assert all(np.array_equal(views[k], inputs[k]) for k in inputs) and not views["u"].flags.c_contiguous
    return views


def test_interpreter_strided_inputs():
    inputs = strided(make_inputs(2, 4, 300, 8, groups=2, B_kind="grouped", C_kind="grouped"))
    out, last = launch(inputs, True, chunk=128)
    check(inputs, out, last, INTERPRETER_TOL[np.dtype(np.float32)], delta_softplus=True)


def test_entry_point_rejects_groups_that_do_not_divide_dim():
    inputs = make_inputs(1, 4, 16, 2, B_kind="grouped", groups=3)
    with pytest.raises(ValueError, match=r"dim \(4\) must be a multiple of the number of groups \(3\)"):
        selective_scan_fwd(inputs["u"], inputs["delta"], inputs["A"], inputs["B"], inputs["C"])


def state_loop_lines() -> range:
    """The source lines of the program's loop over states."""
    lines, first = inspect.getsourcelines(selective_scan.fn)
    start = next(i for i, text in enumerate(lines) if "for n in range(N):" in text)
    end = next(i for i, text in enumerate(lines) if "if HAS_Z:" in text)
    return range(first + start, first + end)


@pytest.mark.parametrize(
    "dtype, seqlen, chunk, registers, spill",
    [(np.float32, 8192, 2048, 80, 96), (BF16, 2048, 2048, 80, 96), (BF16, 8192, 2048, 64, 160)],
    ids=["float32", "bfloat16", "bfloat16-long"],
)
def test_compiled_kernel_keeps_the_state_loop_to_the_scans_own_barriers(dtype, seqlen, chunk, registers, spill):
    """The full variant compiles to a cubin without a GPU, at the chunk and register cap `launch_choice` picks,
    whose only local memory is a few spilled registers. In its state loop, B and C rows move
    in 16-byte words (16-bit rows converted to float32 as they arrive) and there is no barrier but the scan's own:
    the carry is read and written by thread 0 alone, whose total it is."""
    assert launch_choice(seqlen, np.dtype(dtype).itemsize) == (chunk, registers)
    inputs = make_inputs(1, 1, 16, 2, dtype)
    B, C = inputs["B"][:, None], inputs["C"][:, None]
    args = [inputs[k] for k in ("u", "delta", "A")] + [B, C] + [inputs[k] for k in ("D", "delta_bias", "z", "u")]
    flags = dict(HAS_D=True, HAS_DELTA_BIAS=True, HAS_Z=True, SOFTPLUS=True, CHUNK=chunk)
    kernel = kernel_for(chunk, False, registers)
    k = kernel.compile(*args, np.zeros((1, 1, 1, 2), np.float32), arch="sm_90", **flags)
    assert k.block_threads == chunk // 16 and k.registers() <= registers and k.local_memory_bytes() <= spill
    plan = str(k.plan)
    assert "scan[combine0_affine], carried" in plan
    in_loop = [c for c in k.plan.collectives.values() if c.line in state_loop_lines()]
    assert [c.algorithm for c in in_loop] == ["DIRECT_VECTORIZED", "BLOCK_SCAN_WARP_SCANS", "DIRECT_VECTORIZED"], plan
    assert not {b.line for b in k.plan.carve.barriers.values()} & set(state_loop_lines()), plan
    if dtype == BF16:  # u, delta, B, C and z
        assert k.shim_source.count("coop_bf16x2_to_f32x2(u[k])") == 5


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("L", [100, 2500])
@pytest.mark.parametrize("variant", ["variable B and C, everything", "grouped B and C", "fixed B, grouped C"])
def test_gpu_matches_reference(dtype, L, variant):
    torch = pytest.importorskip("torch")
    kwargs, optional, softplus = VARIANTS[variant]
    np_dtype = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    inputs = make_inputs(2, 8, L, 16, np_dtype, **kwargs)
    given = {k: v for k, v in inputs.items() if k in ("u", "delta", "A", "B", "C") or k in optional}

    def device(a):
        if a.dtype == BF16:
            return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
        return torch.from_numpy(a).cuda()

    out, last = selective_scan_fwd(**{k: device(v) for k, v in given.items()}, delta_softplus=softplus,
                                   return_last_state=True)  # fmt: skip
    assert out.dtype == getattr(torch, dtype) and out.is_cuda
    host = out.float().cpu().numpy().astype(np_dtype)
    check(given, host, last.cpu().numpy(), MAMBA_TOL[np_dtype], delta_softplus=softplus)


@pytest.mark.gpu
def test_gpu_strided_cupy_inputs():
    cp = pytest.importorskip("cupy")
    inputs = make_inputs(2, 8, 2100, 16, groups=2, B_kind="grouped", C_kind="grouped")
    views = strided(inputs)
    device = {}
    for k, v in views.items():  # the same strides on the device
        base = v.base if v.base is not None else v
        device[k] = cp.lib.stride_tricks.as_strided(cp.asarray(base), v.shape, v.strides)
    out, last = selective_scan_fwd(**device, delta_softplus=True, return_last_state=True)
    assert isinstance(out, cp.ndarray)
    check(views, cp.asnumpy(out), cp.asnumpy(last), MAMBA_TOL[np.dtype(np.float32)], delta_softplus=True)
