"""Real kernels written as tile programs, with host entry points: `selective_scan_fwd` and
`selective_state_update` (Mamba's selective scan forward and its decode step), `compact` and `nonzero`
(whole-array stream compaction in one launch), `moe_align_block_size` (mixture-of-experts routing)."""

from .compaction import compact, nonzero
from .moe import moe_align_block_size
from .selective_scan import selective_scan_fwd, selective_scan_reference
from .state_update import selective_state_update

__all__ = [
    "compact",
    "moe_align_block_size",
    "nonzero",
    "selective_scan_fwd",
    "selective_scan_reference",
    "selective_state_update",
]
