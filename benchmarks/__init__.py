"""coop_tiles benchmarks: `python benchmarks/run.py` (see its docstring) writes docs/benchmarks.md.

run.py is the command line; `sections/` has one module per section (its measurements, its markdown, its name and what
it needs, as a `Section`); `timing.py` (CUDA-event timing, tuning over configs, failures as rows), `device.py` (arrays
and the device), `cub.py` (the CUB baselines, built with nvcc at run time), `kernels.py` (the tile programs several
sections time) and `report.py` (the page's header and table cells) are shared by them; `compare.py` sets the results of
two trees side by side (`run.py --baseline-tree`)."""
