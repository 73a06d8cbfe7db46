"""Mamba's decode step, `selective_state_update`: `coop_tiles.examples.selective_state_update` (when it exists) against
Mamba's own Triton kernel (benchmarks/_mamba_triton.py) and the memory-traffic limit (issue 19)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.charts import declare, share
from benchmarks.device import free_device_memory, torch_copy_rate_gbs
from benchmarks.report import correct_cell, failed_row, ms_cell, speedup_cell, table_row
from benchmarks.section import Section
from benchmarks.timing import cuda_time_ms, guarded, host_overheads_us

#: (name, batch, nheads, headdim, dstate, ngroups): Mamba-1's state is (batch, dim, dstate) (nheads None: no head
#: axis, headdim is dim), Mamba-2's (batch, nheads, headdim, dstate)
STATE_UPDATE_SHAPES = (
    ("Mamba-1", 64, None, 5120, 16, 1),
    ("Mamba-2", 64, 80, 64, 128, 1),
)
STATE_UPDATE_DTYPES = ("bfloat16", "float32")  # of x, dt, B, C, z (and out); the state is float32
#: Mamba's own tests' (rtol, atol) for the output and state, by input dtype
STATE_UPDATE_TOLERANCE = {"float32": (3e-4, 1e-3), "bfloat16": (1e-2, 5e-2)}
#: steps per round of the host-time measurement (a step's host time is tens of microseconds)
HOST_CALLS = 500


def state_update_rows() -> list[dict]:
    """Every shape and input dtype: coop_tiles, Mamba's Triton kernel, and the memory-traffic limit."""
    import torch

    copy_gbs = torch_copy_rate_gbs(torch)
    mamba = guarded(_mamba_module)
    rows = []
    for name, *shape in STATE_UPDATE_SHAPES:
        for dtype in STATE_UPDATE_DTYPES:
            batch, nheads, headdim, dstate, _ = shape
            state_shape = (batch, headdim, dstate) if nheads is None else (batch, nheads, headdim, dstate)
            key = {"case": name, "shape": state_shape, "dtype": dtype}
            rows.append({**key, **guarded(_state_update_row, name, tuple(shape), dtype, mamba, copy_gbs)})
            free_device_memory()
    return rows


def _mamba_module() -> dict:
    from benchmarks import _mamba_triton

    return {"module": _mamba_triton.load()}


def state_update_inputs(name: str, shape: tuple, dtype: str) -> dict:
    """The arguments as Mamba's modules pass them in their `step` (mamba_simple.Mamba: state (batch, dim, dstate),
    A (dim, dstate), D and dt_bias (dim,), z given; mamba2.Mamba2 with its default rmsnorm: A, dt, dt_bias and D
    broadcast over the head dimension with stride 0, B and C (batch, ngroups, dstate), no z). A, D and dt_bias
    are float32 parameters; x, dt, B, C, z in `dtype`; softplus on. Values are drawn as Mamba's tests draw them
    (A = -(uniform + 1), dt_bias = uniform - 4, the rest standard normal)."""
    import torch

    batch, nheads, headdim, dstate, ngroups = shape
    g = torch.Generator(device="cuda").manual_seed(19)
    t = getattr(torch, dtype)

    def randn(*s: int) -> Any:
        return torch.randn(*s, device="cuda", generator=g)

    def rand(*s: int) -> Any:
        return torch.rand(*s, device="cuda", generator=g)

    if nheads is None:  # Mamba-1
        dim = headdim
        return {
            "state": randn(batch, dim, dstate),
            "x": randn(batch, dim).to(t),
            "dt": randn(batch, dim).to(t),
            "A": -rand(dim, dstate) - 1.0,
            "B": randn(batch, dstate).to(t),
            "C": randn(batch, dstate).to(t),
            "D": randn(dim),
            "z": randn(batch, dim).to(t),
            "dt_bias": rand(dim) - 4.0,
        }
    return {
        "state": randn(batch, nheads, headdim, dstate),
        "x": randn(batch, nheads, headdim).to(t),
        "dt": randn(batch, nheads).to(t)[:, :, None].expand(batch, nheads, headdim),
        "A": (-rand(nheads) - 1.0)[:, None, None].expand(nheads, headdim, dstate),
        "B": randn(batch, ngroups, dstate).to(t),
        "C": randn(batch, ngroups, dstate).to(t),
        "D": randn(nheads)[:, None].expand(nheads, headdim),
        "z": None,
        "dt_bias": (rand(nheads) - 4.0)[:, None].expand(nheads, headdim),
    }


