"""Ports of Mamba-2's chunk cumsum (forward, backward) and flash-linear-attention's fused recurrent simple GLA
(forward, reverse) as tile programs (`ports`): in the interpreter and on the GPU against float64 references
written from the equations, and compiled for sm_80 and sm_90."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import ports
import pytest
from carve_checker import check, format_report

import coop_tiles as ct

Shapes = dict[str, Any]

#: Mamba-2 chunk cumsum configurations: ragged sequences (seqlen not a multiple of chunk_size), chunk sizes
#: that are not powers of two (BLOCK_SIZE_CHUNK pads them), nheads not a multiple of the block of heads
KEYS = ("batch", "seqlen", "nheads", "chunk", "bh", "bias", "softplus", "limit")
CUMSUM = [
    dict(zip(KEYS, values))
    for values in (
        (2, 37, 6, 16, 4, True, True, (0.1, 2.0)),
        (1, 64, 3, 32, 4, False, False, (0.0, np.inf)),
        (2, 50, 5, 12, 2, True, True, (0.0, np.inf)),
        (1, 7, 8, 8, 8, False, True, (0.3, 1.5)),
        (1, 33, 1, 32, 1, True, False, (-1.0, 0.5)),
    )
]
#: simple GLA configurations: K and V past 64 (several blocks of K, whose shares the wrapper sums, and of V),
#: K and V that are not powers of two, one time step
GLA = [
    {"N": 2, "T": 9, "H": 3, "K": 40, "V": 70, "scale": None, "h0": True, "ht": True},
    {"N": 1, "T": 6, "H": 2, "K": 100, "V": 20, "scale": 0.1, "h0": False, "ht": True},
    {"N": 1, "T": 1, "H": 1, "K": 16, "V": 16, "scale": 1.0, "h0": True, "ht": False},
    {"N": 3, "T": 5, "H": 1, "K": 8, "V": 130, "scale": None, "h0": False, "ht": False},
]


def _id(cfg: Shapes) -> str:
    return "-".join(f"{k}{v}" for k, v in cfg.items() if not isinstance(v, tuple))


@dataclass
class Arrays:
    """Moves NumPy arrays to the array library under test and back (the interpreter: copies)."""

    to: Callable[[np.ndarray], Any] = np.copy
    back: Callable[[Any], np.ndarray] = np.asarray
    interpret: bool = True


def _dt(rng: np.random.Generator, batch: int, seqlen: int, nheads: int, dtype: Any) -> np.ndarray:
    """dt of Mamba's scale, with some elements past softplus's threshold of 20 and some below the clamp."""
    dt = rng.standard_normal((batch, seqlen, nheads)) * 2 - 1
    dt[..., 0, 0] = 25
    return dt.astype(dtype)


def run_cumsum_fwd(cfg: Shapes, arrays: Arrays, dtype: Any, rng: np.random.Generator):
    """Launches the forward port on random inputs of `cfg`; (got, expected) for (dA_cumsum, dt_out)."""
    b, L, H, cs = cfg["batch"], cfg["seqlen"], cfg["nheads"], cfg["chunk"]
    dt = _dt(rng, b, L, H, dtype)
    A = -rng.uniform(0.5, 4, H).astype(np.float32)
    bias = rng.standard_normal(H).astype(np.float32) if cfg["bias"] else None
    nchunks = -(-L // cs)
    outs = [arrays.to(np.full((b, H, nchunks, cs), np.nan, np.float32)) for _ in range(2)]
    dev = [arrays.to(x) if x is not None else None for x in (dt, A, bias)]
    launch = ports.chunk_cumsum_fwd(
        dev[0], dev[1], outs[1], outs[0], dt_bias=dev[2], dt_softplus=cfg["softplus"],
        dt_limit=cfg["limit"], block_size_h=cfg["bh"],
    )  # fmt: skip
    launch(interpret=arrays.interpret)
    expected = ports.ref_chunk_cumsum_fwd(dt, A, cs, bias, cfg["softplus"], cfg["limit"])
    return [arrays.back(o) for o in outs], expected


def run_cumsum_bwd(cfg: Shapes, arrays: Arrays, dtype: Any, rng: np.random.Generator, deterministic: bool):
    """Launches the backward port; (got, expected) for (ddt, dA, ddt_bias), workspaces summed here."""
    b, L, H, cs = cfg["batch"], cfg["seqlen"], cfg["nheads"], cfg["chunk"]
    nchunks = -(-L // cs)
    dt = _dt(rng, b, L, H, dtype)
    A = -rng.uniform(0.5, 4, H).astype(np.float32)
    bias = rng.standard_normal(H).astype(np.float32) if cfg["bias"] else None
    ddA, ddt_out = (rng.standard_normal((b, H, nchunks, cs)).astype(dtype) for _ in range(2))
    reduced = (b, nchunks, H) if deterministic else (H,)
    ddt = arrays.to(np.full(dt.shape, np.nan, dtype))
    dA, ddt_bias = (arrays.to(np.zeros(reduced, np.float32)) for _ in range(2))
    dev = [arrays.to(x) if x is not None else None for x in (ddA, ddt_out, dt, A, bias)]
    launch = ports.chunk_cumsum_bwd(
        *dev[:4], ddt, dA, ddt_bias if cfg["bias"] else None, dt_bias=dev[4], dt_softplus=cfg["softplus"],
        dt_limit=cfg["limit"], deterministic=deterministic, block_size_h=cfg["bh"],
    )  # fmt: skip
    launch(interpret=arrays.interpret)
    got = [arrays.back(x).astype(np.float64) for x in (ddt, dA, ddt_bias)]
    if deterministic:
        got[1:] = [x.sum(axis=(0, 1)) for x in got[1:]]
    expected = ports.ref_chunk_cumsum_bwd(ddA, ddt_out, dt, A, bias, cfg["softplus"], cfg["limit"])
    if not cfg["bias"]:
        got, expected = got[:2], expected[:2]
    return got, expected


def run_gla(cfg: Shapes, arrays: Arrays, dtype: Any, rng: np.random.Generator, reverse: bool, normalizer=1.0):
    """Launches the simple GLA port (gates logsigmoid(x) / normalizer, as fla's tests draw them); (got,
    expected) for the output and, when asked, the final state."""
    N, T, H, K, V = (cfg[k] for k in "NTHKV")
    q, k = (rng.standard_normal((N, T, H, K)).astype(dtype) for _ in range(2))
    v = rng.standard_normal((N, T, H, V)).astype(dtype)
    g = (-np.logaddexp(0, -rng.standard_normal((N, T, H))) / normalizer).astype(dtype)
    h0 = rng.standard_normal((N, H, K, V)).astype(np.float32) if cfg["h0"] else None
    nk = -(-K // min(ports.next_power_of_2(K), 64))
    o_parts = arrays.to(np.full((nk, N, T, H, V), np.nan, np.float32))
    ht = arrays.to(np.full((N, H, K, V), np.nan, np.float32)) if cfg["ht"] else None
    dev = [arrays.to(x) for x in (q, k, v, g)]
    launch = ports.fused_recurrent_simple_gla(
        *dev, o_parts, scale=cfg["scale"], initial_state=None if h0 is None else arrays.to(h0), final_state=ht,
        reverse=reverse,
    )  # fmt: skip
    launch(interpret=arrays.interpret)
    o, S = ports.ref_simple_gla(q, k, v, g, cfg["scale"], h0, reverse)
    got = [arrays.back(o_parts).sum(axis=0)] + ([arrays.back(ht)] if cfg["ht"] else [])
    return got, [o] + ([S] if cfg["ht"] else [])


def _close(got: list[np.ndarray], expected: list[np.ndarray], rtol: float, atol: float) -> None:
    for i, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"output {i}")


def _err_ratio(got: list[np.ndarray], expected: list[np.ndarray], ratio: float, err_atol: float = 1e-6) -> None:
    """fla's `assert_close`: passes when the largest difference is at most `err_atol`, else the RMS of the
    differences over the RMS of the reference must be under `ratio`."""
    for i, (g, e) in enumerate(zip(got, expected)):
        diff = g.astype(np.float64) - e
        if np.abs(diff).max() <= err_atol:
            continue
        err = np.sqrt(np.mean(diff**2)) / (np.sqrt(np.mean(e**2)) + 1e-8)
        assert err < ratio, f"output {i}: error ratio {err:.6f} >= {ratio}"


# ----- the interpreter --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ct.bfloat16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("cfg", CUMSUM, ids=_id)
def test_chunk_cumsum_fwd_in_the_interpreter(cfg, dtype):
    got, expected = run_cumsum_fwd(cfg, Arrays(), dtype, np.random.default_rng(0))
    _close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
@pytest.mark.parametrize("cfg", CUMSUM, ids=_id)
def test_chunk_cumsum_bwd_in_the_interpreter(cfg, deterministic):
    got, expected = run_cumsum_bwd(cfg, Arrays(), np.float32, np.random.default_rng(1), deterministic)
    _close(got, expected, rtol=1e-5, atol=1e-5)


def run_suffix_sum(cfg: Shapes, arrays: Arrays, rng: np.random.Generator):
    """Launches the suffix-sum step; (got, expected) for ddA."""
    b, L, H, cs = cfg["batch"], cfg["seqlen"], cfg["nheads"], cfg["chunk"]
    ddA_cumsum, ddA = (rng.standard_normal((b, H, -(-L // cs), cs)).astype(np.float32) for _ in range(2))
    out = arrays.to(ddA)
    ports.chunk_suffix_sum(arrays.to(ddA_cumsum), out, cfg["bh"])(interpret=arrays.interpret)
    return [arrays.back(out)], [ddA + np.flip(np.cumsum(np.flip(ddA_cumsum.astype(np.float64), -1), -1), -1)]


@pytest.mark.parametrize("cfg", CUMSUM, ids=_id)
def test_chunk_suffix_sum_in_the_interpreter(cfg):
    got, expected = run_suffix_sum(cfg, Arrays(), np.random.default_rng(4))
    _close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("cfg", GLA, ids=_id)
def test_fused_recurrent_simple_gla_in_the_interpreter(cfg, reverse, dtype):
    got, expected = run_gla(cfg, Arrays(), dtype, np.random.default_rng(2), reverse)
    _close(got, expected, rtol=1e-5, atol=1e-5)


def test_reverse_is_the_forward_of_the_time_reversed_sequence():
    """fla's meaning of reverse=True: the state runs from t = T-1 down to 0, so the reverse output is the
    forward output of the flipped sequence, flipped back."""
    rng = np.random.default_rng(3)
    N, T, H, K, V = 1, 7, 2, 8, 16
    q, k = (rng.standard_normal((N, T, H, K)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((N, T, H, V)).astype(np.float32)
    g = -rng.uniform(0, 1, (N, T, H)).astype(np.float32)
    outs = []
    for reverse, flip in ((True, False), (False, True)):
        o = np.zeros((1, N, T, H, V), np.float32)
        args = [np.ascontiguousarray(x[:, ::-1]) if flip else x for x in (q, k, v, g)]
        ports.fused_recurrent_simple_gla(*args, o, reverse=reverse)(interpret=True)
        outs.append(o[0, :, ::-1] if flip else o[0])
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-6)


# ----- compiled for sm_80 and sm_90 (no GPU needed) ------------------------------------------------------
def _launches() -> list[tuple[str, ports.Launch]]:
    """One launch of each kernel and each of its constexpr branches (NumPy arrays: only their types count)."""
    f32 = np.float32
    dt, A = np.zeros((2, 37, 6), f32), np.zeros(6, f32)
    chunked = np.zeros((2, 6, 3, 16), f32)
    out = []
    for bias, softplus in ((A, True), (None, False)):
        tag = f"bias{bias is not None}-softplus{softplus}"
        out.append((f"cumsum_fwd-{tag}", ports.chunk_cumsum_fwd(dt, A, chunked, chunked, bias, softplus, (0.1, 2))))
        for det in (False, True):
            red = np.zeros((2, 3, 6) if det else 6, f32)
            launch = ports.chunk_cumsum_bwd(
                chunked, chunked, dt, A, dt, red, red if bias is not None else None, bias, softplus, (0.1, 2), det
            )
            out.append((f"cumsum_bwd-{tag}-det{det}", launch))
    out.append(("suffix_sum", ports.chunk_suffix_sum(chunked, chunked)))
    q, v = np.zeros((2, 9, 3, 100), f32), np.zeros((2, 9, 3, 70), f32)
    parts, state = np.zeros((2, 2, 9, 3, 70), f32), np.zeros((2, 3, 100, 70), f32)
    for reverse in (False, True):
        gla = ports.fused_recurrent_simple_gla(q, q, v, q[..., 0], parts, None, state, state, reverse)
        out.append((f"simple_gla-reverse{reverse}", gla))
    out.append(("simple_gla-stateless", ports.fused_recurrent_simple_gla(q, q, v, q[..., 0], parts)))
    return out


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name,launch", _launches(), ids=[n for n, _ in _launches()])
def test_ports_compile_to_cubin(name, launch, arch):
    k = launch.compile(arch)
    assert k.cubin[:4] == b"\x7fELF"
    assert k.arch == arch
    problems = check(k.program, k.plan)  # the plan with NVRTC's TempStorage sizes: no race, no clobber
    assert not problems, format_report(problems, k.program, k.plan)


def test_a_reverse_row_scan_compiles_to_lane_shuffles_without_flips():
    """The suffix sum is one reverse row scan in registers: no flip, no shared memory."""
    c = np.zeros((2, 6, 3, 16), np.float32)
    compiled = ports.chunk_suffix_sum(c, c).compile("sm_90")
    plan = str(compiled.plan)
    assert "scan[add, reverse] axis=1" in plan and "flip" not in plan, plan
    assert compiled.shared_bytes == 0


# ----- the GPU, with the originals' tests' tolerances ------------------------------------------------------
def _device(library: str) -> Arrays:
    if library == "cupy":
        cp = pytest.importorskip("cupy")
        return Arrays(cp.asarray, cp.asnumpy, False)
    torch = pytest.importorskip("torch")

    def back(t: Any) -> np.ndarray:
        torch.cuda.synchronize()
        return t.float().cpu().numpy() if t.dtype == torch.bfloat16 else t.cpu().numpy()

    def to(a: np.ndarray) -> Any:
        if a.dtype == np.dtype(ct.bfloat16):
            return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
        return torch.from_numpy(a).cuda()

    return Arrays(to, back, False)


#: Mamba's shapes: (batch, seqlen, nheads, chunk_size, block of heads), seqlen ragged
CUMSUM_GPU = [
    {**CUMSUM[0], "batch": 2, "seqlen": 1000, "nheads": 24, "chunk": 256, "bh": 8},
    {**CUMSUM[2], "batch": 3, "seqlen": 777, "nheads": 80, "chunk": 64, "bh": 16},
    *CUMSUM,
]
#: fla's test_fused_recurrent shapes: (B, T, H, D, scale, gate_logit_normalizer)
GLA_GPU = [(1, 63, 1, 64, 1, 1), (2, 500, 4, 60, 1, 1), (2, 1024, 8, 128, 1, 0.1), (2, 1024, 8, 128, 0.1, 1)]
DTYPES_GPU = [("cupy", np.float32), ("cupy", np.float16), ("torch", ct.bfloat16)]


@pytest.mark.gpu
@pytest.mark.parametrize("library,dtype", DTYPES_GPU, ids=lambda v: v if isinstance(v, str) else np.dtype(v).name)
@pytest.mark.parametrize("cfg", CUMSUM_GPU, ids=_id)
def test_chunk_cumsum_fwd_on_the_gpu(cfg, library, dtype):
    got, expected = run_cumsum_fwd(cfg, _device(library), dtype, np.random.default_rng(0))
    _close(got, expected, rtol=1e-2, atol=3e-3)  # Mamba's tests/ops/triton/test_ssd.py


@pytest.mark.gpu
@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
@pytest.mark.parametrize("cfg", CUMSUM_GPU, ids=_id)
def test_chunk_cumsum_bwd_on_the_gpu(cfg, deterministic):
    got, expected = run_cumsum_bwd(cfg, _device("cupy"), np.float32, np.random.default_rng(1), deterministic)
    _close(got, expected, rtol=1e-2, atol=3e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", CUMSUM_GPU, ids=_id)
def test_chunk_suffix_sum_on_the_gpu(cfg):
    got, expected = run_suffix_sum(cfg, _device("cupy"), np.random.default_rng(4))
    _close(got, expected, rtol=1e-2, atol=3e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("shape", GLA_GPU, ids=lambda s: "B{}-T{}-H{}-D{}-scale{}-norm{}".format(*s))
def test_fused_recurrent_simple_gla_on_the_gpu(shape, reverse, dtype):
    B, T, H, D, scale, normalizer = shape
    cfg = {"N": B, "T": T, "H": H, "K": D, "V": D, "scale": scale, "h0": True, "ht": True}
    got, expected = run_gla(cfg, _device("cupy"), dtype, np.random.default_rng(42), reverse, normalizer)
    _err_ratio(got, expected, 0.005)  # fla's tests/ops/test_simple_gla.py


# ----- the lines table -------------------------------------------------------------------------------------
def _body_lines(fn: Callable) -> int:
    """Lines of a function's body, its docstring, blank lines and comments left out."""
    src = inspect.getsource(fn)
    node = ast.parse(src).body[0]
    body = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body
    lines = src.splitlines()[body[0].lineno - 1 : node.end_lineno]
    return sum(1 for line in lines if line.strip() and not line.strip().startswith("#"))


@pytest.mark.parametrize(
    "kernel,row,lines",
    [
        (ports.chunk_cumsum_fwd_kernel, "_chunk_cumsum_fwd_kernel", 13),
        (ports.chunk_cumsum_bwd_kernel, "_chunk_cumsum_bwd_kernel", 29),
        (ports.chunk_suffix_sum_kernel, "ddA suffix sum (PyTorch)", 4),
        (ports.fused_recurrent_gla_fwd_kernel, "fused_recurrent_fwd_kernel", 14),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_line_counts_in_the_table(kernel, row, lines):
    assert _body_lines(kernel.fn) == lines
    assert re.search(rf"^{re.escape(row)} +\d+(?: \(\d+\))? +{lines} ", ports.__doc__, re.M), row
