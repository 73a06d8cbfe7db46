"""Tutorial 09: Triton's fused softmax and layer norm, forward and backward, as tile programs.

Triton's tutorials 02 (fused softmax) and 05 (layer normalization) fuse a row's whole
computation into one kernel: one program per row reads the row once, reduces it, and writes
the result, so the row never makes a second trip through global memory. A tile program is
written the same way, one program per row:

    Triton (per program)                                 the tile program (per program)
    row = tl.load(X + r * stride + cols,                 x = tile.load(X[r], 0, BLOCK,
                  mask=cols < n, other=-inf)                       valid=n, other=-inf)
    row - tl.max(row, axis=0)                            x - tile.max(x)  (a block-uniform scalar)
    num / tl.sum(num, axis=0)                            e / tile.sum(e)
    BLOCK_SIZE = next_power_of_2(n), num_warps by hand   BLOCK: any size >= n, threads: the planner

`X[r]` is the r-th row of the 2-D array as a 1-D view (its stride is the array's), and the
padding past `n` is `-inf` for the max (exp gives 0 there, so it does not change the sum) and
0 for the sums. `tile.max` and `tile.sum` fold the tile to a scalar every thread holds
(`cub::BlockReduce` and a broadcast), so the rest of the row's arithmetic is element-wise.
16-bit rows (bfloat16, float16) are converted to float32 once, as they are loaded, and the
store rounds the float32 result back to the output's dtype.

The backward passes are per row too:

- softmax: `dx = y * (dy - sum(y * dy))`, one reduction per row;
- layer norm: with `xhat = (x - mean) * rstd` and `g = w * dy`,
  `dx = (g - (xhat * mean(xhat * g) + mean(g))) * rstd`, two reductions per row, reading the
  mean and 1/std the forward wrote. The weight and bias gradients `dw = sum over rows of
  dy * xhat`, `db = sum over rows of dy` are column sums: each program takes ROWS rows,
  accumulates its partial sums in a tile (registers), and adds them into float32 `dw`, `db`
  with one `tile.atomic_add` each at the end (Triton's tutorial adds its partials into a
  buffer of GROUP_SIZE_M rows under a spin lock and sums that in a second kernel).

Which program for which row length (forward passes):

- short rows (up to about 1024 float32 columns): a **block of rows** per program,
  `softmax_rows_fwd` and `layer_norm_rows_fwd`. One row per program would be a tiny program
  (4096 blocks of 1024 elements: per-block overhead dominates); a `(BM, BLOCK)` 2-D tile with
  `axis=1` reductions gives each row a warp of its own when `32 * BM` threads run the block (the
  planner's row arrangement: 32 lanes per row, 32 items per lane), so the reductions are warp
  shuffles with no shared memory and no barrier. The per-row results (`keepdims=True`, shape
  `(BM, 1)`) broadcast back over their rows, and `w[None, :]` over the rows of the block.
- rows of a few thousand columns: **one row per program** (`softmax_fwd`, `layer_norm_fwd`):
  the whole row is one tile that several warps share.
- long rows (16384 columns): still one row per program, at fewer threads than the planner's
  default. A tile stays in registers up to 32 items per thread, or 64 where it takes at most half
  of what a thread may hold, so `ct.jit(layer_norm_fwd.fn, block_threads=256, max_registers=128)`
  keeps 64 items a thread in registers, as Triton's tutorial does at 8 warps, with two blocks per
  SM. Measured on an H200, 16384 bfloat16 columns: 87 us (Triton's best, 8 warps: 89 us); at 512
  threads 127 us (one block per SM), and 102 us capped at 64 registers. `layer_norm_fwd_chunked`
  is Triton's own form, three passes over the row in chunks of BLOCK columns, reading the row
  again from global memory (the L2 cache) for each pass instead of keeping it (117 us with half
  a row per chunk at 256 threads): for rows too long for any block to hold.

Dividing by the column count: `tile.sum(t) / n_cols` with an int32 `n_cols` is float64 under
NumPy's promotion rules (Triton gives float32), and so would be every tile computed from it:
`ct.float32(n_cols)` keeps the layer norm in float32.

    python tutorials/09_softmax_layernorm.py
"""

import numpy as np
from _runner import ON_GPU, kernel, report_speed, to_device, to_host, where

import coop_tiles as ct
from coop_tiles import tile

LOG2E = 1.4426950408889634  # log2(e)


