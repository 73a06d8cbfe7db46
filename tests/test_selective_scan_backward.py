"""Mamba's selective scan backward (coop_tiles.examples.selective_scan_backward): the interpreter against the float64
gradients of tests/ssm_references.py for every variant, several lengths (one chunk, several, partial ones), 16-bit
inputs and the deterministic reductions, with 1, 2 and 4 channels per program; the compiled kernels (no GPU)."""

import numpy as np
import pytest
from ssm_references import selective_scan_backward
from test_selective_scan import BF16, VARIANTS, make_inputs

from coop_tiles.examples.selective_scan import forward
from coop_tiles.examples.selective_scan_backward import LAUNCHES, channels_for, kernel_for, selective_scan_bwd

#: (rtol, atol as a fraction of the gradient's largest magnitude) against the float64 reference
TOL = {np.dtype(np.float32): (1e-4, 1e-5), np.dtype(np.float16): (1e-2, 5e-3), BF16: (5e-2, 2e-2)}


def gradients(kwargs, optional, softplus, L, dtype=np.float32, deterministic=False, seed=0, channels=1):
    """(the program's gradients, the reference's) for inputs drawn as tests/test_selective_scan.py draws them (4
    channels; grouped B and C: 2 groups of 2)."""
    inputs = make_inputs(2, 4, L, 3, dtype, **kwargs, seed=seed)
    given = {k: v for k, v in inputs.items() if k in ("u", "delta", "A", "B", "C") or k in optional}
    dout = np.random.default_rng(seed + 1).standard_normal(inputs["u"].shape).astype(dtype)
    _, states = forward(**{k: given.get(k) for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")},
                        delta_softplus=softplus)  # fmt: skip
    got = selective_scan_bwd(dout, **given, states=states, delta_softplus=softplus, deterministic=deterministic,
                             channels=channels)  # fmt: skip
    return got, given, selective_scan_backward(dout, **given, delta_softplus=softplus)


def check(got, given, expected):
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        assert got[name].shape == given[name].shape and got[name].dtype == given[name].dtype, name
        rtol, atol = TOL[np.dtype(given["u"].dtype)]
        scale = np.abs(value).max()
        np.testing.assert_allclose(got[name].astype(np.float64), value, rtol=rtol, atol=atol * scale, err_msg=name)


@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("L", [1, 7, 300, 2048 + 33])
def test_interpreter_matches_reference(variant, L, channels):
    kwargs, optional, softplus = VARIANTS[variant]
    check(*gradients(kwargs, optional, softplus, L, channels=channels))


@pytest.mark.parametrize(
    "variant", ["variable B and C, everything", "variable B, fixed C", "fixed B and C, nothing optional"]
)
def test_four_channels_per_program(variant):
    kwargs, optional, softplus = VARIANTS[variant]
    check(*gradients(kwargs, optional, softplus, 2048 + 33, channels=4))


@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("variant", ["variable B and C, everything", "grouped B and C", "fixed B, grouped C"])
def test_deterministic_reductions_match_reference(variant, channels):
    kwargs, optional, softplus = VARIANTS[variant]
    check(*gradients(kwargs, optional, softplus, 2048 + 33, deterministic=True, channels=channels))


def test_channels_per_program_fall_back_to_one_unless_they_divide_every_group():
    variable, fixed = np.zeros((2, 1, 3, 8)), np.zeros((4, 3))
    grouped = np.zeros((2, 2, 3, 8))
    assert channels_for(4, 8, variable, grouped) == 4 and channels_for(2, 4, fixed, grouped) == 2
    assert channels_for(4, 4, variable, grouped) == 1 and channels_for(4, 6, fixed, fixed) == 1
    assert channels_for(2, 6, fixed, fixed) == 2 and channels_for(2, 6, grouped, fixed) == 1
    with pytest.raises(ValueError, match="channels per program must be one of"):
        channels_for(3, 6, fixed, fixed)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_16_bit_inputs(dtype):
    kwargs, optional, softplus = VARIANTS["grouped B and C"]
    check(*gradients(kwargs, optional, softplus, 2048 + 33, dtype=dtype))


def test_complex_weights_are_not_supported():
    inputs = make_inputs(1, 2, 8, 2)
    A = inputs["A"].astype(np.complex64)
    with pytest.raises(NotImplementedError, match="real weights only"):
        forward(inputs["u"], inputs["delta"], A, inputs["B"], inputs["C"], None, None, None, False)
    with pytest.raises(NotImplementedError, match="real weights only"):
        selective_scan_bwd(inputs["u"], inputs["u"], inputs["delta"], A, inputs["B"], inputs["C"], None)


def compile_full(dtype, deterministic, channels=1):
    """The full variant (variable B and C, D, z, delta_bias, softplus) at Mamba's chunk of 2048 and the default
    launch for `channels`, compiled to an sm_90 cubin."""
    i = make_inputs(1, 1, 16, 2, dtype)
    f32 = lambda *shape: np.zeros(shape, np.float32)  # noqa: E731
    weights = f32(1, 1, 2, 16)
    args = [i["u"], i["delta"], i["A"], i["B"][:, None], i["C"][:, None], i["D"], i["delta_bias"], i["z"], i["u"]]
    args += [f32(1, 1, 1, 2), f32(1, 1, 2), i["u"], i["u"], i["u"], weights, weights.copy()]
    args.append(f32(1, 8) if deterministic else f32(8))
    flags = dict(HAS_D=True, HAS_DELTA_BIAS=True, HAS_Z=True, SOFTPLUS=True, CHUNK=2048, DSTATE=2)
    kernel = kernel_for(2048, False, LAUNCHES[channels])
    return kernel.compile(*args, **flags, DETERMINISTIC=deterministic, CHANNELS=channels, arch="sm_90")


@pytest.mark.parametrize(
    "dtype, deterministic", [(BF16, False), (np.float32, True)], ids=["bfloat16", "float32-deterministic"]
)
def test_compiled_kernel(dtype, deterministic):
    """At the default launch (8 items over 256 threads, 128 registers) every tile is in registers (shared memory for
    the collectives only) with a few spilled values at most (bfloat16: 136 bytes of local memory; the groups of B and
    C, divided out once per program, keep more values alive across the loops, and whole rows' atomics test nothing
    per item);
    one reverse scan and one forward scan per state; the atomics of variable B's and C's gradients warp-exchanged to
    consecutive elements per lane."""
    k = compile_full(dtype, deterministic)
    assert k.block_threads == 256 and k.registers() <= 128 and k.local_memory_bytes() <= 256
    assert not [t.name for t in k.plan.tiles.values() if t.storage != "registers"]
    plan = str(k.plan)
    assert plan.count("scan[combine0_affine]") == 1 and plan.count("scan[combine0_affine, reverse]") == 1, plan
    assert ("atomic_add" in plan) != deterministic
    assert plan.count("WARP_EXCHANGE_STRIPED") == (0 if deterministic else 2), plan


def test_compiled_kernel_two_channels_per_program():
    """Two channels per program (bfloat16, at `LAUNCHES[2]`: 4 items over 512 threads, 128 registers): every tile in
    registers, a few values spilled (184 bytes of local memory, about as many as with one channel); each channel's two
    scans per state, and one atomic add per chunk row of variable B's and C's gradients for both channels."""
    k = compile_full(BF16, False, channels=2)
    assert k.block_threads == 512 and k.registers() <= 128 and k.local_memory_bytes() <= 256
    assert not [t.name for t in k.plan.tiles.values() if t.storage != "registers"]
    plan = str(k.plan)
    assert plan.count("scan[combine0_affine]") == 2 and plan.count("scan[combine0_affine, reverse]") == 2, plan
    assert plan.count("WARP_EXCHANGE_STRIPED") == 2, plan
