"""The NumPy references of tests/ssm_references.py: Mamba's selective_state_update on numbers checked by hand (with one
state per row, dstate 1, the update is scalar arithmetic written out below), and the selective scan's backward against
central finite differences of the forward reference."""

import math

import ml_dtypes
import numpy as np
import pytest
from ssm_references import selective_scan_backward, selective_state_update

from coop_tiles.examples import selective_scan_reference


def f32(*values):
    return np.array(values, np.float32)


def test_mamba1_one_scalar_state():
    """state 2, x 3, dt 0.5 + dt_bias 0.25, A -1, B 2, C 0.5, D 1, z 1 (no softplus)."""
    state = f32(2.0).reshape(1, 1, 1)  # (batch, dim, dstate)
    out = selective_state_update(
        state,
        f32(3.0).reshape(1, 1),
        f32(0.5).reshape(1, 1),
        f32(-1.0).reshape(1, 1),
        f32(2.0).reshape(1, 1),
        f32(0.5).reshape(1, 1),
        D=f32(1.0),
        z=f32(1.0).reshape(1, 1),
        dt_bias=f32(0.25),
    )
    new = 2 * math.exp(-0.75) + 0.75 * 2 * 3
    assert state[0, 0, 0] == pytest.approx(new, rel=1e-6)  # updated in place
    assert out.shape == (1, 1) and out.dtype == np.float32
    assert out[0, 0] == pytest.approx((0.5 * new + 1 * 3) * (1 / (1 + math.exp(-1))), rel=1e-6)


def test_softplus_of_dt():
    """dt 0 through softplus is ln 2; A -2 makes the decay exp(-2 ln 2) = 1/4; past 20, dt is kept as is."""
    state = f32(4.0, 4.0).reshape(2, 1, 1)
    x, dt = f32(1.0, 1.0).reshape(2, 1), f32(0.0, 30.0).reshape(2, 1)
    A, B, C = f32(-2.0).reshape(1, 1), f32(1.0, 1.0).reshape(2, 1), f32(1.0, 1.0).reshape(2, 1)
    out = selective_state_update(state, x, dt, A, B, C, dt_softplus=True)
    assert state[0, 0, 0] == pytest.approx(4 / 4 + math.log(2), rel=1e-6)
    assert state[1, 0, 0] == pytest.approx(4 * math.exp(-60) + 30, rel=1e-6)
    np.testing.assert_allclose(out[:, 0], [1 + math.log(2), 30], rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_mamba2_groups_and_state_batch_indices(dtype):
    """4 heads in 2 groups (heads 0, 1 read group 0; heads 2, 3 group 1), headdim 1, dstate 1; batch 0 updates state
    2, batch 1 is padding (index -1): its output is 0 and states 0 and 1 stay as they were. A = 0 (no decay), dt 1:
    new state = old + B[group] * x, out = new * C[group]."""
    state = (10 * np.arange(3)[:, None] + np.arange(4)[None, :]).astype(np.float32).reshape(3, 4, 1, 1)
    before = state.copy()
    x = np.ones((2, 4, 1), dtype)
    dt = np.ones((2, 4, 1), dtype)
    A = np.zeros((1, 1, 1), np.float32)
    A = np.broadcast_to(A, (4, 1, 1))  # stride 0 over heads, as Mamba-2's decode passes it
    B = np.array([[100, 200], [7, 7]], dtype).reshape(2, 2, 1)
    C = np.array([[1, 2], [7, 7]], dtype).reshape(2, 2, 1)
    out = selective_state_update(state, x, dt, A, B, C, state_batch_indices=np.array([2, -1]))
    np.testing.assert_array_equal(state[2, :, 0, 0], [120, 121, 222, 223])
    np.testing.assert_array_equal(state[:2], before[:2])
    assert out.dtype == dtype and out.shape == (2, 4, 1)
    np.testing.assert_array_equal(out[:, :, 0].astype(np.float32), [[120, 121, 444, 446], [0, 0, 0, 0]])


SCAN_CASES = {  # name: (B shape, C shape, which optional inputs, softplus); batch 2, dim 4, dstate 3, L 5
    "variable B and C, everything": ((2, 3, 5), (2, 3, 5), ("D", "z", "delta_bias"), True),
    "grouped B, fixed C": ((2, 2, 3, 5), (4, 3), ("D",), False),
    "fixed B, grouped C, softplus": ((4, 3), (2, 2, 3, 5), ("z", "delta_bias"), True),
    "fixed B and C, nothing optional": ((4, 3), (4, 3), (), False),
}


@pytest.mark.parametrize("case", SCAN_CASES)
def test_selective_scan_backward_matches_finite_differences(case):
    """Every element of every input moved by +-1e-6: the change of sum(dout * out), divided by 2e-6, is the gradient
    (to about 1e-9 in float64)."""
    B_shape, C_shape, optional, softplus = SCAN_CASES[case]
    rng = np.random.default_rng(1)
    inputs = {
        "u": rng.standard_normal((2, 4, 5)),
        "delta": rng.standard_normal((2, 4, 5)),  # negative too: softplus below and (without it) negative steps
        "A": -rng.random((4, 3)) - 0.2,
        "B": rng.standard_normal(B_shape),
        "C": rng.standard_normal(C_shape),
        "D": rng.standard_normal(4),
        "z": rng.standard_normal((2, 4, 5)),
        "delta_bias": rng.random(4),
    }
    inputs = {k: v for k, v in inputs.items() if k in ("u", "delta", "A", "B", "C") or k in optional}
    dout = rng.standard_normal((2, 4, 5))

    def loss() -> float:
        return float((dout * selective_scan_reference(**inputs, delta_softplus=softplus)[0]).sum())

    grads = selective_scan_backward(dout, **inputs, delta_softplus=softplus)
    assert sorted(grads) == sorted(inputs)
    for name, value in inputs.items():
        numeric = np.empty_like(value)
        for i in np.ndindex(value.shape):
            keep = value[i]
            value[i] = keep + 1e-6
            up = loss()
            value[i] = keep - 1e-6
            numeric[i] = (up - loss()) / 2e-6
            value[i] = keep
        assert grads[name].shape == value.shape, name
        np.testing.assert_allclose(grads[name], numeric, rtol=1e-6, atol=1e-7, err_msg=name)
