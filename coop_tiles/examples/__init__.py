"""Real kernels written as tile programs, with host entry points: `selective_scan_fwd` and
`selective_state_update` (Mamba's selective scan forward and its decode step)."""

from .selective_scan import selective_scan_fwd, selective_scan_reference
from .state_update import selective_state_update

__all__ = ["selective_scan_fwd", "selective_scan_reference", "selective_state_update"]
