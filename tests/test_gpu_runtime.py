"""Runtime behaviour on a GPU: array libraries, streams, dynamic shared memory (needs a GPU)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from programs import ref_scaled_cumsum as scaled_cumsum_reference
from programs import scaled_cumsum, tile_scan, vector_add

import coop_tiles as ct
from coop_tiles import tile

pytestmark = pytest.mark.gpu


def test_pytorch_and_numba_arrays():
    torch = pytest.importorskip("torch")
    from numba import cuda

    n = 3001
    x = torch.randn(n, device="cuda")
    out = torch.zeros(n, device="cuda")
    vector_add[ct.cdiv(n, 512)](x, x, out, n, TILE=512)
    torch.testing.assert_close(out, 2 * x)
    xn = cuda.to_device(np.arange(n, dtype=np.float32))
    outn = cuda.device_array(n, np.float32)
    vector_add[ct.cdiv(n, 512)](xn, xn, outn, n, TILE=512)
    np.testing.assert_array_equal(outn.copy_to_host(), 2 * np.arange(n, dtype=np.float32))


def _captured(stream, launch):
    """Run `launch` under CUDA graph capture of `stream`: a launch on any other stream fails
    the capture (or leaves the work out of the graph), so the result proves the stream used."""
    stream.begin_capture()
    launch()
    graph = stream.end_capture()
    graph.launch(stream)
    stream.synchronize()


@pytest.mark.parametrize("how", ["current", "explicit", "raw_handle"])
def test_launches_on_the_callers_cupy_stream(how):
    cp = pytest.importorskip("cupy")
    n = 10_000
    x = cp.arange(n, dtype=cp.float32)
    out = cp.zeros(n, cp.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    vector_add[ct.cdiv(n, 1024)](x, x, out, n, TILE=1024)  # compile and load outside the capture
    cp.cuda.runtime.deviceSynchronize()
    out.fill(0)
    launches = {
        "current": lambda: vector_add[ct.cdiv(n, 1024)](x, x, out, n, TILE=1024),
        "explicit": lambda: vector_add[ct.cdiv(n, 1024), stream](x, x, out, n, TILE=1024),
        "raw_handle": lambda: vector_add[(ct.cdiv(n, 1024),), stream.ptr](x, x, out, n, TILE=1024),
    }
    with stream:
        _captured(stream, launches[how])
    np.testing.assert_array_equal(cp.asnumpy(out), 2 * np.arange(n, dtype=np.float32))


def test_launches_on_the_current_pytorch_stream():
    torch = pytest.importorskip("torch")
    n = 10_000
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    out = torch.zeros(n, device="cuda")
    vector_add[ct.cdiv(n, 1024)](x, x, out, n, TILE=1024)
    torch.cuda.synchronize()
    out.zero_()
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        vector_add[ct.cdiv(n, 1024)](x, x, out, n, TILE=1024)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 2 * x)


def test_about_100_kib_of_dynamic_shared_memory():
    cp = pytest.importorskip("cupy")
    big = ct.jit(tile_scan.fn, block_threads=512)
    n, tile_size = 50_000, 12288
    x = cp.asarray(np.random.default_rng(1).standard_normal(n))
    y = cp.zeros(n, cp.float64)
    k = big.compile(x.get(), y.get(), n, TILE=tile_size, OP="add", EXCLUSIVE=False)
    assert 96 * 1024 < k.shared_bytes < 120 * 1024
    big[ct.cdiv(n, tile_size)](x, y, n, TILE=tile_size, OP="add", EXCLUSIVE=False)
    xh = x.get()
    expected = np.concatenate([np.cumsum(xh[i : i + tile_size]) for i in range(0, n, tile_size)])
    np.testing.assert_allclose(y.get(), expected, rtol=1e-9, atol=1e-9)


def test_more_shared_memory_than_the_device_has_is_a_clear_error():
    cp = pytest.importorskip("cupy")
    huge = ct.jit(tile_scan.fn, block_threads=1024)
    n, tile_size = 40_000, 32768
    x = cp.zeros(n, cp.float64)
    with pytest.raises(ct.SharedMemoryError, match=r"needs \d+ bytes of shared memory per block, more than .* limit"):
        huge[ct.cdiv(n, tile_size)](x, x, n, TILE=tile_size, OP="add", EXCLUSIVE=False)


@ct.jit
def scalars_out(out, a, b, c, d, e, f):
    out[0] = a
    out[1] = b
    out[2] = c
    out[3] = d
    out[4] = e
    if f:
        out[5] = 1


def test_every_scalar_parameter_kind_reaches_the_kernel():
    cp = pytest.importorskip("cupy")
    out = cp.zeros(6, cp.float64)
    scalars_out[1](out, np.float32(1.5), np.uint8(250), np.int16(-300), 2**40 + 3, -2.25, True)
    np.testing.assert_array_equal(out.get(), [1.5, 250, -300, 2**40 + 3, -2.25, 1])
    out.fill(0)
    scalars_out[1](out, np.float32(-0.5), np.uint8(1), np.int16(7), -(2**62), 1e300, False)
    np.testing.assert_array_equal(out.get(), [-0.5, 1, 7, -(2**62), 1e300, 0])
    with pytest.raises(ct.LaunchError, match="does not fit"):
        scalars_out[1](out, np.float32(0), np.uint8(0), np.int16(0), 2**63, 0.0, False)


class DLPackOnly:
    """An array that offers only DLPack (no __cuda_array_interface__)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_dlpack_only_arrays():
    cp = pytest.importorskip("cupy")
    n = 1000
    x = cp.arange(n, dtype=cp.float32)
    out = cp.zeros(n, cp.float32)
    vector_add[ct.cdiv(n, 256)](DLPackOnly(x), DLPackOnly(x), DLPackOnly(out), n, TILE=256)
    np.testing.assert_array_equal(out.get(), 2 * np.arange(n, dtype=np.float32))


