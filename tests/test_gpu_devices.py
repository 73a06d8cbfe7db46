"""Launching on two GPUs in one process (needs two GPUs): each launch runs on its arrays' device."""

from __future__ import annotations

import inspect
import threading

import numpy as np
import pytest

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.runtime import launcher

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(launcher.device_count() < 2, reason="needs two GPUs"),
]

TILE = 1024


@ct.jit
def scaled_cumsum(x, out, n, alpha, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base)
    tile.store(out, base, tile.scan(t, op="add") * alpha, valid=n - base)


def reference(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.concatenate([np.cumsum(x[i : i + TILE]) for i in range(0, len(x), TILE)]) * alpha


def test_pytorch_tensors_on_the_second_gpu():
    torch = pytest.importorskip("torch")
    n = 5000
    host = np.random.default_rng(0).random(n, dtype=np.float32)
    torch.cuda.set_device(0)
    x = torch.from_numpy(host).to("cuda:1")
    out = torch.zeros(n, device="cuda:1")
    scaled_cumsum[ct.cdiv(n, TILE)](x, out, n, 2.0, TILE=TILE)
    torch.cuda.synchronize(1)
    np.testing.assert_allclose(out.cpu().numpy(), reference(host, 2.0), rtol=1e-5)
    assert torch.cuda.current_device() == 0  # the caller's current device is left as it was
    assert {key[-1] for key in scaled_cumsum._kernels} >= {1}


def test_cupy_arrays_under_each_device():
    cp = pytest.importorskip("cupy")
    n = 3000
    host = np.arange(n, dtype=np.float32) % 7
    for device in (0, 1):
        with cp.cuda.Device(device):
            x = cp.asarray(host)
            out = cp.zeros(n, cp.float32)
            for _ in range(3):  # the first launch prepares, the others take the fast paths
                scaled_cumsum[ct.cdiv(n, TILE)](x, out, n, 0.5, TILE=TILE)
            np.testing.assert_allclose(out.get(), reference(host, 0.5), rtol=1e-5)
    # CuPy arrays of device 1 while device 0 is current: still launched on device 1
    with cp.cuda.Device(1):
        x, out = cp.asarray(host), cp.zeros(n, cp.float32)
    scaled_cumsum[ct.cdiv(n, TILE)](x, out, n, 1.0, TILE=TILE)
    with cp.cuda.Device(1):
        np.testing.assert_allclose(out.get(), reference(host, 1.0), rtol=1e-5)


def test_arrays_on_two_devices_are_a_located_error():
    cp = pytest.importorskip("cupy")
    with cp.cuda.Device(0):
        x = cp.zeros(16, cp.float32)
    with cp.cuda.Device(1):
        out = cp.zeros(16, cp.float32)
    with pytest.raises(ct.LaunchError) as info:
        scaled_cumsum[1](x, out, 16, 1.0, TILE=TILE)  # HERE
    assert info.value.loc.line == inspect.currentframe().f_lineno - 1
    assert info.value.message == (
        "arguments 'x' and 'out' are on different devices (GPU 0 and GPU 1); "
        "a launch runs on the device of its arrays, so move them to one device"
    )


def test_a_stream_of_another_device_is_a_located_error():
    cp = pytest.importorskip("cupy")
    with cp.cuda.Device(1):
        x, out = cp.zeros(16, cp.float32), cp.zeros(16, cp.float32)
    with cp.cuda.Device(0):
        stream = cp.cuda.Stream(non_blocking=True)
    for launch in (lambda: scaled_cumsum[1, stream], lambda: scaled_cumsum[(1,), stream.ptr]):
        with pytest.raises(ct.LaunchError) as info:
            launch()(x, out, 16, 1.0, TILE=TILE)
        assert info.value.message == (
            "the stream is on GPU 0 but the launch runs on GPU 1 (the device of its arrays); "
            "pass a stream of GPU 1, or none for the current stream there"
        )


def test_two_threads_launch_on_two_devices_at_once():
    cp = pytest.importorskip("cupy")
    kernel = ct.jit(scaled_cumsum.fn)  # nothing compiled yet: both threads prepare at once
    n, launches = 4096, 200
    host = np.random.default_rng(1).random(n, dtype=np.float32)
    results, errors = {}, []
    barrier = threading.Barrier(2)

    def work(device: int) -> None:
        try:
            with cp.cuda.Device(device):
                x, out = cp.asarray(host), cp.zeros(n, cp.float32)
                barrier.wait()
                for i in range(launches):
                    kernel[ct.cdiv(n, TILE)](x, out, n, float(i % 3 + device), TILE=TILE)
                results[device] = out.get()
        except Exception as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for device in (0, 1):
        np.testing.assert_allclose(results[device], reference(host, (launches - 1) % 3 + device), rtol=1e-5)
    assert {key[-1] for key in kernel._kernels} == {0, 1}


def test_autotune_on_the_second_device(monkeypatch, tmp_path):
    cp = pytest.importorskip("cupy")
    monkeypatch.setenv("COOP_TILES_CACHE_DIR", str(tmp_path))
    configs = [ct.Config(block_threads=b, TILE=t) for b, t in ((128, 1024), (256, 2048))]
    tuned = ct.autotune(configs=configs, key=["n"], reset=["out"])(ct.jit(scaled_cumsum.fn))
    n = 1 << 16
    host = np.random.default_rng(2).random(n, dtype=np.float32)
    with cp.cuda.Device(1):
        x, out = cp.asarray(host), cp.zeros(n, cp.float32)
    tuned[lambda meta: ct.cdiv(n, meta["TILE"])](x, out, n, 1.0)
    best = tuned._best[next(iter(tuned._best))]
    expected = np.concatenate([np.cumsum(c) for c in host.reshape(-1, best.kwargs["TILE"])])
    with cp.cuda.Device(1):
        np.testing.assert_allclose(out.get(), expected, rtol=1e-4)
    assert {key[-1] for variant in tuned._variants.values() for key in variant._kernels} == {1}