@ct.jit
def softmax_fwd(x, y, n_cols, BLOCK: ct.constexpr):
    r = ct.program_id(0)
    row = tile.load(x[r], 0, BLOCK, valid=n_cols, other=-np.inf).astype(np.float32)
    # exp(x) as exp2(x * log2(e)), as Triton's tl.exp is compiled: one hardware ex2 per element; the padding is
    # -inf, so exp gives 0 and the sum is unchanged. One division per row, then a multiplication per element.
    e = ct.exp2((row - tile.max(row)) * LOG2E)
    tile.store(y[r], 0, e * (1.0 / tile.sum(e)), valid=n_cols)


@ct.jit
def softmax_bwd(y, dy, dx, n_cols, BLOCK: ct.constexpr):
    r = ct.program_id(0)
    yt = tile.load(y[r], 0, BLOCK, valid=n_cols, other=0).astype(np.float32)
    g = tile.load(dy[r], 0, BLOCK, valid=n_cols, other=0).astype(np.float32)
    tile.store(dx[r], 0, yt * (g - tile.sum(yt * g)), valid=n_cols)


@ct.jit
def layer_norm_fwd(x, y, w, b, mean, rstd, n_cols, eps, BLOCK: ct.constexpr):
    r = ct.program_id(0)
    t = tile.load(x[r], 0, BLOCK, valid=n_cols, other=0).astype(np.float32)
    n = ct.float32(n_cols)  # float32 / int32 is float64 (NumPy's rule): divide by a float32 to stay in float32
    mu = tile.sum(t) / n
    centered = ct.where(tile.arange(BLOCK) < n_cols, t - mu, 0.0)  # the padding must not count in the variance
    rs = 1.0 / ct.sqrt(tile.sum(centered * centered) / n + eps)
    # w and b loaded where they are used, one after the other: fewer values live at once (registers)
    out = centered * rs * tile.load(w, 0, BLOCK, valid=n_cols, other=0).astype(np.float32)
    tile.store(y[r], 0, out + tile.load(b, 0, BLOCK, valid=n_cols, other=0).astype(np.float32), valid=n_cols)
    mean[r] = mu
    rstd[r] = rs


@ct.jit
def layer_norm_bwd(x, dy, w, mean, rstd, dx, dw, db, n_rows, n_cols, ROWS: ct.constexpr, BLOCK: ct.constexpr):
    first = ct.program_id(0) * ROWS
    wt = tile.load(w, 0, BLOCK, valid=n_cols, other=0).astype(np.float32)
    dw_part = tile.zeros(BLOCK, np.float32)
    db_part = tile.zeros(BLOCK, np.float32)
    for r in range(first, ct.minimum(first + ROWS, n_rows)):
        t = tile.load(x[r], 0, BLOCK, valid=n_cols, other=0).astype(np.float32)
        g = tile.load(dy[r], 0, BLOCK, valid=n_cols, other=0).astype(np.float32)  # 0 in the padding
        xhat = (t - mean[r]) * rstd[r]
        wg = wt * g
        c1 = tile.sum(xhat * wg) / ct.float32(n_cols)
        c2 = tile.sum(wg) / ct.float32(n_cols)
        tile.store(dx[r], 0, (wg - (xhat * c1 + c2)) * rstd[r], valid=n_cols)
        dw_part = dw_part + g * xhat
        db_part = db_part + g
    tile.atomic_add(dw, 0, dw_part, valid=n_cols)  # dw, db: float32, zeroed before the launch
    tile.atomic_add(db, 0, db_part, valid=n_cols)


# ----- a block of rows per program: short rows ----------------------------------------------------
@ct.jit
def softmax_rows_fwd(x, y, n_rows, n_cols, BM: ct.constexpr, BLOCK: ct.constexpr):
    r = ct.program_id(0) * BM
    rows = tile.load(x, (r, 0), (BM, BLOCK), valid=(n_rows - r, n_cols), other=-np.inf).astype(np.float32)
    # the rows' maxima and sums, shape (BM, 1): each broadcasts over its row
    e = ct.exp2((rows - tile.max(rows, axis=1, keepdims=True)) * LOG2E)
    tile.store(y, (r, 0), e * (1.0 / tile.sum(e, axis=1, keepdims=True)), valid=(n_rows - r, n_cols))


