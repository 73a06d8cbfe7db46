"""Mamba-2's SSD chunked scan forward, `mamba_chunk_scan_combined`: `coop_tiles.examples.mamba_chunk_scan_combined`
against Mamba's own Triton function (benchmarks/_mamba_triton.py), and the state passing between chunks alone
against Mamba's `_state_passing_fwd` (issue 21)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.charts import declare, ms
from benchmarks.device import free_device_memory
from benchmarks.report import correct_cell, failed_row, ms_cell, speedup_cell, table_row
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms, guarded
from benchmarks.warm import one_triton_config, triton_autotuners, warm_in_workers

#: (batch, seqlen, nheads, headdim, dstate, ngroups, chunk_size), bfloat16
SSD_SHAPES = ((8, 4096, 80, 64, 128, 1, 256), (2, 16384, 32, 64, 128, 1, 256))
#: the largest error of out allowed against the float64 reference, over the reference's largest magnitude (bfloat16
#: products and states round each term by 2^-9 relative; a wrong term, decay or chunk boundary errs by O(1))
SSD_TOLERANCE = 2e-2
#: (rtol, atol) of the passed states (bfloat16) and final states, coop_tiles' against Mamba's
PASSING_TOLERANCE = (2e-2, 5e-2)
#: batch rows the float64 reference computes (its (chunk, chunk) decays for all rows at once would take
#: gigabytes; an element-wise check of every row would take 80 GiB at the first shape)
CHECKED_BATCH = 1
#: Mamba's Triton kernels (each a `triton.autotune`) that its forward launches
MAMBA_FORWARD_KERNELS = (
    "_chunk_cumsum_fwd_kernel",
    "_chunk_state_fwd_kernel",
    "_state_passing_fwd_kernel",
    "_bmm_chunk_fwd_kernel",
    "_chunk_scan_fwd_kernel",
)


def ssd_rows() -> list[dict]:
    """Every shape: the whole forward and the state passing alone, coop_tiles and Mamba's Triton."""
    mamba = guarded(_mamba_module)
    rows = []
    for shape in SSD_SHAPES:
        rows.append({"shape": shape, **guarded(_ssd_row, shape, mamba)})
        free_device_memory()
    return rows


def _mamba_module() -> dict:
    from benchmarks import _mamba_triton

    return {"module": _mamba_triton.load(_mamba_triton.SSD_MODULE)}


def ssd_inputs(shape: tuple) -> dict:
    """The arguments as `mamba2.Mamba2` passes them (its default RMSNorm gate: no z; D per head, dt_bias, softplus
    on), bfloat16 activations and float32 parameters, drawn as Mamba's tests draw them."""
    import torch

    batch, seqlen, nheads, headdim, dstate, ngroups, _ = shape
    g = torch.Generator(device="cuda").manual_seed(21)
    bf = torch.bfloat16

    def randn(*s: int) -> Any:
        return torch.randn(*s, device="cuda", generator=g)

    return {
        "x": randn(batch, seqlen, nheads, headdim).to(bf),
        "dt": randn(batch, seqlen, nheads).to(bf),
        "A": -torch.exp(torch.rand(nheads, device="cuda", generator=g) * 2.7),
        "B": randn(batch, seqlen, ngroups, dstate).to(bf),
        "C": randn(batch, seqlen, ngroups, dstate).to(bf),
        "D": randn(nheads),
        "dt_bias": torch.rand(nheads, device="cuda", generator=g) - 4.0,
    }


