"""Builds the optional C launch fast path; everything else is in pyproject.toml.

The extension is optional: if it cannot be compiled, coop_tiles installs without it and
launches through its Python fast path.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("coop_tiles.runtime._claunch", ["coop_tiles/runtime/_claunch.c"], optional=True)])
