"""The runtime: toolchain, caches, argument handling, loading and launching."""
