"""Chained scans (`tile.scan(..., chained=True)`) beyond the shared cases of programs.py: the generated
code (no GPU), the interpreter's launches, and on a GPU against NumPy: dtypes and ops, 1, 2 and 10^5
programs, repeated launches, two streams at once, and CUDA graph capture."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from programs import chained_linrec, chained_scan, vector_add

import coop_tiles as ct
from coop_tiles import tile
from coop_tiles.ops.chained import descriptor_bytes, item_bytes


@ct.jit
def cumsum(x, y, n, TILE: ct.constexpr):
    base = ct.program_id(0) * TILE
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    tile.store(y, base, tile.scan(t, chained=True), valid=n - base)


# ----- without a GPU ----------------------------------------------------------------------------------------------
def test_a_chained_kernel_takes_tickets_and_publishes_tag_and_value_in_one_access():
    x = np.zeros(1, np.int32)
    k = cumsum.compile(x, x, 1, TILE=4096, arch="sm_90")
    assert k.chain_bytes == 16
    assert "unsigned char* coop_grid_state)" in k.shim_source
    # the body prefetches its tile for program id = block index, then takes its ticket, then loads for the ticket
    body = k.numba_source
    assert body.index("cuda.blockIdx.x") < body.index("coop_prefetch_0(") < body.index("coop_chain_begin(")
    assert body.index("coop_chain_begin(") < body.index("coop_chain_tile()") < body.index("coop_load_0(")
    assert body.count("blockIdx") == 1 and "prefetch.global.L2" in k.shim_source
    assert "InclusiveScan(y, y, coop::add{}, cb)" in k.shim_source  # the look-back inside CUB's block scan
    assert "scan[add, chained]" in str(k.plan)
    ptx = k.ptx
    assert "atom.relaxed.gpu.add.u64" in ptx  # the ticket and the epoch in one atomic
    assert "ld.relaxed.gpu" in ptx and ".b128" in ptx
    assert k.local_memory_bytes() == 0


def test_items_over_8_bytes_publish_a_status_word_after_their_value():
    f = np.zeros(1, np.float64)
    k = chained_linrec.compile(f, f, f, f, 1, TILE=512, EXCLUSIVE=False, arch="sm_90")
    assert k.chain_bytes == descriptor_bytes([np.dtype(np.float64)] * 2) == 8 + 2 * 16
    assert "st.release.gpu" in k.ptx and "ld.acquire.gpu" in k.ptx


@ct.jit
def offsets_from_memory(x, starts, y, n, TILE: ct.constexpr):
    pid = ct.program_id(0)
    base = starts[pid]  # read from memory: not guessed before the ticket
    t = tile.load(x, base, TILE, valid=n - base, other=0)
    u = tile.load(x, pid * TILE, TILE, valid=n - pid * TILE, other=0)
    tile.store(y, pid * TILE, tile.scan(t + u, chained=True), valid=n - pid * TILE)


def test_only_loads_whose_operands_are_arithmetic_on_the_program_id_are_prefetched():
    x = np.zeros(1, np.int32)
    k = offsets_from_memory.compile(x, np.zeros(1, np.int64), x, 1, TILE=1024, arch="sm_90")
    body = k.numba_source
    assert "coop_prefetch_0(" not in body and "coop_prefetch_1(" in body
    assert body.index("coop_prefetch_1(") < body.index("coop_chain_begin(")


@pytest.mark.parametrize(
    "dtypes, size",
    [((np.int8,), 1), ((np.float32, np.float32), 8), ((np.float32, np.int64), 16), ((np.int8, np.int16, np.int8), 6)],
)
def test_item_bytes_follow_c_struct_layout(dtypes, size):
    assert item_bytes([np.dtype(d) for d in dtypes]) == size  # the shim static_asserts the same


def test_interpreted_launches_start_afresh():
    k = ct.jit(cumsum.fn, interpret=True)
    x = np.arange(1, 301, dtype=np.int64)
    for _ in range(2):
        y = np.zeros_like(x)
        k[ct.cdiv(300, 64)](x, y, 300, TILE=64)
        np.testing.assert_array_equal(y, np.cumsum(x))


def test_elements_past_valid_take_part_with_their_other_value():
    @ct.jit(interpret=True)
    def padded(x, y, n, TILE: ct.constexpr):
        base = ct.program_id(0) * TILE
        t = tile.load(x, base, TILE, valid=n - base, other=1)
        tile.store(y, base, tile.scan(t, chained=True), valid=TILE)

    x, y = np.zeros(10, np.int32), np.zeros(16, np.int32)
    padded[2](x, y, 5, TILE=8)  # programs 0 and 1 each see 8 elements, 5 of them read
    np.testing.assert_array_equal(y, np.concatenate([np.zeros(5), np.arange(1, 12)]))


def test_the_launch_passes_the_grid_state_last_and_frees_a_captured_one():
    import ctypes
    from types import SimpleNamespace

    from coop_tiles.runtime.launcher import PreparedLaunch

    x = np.zeros(1, np.int32)
    k = cumsum.compile(x, x, 1, TILE=256, arch="sm_90")
    prepared = PreparedLaunch(k, SimpleNamespace(handle=0), [t for _, t in k.signature.params])
    assert prepared.c_info is None  # the C launch path leaves chained kernels to the Python one
    calls = []

    class States:
        def acquire(self, stream, programs, per_program):
            calls.append(("acquire", stream, programs, per_program))
            return 0xABC00, True

        def release(self, ptr, stream):
            calls.append(("release", ptr, stream))

    def fake_launch(f, g0, g1, g2, b0, b1, b2, shared, stream, params, extra):
        pointers = (ctypes.c_void_p * 6).from_address(params)
        calls.append(("launch", g0, [ctypes.c_uint64.from_address(pointers[i]).value for i in range(6)]))
        return ("ok",)

    def fake_launch_ex(config, f, params, extra):  # (an sm_90 kernel: launched allowing programmatic serialization)
        grid, block = (config.gridDimX, config.gridDimY, config.gridDimZ), config.blockDimX
        return fake_launch(f, *grid, block, 1, 1, config.sharedMemBytes, int(config.hStream), params, extra)

    assert prepared.programmatic
    namespace = prepared.launch.__globals__
    namespace.update(STATES=States(), LAUNCH=fake_launch, LAUNCH_EX=fake_launch_ex, OK="ok")
    prepared.launch(7, 1, 1, 99, 0x1000, 10, 0x2000, 20, 30, 0)
    assert calls == [
        ("acquire", 99, 7, 16),
        ("launch", 7, [0x1000, 10, 0x2000, 20, 30, 0xABC00]),
        ("release", 0xABC00, 99),
    ]
    with pytest.raises(ct.LaunchError, match="this launch's grid is 7 x 2 x 1"):
        prepared.launch(7, 2, 1, 99, 0x1000, 10, 0x2000, 20, 30, 0)


def test_grid_states_per_stream_grown_replaced_and_captured(monkeypatch):
    """The runtime's states with the driver stubbed out: one per stream (by id) and size, reused, grown,
    replaced before the epoch wraps, and a fresh one per captured launch, freed after it."""
    from types import SimpleNamespace

    from coop_tiles.runtime import chain, stream_memory

    capturing, freed, made = set(), [], []

    def allocate(nbytes, stream):
        made.append((nbytes, stream))
        return 0, 0x1000 * len(made)

    driver = SimpleNamespace(
        CUresult=SimpleNamespace(CUDA_SUCCESS=0),
        CUstreamCaptureStatus=SimpleNamespace(CU_STREAM_CAPTURE_STATUS_NONE=0),
        cuStreamIsCapturing=lambda s: (0, int(s in capturing)),
        cuStreamGetId=lambda s: (0, 100 + s),
        cuMemAllocAsync=allocate,
        cuMemsetD8Async=lambda ptr, value, nbytes, stream: (0,),
        cuMemFreeAsync=lambda ptr, stream: freed.append((ptr, stream)) or (0,),
    )
    monkeypatch.setattr(stream_memory, "driver", lambda: driver)
    monkeypatch.setattr(chain, "MAX_LAUNCHES", 3)
    states = chain.GridStates()
    a = states.acquire(7, 10, 16)
    assert a == (0x1000, False) and made == [(64 + 160, 7)]
    assert states.acquire(7, 4, 16) == a  # a smaller grid on the same stream: the same state
    assert states.acquire(8, 10, 16) == (0x2000, False)  # another stream: its own
    assert states.acquire(7, 10, 40) == (0x3000, False)  # other descriptors: their own
    assert states.acquire(7, 20, 16) == (0x4000, False) and freed == [(0x1000, 7)]  # grown
    assert states.acquire(7, 20, 16) == (0x4000, False)
    assert states.acquire(7, 20, 16) == (0x4000, False)
    assert states.acquire(7, 20, 16) == (0x5000, False) and freed[-1] == (0x4000, 7)  # 3 launches: replaced
    capturing.add(9)
    assert states.acquire(9, 5, 16) == (0x6000, True) and states.acquire(9, 5, 16) == (0x7000, True)
    states.release(0x6000, 9)
    assert freed[-1] == (0x6000, 9)


# ----- on a GPU ---------------------------------------------------------------------------------------------------
def _cupy():
    return pytest.importorskip("cupy")


def _data(dt, n, seed=0):
    # small integers: float32 sums stay exact below 2^24, so every dtype compares exactly
    return np.random.default_rng(seed).integers(-3 if dt != np.uint8 else 0, 8, n).astype(dt)


#: block size pinned: twelve specialisations, without the runtime's block-size search for each
PINNED_SCAN = ct.jit(chained_scan.fn, block_threads=256)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
@pytest.mark.parametrize("op", ["add", "max", "min"])
def test_gpu_whole_array_scan_matches_numpy(op, dtype):
    cp = _cupy()
    n, tile_size = 1_000_003, 2048
    x = _data(dtype, n)
    expected = {"add": np.cumsum, "max": np.maximum.accumulate, "min": np.minimum.accumulate}[op](x)
    y = cp.zeros(n, dtype)
    PINNED_SCAN[ct.cdiv(n, tile_size)](cp.asarray(x), y, n, TILE=tile_size, OP=op, EXCLUSIVE=False)
    np.testing.assert_array_equal(cp.asnumpy(y), expected.astype(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("programs", [1, 2, 100_000])
def test_gpu_program_counts(programs):
    cp = _cupy()
    tile_size = 128
    n = programs * tile_size - 7
    x = _data(np.int32, n, programs)
    y = cp.zeros(n, np.int32)
    cumsum[programs](cp.asarray(x), y, n, TILE=tile_size)
    np.testing.assert_array_equal(cp.asnumpy(y), np.cumsum(x))


@pytest.mark.gpu
def test_gpu_repeated_launches_of_changing_grids():
    cp = _cupy()
    for i, n in enumerate([100_000, 3_000_000, 50_000, 3_000_000, 10_000_001]):  # the state grows twice
        x = _data(np.int64, n, i)
        y = cp.zeros(n, np.int64)
        cumsum[ct.cdiv(n, 2048)](cp.asarray(x), y, n, TILE=2048)
        np.testing.assert_array_equal(cp.asnumpy(y), np.cumsum(x), err_msg=f"launch {i}")
    xd = cp.asarray(_data(np.int64, 1 << 20, 9))
    ys = [cp.zeros(1 << 20, np.int64) for _ in range(20)]
    for y in ys:  # back to back, no synchronisation between them
        cumsum[(1 << 20) // 2048](xd, y, 1 << 20, TILE=2048)
    for y in ys:
        np.testing.assert_array_equal(cp.asnumpy(y), np.cumsum(cp.asnumpy(xd)))


@pytest.mark.gpu
def test_gpu_the_block_context_is_static_shared_memory_the_opt_in_counts():
    """The driver counts a chained kernel's block context as static shared memory (the dynamic shared memory
    opt-in adds it to the carve); a kernel without one has none."""
    from coop_tiles.runtime import launcher

    _cupy()
    x = np.zeros(1, np.int32)
    chained = cumsum.compile(x, x, 1, TILE=256)
    assert launcher.static_shared_bytes(launcher.load(chained, 0), 0) >= 24
    f = np.zeros(1, np.float32)
    assert launcher.static_shared_bytes(launcher.load(vector_add.compile(f, f, f, 1, TILE=256), 0), 0) == 0


@pytest.mark.gpu
def test_gpu_launches_on_two_streams_at_once():
    cp = _cupy()
    n = 1 << 24
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    xs = [cp.asarray(_data(np.int64, n, s)) for s in range(2)]
    ys = [[cp.zeros(n, np.int64) for _ in range(4)] for _ in range(2)]
    for round_ in range(4):
        for s in range(2):  # interleaved, so the two streams' kernels overlap on the device
            cumsum[ct.cdiv(n, 4096), streams[s]](xs[s], ys[s][round_], n, TILE=4096)
    for s in range(2):
        streams[s].synchronize()
        expected = np.cumsum(cp.asnumpy(xs[s]))
        for y in ys[s]:
            np.testing.assert_array_equal(cp.asnumpy(y), expected)


@pytest.mark.gpu
def test_gpu_launches_from_two_threads_on_their_own_streams():
    cp = _cupy()
    n, errors = 1 << 22, []
    x = cp.asarray(_data(np.int32, n, 3))
    expected = np.cumsum(cp.asnumpy(x))

    def work():
        try:
            with cp.cuda.Stream(non_blocking=True) as stream:
                y = cp.zeros(n, np.int32)
                for _ in range(10):
                    cumsum[ct.cdiv(n, 4096), stream](x, y, n, TILE=4096)
                stream.synchronize()
                np.testing.assert_array_equal(cp.asnumpy(y), expected)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["global", "relaxed"])
def test_gpu_graph_capture_replays(mode):
    cp = _cupy()
    n = 3_000_000
    x, y = cp.asarray(_data(np.int32, n, 5)), cp.zeros(n, np.int32)
    stream = cp.cuda.Stream(non_blocking=True)
    grid = ct.cdiv(n, 4096)
    with stream:
        cumsum[grid, stream](x, y, n, TILE=4096)  # compiled and loaded outside the capture
        stream.synchronize()
        capture = getattr(cp.cuda.runtime, f"streamCaptureMode{mode.capitalize()}")
        stream.begin_capture(capture)
        cumsum[grid, stream](x, y, n, TILE=4096)
        graph = stream.end_capture()
        for replay in range(2):
            x[:] = cp.asarray(_data(np.int32, n, 10 + replay))
            y.fill(0)
            graph.launch(stream)
            cumsum[grid, stream](x, y, n, TILE=4096)  # a direct launch on the same stream in between
            graph.launch(stream)
            stream.synchronize()
            np.testing.assert_array_equal(cp.asnumpy(y), np.cumsum(cp.asnumpy(x)), err_msg=f"replay {replay}")


@pytest.mark.gpu
def test_gpu_torch_graph_capture():
    torch = pytest.importorskip("torch")
    n = 1_000_000
    x = torch.from_numpy(_data(np.float32, n, 7)).cuda()
    y = torch.zeros_like(x)
    cumsum[ct.cdiv(n, 4096)](x, y, n, TILE=4096)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cumsum[ct.cdiv(n, 4096)](x, y, n, TILE=4096)
    for seed in (11, 12):
        x.copy_(torch.from_numpy(_data(np.float32, n, seed)))
        y.zero_()
        graph.replay()
        torch.cuda.synchronize()
        np.testing.assert_array_equal(y.cpu().numpy(), np.cumsum(x.cpu().numpy()))


@pytest.mark.gpu
def test_gpu_2d_grid_is_an_error_at_the_launch():
    cp = _cupy()
    x = cp.zeros(64, np.int32)
    with pytest.raises(ct.LaunchError, match="scans the programs of a 1-D grid in order") as info:
        cumsum[(2, 2)](x, x, 64, TILE=16)  # LAUNCH
    assert info.value.loc is not None and info.value.loc.line == _line_of("# LAUNCH")


def _line_of(marker: str) -> int:
    import inspect

    lines, first = inspect.getsourcelines(test_gpu_2d_grid_is_an_error_at_the_launch)
    return first + next(i for i, text in enumerate(lines) if marker in text)
