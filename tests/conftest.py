import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


from coop_tiles.runtime.launcher import gpu_available  # noqa: E402

HAS_GPU = gpu_available()


def pytest_configure(config):
    # Every program the suite builds, compiles or interprets has its IR verified after each stage.
    os.environ["COOP_TILES_VERIFY_IR"] = "1"
    # Keep the suite's compiled artefacts out of the user's cache unless told otherwise.
    if "COOP_TILES_CACHE_DIR" not in os.environ:
        os.environ["COOP_TILES_CACHE_DIR"] = str(Path(config.rootpath) / ".pytest_cache" / "coop_tiles")


#: The longest tests on a CI machine (2 cores, no GPU), longest first: each compiles a program with libmathdx GEMMs
#: (tens of seconds of NVRTC each) or a large one. Collected first, so that pytest-xdist hands them out at the start
#: (its first round goes to the workers in turn) and no worker is left with one of them while the others are idle.
#: (The option matrix's compiles are not here: their module fixture fills the cache in a pool of processes.)
SLOWEST = (
    "tests/test_ssd.py::test_programs_compile_to_cubins",
    "tests/test_dot_loop.py::test_tutorial_12_compiles_at_sm_90a_with_tma_and_wgmma_in_its_k_loop",
    "tests/test_ssd.py::test_seq_idx_programs_compile_to_cubins",
    "tests/test_selective_scan_backward.py::test_compiled_kernel_two_channels_per_program",
    "tests/test_ssd.py::test_capped_scan_block_compiles_without_local_memory",
    "tests/test_topk_rows.py::test_programs_compile",
    "tests/test_moe.py::test_programs_compile",
    "tests/test_compile.py::test_compiles_to_cubin[sm_90-large_tile[65536]]",
    "tests/test_selective_scan_backward.py::test_compiled_kernel[bfloat16]",
    "tests/test_selective_scan_backward.py::test_compiled_kernel[float32-deterministic]",
)


def pytest_collection_modifyitems(config, items):
    rank = {nodeid: i for i, nodeid in enumerate(SLOWEST)}
    items.sort(key=lambda item: rank.get(item.nodeid, len(SLOWEST)))  # (stable: the rest keep their order)
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
