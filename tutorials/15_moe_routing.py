"""Tutorial 15: mixture-of-experts routing (vLLM's `moe_align_block_size`) as one or two tile programs.

A mixture-of-experts layer sends each token to its top-k experts. The grouped GEMM that follows wants
the token copies (*routes*: route r is element r of `topk_ids`, read row-major) grouped by expert, each
group padded to a multiple of the GEMM's row block, so that every block of rows belongs to one expert:

  topk_ids = [[2, 0], [2, 1], [0, 2]]   (3 tokens, top-2, 4 experts, blocks of 2 rows)
  sorted_token_ids = [1, 4, | 3, 6, | 0, 2, | 5, 6]     (6: the sentinel, numel; `|`: block edges)
  expert_ids       = [0, 1, 2, 2]  (then -1 for the unused blocks)
  num_tokens_post_padded = [8]

`coop_tiles.examples.moe_align_block_size(topk_ids, block_size, num_experts)` computes these, for
many routes, in two launches (read `coop_tiles/examples/moe.py` beside this):

  1. `count_routes`: each program counts its chunk of routes per expert with `tile.histogram` and
     stores the counts as one column of an (experts, programs) table. It also fills its share of
     `sorted_token_ids` with the sentinel (the padding is whatever no route overwrites).
  2. `place_routes`: each program folds the table's columns, loaded as 2-D tiles of up to 64 columns
     (each thread sums one expert's row: `tile.sum(table, axis=1)`). All of them give each expert's count,
     rounded up to the block (`padded`); an exclusive `tile.scan` of those is where each expert's group
     starts. Those of the programs before it give how many routes of each expert come before its own.
     Their sum is stored in a small table, one row per program. Then the program sorts its chunk's
     expert ids with the route numbers as payload (`tile.sort`: a stable radix sort over the few bits an
     expert id has), so each expert's routes form a run in route order; `tile.flag_heads` marks the
     runs, a max-`tile.scan` of the heads' positions gives each route its run's start, and a route's
     rank in its run is its distance from there. `tile.gather` of its expert's row entry plus its rank
     is where it goes: `tile.scatter` puts it there. The result is stable (routes of one expert in
     route order), as vLLM's reference is. Program 0 also writes the padded total and `expert_ids`:
     each expert's id scattered at its group's first block, then a running max (a carried `tile.scan`)
     fills the blocks after it.

Up to one chunk of routes (2048: 256 tokens of top-8), where launching costs more than the work, one
program `align_routes` does both steps alone, with no table: the histogram of all the routes, their
starts stored for the gather, the sentinel, the routes sorted and scattered, and `expert_ids`. It
writes `sorted_token_ids` twice, the sentinel then the routes, from different threads: the planner
puts a `__syncthreads()` between the two (its plan lists it), as it does between any write and a
later access of one array in a block.

Expert ids outside `[0, num_experts)` are skipped (sorted last, never placed). The checks below compare
with a sequential implementation of vLLM's semantics.

    python tutorials/15_moe_routing.py
"""

import numpy as np
from _runner import ON_GPU, report_speed, to_device, to_host, where

import coop_tiles as ct
from coop_tiles.examples import moe_align_block_size


