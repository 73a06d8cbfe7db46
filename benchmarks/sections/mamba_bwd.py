"""Mamba's selective scan backward (issue 20): `coop_tiles.examples.selective_scan_bwd` against Mamba's CUDA backward
(built by benchmarks/_mamba_cuda.py), forward + backward, the memory-traffic limit, the peak memory of a forward +
backward through autograd, and the training step of the 2-layer `coop_tiles.examples.mamba` model on either op."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.charts import declare
from benchmarks.device import free_device_memory, torch_copy_rate_gbs
from benchmarks.report import correct_cell, failed_row, ms_cell, speedup_cell, table_row
from benchmarks.section import Section
from benchmarks.sections.mamba import MAMBA_CHECK_DIMS, MAMBA_DTYPES, MAMBA_SHAPES, MAMBA_TOLERANCE, _mamba_inputs
from benchmarks.timing import cuda_time_ms, guarded
from benchmarks.warm import warm_in_workers

#: the backward's launches tried, (items per thread, register cap); the first is `selective_scan_backward.LAUNCH`
BWD_LAUNCHES = ((8, 128), (8, None), (8, 96), (16, 168), (16, None))  # (16, 168): Mamba's 3 blocks x 128
#: the 2-layer model: (batch, L, d_model: d_inner = 2 d_model, as MAMBA_SHAPES[0]'s dim), vocabulary
MODEL = (8, 2048, 768)
VOCAB = 1024
GRADS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")


def backward_bytes(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes a backward must move at least: u, delta, z, dout read and du, ddelta, dz written; B and C read and their
    gradients written once (the input dtype); A, D, delta_bias read, their gradients written, and the chunk states
    read (float32)."""
    batch, dim, L, N = shape
    item = np.dtype(dtype if dtype != "bfloat16" else "float16").itemsize
    chunks = -(-L // 2048)
    return (
        7 * batch * dim * L * item + 4 * batch * N * L * item + 4 * (2 * dim * N + 4 * dim + batch * dim * chunks * N)
    )


def mamba_bwd_rows() -> list[dict]:
    """Every shape and dtype of the forward's section, then the training step of the model in each dtype."""
    import torch

    copy_gbs = torch_copy_rate_gbs(torch)
    mamba = guarded(_mamba_extension)
    rows = []
    for shape in MAMBA_SHAPES:
        for dtype in MAMBA_DTYPES:
            rows.append({"shape": shape, "dtype": dtype, **guarded(_row, shape, dtype, mamba, copy_gbs)})
            free_device_memory()
    for dtype in MAMBA_DTYPES:
        rows.append({"shape": ("model", *MODEL), "dtype": dtype, **guarded(_training_row, dtype, mamba)})
        free_device_memory()
    return rows


def _mamba_extension() -> dict:
    """Mamba's forward and backward, built (or found built) by benchmarks/_mamba_cuda.py."""
    from benchmarks import _mamba_cuda

    return {"ext": _mamba_cuda.load()}


def _ext(mamba: dict) -> Any:
    if "error" in mamba:
        raise RuntimeError(mamba["error"])
    return mamba["ext"]


def mamba_scan_fn(ext: Any) -> Callable:
    """Mamba's `selective_scan_fn` (its `SelectiveScanFn`: what the forward saves, the backward it runs) over the
    built binding, for variable B and C with z and softplus (what the binding is built for)."""
    import torch

    class MambaScan(torch.autograd.Function):
        @staticmethod
        def forward(ctx, u, delta, A, B, C, D, z, delta_bias):
            squeeze = B.dim() == 3
            if squeeze:
                B, C = B[:, None], C[:, None]
            out, x, out_z = ext.fwd(u, delta, A, B, C, D, z, delta_bias, True)
            ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, x, out)
            ctx.squeeze = squeeze
            return out_z

        @staticmethod
        def backward(ctx, dout):
            u, delta, A, B, C, D, z, delta_bias, x, out = ctx.saved_tensors
            du, ddelta, dA, dB, dC, dD, ddelta_bias, dz = ext.bwd(
                u, delta, A, B, C, D, z, delta_bias, dout.contiguous(), x, out, True
            )
            if ctx.squeeze:
                dB, dC = dB[:, 0], dC[:, 0]
            return du, ddelta, dA, dB, dC, dD, dz, ddelta_bias

    def scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
        if z is None or not delta_softplus or D is None or delta_bias is None:
            raise NotImplementedError("the built backward serves D, z, delta_bias and softplus only")
        return MambaScan.apply(u, delta, A, B, C, D, z, delta_bias)

    return scan


