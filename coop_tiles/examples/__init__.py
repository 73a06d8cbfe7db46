"""Real kernels written as tile programs, with host entry points: `selective_scan_fwd` and
`selective_state_update` (Mamba's selective scan forward and its decode step), `compact` and `nonzero`
(whole-array stream compaction in one launch)."""

from .compaction import compact, nonzero
from .selective_scan import selective_scan_fwd, selective_scan_reference
from .state_update import selective_state_update

__all__ = ["compact", "nonzero", "selective_scan_fwd", "selective_scan_reference", "selective_state_update"]