def ssd_reference(args: dict, chunk_size: int) -> Any:
    """out of the first CHECKED_BATCH batch rows in float64 by Mamba's chunked equations (`ssd_minimal_discrete`,
    its state passing a product of decays over whole chunks), for a seqlen that is a multiple of chunk_size, with
    D and dt_bias, softplus on; each product its own einsum of two operands (no 5-operand intermediates)."""
    import torch

    f64 = torch.float64
    x, dt, B, C = (args[k][:CHECKED_BATCH].to(f64) for k in ("x", "dt", "B", "C"))
    dt = torch.nn.functional.softplus(dt + args["dt_bias"].to(f64))
    batch, seqlen, nheads, headdim = x.shape
    reps = nheads // B.shape[2]
    B, C = B.repeat_interleave(reps, dim=2), C.repeat_interleave(reps, dim=2)
    n, L = seqlen // chunk_size, chunk_size
    xs, Bs, Cs = (t.reshape(batch, n, L, nheads, -1) for t in (x, B, C))
    dts = dt.reshape(batch, n, L, nheads).permute(0, 3, 1, 2)  # (b, h, c, l)
    cs = torch.cumsum(dts * args["A"].to(f64)[:, None, None], dim=-1)
    causal = torch.ones(L, L, device=x.device, dtype=torch.bool).tril()
    decay = torch.exp((cs[..., :, None] - cs[..., None, :]).masked_fill(~causal, float("-inf")))  # (b, h, c, l, s)
    weights = torch.einsum("bclhn,bcshn->bhcls", Cs, Bs) * decay * dts[..., None, :]
    y = torch.einsum("bhcls,bcshp->bclhp", weights, xs)
    own = torch.einsum(
        "bclhp,bclhn->bchpn", xs * (torch.exp(cs[..., -1:] - cs) * dts).permute(0, 2, 3, 1)[..., None], Bs
    )
    state = torch.zeros_like(own[:, 0])
    entering = []
    for c in range(n):  # the states entering each chunk
        entering.append(state)
        state = torch.exp(cs[:, :, c, -1])[..., None, None] * state + own[:, c]
    y = (
        y
        + torch.einsum("bclhn,bchpn->bclhp", Cs, torch.stack(entering, 1))
        * torch.exp(cs).permute(0, 2, 3, 1)[..., None]
    )
    return y.reshape(batch, seqlen, nheads, headdim) + x * args["D"].to(f64)[:, None]


def ssd_error(out: Any, expected: Any) -> float:
    """The largest error of out's first rows against `expected` (ssd_reference), over expected's magnitude."""
    return float((out[: expected.shape[0]].double() - expected).abs().max() / expected.abs().max())


def _ssd_row(shape: tuple, mamba: dict) -> dict:
    """One shape: each implementation's forward checked against the float64 reference, then timed; the state
    passing alone on the same per-chunk states (random), both checked against each other."""

    args = ssd_inputs(shape)
    chunk = shape[-1]
    expected = ssd_reference(args, chunk)

    def measure(forward: Callable[..., Any]) -> dict:
        run = lambda: forward(**args, chunk_size=chunk, dt_softplus=True)  # noqa: E731
        error = ssd_error(run(), expected)
        ms = cuda_time_ms(run)
        return {"best": None, "ms": ms, "times": {None: ms}, "correct": error <= SSD_TOLERANCE, "error_of_max": error}

    row = {"mamba": guarded(_mamba_forward, mamba, measure), "coop": guarded(_coop_forward, measure)}
    row.update(_passing_rows(shape, mamba))
    return row


def _mamba_forward(mamba: dict, measure: Callable) -> dict:
    if "error" in mamba:
        raise RuntimeError(mamba["error"])
    return measure(mamba["module"].mamba_chunk_scan_combined)


def _coop_forward(measure: Callable) -> dict:
    from coop_tiles.examples import mamba_chunk_scan_combined

    return measure(mamba_chunk_scan_combined)