def _row(shape: tuple[int, ...], dtype: str, mamba: dict, copy_gbs: float) -> dict:
    """One shape and dtype: the backwards, the forward + backward pairs, the peak memory through autograd, and the
    gradients of the first channels checked against the float64 sequential reference."""
    import torch

    from coop_tiles.examples.selective_scan import forward
    from coop_tiles.examples.selective_scan_backward import selective_scan_bwd

    x = _mamba_inputs(shape, dtype)
    args = [x[k] for k in GRADS]
    dout = torch.randn_like(x["u"])
    _, states = forward(*args[:5], x["D"], x["z"], x["delta_bias"], True)

    def ours_bwd(launch: tuple) -> Callable:
        return lambda: selective_scan_bwd(dout, *args[:5], states, x["D"], x["z"], x["delta_bias"], True,
                                          launch=launch)  # fmt: skip

    def ours_both() -> Any:
        _, s = forward(*args[:5], x["D"], x["z"], x["delta_bias"], True)
        return selective_scan_bwd(dout, *args[:5], s, x["D"], x["z"], x["delta_bias"], True)

    launches = {
        launch: guarded(lambda launch=launch: {"ms": cuda_time_ms(ours_bwd(launch))}) for launch in BWD_LAUNCHES
    }
    check = _checker(shape, dtype)
    row = {
        "limit_ms": backward_bytes(shape, dtype) / 1e6 / copy_gbs,
        "coop": {**launches[BWD_LAUNCHES[0]], "correct": check(_coop_scan)},
        "launches": launches,
        "coop_both": guarded(lambda: {"ms": cuda_time_ms(ours_both)}),
        "coop_peak": guarded(_peak_bytes, _coop_scan, x, dout),
        "mamba": guarded(_mamba_times, mamba, x, dout, check),
    }
    if "error" not in row["mamba"]:
        row["mamba_peak"] = guarded(_peak_bytes, mamba_scan_fn(_ext(mamba)), x, dout)
    return row


def _coop_scan(*args: Any, **kwargs: Any) -> Any:
    from coop_tiles.examples import selective_scan_fn

    return selective_scan_fn(*args, **kwargs)


