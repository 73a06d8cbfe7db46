"""Real kernels written as tile programs, with host entry points: `selective_scan_fwd` (Mamba)."""

from .selective_scan import selective_scan_fwd, selective_scan_reference

__all__ = ["selective_scan_fwd", "selective_scan_reference"]