def _passing_rows(shape: tuple, mamba: dict) -> dict:
    """The state passing alone: coop_tiles' `pass_states` and Mamba's `_state_passing_fwd` on per-chunk float32
    states of the shape's (batch, nchunks, nheads, headdim, dstate), the passed states in bfloat16."""
    import torch

    from coop_tiles.examples.ssd import pass_states

    states, ends = _passing_inputs(shape)
    ours = pass_states(states, ends, None, torch.bfloat16)
    rtol, atol = PASSING_TOLERANCE

    def coop() -> dict:
        ms = cuda_time_ms(lambda: pass_states(states, ends, None, torch.bfloat16))
        return {"best": None, "ms": ms, "times": {None: ms}, "correct": None}

    def theirs() -> dict:
        if "error" in mamba:
            raise RuntimeError(mamba["error"])
        run = lambda: _mamba_passing(mamba["module"], states, ends)  # noqa: E731
        passed, final = run()
        ok = torch.allclose(passed.float(), ours[0].reshape(passed.shape).float(), rtol=rtol, atol=atol)
        ok = ok and torch.allclose(final.float(), ours[1].reshape(final.shape), rtol=rtol, atol=atol)
        ms = cuda_time_ms(run)
        return {"best": None, "ms": ms, "times": {None: ms}, "correct": bool(ok)}

    return {"passing_coop": guarded(coop), "passing_mamba": guarded(theirs)}


def _passing_inputs(shape: tuple) -> tuple[Any, Any]:
    """The state passing's per-chunk float32 states (batch, nchunks, nheads, headdim, dstate) and the chunks' decays
    (batch, nheads, nchunks), random."""
    import torch

    batch, seqlen, nheads, headdim, dstate, _, chunk = shape
    nchunks = seqlen // chunk
    g = torch.Generator(device="cuda").manual_seed(22)
    states = torch.randn(batch, nchunks, nheads, headdim, dstate, device="cuda", generator=g)
    return states, -torch.rand(batch, nheads, nchunks, device="cuda", generator=g)


def _mamba_passing(module: Any, states: Any, ends: Any) -> Any:
    """Mamba's `_state_passing_fwd` of `_passing_inputs`' states, bfloat16 out."""
    import torch

    flat = states.reshape(*states.shape[:3], -1)
    return module._state_passing_fwd(flat, ends, out_dtype=torch.bfloat16)


def _mamba_modules() -> list[Any]:
    """Mamba's SSD module and the Mamba modules it imports (which hold its Triton kernels)."""
    import sys

    from benchmarks import _mamba_triton

    _mamba_triton.load(_mamba_triton.SSD_MODULE)
    return [module for name, module in list(sys.modules.items()) if name.startswith(_mamba_triton.PACKAGE + ".")]


def warm_items() -> tuple[list[tuple], list[tuple]]:
    """`(first, then)` for `warm_in_workers`, `(what, shape, kernel, config)`: coop_tiles' forward and state passing
    at the first shape, and each config of each of Mamba's forward kernels and of its state passing alone (on
    contiguous states: other strides than in its forward, so other binaries), by index (where Mamba's copy loads;
    else the timed run reports it); then coop_tiles' at the other shapes. Mamba's at the first shape only: the
    shapes' sizes are all multiples of 16, the only property of a size Triton specialises on."""
    first, then = [("coop", SSD_SHAPES[0], None, None)], [("coop", shape, None, None) for shape in SSD_SHAPES[1:]]
    try:
        tuners = triton_autotuners(_mamba_modules())
    except Exception:  # noqa: BLE001 (no Mamba copy, no Triton: the timed run reports it)
        return first, then
    for what, names in (("mamba", MAMBA_FORWARD_KERNELS), ("mamba_passing", ("_state_passing_fwd_kernel",))):
        first += [
            (what, SSD_SHAPES[0], name, i) for name in names if name in tuners for i in range(len(tuners[name].configs))
        ]
    return first, then


def warm_launch(item: tuple) -> None:
    """One of `warm_items` (in a worker process): what the timed row launches; Mamba's with one kernel left one config
    and its other kernels launching nothing (one_triton_config)."""
    import torch

    what, shape, kernel, config = item
    if what == "coop":
        from coop_tiles.examples import mamba_chunk_scan_combined
        from coop_tiles.examples.ssd import pass_states

        mamba_chunk_scan_combined(**ssd_inputs(shape), chunk_size=shape[-1], dt_softplus=True)
        pass_states(*_passing_inputs(shape), None, torch.bfloat16)
    else:
        modules = _mamba_modules()
        module = _mamba_module()["module"]
        with one_triton_config(modules, kernel, config):
            if what == "mamba":
                module.mamba_chunk_scan_combined(**ssd_inputs(shape), chunk_size=shape[-1], dt_softplus=True)
            else:
                _mamba_passing(module, *_passing_inputs(shape))
    torch.cuda.synchronize()


