"""The front end: tile-program source, its typed IR, and the NumPy interpreter."""