@ct.jit
def layer_norm_rows_fwd(x, y, w, b, mean, rstd, n_rows, n_cols, eps, BM: ct.constexpr, BLOCK: ct.constexpr):
    r = ct.program_id(0) * BM
    t = tile.load(x, (r, 0), (BM, BLOCK), valid=(n_rows - r, n_cols), other=0).astype(np.float32)
    n = ct.float32(n_cols)
    mu = tile.sum(t, axis=1, keepdims=True) / n
    centered = ct.where(tile.arange(BLOCK)[None, :] < n_cols, t - mu, 0.0)
    rs = 1.0 / ct.sqrt(tile.sum(centered * centered, axis=1, keepdims=True) / n + eps)
    out = centered * rs * tile.load(w, 0, BLOCK, valid=n_cols, other=0).astype(np.float32)[None, :]
    out = out + tile.load(b, 0, BLOCK, valid=n_cols, other=0).astype(np.float32)[None, :]
    tile.store(y, (r, 0), out, valid=(n_rows - r, n_cols))
    tile.store(mean, r, tile.reshape(mu, BM), valid=n_rows - r)
    tile.store(rstd, r, tile.reshape(rs, BM), valid=n_rows - r)


# ----- long rows: the layer norm in chunks, the row read once per pass -------------------------------
@ct.jit
def layer_norm_fwd_chunked(x, y, w, b, mean, rstd, n_cols, eps, BLOCK: ct.constexpr):
    r = ct.program_id(0)
    acc = tile.zeros(BLOCK, np.float32)
    for c in range(0, n_cols, BLOCK):
        acc = acc + tile.load(x[r], c, BLOCK, valid=n_cols - c, other=0).astype(np.float32)
    n = ct.float32(n_cols)
    mu = tile.sum(acc) / n
    squares = tile.zeros(BLOCK, np.float32)
    for c in range(0, n_cols, BLOCK):
        v = tile.load(x[r], c, BLOCK, valid=n_cols - c, other=0).astype(np.float32)
        d = ct.where(tile.arange(BLOCK) < n_cols - c, v - mu, 0.0)
        squares = squares + d * d
    rs = 1.0 / ct.sqrt(tile.sum(squares) / n + eps)
    for c in range(0, n_cols, BLOCK):
        # one input at a time: x, then w, then b (fewer values live at once)
        out = (tile.load(x[r], c, BLOCK, valid=n_cols - c, other=0).astype(np.float32) - mu) * rs
        out = out * tile.load(w, c, BLOCK, valid=n_cols - c, other=0).astype(np.float32)
        out = out + tile.load(b, c, BLOCK, valid=n_cols - c, other=0).astype(np.float32)
        tile.store(y[r], c, out, valid=n_cols - c)
    mean[r] = mu
    rstd[r] = rs


def softmax_reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layer_norm_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> tuple:
    """(y, mean, rstd) in float64."""
    x = x.astype(np.float64)
    mu = x.mean(axis=1)
    rs = 1 / np.sqrt(((x - mu[:, None]) ** 2).mean(axis=1) + eps)
    return (x - mu[:, None]) * rs[:, None] * w + b, mu, rs


