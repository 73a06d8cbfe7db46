"""The NumPy reference of Mamba's selective_state_update (tests/ssm_references.py) on numbers checked by hand: with one
state per row (dstate 1) the update is scalar arithmetic written out below."""

import math

import ml_dtypes
import numpy as np
import pytest
from ssm_references import selective_state_update


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