@ct.jit
def out_of_range(x, out, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=-1)  # n is larger than x
    tile.store(out, base, t, valid=n - base)  # and than out
    out[0] = x[n + 5]  # past the end: reads 0
    x[n + 5] = 3.0  # past the end: skipped


def test_accesses_past_the_end_of_an_array_are_masked_not_faults():
    cp = pytest.importorskip("cupy")

    x = cp.arange(100, dtype=cp.float32) + 1
    out = cp.zeros(90, cp.float32)
    out_of_range[4](x, out, 1000, TILE=64)
    cp.cuda.runtime.deviceSynchronize()  # a fault would surface here
    expected = np.arange(1, 91, dtype=np.float32)
    expected[0] = 0
    np.testing.assert_array_equal(out.get(), expected)
    np.testing.assert_array_equal(x.get(), np.arange(100, dtype=np.float32) + 1)
    with pytest.raises(ct.TileValueError, match="index 1005 is outside an array of 100 elements"):
        ct.jit(out_of_range.fn, interpret=True)[4](x.get(), out.get(), 1000, TILE=64)


def test_c_launch_path_is_taken_and_correct():
    cp = pytest.importorskip("cupy")
    claunch = pytest.importorskip("coop_tiles.runtime._claunch")
    kernel = ct.jit(vector_add.fn)
    n = 5000
    x, out = cp.arange(n, dtype=cp.float32), cp.zeros(n, cp.float32)
    kernel[ct.cdiv(n, 512)](x, x, out, n, TILE=512)  # the first call compiles through run()
    assert isinstance(kernel[1], claunch.BoundLaunch)
    fallbacks = []
    run = kernel.run
    kernel.run = lambda *call: fallbacks.append(call[0]) or run(*call)  # the C path's fallback
    y = cp.ones(n, dtype=cp.float32)
    for _ in range(2):  # the second call reuses the first's remembered signature
        kernel[ct.cdiv(n, 512)](x, y, out, n, TILE=512)
        np.testing.assert_array_equal(out.get(), np.arange(n, dtype=np.float32) + 1)
        out.fill(0)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:  # the current CuPy stream, read through CuPy's C API
        _captured(stream, lambda: kernel[ct.cdiv(n, 512)](y, y, out, n, TILE=512))
    np.testing.assert_array_equal(out.get(), np.full(n, 2, np.float32))
    assert fallbacks == []
    kernel[3](x, y, out, 2, TILE=256)  # a new constexpr: compiled through run(), then launched in C
    kernel[3](x, y, out, 2, TILE=256)
    assert fallbacks == [3]
    assert out.get()[:2].tolist() == [1, 2]