def _distinct_bytes(tensor: Any) -> int:
    """The bytes of a tensor's distinct elements (a broadcast axis, stride 0, counts once)."""
    count = 1
    for size, stride in zip(tensor.shape, tensor.stride()):
        count *= size if stride != 0 else 1
    return count * tensor.element_size()


def state_update_bytes(args: dict) -> int:
    """What a step must move: the state read and written, every input's distinct elements read, out written."""
    state = args["state"]
    inputs = sum(_distinct_bytes(v) for k, v in args.items() if k != "state" and v is not None)
    return 2 * _distinct_bytes(state) + inputs + _distinct_bytes(args["x"])


def state_update_reference(args: dict) -> tuple[Any, Any]:
    """(new state, out) in float64, from Mamba's equations (its `selective_state_update_ref`, with the kernel's
    softplus threshold of 20), for the heads layout and the Mamba-1 layout alike."""
    import torch

    state, x, dt, A, B, C, D, z, dt_bias = (
        None if args[k] is None else args[k].double() for k in ("state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias")
    )
    if state.dim() == 3:  # Mamba-1: one head
        state, x, dt, A, D, dt_bias = state[:, None], x[:, None], dt[:, None], A[None], D[None], dt_bias[None]
        B, C, z = B[:, None], C[:, None], None if z is None else z[:, None]
    heads = state.shape[1]
    dt = dt + dt_bias
    dt = torch.where(dt <= 20.0, torch.nn.functional.softplus(dt), dt)
    B = B.repeat_interleave(heads // B.shape[1], dim=1)  # (batch, nheads, dstate): head h reads group h // ratio
    C = C.repeat_interleave(heads // C.shape[1], dim=1)
    new = state * torch.exp(dt[..., None] * A) + (dt[..., None] * B[:, :, None, :]) * x[..., None]
    out = torch.einsum("bhdn,bhn->bhd", new, C) + x * D
    if z is not None:
        out = out * z * torch.sigmoid(z)
    if args["state"].dim() == 3:
        new, out = new[:, 0], out[:, 0]
    return new, out


def _state_update_row(name: str, shape: tuple, dtype: str, mamba: dict, copy_gbs: float) -> dict:
    """One shape and dtype. Each implementation first runs once on a copy of the initial state, and that state and
    its output are checked against the float64 reference (Mamba's tolerances); then it is timed updating a working
    state in place, step after step, as a decoder does."""
    import torch

    args = state_update_inputs(name, shape, dtype)
    expected_state, expected_out = state_update_reference(args)
    rtol, atol = STATE_UPDATE_TOLERANCE[dtype]

    def correct(state: Any, out: Any) -> bool:
        ok_state = torch.allclose(state.double(), expected_state, rtol=rtol, atol=atol)
        return bool(ok_state and torch.allclose(out.double(), expected_out, rtol=rtol, atol=atol))

    def measure(update: Callable[..., Any]) -> dict:
        state = args["state"].clone()
        out = update(state, *(args[k] for k in ("x", "dt", "A", "B", "C")), D=args["D"], z=args["z"],
                     dt_bias=args["dt_bias"], dt_softplus=True)  # fmt: skip
        ok = correct(state, out)
        working = args["state"].clone()

        def step() -> Any:
            return update(working, *(args[k] for k in ("x", "dt", "A", "B", "C")), D=args["D"], z=args["z"],
                          dt_bias=args["dt_bias"], dt_softplus=True)  # fmt: skip

        ms = cuda_time_ms(step, host_ahead=True)
        host_us = host_overheads_us({"step": step}, count=HOST_CALLS, reps=5)["step"]
        return {"best": None, "ms": ms, "times": {None: ms}, "correct": ok, "host_us": host_us}

    return {
        "limit_ms": state_update_bytes(args) / 1e6 / copy_gbs,
        "mamba": guarded(_mamba_result, mamba, measure),
        "coop": guarded(_coop_result, measure),
    }


def _mamba_result(mamba: dict, measure: Callable) -> dict:
    if "error" in mamba:
        raise RuntimeError(mamba["error"])
    return measure(mamba["module"].selective_state_update)


def _coop_result(measure: Callable) -> dict:
    import coop_tiles.examples as examples

    update = getattr(examples, "selective_state_update", None)
    if update is None:
        raise NotImplementedError("not available: coop_tiles.examples has no selective_state_update yet")
    return measure(update)


def state_update_lines(rows: list[dict]) -> list[str]:
    tols = "; ".join(f"{d} rtol {r:g}, atol {a:g}" for d, (r, a) in STATE_UPDATE_TOLERANCE.items())
    lines = [
        "",
        "## Mamba's decode step: `selective_state_update` against Mamba's Triton kernel (issue 19)",
        "",
        "One step of the state update, in place, with the arguments Mamba's modules pass in their `step`: Mamba-1 "
        "(`mamba_simple.Mamba`: state (batch, dim, dstate), z, D, dt_bias) and Mamba-2 (`mamba2.Mamba2` with its "
        "default RMSNorm: state (batch, nheads, headdim, dstate), A, dt, dt_bias and D broadcast over the head "
        "dimension with stride 0, B and C of one group, no z); state float32, x, dt, B, C, z and out in the dtype "
        "shown, A, D and dt_bias float32, softplus on. Mamba's kernel is its own "
        "`mamba_ssm/ops/triton/selective_state_update.py`, run from a git-ignored copy (benchmarks/_mamba_triton.py). "
        "coop_tiles: `coop_tiles.examples.selective_state_update`, the drop-in of the same signature.",
        "The memory-traffic limit is the bytes a step must move (the state read and written, every input's distinct "
        "elements read, out written) at the device copy rate of the run; *of limit* is its time over the "
        "implementation's; *Mamba / coop* is Mamba's time over coop_tiles' (above 1: coop_tiles faster).",
        "Times are the GPU's alone (`do_bench(..., host_ahead=True)`: before each timed step the GPU waits twice as "
        "long as the host takes to queue it, as under the CUDA graph a decoder replays): a step takes the host "
        "longer than the L2 flush takes the GPU, and timed as it comes the GPU would idle inside the interval "
        "until the step's launch arrived. *Host µs* is the host's own time per step (Python, checks, allocation, "
        "launch: perf_counter over back-to-back steps), which a decoder without CUDA graphs also pays.",
        f"Correct: after one step from the same state, the state and the output against a float64 reference of "
        f"Mamba's equations (`torch.allclose` with Mamba's own tests' tolerances: {tols}).",
        "",
        "| case | state shape | dtype | coop_tiles ms | of limit | Mamba Triton ms | Mamba of limit | Mamba / coop "
        "| memory limit ms | host µs (coop / Mamba) | correct (coop / Mamba) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(failed_row(r, ("case", "shape", "dtype"), 11))
            continue
        coop, mamba = r["coop"], r["mamba"]
        shares = ["—" if "error" in v else f"**{r['limit_ms'] / v['ms']:.0%}**" for v in (coop, mamba)]
        lines.append(
            table_row(
                r["case"],
                str(r["shape"]),
                r["dtype"],
                ms_cell(coop),
                shares[0],
                ms_cell(mamba),
                shares[1],
                speedup_cell(mamba, coop),
                f"{r['limit_ms']:.4f}",
                " / ".join(f"{v['host_us']:.1f}" if "host_us" in v else "—" for v in (coop, mamba)),
                f"{correct_cell(coop)} / {correct_cell(mamba)}",
            )
        )
    bar = (
        "Bar (issue 19): at least 70% of the memory-traffic limit and at least 1.1x Mamba's Triton kernel, every "
        "shape and dtype."
    )
    return lines + ["", bar, ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    return state_update_rows()


SECTION = Section(
    "state_update",
    key="state_update",
    needs=("torch", "triton", "mamba_triton"),
    run=run,
    lines=state_update_lines,
    guarded=True,
    chart=declare(
        "Mamba's decode step",
        {"coop_tiles": share("coop"), "Mamba Triton": share("mamba")},
        x=lambda r: f"{r['case']} {r['dtype']}",
        dashed={"memory limit": lambda r: 1.0},
        ylabel="memory-traffic limit / time",
    ),
)
