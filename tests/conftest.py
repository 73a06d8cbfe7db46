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


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