def _mamba_times(mamba: dict, x: dict, dout: Any, check: Callable) -> dict:
    """Mamba's backward alone (from its forward's saved x and out) and its forward + backward."""
    ext = _ext(mamba)
    args = [x[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
    out, states, _ = ext.fwd(*args, True)

    def both() -> Any:
        out, states, _ = ext.fwd(*args, True)
        return ext.bwd(*args, dout, states, out, True)

    return {
        "ms": cuda_time_ms(lambda: ext.bwd(*args, dout, states, out, True)),
        "both_ms": cuda_time_ms(both),
        "correct": check(mamba_scan_fn(ext)),
    }


def _checker(shape: tuple[int, ...], dtype: str) -> Callable[[Callable], bool]:
    """check(scan): whether the gradients of the first MAMBA_CHECK_DIMS channels (a problem of its own) through
    autograd of `scan` match the float64 sequential reference's, with Mamba's test tolerances: input gradients at
    twice the output's, variable B and C at the output's, the other weights at (1e-3, 1e-3) or the output's if
    larger (its tests with z)."""
    import torch

    from benchmarks._baselines import torch_selective_scan_ref

    batch, dim, L, N = shape
    x = _mamba_inputs((batch, MAMBA_CHECK_DIMS, L, N), dtype)
    dout = torch.randn_like(x["u"])
    ref = _grads(lambda *a: torch_selective_scan_ref(*a, dtype=torch.float64)[0], x, dout)
    rtol, atol = MAMBA_TOLERANCE[dtype]
    tolerances = {"u": (2 * rtol, 2 * atol), "delta": (2 * rtol, 2 * atol), "z": (2 * rtol, 2 * atol)}
    tolerances.update(B=(rtol, atol), C=(rtol, atol))

    def check(scan: Callable) -> bool:
        got = _grads(lambda *a: scan(*a[:5], D=a[5], z=a[6], delta_bias=a[7], delta_softplus=True), x, dout)
        ok = True
        for name in GRADS:
            r, a = tolerances.get(name, (max(1e-3, rtol), max(1e-3, atol)))
            ok &= bool((got[name].double() - ref[name]).abs().max() <= a + r * ref[name].abs().max())
        return ok

    return check


def _grads(fn: Callable, x: dict, dout: Any) -> dict:
    """The gradients of sum(fn(inputs) * dout) with respect to every input."""
    import torch

    leaves = {k: x[k].detach().clone().requires_grad_() for k in GRADS}
    out = fn(*(leaves[k] for k in GRADS))
    grads = torch.autograd.grad(out, list(leaves.values()), dout.to(out.dtype))
    return dict(zip(GRADS, grads))


def _peak_bytes(scan: Callable, x: dict, dout: Any) -> dict:
    """Peak bytes allocated by a forward + backward through autograd beyond the inputs and dout (the saved
    activations, the outputs and the gradients included), torch.cuda.max_memory_allocated reset before."""
    import torch

    leaves = {k: x[k].detach().clone().requires_grad_() for k in GRADS}
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = scan(*(leaves[k] for k in list(GRADS)[:5]), D=leaves["D"], z=leaves["z"], delta_bias=leaves["delta_bias"],
               delta_softplus=True)  # fmt: skip
    out.backward(dout)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out, leaves
    return {"bytes": peak}


def _training_row(dtype: str, mamba: dict) -> dict:
    """One training step (forward, cross-entropy, backward, AdamW step) of the 2-layer model, the same seed and
    batch, with coop_tiles' op and with Mamba's."""
    scans = {"coop": None, "mamba": guarded(lambda: {"scan": mamba_scan_fn(_ext(mamba))})}
    row = {"coop": guarded(_train_step_ms, None, dtype)}
    row["mamba"] = (
        scans["mamba"] if "error" in scans["mamba"] else guarded(_train_step_ms, scans["mamba"]["scan"], dtype)
    )
    return row


def _train_step_ms(scan: Callable | None, dtype: str) -> dict:
    return {"ms": cuda_time_ms(_train_step(scan, dtype))}


def _train_step(scan: Callable | None, dtype: str) -> Callable[[], None]:
    """One training step of the model (its own seed and batch) with `scan` (None: coop_tiles' op)."""
    import torch

    from coop_tiles.examples.mamba import MambaLM

    batch, L, d_model = MODEL
    torch.manual_seed(0)
    model = MambaLM(VOCAB, d_model, layers=2, scan=scan).cuda().to(getattr(torch, dtype))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, VOCAB, (batch, L + 1), device="cuda")

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()

    return step


def warm_items() -> tuple[list[tuple], list[tuple]]:
    """`(first, then)` for `warm_in_workers`, `(what, shape, dtype, launch)`: at the first shape in each dtype,
    coop_tiles' forward with each backward launch of BWD_LAUNCHES, and a forward + backward through autograd (at
    the shape and at the checked channels), and the model's training step; then the same at the other shapes
    (which share most of those kernels)."""

    def at(shape: tuple) -> list[tuple]:
        items = [("bwd", shape, dtype, launch) for dtype in MAMBA_DTYPES for launch in BWD_LAUNCHES]
        return items + [("autograd", shape, dtype, None) for dtype in MAMBA_DTYPES]

    model = [("model", None, dtype, None) for dtype in MAMBA_DTYPES]
    return at(MAMBA_SHAPES[0]) + model, [item for shape in MAMBA_SHAPES[1:] for item in at(shape)]


def warm_launch(item: tuple) -> None:
    """One of `warm_items` (in a worker process): the coop_tiles launches the timed rows make for it."""
    import torch

    from coop_tiles.examples.selective_scan import forward
    from coop_tiles.examples.selective_scan_backward import selective_scan_bwd

    what, shape, dtype, launch = item
    if what == "model":
        _train_step(None, dtype)()
    elif what == "bwd":
        x = _mamba_inputs(shape, dtype)
        args = [x[k] for k in GRADS]
        _, states = forward(*args[:5], x["D"], x["z"], x["delta_bias"], True)
        selective_scan_bwd(torch.randn_like(x["u"]), *args[:5], states, x["D"], x["z"], x["delta_bias"], True,
                           launch=launch)  # fmt: skip
    else:
        batch, _, L, N = shape
        for dims in (shape, (batch, MAMBA_CHECK_DIMS, L, N)):
            x = _mamba_inputs(dims, dtype)
            _grads(lambda *a: _coop_scan(*a[:5], D=a[5], z=a[6], delta_bias=a[7], delta_softplus=True), x,
                   torch.randn_like(x["u"]))  # fmt: skip
    torch.cuda.synchronize()


def _peak_cell(r: dict, key: str) -> str:
    peak = r.get(key, {"error": "not measured"})
    return f"failed: {peak['error']}" if "error" in peak else f"{peak['bytes'] / 2**20:.0f}"


def mamba_bwd_lines(rows: list[dict]) -> list[str]:
    tols = "; ".join(f"{d} rtol {r:g}, atol {a:g}" for d, (r, a) in MAMBA_TOLERANCE.items())
    launches = ", ".join(f"{i} items × {r or 'any'} registers" for i, r in BWD_LAUNCHES)
    lines = [
        "",
        "## Mamba's selective scan backward: `coop_tiles.examples.selective_scan_bwd` against Mamba's CUDA backward",
        "",
        "The forward section's shapes and inputs (variable B and C, one group, with z, D, delta_bias and softplus), "
        "dout drawn from a normal distribution. Mamba's backward (`csrc/selective_scan`, built for sm_90 by "
        "benchmarks/_mamba_cuda.py with Mamba's flags) through its binding, from the x and out its forward saved; "
        "coop_tiles' from the per-chunk states its forward saved. *fwd+bwd* runs each forward then its backward. "
        "The memory limit is the bytes a backward must move (u, delta, z, dout read; du, ddelta, dz written; B, C read "
        "and their gradients written once; the chunk states read) at the device copy rate of the run. *X / coop* is "
        "X's time over coop_tiles' (above 1: coop_tiles faster). Peak memory: `torch.cuda.max_memory_allocated` "
        "above the inputs over a forward + backward through autograd (`selective_scan_fn`; Mamba's "
        "`SelectiveScanFn` written over its binding: it saves out and x). "
        f"coop_tiles' backward launches tried: {launches} (the first is the default; *best* names the fastest).",
        f"Correct: every gradient of the first {MAMBA_CHECK_DIMS} channels (a problem of their own, through autograd) "
        f"against the float64 sequential reference, with Mamba's test tolerances ({tols}; input gradients at twice "
        "those, fixed weights' at least 1e-3).",
        "",
        "| (batch, dim, L, dstate) | dtype | coop bwd ms | best launch ms | Mamba bwd ms | Mamba / coop (bwd) | "
        "coop fwd+bwd ms | Mamba fwd+bwd ms | Mamba / coop (fwd+bwd) | memory limit ms | of limit | "
        "peak MiB (coop / Mamba) | correct (coop / Mamba) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    training = []
    for r in rows:
        if "error" in r:
            lines.append(failed_row(r, ("shape", "dtype"), 13))
            continue
        if r["shape"][0] == "model":
            training.append(r)
            continue
        coop, mamba, both = r["coop"], r["mamba"], r["coop_both"]
        timed = {k: v for k, v in r["launches"].items() if "error" not in v}
        best = min(timed, key=lambda k: timed[k]["ms"]) if timed else None
        best_cell = "—" if best is None else f"{timed[best]['ms']:.3f} ({best[0]} × {best[1] or 'any'})"
        mamba_both = {"ms": mamba["both_ms"]} if "both_ms" in mamba else mamba
        lines.append(
            table_row(
                str(r["shape"]),
                r["dtype"],
                ms_cell(coop),
                best_cell,
                ms_cell(mamba),
                speedup_cell(mamba, coop),
                ms_cell(both),
                ms_cell(mamba_both),
                speedup_cell(mamba_both, both),
                f"{r['limit_ms']:.3f}",
                "—" if "error" in coop else f"**{r['limit_ms'] / coop['ms']:.0%}**",
                f"{_peak_cell(r, 'coop_peak')} / {_peak_cell(r, 'mamba_peak')}",
                f"{correct_cell(coop)} / {correct_cell(mamba)}",
            )
        )
    lines += [
        "",
        "Training step (forward, cross-entropy, backward, AdamW) of the 2-layer `coop_tiles.examples.mamba` model "
        f"(batch {MODEL[0]}, L {MODEL[1]}, d_model {MODEL[2]}, vocabulary {VOCAB}), the same seed, with each op:",
        "",
        "| dtype | coop_tiles ms | Mamba CUDA ms | Mamba / coop |",
        "|---|---|---|---|",
    ]
    for r in training:
        lines.append(
            table_row(r["dtype"], ms_cell(r["coop"]), ms_cell(r["mamba"]), speedup_cell(r["mamba"], r["coop"]))
        )
    bar = (
        "Bar (issue 20): backward at least 1.1x Mamba's CUDA backward and forward + backward at least 1.15x, every "
        "shape and dtype; peak memory at most Mamba's."
    )
    return lines + ["", bar, ""]


def run(sizes: list[int], arch: str) -> list[dict]:
    first, then = warm_items()
    warm_in_workers(warm_launch, first, then=then, label="mamba_bwd")
    return mamba_bwd_rows()


def _speedup(theirs: Callable[[dict], float], ours: str) -> Callable[[dict], float]:
    """Mamba's time over ours (above 1: coop_tiles faster); KeyError or TypeError (a failed side) draws a gap."""
    return lambda r: theirs(r) / r[ours]["ms"]


SECTION = Section(
    "mamba_bwd",
    key="mamba_bwd",
    needs=("torch", "mamba"),
    run=run,
    lines=mamba_bwd_lines,
    guarded=True,
    chart=declare(
        "selective scan backward: Mamba's CUDA time over coop_tiles'",
        {
            "backward": _speedup(lambda r: r["mamba"]["ms"] if r["shape"][0] != "model" else None, "coop"),
            "forward + backward": _speedup(lambda r: r["mamba"]["both_ms"], "coop_both"),
            "training step": _speedup(lambda r: r["mamba"]["ms"] if r["shape"][0] == "model" else None, "coop"),
        },
        x=lambda r: f"{r['shape']} {r['dtype']}",
        dashed={"bar (backward)": lambda r: 1.1 if r["shape"][0] != "model" else None},
        ylabel="speedup over Mamba (x)",
    ),
)
