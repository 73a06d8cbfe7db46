"""Mamba-2's chunked scan forward (coop_tiles.examples.mamba_chunk_scan_combined): the interpreter against the
float64 step-by-step recurrence (tests/ssm_references.py) with every option, its argument checks, the four
programs compiled to sm_90 cubins, and on the GPU against the same reference at Mamba's tolerances (and, in a test
of its own, no further from it than Mamba's own Triton function when benchmarks/.mamba/triton holds it)."""

from __future__ import annotations

import numpy as np
import pytest
from ssm_references import ssd_combined as reference

import coop_tiles as ct
from coop_tiles.examples import mamba_chunk_scan_combined, ssd
from coop_tiles.runtime import mathdx

BF16 = np.dtype(ct.bfloat16)


def make_inputs(batch, seqlen, nheads, headdim, dstate, ngroups, dtype=np.float32, seed=0) -> dict:
    """Arguments drawn as Mamba's SSD tests draw them (A = -0.1 * uniform, dt = softplus(normal - 4), B / 5), with
    every option: D per row, z, dt_bias, initial_states."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return dict(
        x=rng.standard_normal((batch, seqlen, nheads, headdim)).astype(dtype),
        dt=(rng.standard_normal((batch, seqlen, nheads)) - 4).astype(f32),
        A=(-0.1 * rng.random(nheads) - 0.05).astype(f32),
        B=(rng.standard_normal((batch, seqlen, ngroups, dstate)) / 5).astype(dtype),
        C=rng.standard_normal((batch, seqlen, ngroups, dstate)).astype(dtype),
        D=rng.standard_normal((nheads, headdim)).astype(f32),
        z=rng.standard_normal((batch, seqlen, nheads, headdim)).astype(dtype),
        dt_bias=(rng.random(nheads) - 0.5).astype(f32),
        initial_states=rng.standard_normal((batch, nheads, headdim, dstate)).astype(f32),
    )


OPTIONS = {
    "all": dict(dt_softplus=True),
    "plain": dict(D=None, z=None, dt_bias=None, initial_states=None),
    "D-per-head": dict(z=None, dt_softplus=True),
    "no-softplus": dict(initial_states=None),
}


@pytest.mark.parametrize("options", OPTIONS, ids=str)
@pytest.mark.parametrize(
    ("batch", "seqlen", "nheads", "headdim", "dstate", "ngroups", "chunk"),
    [(2, 40, 4, 8, 16, 2, 16), (1, 70, 2, 4, 8, 1, 4), (1, 24, 2, 6, 5, 2, 24)],
    ids=["ragged-groups", "many-chunks", "one-chunk-odd-sizes"],
)
def test_interpreter_matches_reference(options, batch, seqlen, nheads, headdim, dstate, ngroups, chunk):
    args = make_inputs(batch, seqlen, nheads, headdim, dstate, ngroups) | OPTIONS[options]
    if options == "D-per-head":
        args["D"] = args["D"][:, 0].copy()
    if options == "no-softplus":
        args["dt"] = np.abs(args["dt"]) * 0.05 - 0.01  # some negative: clamped to 0 as Mamba's dt_limit does
    out, final = mamba_chunk_scan_combined(**args, chunk_size=chunk, return_final_states=True)
    ref_out, ref_final = reference(**args)
    assert out.shape == ref_out.shape and out.dtype == np.float32 and final.dtype == np.float32
    np.testing.assert_allclose(out, ref_out, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(final, ref_final, rtol=1e-4, atol=1e-4)
    # (the programs keep states (dstate, headdim): the final ones come back (headdim, dstate), contiguous, as Mamba's)
    assert final.shape == ref_final.shape and final.flags.c_contiguous
    assert isinstance(mamba_chunk_scan_combined(**args, chunk_size=chunk), np.ndarray)


@pytest.mark.parametrize("name", ssd.SCAN_BLOCKS)
def test_interpreter_scan_blocks(name, monkeypatch):
    """Each `chunk_scan` launch (blocks of rows and steps smaller than the chunk, cut to it where larger) against
    the reference, with packed sequences."""
    monkeypatch.setattr(ssd, "SCAN_BLOCK", name)
    args = make_inputs(1, 100, 2, 4, 8, 1) | dict(dt_softplus=True)
    seq_idx = packed(1, [[30, 50, 20]])
    for chunk in (64, 16):
        out = mamba_chunk_scan_combined(**args, chunk_size=chunk, seq_idx=seq_idx)
        np.testing.assert_allclose(out, reference(**args, seq_idx=seq_idx)[0], rtol=1e-4, atol=1e-4)


def packed(batch: int, lengths: list[list[int]], first: list[int] | None = None) -> np.ndarray:
    """seq_idx (batch, sum of a row's lengths) int32: row b holds sequences of lengths[b], numbered from first[b]."""
    rows = [np.repeat(np.arange(len(ls)) + (first or [0] * batch)[b], ls) for b, ls in enumerate(lengths)]
    return np.array(rows, np.int32)


SEQ_IDX = {  # (batch, seqlen, nheads, headdim, dstate, ngroups, chunk), lengths of the packed sequences, first ids
    # boundaries inside chunks and on their edges (16, 32); a one-step sequence; row 1 numbered from 1: no
    # initial state (Mamba's rule: it is sequence 0's)
    "several": ((2, 40, 4, 8, 16, 2, 16), [[5, 11, 16, 1, 7], [3, 29, 8]], [0, 1]),
    "one-sequence": ((2, 40, 4, 8, 16, 2, 16), [[40], [40]], [0, 3]),
    # dstate over several blocks of K = 8 steps (chunk_cb's loop over the states); short sequences in a chunk
    "small-chunks": ((1, 70, 2, 4, 20, 1, 8), [[20, 4, 2, 3, 1, 24, 16]], None),
}


@pytest.mark.parametrize("options", ["all", "plain"])
@pytest.mark.parametrize("case", SEQ_IDX)
def test_interpreter_seq_idx(case, options):
    """Packed sequences against each sequence run on its own through the recurrence (and with all ids 0 against
    no seq_idx)."""
    shape, lengths, first = SEQ_IDX[case]
    args = make_inputs(*shape[:-1]) | OPTIONS[options]
    seq_idx = packed(shape[0], lengths, first)
    out, final = mamba_chunk_scan_combined(**args, chunk_size=shape[-1], seq_idx=seq_idx, return_final_states=True)
    ref_out, ref_final = reference(**args, seq_idx=seq_idx)
    np.testing.assert_allclose(out, ref_out, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(final, ref_final, rtol=1e-4, atol=1e-4)
    if case == "one-sequence":  # row 0 is sequence 0 throughout: what it gives without seq_idx
        np.testing.assert_allclose(out[:1], reference(**args)[0][:1], rtol=1e-4, atol=1e-4)


def test_interpreter_bfloat16():
    """bfloat16 inputs: products in bfloat16 with float32 accumulation, the states between chunks in bfloat16."""
    args = make_inputs(1, 48, 2, 8, 16, 1, dtype=BF16) | dict(dt_softplus=True)
    out = mamba_chunk_scan_combined(**args, chunk_size=16)
    assert out.dtype == BF16
    ref_out, _ = reference(**args)
    np.testing.assert_allclose(out.astype(np.float32), ref_out, rtol=2e-2, atol=3e-2)


def test_argument_checks():
    args = make_inputs(1, 8, 4, 4, 8, 2)
    with pytest.raises(ValueError, match=r"D must be \(4, 4\) or \(4,\) for x of shape"):
        mamba_chunk_scan_combined(**args | dict(D=np.zeros(3, np.float32)), chunk_size=4)
    with pytest.raises(ValueError, match=r"nheads \(4\) must be a multiple of ngroups \(3"):
        mamba_chunk_scan_combined(**args | dict(B=np.zeros((1, 8, 3, 8)), C=np.zeros((1, 8, 3, 8))), chunk_size=4)
    with pytest.raises(ValueError, match=r"seq_idx must be \(1, 8\) for x of shape \(1, 8, 4, 4\), not \(1, 9\)"):
        mamba_chunk_scan_combined(**args, chunk_size=4, seq_idx=np.zeros((1, 9), np.int32))
    with pytest.raises(ValueError, match="seq_idx must be int32, not int64"):
        mamba_chunk_scan_combined(**args, chunk_size=4, seq_idx=np.zeros((1, 8), np.int64))


def test_seq_idx_device_check():
    torch = pytest.importorskip("torch")
    args = make_inputs(1, 8, 4, 4, 8, 2)
    with pytest.raises(ValueError, match=r"seq_idx must be on x's device \(numpy cpu\), not torch cpu"):
        mamba_chunk_scan_combined(**args, chunk_size=4, seq_idx=torch.zeros((1, 8), dtype=torch.int32))


needs_mathdx = pytest.mark.skipif(not mathdx.available(), reason="libmathdx (nvidia-libmathdx-cu13) not installed")


def compiled_programs(
    batch=1, seqlen=512, nheads=2, P=64, N=128, L=256, dtype=BF16, seq=False, scan=None, names=None
) -> dict:
    """The five programs (or those of `names`) compiled to sm_90 for `dtype` at the benchmark's headdim, dstate and
    chunk, with seq_idx (HAS_SEQ_IDX) or without (A in its place, as `mamba_chunk_scan_combined` passes it);
    chunk_scan at the ScanBlock `scan` (the default launch's when None)."""
    f32 = np.float32
    nch = -(-seqlen // L)
    x, B = np.zeros((batch, nheads, seqlen, P), dtype), np.zeros((batch, 1, seqlen, N), dtype)
    dt, A = np.zeros((batch, nheads, seqlen), f32), np.zeros(nheads, f32)
    cs, flat = np.zeros((batch, nheads, nch, L), f32), np.zeros((batch, nheads, P * N), f32)
    by_chunk = np.zeros((batch, nheads, nch, P * N), f32)
    sizes = dict(L=L, P=P, N=N, arch="sm_90")
    M, K = min(ssd.BLOCK_M, L), min(ssd.BLOCK_K, L)
    cb = np.zeros((batch, nch, 1, L, L), f32)
    seq_idx = np.zeros((batch, seqlen), np.int32)
    rows = np.broadcast_to(seq_idx[:, :, None], (batch, seqlen, max(P, K))) if seq else A
    cols = np.broadcast_to(seq_idx[:, None, :], (batch, M, seqlen)) if seq else A
    by_seq = dict(HAS_SEQ_IDX=seq)
    block = ssd.SCAN_BLOCKS[ssd.SEQ_SCAN_BLOCK if seq else ssd.SCAN_BLOCK] if scan is None else scan
    compiles = {
        "chunk_cumsum": lambda: ssd.chunk_cumsum.compile(
            dt, A, A, cs, cs, seqlen, HAS_DT_BIAS=True, SOFTPLUS=True, L=L, arch="sm_90"
        ),
        "chunk_state": lambda: ssd.chunk_state.compile(
            x, B, seq_idx if seq else A, cs, cs, np.zeros((batch, nch, nheads, N, P), f32).swapaxes(3, 4), seqlen,
            K=ssd.state_block(L, P, N, np.dtype(dtype).itemsize), **by_seq, **sizes,
        ),
        "state_passing": lambda: ssd.state_passing.compile(
            by_chunk, cs[..., 0], flat, seq_idx if seq else cs[..., 0], by_chunk.astype(dtype), flat,
            HAS_INITIAL=True, L=L if seq else 0, E=ssd.BLOCK_E, arch="sm_90", **by_seq,
        ),
        "chunk_cb": lambda: ssd.chunk_cb.compile(
            B, B, rows, cols, cb, seqlen, L=L, N=N, M=M, K=K, arch="sm_90", **by_seq
        ),
        "chunk_scan": lambda: ssd.scan_program(block, False).compile(
            x, x, np.broadcast_to(np.zeros((nheads, 1, P), f32), (nheads, block.M, P)), cb, B, cs, cs,
            np.broadcast_to(cs[..., None], (*cs.shape, P)), rows,
            np.zeros((batch, nch, nheads, N, P), dtype), x, seqlen,
            HAS_D=True, D_PER_ROW=True, HAS_Z=True, M=block.M, K=block.K, **by_seq, **sizes,
        ),
    }  # fmt: skip
    return {name: compile() for name, compile in compiles.items() if names is None or name in names}


@needs_mathdx
def test_programs_compile_to_cubins():
    programs = compiled_programs()
    for name, k in programs.items():
        assert len(k.cubin) > 0, name
    # (the default chunk_scan launch caps registers at 128, two blocks a multiprocessor: NVRTC 13.0, the lent
    # GPUs', fits it without local memory, 13.5 spills 64 bytes a thread)
    assert all(k.local_memory_bytes() == 0 for name, k in programs.items() if name != "chunk_scan")
    assert programs["chunk_scan"].registers() <= 128 and programs["chunk_scan"].local_memory_bytes() <= 64
    state, passing, scan = (str(programs[k].plan) for k in ("chunk_state", "state_passing", "chunk_scan"))
    registers = "BLAS execute (registers"  # the accumulator in registers: no exchange, one barrier a product
    # (stored transposed, (N, P), through a view: chunk_scan multiplies it as loaded, so all its products share one
    # arrangement)
    assert "dot 64x128x64 bf16*bf16->f32, a col, b row" in state and registers in state and "transpose" not in state
    # x and B loaded along their contiguous rows, x's transpose read in place by the dot; no scan (chunk_cumsum's)
    assert state.count("load 2-D, 16-byte words per row run") == 2 and "a = scaled.T read in place" in state
    assert "scan" not in state and "scan" in str(programs["chunk_cumsum"].plan)
    assert programs["state_passing"].shared_bytes == 0 and "exchange" not in passing  # each thread its elements
    assert scan.count(registers) == 2 and "transpose" not in scan and _broadcasts_in_registers(scan)
    assert scan.count("bf16*bf16->f32, a row, b row") == 2  # (every operand stored a run at a time)
    assert "dot 64x64x128 bf16*bf16->f32" in str(programs["chunk_cb"].plan)


@needs_mathdx
def test_seq_idx_programs_compile_to_cubins():
    """With HAS_SEQ_IDX: the same products (chunk_cb's K states at a time: chunk_scan's shape), no local memory,
    no exchange added. (chunk_cumsum takes no seq_idx: the program is the one compiled above, and not again.)"""
    programs = compiled_programs(seq=True, names=("chunk_state", "state_passing", "chunk_cb", "chunk_scan"))
    assert all(len(k.cubin) > 0 and k.local_memory_bytes() == 0 for k in programs.values())
    plans = {name: str(k.plan) for name, k in programs.items()}
    assert "dot 64x128x64 bf16*bf16->f32" in plans["chunk_state"] and "transpose" not in plans["chunk_state"]
    assert programs["state_passing"].shared_bytes == 0 and "exchange" not in plans["state_passing"]
    assert "dot 64x64x64 bf16*bf16->f32" in plans["chunk_cb"] and "exchange" not in plans["chunk_cb"]
    scan = plans["chunk_scan"]
    assert scan.count("BLAS execute (registers") == 2 and "transpose" not in scan and _broadcasts_in_registers(scan)


def _broadcasts_in_registers(plan: str) -> bool:
    """Whether every broadcast of a plan (chunk_scan's vectors of cs and dt') is a copy in registers."""
    broadcasts = [line for line in plan.splitlines() if " broadcast" in line]
    return bool(broadcasts) and all("registers" in line and "copy" in line for line in broadcasts)


@needs_mathdx
def test_capped_scan_block_compiles_without_local_memory():
    """A `chunk_scan` launch of SCAN_BLOCKS under a register cap (benchmarks/ssd_probe.py times them all): at its
    cap, with no local memory (the others are checked by the probe before it times them). Only chunk_scan: the other
    four programs do not depend on the launch and are those of `test_programs_compile_to_cubins`."""
    block = ssd.SCAN_BLOCKS["m32k32t128r168"]
    scan = compiled_programs(scan=block, names=("chunk_scan",))["chunk_scan"]
    assert scan.block_threads == block.threads and scan.registers() <= block.registers
    assert scan.local_memory_bytes() == 0


# ----- GPU ---------------------------------------------------------------------------------------------------
def _torch(args: dict, torch) -> dict:
    """The arguments as CUDA tensors of the same dtypes."""
    out = {}
    for k, v in args.items():
        if isinstance(v, np.ndarray):
            t = torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) if v.dtype == BF16 else torch.from_numpy(v)
            v = t.cuda()
        out[k] = v
    return out


def _mamba():
    """Mamba's own Triton `mamba_chunk_scan_combined`, or None when benchmarks/.mamba/triton does not hold it."""
    try:
        from benchmarks import _mamba_triton

        return _mamba_triton.load(_mamba_triton.SSD_MODULE).mamba_chunk_scan_combined
    except Exception:
        return None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
    ("batch", "seqlen", "nheads", "headdim", "dstate", "ngroups", "chunk"),
    [(2, 1000, 8, 64, 128, 2, 256), (1, 2048, 4, 64, 64, 1, 128), (2, 300, 4, 32, 16, 4, 64)],
    ids=["ragged-groups", "chunk128", "small"],
)
def test_gpu_matches_reference(dtype, batch, seqlen, nheads, headdim, dstate, ngroups, chunk):
    args = make_inputs(batch, seqlen, nheads, headdim, dstate, ngroups, dtype=dtype) | dict(dt_softplus=True)
    _check_on_gpu(args, chunk, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
    ("batch", "seqlen", "nheads", "headdim", "dstate", "ngroups", "chunk"),
    [(2, 1000, 8, 64, 128, 2, 256), (1, 300, 4, 32, 16, 4, 64)],
    ids=["ragged-groups", "small"],
)
def test_gpu_seq_idx_matches_reference(dtype, batch, seqlen, nheads, headdim, dstate, ngroups, chunk):
    """Packed sequences of random lengths (some ending on a chunk's edge, some of one step; row 1 numbered from
    1, so without the initial state) against each run through the recurrence on its own."""
    _check_on_gpu(_packed_inputs(batch, seqlen, nheads, headdim, dstate, ngroups, chunk, dtype), chunk, dtype)


def _packed_inputs(batch, seqlen, nheads, headdim, dstate, ngroups, chunk, dtype) -> dict:
    """Every option, with seq_idx: packed sequences of random lengths, some ending on a chunk's edge."""
    rng = np.random.default_rng(1)
    lengths = []
    for _ in range(batch):
        cuts = np.unique(np.r_[rng.integers(1, seqlen, 6), chunk, 2 * chunk, 2 * chunk + 1, seqlen - 1])
        lengths.append(np.diff(np.r_[0, cuts[cuts < seqlen], seqlen]).tolist())
    args = make_inputs(batch, seqlen, nheads, headdim, dstate, ngroups, dtype=dtype) | dict(dt_softplus=True)
    return args | dict(seq_idx=packed(batch, lengths, [0, 1][:batch]))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ssd.SCAN_BLOCKS)
