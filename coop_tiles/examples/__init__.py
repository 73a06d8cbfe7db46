"""Real kernels written as tile programs, with host entry points: `selective_scan_fwd` and
`selective_state_update` (Mamba's selective scan forward and its decode step), `selective_scan_bwd` (its backward),
for PyTorch `selective_scan_fn` (differentiable: imports torch when asked for), `compact` and `nonzero`
(whole-array stream compaction in one launch), `moe_align_block_size` (mixture-of-experts routing),
`mamba_chunk_scan_combined` (Mamba-2's SSD chunked scan forward), `topk` and `top_p_sample` (top-k over rows
longer than a tile, and a nucleus sampler on it)."""

from typing import Any

from .compaction import compact, nonzero
from .moe import moe_align_block_size
from .sampling import top_p_sample, topk
from .selective_scan import selective_scan_fwd, selective_scan_reference
from .selective_scan_backward import selective_scan_bwd
from .ssd import mamba_chunk_scan_combined
from .state_update import selective_state_update

__all__ = [
    "compact",
    "mamba_chunk_scan_combined",
    "moe_align_block_size",
    "nonzero",
    "selective_scan_bwd",
    "selective_scan_fn",
    "selective_scan_fwd",
    "selective_scan_reference",
    "selective_state_update",
    "top_p_sample",
    "topk",
]


def __getattr__(name: str) -> Any:
    """`selective_scan_fn` from the module that imports torch and registers its ops, on first use."""
    if name == "selective_scan_fn":
        from .selective_scan_torch import selective_scan_fn

        return selective_scan_fn
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