def test_c_launch_path_hands_the_driver_one_parameter_buffer_of_arrays_ints_and_floats():
    cp = pytest.importorskip("cupy")
    pytest.importorskip("coop_tiles.runtime._claunch")
    kernel = ct.jit(scaled_cumsum.fn)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(5000)
    y = cp.zeros(5000)
    kernel[ct.cdiv(5000, 1024)](cp.asarray(x), y, 5000, 0.5, TILE=1024)  # compiles through run()
    (prepared,) = kernel._kernels.values()
    assert prepared.c_info[6] == 8 * 6  # x and y (pointer, length), n, alpha: all 8-byte parameters
    fallbacks = []
    run = kernel.run
    kernel.run = lambda *call: fallbacks.append(call) or run(*call)
    for n, alpha in [(4999, -1.25), (1, 3.0), (3000, 1e-3)]:
        y.fill(0)
        kernel[ct.cdiv(n, 1024)](cp.asarray(x), y, n, alpha, TILE=1024)
        expected = np.zeros(5000)
        scaled_cumsum_reference(x, expected, n, alpha, 1024)
        np.testing.assert_allclose(y.get(), expected, rtol=1e-12, atol=1e-12)
    assert fallbacks == []


@pytest.mark.parametrize("path", ["c", "python"])
def test_dependent_launches_see_the_whole_previous_kernel(path):
    """Each launch reads every element the one before it wrote: on sm_90 and later both are launched allowing
    programmatic stream serialization, and a kernel's entry must wait for all of the previous kernel's blocks (a block
    of this one that read early would see a stale element, and the count would come out short)."""
    cp = pytest.importorskip("cupy")
    kernel = ct.jit(vector_add.fn)
    n, launches = 1 << 24, 40
    one = cp.ones(n, cp.float32)
    a, b = cp.zeros(n, cp.float32), cp.zeros(n, cp.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        grid = (ct.cdiv(n, 4096),) if path == "c" else ((ct.cdiv(n, 4096),), stream)  # a stream object: Python
        for _ in range(launches // 2):
            kernel[grid](a, one, b, n, TILE=4096)
            kernel[grid](b, one, a, n, TILE=4096)
    stream.synchronize()
    (prepared,) = kernel._kernels.values()
    sm = cp.cuda.Device().compute_capability
    assert prepared.programmatic == (int(sm) >= 90) and prepared.c_info[9] == (int(sm) >= 90)
    assert int(cp.count_nonzero(a != launches)) == 0


def test_cupy_imported_after_the_first_launch():
    """A kernel first launched before CuPy was imported then launches CuPy arrays, through the
    fast paths rebuilt for CuPy, on CuPy's current stream."""
    pytest.importorskip("cupy")
    pytest.importorskip("torch")
    script = textwrap.dedent(
        """
        import sys, torch, numpy as np
        sys.path.insert(0, "tests")
        from programs import vector_add
        import coop_tiles as ct
        t = torch.arange(300, dtype=torch.float32, device="cuda")
        out = torch.zeros(300, device="cuda")
        vector_add[1](t, t, out, 300, TILE=512)
        assert "cupy" not in sys.modules
        import cupy as cp
        x, o = cp.arange(300, dtype=cp.float32), cp.zeros(300, cp.float32)
        for _ in range(3):
            vector_add[1](x, x, o, 300, TILE=512)
        np.testing.assert_array_equal(o.get(), 2 * np.arange(300, dtype=np.float32))
        np.testing.assert_array_equal(out.cpu().numpy(), 2 * np.arange(300, dtype=np.float32))
        print("ok")
        """
    )
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


@ct.jit
def every_dtype_out(out, i8, u16, i32, u32, i64, u64, f16, bf16, f64, flag):
    out[0] = i8
    out[1] = u16
    out[2] = i32
    out[3] = u32
    out[4] = i64
    out[5] = u64
    out[6] = f16
    out[7] = bf16
    out[8] = f64
    out[9] = flag


def test_scalar_parameters_of_every_dtype_reach_the_kernel():
    """Both launch paths (a first call compiles through Python, the second takes the fast path)."""
    cp = pytest.importorskip("cupy")
    out = cp.zeros(10, cp.float64)
    for _ in range(2):
        values = (
            np.int8(-100),
            np.uint16(65000),
            np.int32(-(2**31)),
            np.uint32(2**32 - 1),
            np.int64(-(2**40)),
            np.uint64(2**53),
            np.float16(-1.5),
            ct.bfloat16(3.25),
            np.float64(1e-300),
            np.bool_(True),
        )
        every_dtype_out[1](out, *values)
        np.testing.assert_array_equal(out.get(), [float(v) for v in values])


def test_strided_numba_and_dlpack_arrays():
    """2-D views from Numba (__cuda_array_interface__ with strides) and DLPack-only arrays are read
    in place, and writes land in the caller's view."""
    cp = pytest.importorskip("cupy")
    from numba import cuda
    from programs import rows_cumsum

    x = np.random.default_rng(3).uniform(0, 1, (700, 6)).astype(np.float32)
    expected = np.cumsum(x.T, axis=1, dtype=np.float64)
    numba_view = cuda.to_device(x).T  # (6, 700) with strides (4, 24): rows are strided
    out = cp.zeros((6, 700), cp.float32)
    rows_cumsum[6](numba_view, out, CHUNK=256)
    np.testing.assert_allclose(out.get(), expected, rtol=1e-5, atol=1e-4)
    base = cp.zeros((700, 6), cp.float32)
    rows_cumsum[6](DLPackOnly(cp.asarray(x).T), DLPackOnly(base.T), CHUNK=256)  # the output is a strided view too
    np.testing.assert_allclose(base.get().T, expected, rtol=1e-5, atol=1e-4)


def test_cupy_arrays_of_any_rank_classify_as_their_device_arrays_do():
    """The classifier's CuPy path (from the second array of a dtype, rank and stride kind on) gives the key and launch
    values that reading the array as a DeviceArray gives (tests/test_devices.py checks the same with fake arrays)."""
    cp = pytest.importorskip("cupy")

    from coop_tiles.runtime.classify import Classifier

    base = cp.arange(2 * 3 * 8, dtype=cp.float32).reshape(2, 3, 8)
    arrays = [base[0, 0], base[0, :, 1], base[0], base[0].T, base, base.transpose(2, 0, 1), base[:, :, :1]]
    arrays += [base.astype(cp.int64)[:, 1:, ::2], base[0, :, ::-2]]
    fresh, warm = Classifier(), Classifier()
    for a in arrays:
        warm.classify(a, "x")
    for a in arrays:
        assert warm.classify(a, "x") == fresh._array(a, "x")


def test_pytorch_tensors_of_any_rank_classify_as_their_device_arrays_do():
    """The classifier's fast path for PyTorch tensors (from the second tensor of a dtype, rank and stride kind
    on) gives the key and launch values that reading the tensor as a DeviceArray gives."""
    import torch

    from coop_tiles.runtime.classify import Classifier

    base = torch.arange(2 * 3 * 8, device="cuda", dtype=torch.float32).reshape(2, 3, 8)
    tensors = [
        base[0, 0],
        base[0, :, 1],
        base[0],
        base[0].T,
        base,
        base.permute(2, 0, 1),
        base[:, :, :1],
        base.to(torch.bfloat16)[1],
        base.to(torch.int64)[:, 1:, ::2],
    ]
    fresh, warm = Classifier(), Classifier()
    for t in tensors:  # the first of each kind takes the slow path in `warm` and teaches it the key
        warm.classify(t, "x")
    for t in tensors:
        assert warm.classify(t, "x") == fresh._array(t, "x")