def test_gpu_scan_blocks_match_reference(name, monkeypatch):
    """Each `chunk_scan` launch of SCAN_BLOCKS in the whole forward, bfloat16, groups and a ragged last chunk."""
    monkeypatch.setattr(ssd, "SCAN_BLOCK", name)
    args = make_inputs(2, 1000, 8, 64, 128, 2, dtype=BF16) | dict(dt_softplus=True)
    _check_on_gpu(args, 256, BF16)


def _tolerances(dtype) -> tuple[float, float]:
    """(rtol, atol): Mamba's test tolerances; bfloat16 outputs round once more."""
    return (1e-2, 3e-3) if dtype == np.float32 else (2e-2, 5e-2)


def _check_on_gpu(args: dict, chunk: int, dtype) -> tuple:
    """`mamba_chunk_scan_combined` on the GPU against the float64 reference at Mamba's tolerances; its output,
    final states and the reference's output as NumPy arrays, and the arguments as CUDA tensors."""
    torch = pytest.importorskip("torch")
    ref_out, ref_final = reference(**args)
    device = _torch(args, torch)
    out, final = mamba_chunk_scan_combined(**device, chunk_size=chunk, return_final_states=True)
    torch.cuda.synchronize()
    rtol, atol = _tolerances(dtype)
    got = out.float().cpu().numpy()
    scale = np.abs(ref_out).max()
    if dtype == BF16:
        # In bfloat16 the products' operands (C B^T with its decay, the passed states) are rounded, so an output's
        # error follows the size of the terms summed into it, not its own: measured on an H100, Mamba's own Triton
        # kernel is up to 0.23 off on outputs up to 105 (33 of 1,024,000 past (2e-2, 5e-2)), ours likewise. Its
        # bound: the same tolerance plus 4e-3 of the largest output, and a mean error under 1e-4 of it.
        assert np.abs(got - ref_out).mean() <= 1e-4 * scale
        atol += 4e-3 * scale
    np.testing.assert_allclose(got, ref_out, rtol=rtol, atol=atol)
    np.testing.assert_allclose(final.cpu().numpy(), ref_final, rtol=rtol, atol=atol)
    return got, final.cpu().numpy(), ref_out, device


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("seq", [False, True], ids=["whole", "seq_idx"])
def test_gpu_as_close_as_mamba(dtype, seq):
    """No further from the float64 reference than Mamba's own Triton function, whose final states ours match.
    Apart from the checks above: Mamba's kernels autotune (minutes of Triton compiles), and the sanitizer sweep
    of gpu-check.sh runs those checks, not this."""
    mamba = _mamba()
    if mamba is None:
        pytest.skip("benchmarks/.mamba/triton does not hold Mamba's Triton SSD module")
    shape, chunk = (2, 1000, 8, 64, 128, 2), 256
    args = _packed_inputs(*shape, chunk, dtype) if seq else make_inputs(*shape, dtype=dtype) | dict(dt_softplus=True)
    got, final, ref_out, device = _check_on_gpu(args, chunk, dtype)
    theirs, their_final = mamba(**device, chunk_size=chunk, return_final_states=True)
    assert np.abs(got - ref_out).max() <= 2 * np.abs(theirs.float().cpu().numpy() - ref_out).max() + 1e-3
    rtol, atol = _tolerances(dtype)
    np.testing.assert_allclose(final, their_final.float().cpu().numpy(), rtol=rtol, atol=atol)