def ssd_lines(rows: list[dict]) -> list[str]:
    rtol, atol = PASSING_TOLERANCE
    lines = [
        "",
        "## Mamba-2's chunked scan: `mamba_chunk_scan_combined` against Mamba's Triton (issue 21)",
        "",
        "The forward with the arguments `mamba2.Mamba2` passes (bfloat16 x, dt, B, C; float32 A, D per head, "
        "dt_bias; softplus on; no z, no initial states). Mamba's is its own `mamba_ssm/ops/triton/ssd_combined.py` "
        "(five Triton kernels: chunk cumsum, chunk state, state passing, C·B^T, chunk scan), run from a git-ignored "
        "copy (benchmarks/_mamba_triton.py); coop_tiles': `coop_tiles.examples.mamba_chunk_scan_combined`, four "
        "tile programs (chunk cumsum and state with `tile.dot`, K steps at a time; the state passing, a loop over "
        "the chunks per block of state elements; C·B^T once per group; the chunk scan; every `tile.dot`'s result "
        "in registers). *Mamba / coop* above 1: coop_tiles faster. The state passing moves "
        "(4 + 2) bytes per state element and chunk: Mamba's already runs near the memory's rate, which bounds "
        "any implementation's gain over it.",
        f"Correct: out of the first {CHECKED_BATCH} batch row(s) against a float64 PyTorch reference of Mamba's "
        f"chunked equations, its largest error over the reference's largest magnitude at most {SSD_TOLERANCE:g} "
        "(the errors in brackets). The state passing alone: `pass_states` against `_state_passing_fwd` on the same "
        "random per-chunk states (float32 in, bfloat16 passed states, float32 final states), checked against each "
        f"other (rtol {rtol:g}, atol {atol:g}).",
        "",
        "| batch, seqlen, nheads, headdim, dstate, ngroups, chunk | coop_tiles ms | Mamba Triton ms | Mamba / coop "
        "| state passing coop ms | Mamba `_state_passing_fwd` ms | Mamba / coop | correct (coop / Mamba / passing) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(failed_row(r, ("shape",), 8))
            continue
        coop, mamba, pc, pm = r["coop"], r["mamba"], r["passing_coop"], r["passing_mamba"]
        lines.append(
            table_row(
                ", ".join(map(str, r["shape"])),
                ms_cell(coop),
                ms_cell(mamba),
                speedup_cell(mamba, coop),
                ms_cell(pc),
                ms_cell(pm),
                speedup_cell(pm, pc),
                f"{_checked(coop)} / {_checked(mamba)} / {correct_cell(pm)}",
            )
        )
    bar = "Bar (issue 21): at least 1.0x Mamba's Triton forward on both shapes; the state passing at least 2x."
    return lines + ["", bar, ""]


def _checked(result: dict) -> str:
    """yes / NO with the error against the reference."""
    return correct_cell(result) + (f" ({result['error_of_max']:.1e})" if "error_of_max" in result else "")


def run(sizes: list[int], arch: str) -> list[dict]:
    first, then = warm_items()
    warm_in_workers(warm_launch, first, then=then, label="ssd")
    return ssd_rows()


SECTION = Section(
    "ssd",
    key="ssd",
    needs=("torch", "triton", "mamba_triton"),
    run=run,
    lines=ssd_lines,
    guarded=True,
    chart=declare(
        "Mamba-2 chunked scan forward",
        {
            "coop_tiles": ms("coop"),
            "Mamba Triton": ms("mamba"),
            "coop_tiles state passing": ms("passing_coop"),
            "Mamba _state_passing_fwd": ms("passing_mamba"),
        },
        x=lambda r: "x".join(map(str, r["shape"])),
        ylabel="ms (lower is faster)",
    ),
)
