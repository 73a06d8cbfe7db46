"""The C launch path (_claunch.c) with PyTorch tensors, without a GPU: tests/claunch_torch_probe.py launches stand-in
tensors through it and through the Python path onto a stand-in driver (tests/fake_libcuda.c), in a process of its own,
and these tests check that the C path takes the common launches and packs what the Python path packs (both against
values worked out by hand), and that everything else still goes to `run`, which launches it or reports the same error.
tests/test_gpu_torch.py launches real tensors."""

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
HALF = struct.unpack("<Q", struct.pack("<d", 0.5))[0]  # the slot of the float argument 0.5
RAW_STREAM = 0x5000  # the stand-in PyTorch's current stream on device d is RAW_STREAM + d
FLOAT_KEY = "(11, 11, <class 'int'>, <class 'float'>, 128, 0)"  # float32 is NumPy's dtype number 11


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    pytest.importorskip("coop_tiles.runtime._claunch")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in driver")
    lib = tmp_path_factory.mktemp("fake_cuda") / "libcuda.so.1"
    build = [cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(lib), str(HERE / "fake_libcuda.c")]
    subprocess.run(build, check=True)
    done = subprocess.run(
        [sys.executable, str(HERE / "claunch_torch_probe.py"), str(lib)],
        cwd=HERE.parent, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def _c_launch(result: dict) -> dict:
    """The C path's launch of a call that took it (and so never entered `run`), without the buffer flag."""
    assert result["run"] == 0 and "python" not in result, result
    return {k: v for k, v in result["c"].items() if k != "whole_buffer"}


def _expected(function: int, grid: list[int], slots: list[int], stream: int = RAW_STREAM) -> dict:
    return {"function": function, "grid": grid, "block": 128, "shared": 64, "stream": stream, "slots": slots}


def test_the_first_tensor_of_a_kind_teaches_the_python_path_its_key_and_later_ones_launch_in_c(probe):
    first = probe["first_of_its_kind"]
    assert first["run"] == 1 and "c" not in first
    expected = _expected(probe["keys"][FLOAT_KEY], [3, 1, 1], [0x10000, 10, 0x20000, 7, 5, HALF])
    assert first["python"] == expected
    assert _c_launch(probe["flat"]) == probe["flat_python"] == expected
    assert probe["flat"]["c"]["whole_buffer"]  # all parameters 8 bytes wide: one buffer for the driver


def test_strided_and_n_d_tensors_on_tuple_grids_pack_as_the_python_path_packs(probe):
    # (3, 5) C order: pointer, both extents, the first stride; (4,) of stride 3: pointer, extent, stride
    key = "((11, 2, True), (11, 1, False), <class 'int'>, <class 'float'>, 128, 0)"
    expected = _expected(probe["keys"][key], [2, 3, 1], [0x30000, 3, 5, 5, 0x40000, 4, 3, 6, HALF])
    assert _c_launch(probe["strided"]) == probe["strided_python"] == expected
    # (2, 3, 4) of strides (1, 2, 6): all three strides; 1-D bfloat16, whose key is a tuple (its dtype number is
    # not unique)
    key = "((dtype(bfloat16), 3, False), (dtype(bfloat16), 1, True), <class 'int'>, <class 'float'>, 128, 0)"
    slots = [0x50000, 2, 3, 4, 1, 2, 6, 0x60000, 8, 7, HALF]
    assert _c_launch(probe["bf16"]) == probe["bf16_python"] == _expected(probe["keys"][key], [1, 2, 3], slots)


def test_a_parameter_and_a_last_axis_of_one_take_the_c_path(probe):
    key = probe["keys"]["((11, 2, True), 11, <class 'int'>, <class 'float'>, 128, 0)"]
    slots = [0x70000, 3, 5, 5, 0x20000, 7, 1, HALF]
    assert _c_launch(probe["parameter"]) == _expected(key, [4, 1, 1], slots)
    # (3, 1) of strides (2, 2): a last axis of one element has a unit stride, which is left out
    slots = [0x80000, 3, 1, 2, 0x20000, 7, 1, HALF]
    assert _c_launch(probe["last_axis_of_one"]) == _expected(key, [2, 1, 1], slots)


def test_a_raw_stream_handle_is_the_launchs_stream(probe):
    slots = [0x10000, 10, 0x20000, 7, 5, HALF]
    assert _c_launch(probe["int_stream"]) == _expected(probe["keys"][FLOAT_KEY], [2, 1, 1], slots, stream=0x777)


@pytest.mark.parametrize("case", ["other_subclass", "stream_object", "other_context"])
def test_unusual_launches_go_to_run_which_launches_them(probe, case):
    """Another Tensor subclass, a stream object, another context current: the Python path launches."""
    result = probe[case]
    assert result["run"] == 1 and "c" not in result
    stream = 0x999 if case == "stream_object" else RAW_STREAM
    slots = [0x10000, 10, 0x20000, 7, 5, HALF]
    assert result["python"] == _expected(probe["keys"][FLOAT_KEY], [3, 1, 1], slots, stream)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("bool_grid", "grid must be an int or a tuple of 1 to 3 ints (or a callable returning one), got (True,)"),
        ("cpu_tensor", "argument 'x' is a PyTorch tensor on the CPU; move it to the GPU with .cuda()"),
        ("zero_d", "argument 'x' is a 0-d array; pass a number, or an array of at least one dimension"),
        ("complex", "argument 'x' has PyTorch dtype torch.complex64, which coop_tiles does not support"),
        ("constexpr_left_out", "probe is missing arguments: TILE"),
    ],
)
def test_mistakes_go_to_run_which_reports_them_as_before(probe, case, message):
    assert probe[case] == {"error": ["LaunchError", message], "run": 1}


def test_a_zero_grid_goes_to_run_and_launches_nothing(probe):
    assert probe["zero_grid"] == {"run": 1}


def test_with_several_gpus_each_tensors_device_picks_the_specialisation_and_the_stream(probe):
    keys = probe["many_keys"]
    slots = [0x10000, 10, 0x20000, 7, 5, HALF]
    assert _c_launch(probe["many_devices"]) == _expected(keys[FLOAT_KEY], [3, 1, 1], slots)
    on_1 = keys["(11, 11, <class 'int'>, <class 'float'>, 128, 1)"]
    assert _c_launch(probe["device_1"]) == _expected(on_1, [3, 1, 1], slots, stream=RAW_STREAM + 1)
    assert probe["mixed_devices"] == {
        "error": [
            "LaunchError",
            "arguments 'x' and 'y' are on different devices (GPU 0 and GPU 1); a launch runs on the device of its "
            "arrays, so move them to one device",
        ],
        "run": 1,
    }


def test_sm_90_kernels_are_launched_allowing_programmatic_stream_serialization_by_both_paths(probe):
    function = probe["programmatic_keys"][FLOAT_KEY]
    slots = [0x10000, 10, 0x20000, 7, 5, HALF]
    assert _c_launch(probe["programmatic"]) == {**_expected(function, [3, 1, 1], slots), "programmatic": True}
    assert probe["programmatic_python"] == {**_expected(function, [2, 3, 1], slots), "programmatic": True}
    assert "programmatic" not in probe["flat"]["c"] and "programmatic" not in probe["flat_python"]
