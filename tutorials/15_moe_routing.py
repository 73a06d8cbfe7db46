"""Tutorial 15: mixture-of-experts routing (vLLM's `moe_align_block_size`) as tile programs, in one launch (two for very
many routes).

A mixture-of-experts layer sends each token to its top-k experts. The grouped GEMM that follows wants
the token copies (*routes*: route r is element r of `topk_ids`, read row-major) grouped by expert, each
group padded to a multiple of the GEMM's row block, so that every block of rows belongs to one expert:

  topk_ids = [[2, 0], [2, 1], [0, 2]]   (3 tokens, top-2, 4 experts, blocks of 2 rows)
  sorted_token_ids = [1, 4, | 3, 6, | 0, 2, | 5, 6]     (6: the sentinel, numel; `|`: block edges)
  expert_ids       = [0, 1, 2, 2]  (then -1 for the unused blocks)
  num_tokens_post_padded = [8]

`coop_tiles.examples.moe_align_block_size(topk_ids, block_size, num_experts)` computes these (read
`coop_tiles/examples/moe.py` beside this). A program takes a chunk of up to 2048 routes and:

  - sorts the chunk's expert ids with the route numbers as payload (`tile.sort`: a stable radix sort
    over the few bits an expert id has), so each expert's routes form a run in route order. An id
    outside `[0, num_experts)` is skipped: it sorts as the last expert with the route -1, so
    `placed = routes >= 0`;
  - ranks each route within its run: `tile.flag_heads` marks the runs, an exclusive `tile.scan` of the
    placed flags counts the placed routes before each, and a max-`tile.scan` carries that count from
    the run's head, so the rank is the difference (the skipped ids in the last run are not counted);
  - scatters each route to its group's start plus its rank (`tile.scatter`), and, where that position
    is a multiple of the block size, its expert to `expert_ids`: every group starts on a block edge,
    and every used block's first row is a route, so the routes write every used block's expert.

Where each expert's group starts takes the count of every expert's routes: `tile.histogram` of the
ids, rounded up to the block (`padded`), then an exclusive `tile.scan`. The padding (the sentinel
after each group's routes, up to its block edge, and past the padded total; -1 for the unused blocks)
comes from the counts too. Three ways, by size:

  1. Up to 2048 routes (256 tokens of top-8), where launching costs more than the work: one launch of
     `align_routes`. Program 0 sorts all the routes and needs no counts: the routes whose rank is a
     multiple of the block size each start a block, so an inclusive `tile.scan` of those flags
     numbers each route's block (from 1), and its position is `(block - 1) * block_size + rank %
     block_size`. The other programs count the
     routes (8 KB of ids each) and write the padding: the positions after each group's routes form an
     (experts, columns) 2-D tile (`(starts + counts)[:, None] + column[None, :]`, masked where the
     column is past the group's padding), each program its share of the columns.
  2. Up to 4 chunks (1024 tokens): one launch of `recount_routes`, a program per chunk. Each counts
     all the routes itself, those before its chunk apart (`h = h + tile.histogram(...)` in a loop,
     which keeps the counts in shared memory), so it knows each group's start and how many of each
     expert's routes come before its chunk; it stores their sum, and after the sort each route
     gathers its expert's entry (`tile.gather`) and adds its rank. It then writes its share of the
     padding as above.
  3. More chunks, where counting all the routes in every program costs more than a launch: two
     launches. `count_routes` stores each chunk's counts as one column of an (experts, programs)
     table, and fills the whole of `sorted_token_ids` with the sentinel; `place_routes` folds the
     table's columns, loaded as 2-D tiles of up to 64 columns (each thread sums one expert's row:
     `tile.sum(table, axis=1)`): all of them give the counts, those of the programs before it how
     many routes of each expert come before its chunk. Then it places its routes as in 2 and writes
     its share of the -1s. The routes overwrite the sentinels: the second launch starts after the
     first has finished.

In one launch no two programs write the same element (a program can't wait for another's writes),
and no program reads what another writes. The result is stable (routes of one expert in route
order), as vLLM's reference is. The checks below compare with a sequential implementation of
vLLM's semantics.

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