def sequential(topk_ids: np.ndarray, block_size: int, num_experts: int):
    """vLLM's outputs, one expert at a time."""
    flat = topk_ids.reshape(-1)
    numel = flat.size
    length = numel * block_size if numel < num_experts else numel + num_experts * (block_size - 1)
    sorted_ids = np.full(length, numel, np.int32)
    expert_ids = np.full(-(-length // block_size), -1, np.int32)
    at = 0
    for e in range(num_experts):
        routes = np.flatnonzero(flat == e)
        if routes.size:
            sorted_ids[at : at + routes.size] = routes
            blocks = -(-routes.size // block_size)
            expert_ids[at // block_size : at // block_size + blocks] = e
            at += blocks * block_size
    return sorted_ids, expert_ids, np.array([at], np.int32)


def check(topk_ids: np.ndarray, block_size: int, num_experts: int) -> None:
    (ids,) = to_device(topk_ids)
    got = [to_host(a) for a in moe_align_block_size(ids, block_size, num_experts)]
    for name, g, w in zip(
        ("sorted_token_ids", "expert_ids", "num_tokens_post_padded"), got, sequential(topk_ids, block_size, num_experts)
    ):
        np.testing.assert_array_equal(g, w, err_msg=name)


# ----- how fast: against the same routing in PyTorch operations (sort, bincount, cumsum, scatter) ------------------
def torch_align(topk_ids, block_size: int, num_experts: int):
    """vLLM's outputs from PyTorch operations, as a PyTorch user would write them (no host synchronisation)."""
    import torch

    flat = topk_ids.reshape(-1).long()
    numel, device = flat.numel(), flat.device
    length = numel * block_size if numel < num_experts else numel + num_experts * (block_size - 1)
    expert = torch.where((flat >= 0) & (flat < num_experts), flat, num_experts)  # num_experts: not routed
    counts = torch.bincount(expert, minlength=num_experts + 1)[:num_experts]
    padded = (counts + block_size - 1) // block_size * block_size
    ends = torch.cumsum(padded, 0)
    order = torch.argsort(expert, stable=True)
    key = expert[order]
    rank = torch.arange(numel, device=device) - (torch.cumsum(counts, 0) - counts)[key.clamp(max=num_experts - 1)]
    dest = torch.where(key < num_experts, (ends - padded)[key.clamp(max=num_experts - 1)] + rank, length)
    sorted_ids = torch.full((length + 1,), numel, dtype=torch.int32, device=device)
    sorted_ids[dest] = order.int()
    blocks = torch.arange(-(-length // block_size), device=device) * block_size
    expert_ids = torch.searchsorted(ends, blocks, right=True).int()
    expert_ids[blocks >= ends[-1]] = -1
    return sorted_ids[:length], expert_ids, ends[-1:].int()


@ct.testing.perf_report(
    ct.testing.Benchmark(
        x_names=["tokens"],
        x_vals=[256, 1024, 4096, 16384],
        line_arg="provider",
        line_vals=["coop_tiles", "torch"],
        line_names=["moe_align_block_size", "PyTorch operations"],
        plot_name="15_moe_routing",
        xlabel="tokens (top-8 of 256 experts, blocks of 64)",
        ylabel="µs per call",
        x_log=True,
    )
)
def speed(tokens: int, provider: str) -> float:
    import torch

    ids = torch.randint(0, 256, (tokens, 8), device="cuda", dtype=torch.int32)
    align = moe_align_block_size if provider == "coop_tiles" else torch_align
    return 1e3 * ct.testing.do_bench(lambda: align(ids, 64, 256))


if __name__ == "__main__":
    small = np.array([[2, 0], [2, 1], [0, 2]], np.int32)
    sorted_ids, expert_ids, total = (to_host(a) for a in moe_align_block_size(*to_device(small), 2, 4))
    print("sorted_token_ids", sorted_ids[: total[0]], "expert_ids", expert_ids[: total[0] // 2], "padded", total[0])
    check(small, 2, 4)
    rng = np.random.default_rng(15)
    tokens = 4096 if ON_GPU else 300
    topk = rng.integers(0, 256, (tokens, 8)).astype(np.int32)
    topk.reshape(-1)[::101] = -1  # (skipped)
    check(topk, 64, 256)
    print(f"moe_align_block_size matches the sequential routing ({tokens} tokens, top-8 of 256 experts) {where()}")
    if ON_GPU:  # the speed report's baseline gives the same outputs
        import torch

        got = torch_align(torch.from_numpy(topk).cuda(), 64, 256)
        for g, w in zip(got, sequential(topk, 64, 256)):
            np.testing.assert_array_equal(g.cpu().numpy(), w)
    report_speed(speed)