def layer_norm_bwd_reference(x, dy, w, mu, rs) -> tuple:
    """(dx, dw, db) in float64: the layer norm's gradients, written out from its definition."""
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    xhat = (x - mu[:, None]) * rs[:, None]
    g = dy * w
    n = x.shape[1]
    dx = rs[:, None] * (g - g.mean(axis=1, keepdims=True) - xhat * (g * xhat).sum(axis=1, keepdims=True) / n)
    return dx, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def run(rows: int, cols: int, block: int, rows_per_program: int, bm: int, chunk: int, eps: float = 1e-5) -> dict:
    """Every program on a float32 (rows, cols) problem (blocks of `bm` rows, layer norm in chunks of `chunk`
    columns); the outputs on the host."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    dy = rng.standard_normal((rows, cols)).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal(cols)).astype(np.float32)
    b = (0.1 * rng.standard_normal(cols)).astype(np.float32)
    xd, dyd, wd, bd = to_device(x, dy, w, b)
    # distinct outputs, one per program
    y, dx, ln, lndx, y2, ln2, ln3 = to_device(*(np.zeros((rows, cols), np.float32) for _ in range(7)))
    mean, rstd, dw, db = to_device(*(np.zeros(n, np.float32) for n in (rows, rows, cols, cols)))
    mean2, rstd2, mean3, rstd3 = to_device(*(np.zeros(rows, np.float32) for _ in range(4)))

    kernel(softmax_fwd)[rows](xd, y, cols, BLOCK=block)
    kernel(softmax_bwd)[rows](y, dyd, dx, cols, BLOCK=block)
    kernel(layer_norm_fwd)[rows](xd, ln, wd, bd, mean, rstd, cols, eps, BLOCK=block)
    grid = ct.cdiv(rows, rows_per_program)
    kernel(layer_norm_bwd)[grid](xd, dyd, wd, mean, rstd, lndx, dw, db, rows, cols, ROWS=rows_per_program, BLOCK=block)
    blocks = ct.cdiv(rows, bm)
    kernel(softmax_rows_fwd)[blocks](xd, y2, rows, cols, BM=bm, BLOCK=block)
    kernel(layer_norm_rows_fwd)[blocks](xd, ln2, wd, bd, mean2, rstd2, rows, cols, eps, BM=bm, BLOCK=block)
    kernel(layer_norm_fwd_chunked)[rows](xd, ln3, wd, bd, mean3, rstd3, cols, eps, BLOCK=chunk)
    out = {"x": x, "dy": dy, "w": w, "b": b, "eps": eps}
    names = "y dx ln mean rstd lndx dw db y2 ln2 mean2 rstd2 ln3 mean3 rstd3".split()
    values = (y, dx, ln, mean, rstd, lndx, dw, db, y2, ln2, mean2, rstd2, ln3, mean3, rstd3)
    return {**out, **{name: to_host(v) for name, v in zip(names, values)}}


def check(r: dict) -> None:
    """Every output against float64 NumPy."""
    x, dy, w, b = r["x"], r["dy"], r["w"], r["b"]
    y = softmax_reference(x)
    for name in ("y", "y2"):  # one row per program, a block of rows per program
        np.testing.assert_allclose(r[name], y, rtol=1e-5, atol=1e-7)
    # the softmax gradient from the float32 y the forward wrote, as autograd does
    y32 = r["y"].astype(np.float64)
    expected_dx = y32 * (dy - (y32 * dy).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(r["dx"], expected_dx, rtol=1e-4, atol=1e-6)
    ln, mu, rs = layer_norm_reference(x, w, b, r["eps"])
    for suffix in ("", "2", "3"):  # one row per program, a block of rows, chunks of a row
        np.testing.assert_allclose(r["ln" + suffix], ln, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(r["mean" + suffix], mu, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(r["rstd" + suffix], rs, rtol=1e-4)
    dx, dw, db = layer_norm_bwd_reference(x, dy, w, mu, rs)
    np.testing.assert_allclose(r["lndx"], dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(r["dw"], dw, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(r["db"], db, rtol=1e-4, atol=1e-3)


def against_torch(rows: int, cols: int, block: int, rows_per_program: int) -> None:
    """On a GPU: the same programs against PyTorch (forward and autograd's backward), and their times."""
    try:
        import torch
    except ImportError:
        print("(no PyTorch: the comparison with torch.softmax and layer_norm is skipped)")
        return
    F = torch.nn.functional
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(rows, cols, device="cuda", generator=g, requires_grad=True)
    dy = torch.randn(rows, cols, device="cuda", generator=g)
    w = (1 + 0.1 * torch.randn(cols, device="cuda", generator=g)).requires_grad_()
    b = (0.1 * torch.randn(cols, device="cuda", generator=g)).requires_grad_()
    y, dx, ln, lndx = (torch.empty(rows, cols, device="cuda") for _ in range(4))
    mean, rstd = torch.empty(rows, device="cuda"), torch.empty(rows, device="cuda")
    dw, db = torch.zeros(cols, device="cuda"), torch.zeros(cols, device="cuda")
    xv = x.detach()
    grid = ct.cdiv(rows, rows_per_program)
    ours = {
        "softmax forward": lambda: softmax_fwd[rows](xv, y, cols, BLOCK=block),
        "softmax backward": lambda: softmax_bwd[rows](y, dy, dx, cols, BLOCK=block),
        "layer norm forward": lambda: layer_norm_fwd[rows](
            xv, ln, w.detach(), b.detach(), mean, rstd, cols, 1e-5, BLOCK=block
        ),  # fmt: skip
        "layer norm backward": lambda: (
            dw.zero_(),
            db.zero_(),
            layer_norm_bwd[grid](
                xv, dy, w.detach(), mean, rstd, lndx, dw, db, rows, cols, ROWS=rows_per_program, BLOCK=block
            ),  # fmt: skip
        ),
    }
    for launch in ours.values():
        launch()
    ty = torch.softmax(x, dim=1)
    (tdx,) = torch.autograd.grad(ty, x, dy)
    tln = F.layer_norm(x, (cols,), w, b, 1e-5)
    tlndx, tdw, tdb = torch.autograd.grad(tln, (x, w, b), dy, retain_graph=True)  # kept for the timing below
    for name, got, expected in (("softmax y", y, ty), ("softmax dx", dx, tdx), ("layer norm y", ln, tln),
                                ("layer norm dx", lndx, tlndx), ("dw", dw, tdw), ("db", db, tdb)):  # fmt: skip
        torch.testing.assert_close(got, expected.detach(), rtol=1e-4, atol=1e-3, msg=name)
    print(f"({rows}, {cols}) float32 on the GPU: every output matches PyTorch")
    theirs = {
        "softmax forward": lambda: torch.softmax(xv, dim=1),
        "softmax backward": lambda: torch._softmax_backward_data(dy, ty.detach(), 1, torch.float32),
        "layer norm forward": lambda: F.layer_norm(xv, (cols,), w.detach(), b.detach(), 1e-5),
        "layer norm backward": lambda: torch.autograd.grad(tln, (x, w, b), dy, retain_graph=True),
    }
    for name in ours:
        mine, torch_ms = ct.testing.do_bench(ours[name]), ct.testing.do_bench(theirs[name])
        print(f"  {name:20} coop_tiles {mine * 1e3:7.1f} us   PyTorch {torch_ms * 1e3:7.1f} us   "
              f"PyTorch / coop_tiles {torch_ms / mine:.2f}x")  # fmt: skip


def main() -> None:
    # in the interpreter: a small problem whose rows do not fill the tile (the padding is exercised)
    rows, cols, block, rows_per_program = (4096, 4096, 4096, 16) if ON_GPU else (12, 300, 512, 5)
    bm, chunk = (2, 1024) if ON_GPU else (5, 128)  # (blocks of rows, the last one partial; chunks, the last partial)
    check(run(rows, cols, block, rows_per_program, bm, chunk))
    print(f"softmax and layer norm, forward and backward, of a {rows}x{cols} float32 matrix ran {where()}: "
          "matches NumPy")  # fmt: skip
    if ON_GPU:
        against_torch(rows, cols, block, rows_per_program)


# ----- how fast: GB/s (rows read and written) against the row's length, 4096 float32 rows, as Triton's tutorials -----
@ct.testing.perf_report(
    [
        ct.testing.Benchmark(
            x_names=["cols"],
            x_vals=[2**k for k in range(8, 15)],
            line_arg="provider",
            line_vals=["coop_tiles", "torch"],
            line_names=[f"{op}_fwd (tile program)", "PyTorch"],
            plot_name=f"09_{op}",
            xlabel="columns (4096 float32 rows)",
            ylabel="GB/s",
            x_log=True,
            args={"op": op},
        )
        for op in ("softmax", "layer_norm")
    ]
)
def speed(cols: int, provider: str, op: str) -> float:
    import torch

    rows = 4096
    x, y = torch.randn(rows, cols, device="cuda"), torch.empty(rows, cols, device="cuda")
    w, b = torch.ones(cols, device="cuda"), torch.zeros(cols, device="cuda")
    mean, rstd = torch.empty(rows, device="cuda"), torch.empty(rows, device="cuda")
    run = {
        ("softmax", "coop_tiles"): lambda: softmax_fwd[rows](x, y, cols, BLOCK=cols),
        ("softmax", "torch"): lambda: torch.softmax(x, dim=1),
        ("layer_norm", "coop_tiles"): lambda: layer_norm_fwd[rows](x, y, w, b, mean, rstd, cols, 1e-5, BLOCK=cols),
        ("layer_norm", "torch"): lambda: torch.nn.functional.layer_norm(x, (cols,), w, b, 1e-5),
    }[op, provider]
    return 2 * 4 * rows * cols / ct.testing.do_bench(run) / 1e6


if __name__ == "__main__":
    main()
    report_speed(speed)
