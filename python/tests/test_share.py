"""Device objects sent elsewhere: pickle makes a host copy (protocol 5
out-of-band buffers) that unpickles onto the device; Dask's serialization
families (host frames for TCP, one device frame for UCX) round-trip them, and
a LocalCluster of worker processes moves a DeviceTable between workers.

CUARROW_DASK_PROTOCOL=ucx runs the LocalCluster test over UCX
(distributed-ucxx, a real GPU; scripts/gpu-suite.sh ucx), default tcp; the
UCX test below runs whenever distributed-ucxx is importable on a GPU."""

import copy
import os
import pickle
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from arrow_samples import all_types, sample, type_id

from cuarrow import cuda


def _objects(t=None):
    t = pa.int64() if t is None else t
    schema = pa.schema([pa.field("x", t), pa.field("i", pa.int32())])
    batches = [
        pa.record_batch([sample(t, n, seed=k), pa.array(np.arange(n, dtype=np.int32))], schema=schema)
        for k, n in enumerate([13, 0, 7])
    ]
    table = pa.Table.from_batches(batches, schema)
    return {
        "array": batches[0].column(0),
        "chunked_array": table.column(0),
        "record_batch": batches[2],
        "table": table,
    }


@pytest.mark.parametrize("t", all_types(), ids=type_id)
def test_pickle_is_a_host_copy_that_unpickles_on_the_device(ctx, t):
    for kind, host in _objects(t).items():
        d = cuda.to_device(host, ctx)
        data = pickle.dumps(d, protocol=5)
        back = pickle.loads(data)
        assert type(back) is type(d), kind
        assert back.device_id == 0 and not back.is_cpu
        assert back.to_host().equals(host), kind


def test_pickle_protocol_5_sends_buffers_out_of_band(ctx):
    host = pa.table({"x": np.arange(100_000, dtype=np.int64)})
    d = cuda.to_device(host, ctx)
    frames = []
    data = pickle.dumps(d, protocol=5, buffer_callback=frames.append)
    assert len(data) < 10_000, "the 800 kB column travels out of band"
    assert sum(memoryview(f).nbytes for f in frames) >= 800_000
    back = pickle.loads(data, buffers=frames)
    assert back.to_host().equals(host)


@pytest.mark.multi_device
def test_pickled_cuda_buffer_and_its_device(ctx, ctx1):
    buf = ctx1.buffer_from_data(np.arange(10, dtype=np.int16))
    back = pickle.loads(pickle.dumps(buf))
    assert isinstance(back, cuda.CudaBuffer)
    assert back.context.device_number == 1
    assert back.copy_to_host().to_pybytes() == np.arange(10, dtype=np.int16).tobytes()
    assert back.address != buf.address


def test_copy_module_is_refused(ctx):
    d = cuda.to_device(pa.array([1, 2]), ctx)
    with pytest.raises(TypeError, match="through the host"):
        copy.copy(d)
    with pytest.raises(TypeError, match="through the host"):
        copy.deepcopy(ctx.new_buffer(4))


def test_a_pickle_reads_in_a_fresh_process(ctx, tmp_path):
    host = _objects(pa.string())["table"]
    (tmp_path / "t.pkl").write_bytes(pickle.dumps(cuda.to_device(host, ctx)))
    code = (
        "import pickle, sys, pyarrow as pa\n"
        f"t = pickle.loads(open({str(tmp_path / 't.pkl')!r}, 'rb').read())\n"
        "print(type(t).__name__, t.to_host().column(0).to_pylist()[:3])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"DeviceTable {host.column(0).to_pylist()[:3]}"


# ---- another process on this machine: share() / open_shared ------------------------------------


def _open_in_child(items):
    # runs in a spawned process: each item is a descriptor, or a pickled
    # SharedDeviceObject; returns what it opened, as host data, and whether
    # anything was copied to this process's devices (zero-copy: nothing).
    import pickle

    from cuarrow import cuda

    out = []
    for item in items:
        if isinstance(item, tuple):
            obj = pickle.loads(item[1])
        else:
            obj = cuda.open_shared(item)
        host = obj.copy_to_host().to_pybytes() if isinstance(obj, cuda.CudaBuffer) else obj.to_host()
        out.append((type(obj).__name__, host, obj.context.transfer_stats()["host_to_device_bytes"]))
    return out


def _try_open_in_child(descriptor):
    # runs in a spawned process: what opening `descriptor` raises
    from cuarrow import cuda

    try:
        cuda.open_shared(descriptor)
    except Exception as e:  # noqa: BLE001 (the test looks at which)
        return type(e).__name__, str(e)
    return None


def _spawn_pool():
    import concurrent.futures as cf
    import multiprocessing as mp

    return cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"))


def test_every_kind_opens_in_a_spawned_process_zero_copy(ctx):
    expected, shares = [], []
    for t in [pa.int64(), pa.string(), pa.dictionary(pa.int8(), pa.utf8()), pa.list_(pa.struct([("a", pa.int32())]))]:
        for kind, host in _objects(t).items():
            shares.append(cuda.to_device(host, ctx).share())
            expected.append((kind, host))
    data = np.arange(1000, dtype=np.int32)
    pooled = ctx.buffer_from_data(data)  # stream-ordered pool memory: shared as a cuMemAlloc copy
    plain = ctx.new_buffer(data.nbytes)  # cuMemAlloc: shared as it is
    plain.copy_from_host(data)
    for buf in (pooled, plain.slice(40, 400)):
        shares.append(buf.share())
        expected.append(("buffer", buf.copy_to_host().to_pybytes()))
    assert shares[-1].nbytes == 400 and shares[-2].nbytes == data.nbytes
    items = [s.descriptor for s in shares]
    items[0] = ("pickle", pickle.dumps(shares[0]))  # a SharedDeviceObject pickles as its descriptor
    with _spawn_pool() as ex:
        got = ex.submit(_open_in_child, items).result(timeout=120)
    names = {"array": "DeviceArray", "chunked_array": "DeviceChunkedArray", "record_batch": "DeviceRecordBatch"}
    names.update({"table": "DeviceTable", "buffer": "CudaBuffer"})
    assert len(got) == len(expected)
    for (kind, host), (name, back, copied), s in zip(expected, got, shares):
        assert s.kind == kind
        assert name == names[kind], kind
        assert copied == 0, f"{kind}: nothing is copied to the opening process's device"
        assert back == host if kind == "buffer" else back.equals(host), kind


def test_shared_object_lifetime_and_context_manager(ctx):
    t = cuda.to_device(pa.table({"x": [1, 2, 3]}), ctx)
    before = ctx.bytes_allocated
    with t.share() as s:
        assert isinstance(s, cuda.SharedDeviceObject) and not s.released
        assert ctx.bytes_allocated > before, "the packed copy lives in this process's device memory"
        assert "kind=table" in repr(s) and len(s.descriptor) == 136
    assert s.released and s.nbytes == 0 and "released" in repr(s)
    assert ctx.bytes_allocated == before
    with pytest.raises(pa.ArrowInvalid, match="released"):
        s.descriptor  # noqa: B018
    s.release()  # idempotent
    with pytest.raises(TypeError, match="share"):
        cuda.SharedDeviceObject()


def test_damaged_descriptors_raise_clear_errors(ctx):
    s = cuda.to_device(pa.array([1, 2]), ctx).share()
    good = s.descriptor
    with pytest.raises(pa.ArrowInvalid, match="descriptor of 4 bytes: a descriptor is 136 bytes"):
        cuda.open_shared(b"abcd")
    flipped = bytearray(good)
    flipped[50] ^= 0xFF
    with pytest.raises(pa.ArrowInvalid, match="checksum does not match"):
        cuda.open_shared(flipped)
    with pytest.raises(pa.ArrowInvalid, match="wrong magic"):
        cuda.open_shared(b"X" + good[1:])
    with pytest.raises(pa.ArrowInvalid, match="other processes"):
        cuda.open_shared(good)  # this process made it
    with pytest.raises(TypeError, match="descriptor as bytes"):
        cuda.open_shared(12)
    with pytest.raises(TypeError, match="Context"):
        cuda.open_shared(good, context=0)


def test_opening_after_the_exporter_released_raises(ctx):
    s = cuda.to_device(pa.table({"x": np.arange(100)}), ctx).share()
    d = s.descriptor
    s.release()
    with _spawn_pool() as ex:
        err = ex.submit(_try_open_in_child, d).result(timeout=120)
    assert err is not None, "a released share must not open"
    name, message = err
    # The real driver refuses the freed allocation; the emulation still
    # maps it, where release() blanked the stream.
    assert (name == "CudaError" and "cuIpcOpenMemHandle" in message) or (
        name == "ArrowInvalid" and "did the exporter release it?" in message
    ), err


def _open_pool_shares_in_child(descriptors, fd, pool_id):
    # runs in a spawned process: opens pool shares through the exporter's
    # pool (fd: a DupFd, detached here), importing it once
    import os

    from cuarrow import cuda

    with pytest.raises(pa.ArrowInvalid, match="import_shared_pool"):
        cuda.open_shared(descriptors[0])  # without the pool: says what to pass
    own = fd.detach()
    try:
        out = []
        for d in descriptors:
            obj = cuda.open_shared(d, pool=(own, pool_id))
            host = obj.copy_to_host().to_pybytes() if isinstance(obj, cuda.CudaBuffer) else obj.to_host()
            out.append((type(obj).__name__, host, obj.context.transfer_stats()["host_to_device_bytes"]))
        return out
    finally:
        os.close(own)


def _open_pool_share_in_process(q, descriptor, fd, pool_id):
    # target of a spawned multiprocessing.Process: fd arrived with its args
    from cuarrow import cuda

    t = cuda.open_shared(descriptor, pool=(fd, pool_id))
    q.put(t.to_host())


def test_pool_share_opens_with_its_pool_in_a_spawned_child(ctx):
    from multiprocessing.reduction import DupFd

    objs = [cuda.to_device(h, ctx) for h in _objects(pa.string()).values()]
    data = np.arange(100, dtype=np.int32)
    objs.append(ctx.buffer_from_data(data))
    shares = [o.share(memory="pool") for o in objs]
    assert all(s.memory == "pool" and len(s.descriptor) == 144 for s in shares)
    assert len({s.pool_id for s in shares}) == 1, "one pool for the process"
    assert shares[0].pool_fd() == shares[1].pool_fd(), "the pool is exported once"
    legacy = objs[0].share()
    assert legacy.memory == "legacy" and legacy.pool_id is None and legacy.pool_fd() is None
    with pytest.raises(ValueError, match="legacy"):
        objs[0].share(memory="plain")
    with _spawn_pool() as ex:
        got = ex.submit(
            _open_pool_shares_in_child, [s.descriptor for s in shares], DupFd(shares[0].pool_fd()), shares[0].pool_id
        ).result(timeout=120)
    hosts = [o.to_host() for o in objs[:-1]] + [data.tobytes()]
    for (name, back, copied), host, o in zip(got, hosts, objs):
        assert name == type(o).__name__
        assert copied == 0
        assert back == host if isinstance(host, bytes) else back.equals(host)
    # A Process started with spawn gets the pool's fd with its arguments.
    import multiprocessing as mp

    spawn = mp.get_context("spawn")
    q = spawn.SimpleQueue()
    table = cuda.to_device(_objects()["table"], ctx)
    s = table.share(memory="pool")
    p = spawn.Process(target=_open_pool_share_in_process, args=(q, s.descriptor, DupFd(s.pool_fd()), s.pool_id))
    p.start()
    back = q.get()
    p.join(timeout=120)
    assert p.exitcode == 0 and back.equals(_objects()["table"])
    for x in shares:
        x.release()


def test_pool_share_pickles_with_its_pool_through_a_process_pool(ctx):
    from multiprocessing.reduction import ForkingPickler

    host = _objects()["table"]
    s = cuda.to_device(host, ctx).share(memory="pool")
    with _spawn_pool() as ex:
        got = ex.submit(_open_in_child, [("pickle", bytes(ForkingPickler.dumps(s)))]).result(timeout=120)
    assert got[0][0] == "DeviceTable" and got[0][1].equals(host) and got[0][2] == 0


def _child_report(obj):
    # runs in a pool worker: what arrived, and whether it was copied here
    from cuarrow import cuda

    stats = obj.context.transfer_stats()
    back = obj.slice(1) if isinstance(obj, cuda.DeviceTable) else obj
    return type(obj).__name__, obj.to_host(), stats["host_to_device_bytes"], back


@pytest.fixture
def sharing_with_multiprocessing():
    from multiprocessing.reduction import ForkingPickler

    saved = dict(ForkingPickler._extra_reducers)
    cuda.enable_sharing_with_multiprocessing()
    yield
    ForkingPickler._extra_reducers.clear()
    ForkingPickler._extra_reducers.update(saved)
    cuda.release_shared_objects()


def test_process_pool_sends_host_copies_unless_sharing_is_enabled(ctx):
    host = pa.table({"x": np.arange(10_000, dtype=np.int64)})
    with _spawn_pool() as ex:
        name, back, copied, _ = ex.submit(_child_report, cuda.to_device(host, ctx)).result(timeout=120)
    assert name == "DeviceTable" and back.equals(host)
    assert copied >= 80_000, "without the opt-in the table travels as a host copy"


def test_reducer_hands_device_tables_over_without_a_copy(ctx, sharing_with_multiprocessing):
    import concurrent.futures as cf
    import multiprocessing as mp

    host = pa.table({"x": np.arange(10_000, dtype=np.int64), "s": pa.array([str(i) for i in range(10_000)])})
    d = cuda.to_device(host, ctx)
    before = ctx.transfer_stats()["host_to_device_bytes"]
    with cf.ProcessPoolExecutor(
        1, mp_context=mp.get_context("spawn"), initializer=cuda.enable_sharing_with_multiprocessing
    ) as ex:
        name, back, copied, sliced = ex.submit(_child_report, d).result(timeout=120)
        assert name == "DeviceTable" and back.equals(host)
        assert copied == 0, "the worker opened the table where it is: nothing copied to its device"
        # and back: the worker shared its slice the same way (it enabled sharing too)
        assert isinstance(sliced, cuda.DeviceTable) and sliced.to_host().equals(host.slice(1))
        # Sharing copies only the stream's metadata from the host (a few
        # hundred bytes); a host copy of the table would be >= 80 kB.
        assert ctx.transfer_stats()["host_to_device_bytes"] - before < 4096, "no host copy either way"
        del sliced
    assert cuda.release_shared_objects() == 1, "the table sent is held until released"
    assert cuda.release_shared_objects() == 0


def _open_many(objs):
    # runs in a pool worker: the objects arrived through the reducer

    return [(type(o).__name__, o.to_host(), o.context.transfer_stats()["host_to_device_bytes"]) for o in objs]


def test_reducer_shares_pool_memory_and_the_worker_imports_the_pool_once(ctx, sharing_with_multiprocessing):
    import concurrent.futures as cf
    import multiprocessing as mp

    hosts = list(_objects(pa.int64()).values())
    objs = [cuda.to_device(h, ctx) for h in hosts]
    with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
        first = ex.submit(_open_many, objs).result(timeout=120)
        again = ex.submit(_open_many, objs[:2]).result(timeout=120)
    for (name, back, copied), h, o in zip(first + again, hosts + hosts[:2], objs + objs[:2]):
        assert name == type(o).__name__ and copied == 0 and back.equals(h)
    from cuarrow import _share

    sent = list(_share._sent)
    assert len(sent) == len(objs) + 2 and all(s.memory == "pool" for s in sent)
    assert cuda.release_shared_objects() == len(objs) + 2


def test_reducer_sends_every_kind_through_a_queue(ctx, sharing_with_multiprocessing):
    import multiprocessing as mp

    objs = [cuda.to_device(h, ctx) for h in _objects(pa.string()).values()] + [ctx.new_buffer(8)]
    q = mp.get_context("spawn").SimpleQueue()
    for o in objs:
        q.put(o)  # pickled by ForkingPickler in this process
    # A queue read in this process opens its own shares: refused, which
    # shows the objects travelled as descriptors (pool memory, with the pool).
    with pytest.raises(pa.ArrowInvalid, match="other processes"):
        q.get()
    assert cuda.release_shared_objects() == len(objs)


# ---- Dask ------------------------------------------------------------------------------

distributed = pytest.importorskip("distributed", reason="distributed is in python/requirements-test.txt")
from distributed.protocol import deserialize, serialize  # noqa: E402


@pytest.mark.parametrize("family", ["dask", "cuda", "pickle"])
def test_dask_serialization_families(ctx, family):
    for kind, host in _objects(pa.list_(pa.int32())).items():
        d = cuda.to_device(host, ctx)
        header, frames = serialize(d, serializers=[family], on_error="raise")
        assert header["serializer"] == family
        if family == "cuda":
            assert len(frames) == 1 and hasattr(frames[0], "__cuda_array_interface__"), kind
            # cuMemAlloc memory, which UCX moves with cuda_ipc (a legacy handle, not a pool one)
            assert frames[0].export_for_ipc().memory == "legacy", kind
        back = deserialize(header, frames, deserializers=[family])
        assert type(back) is type(d) and back.to_host().equals(host), (family, kind)


def test_cuda_family_reads_any_device_frame_zero_copy(ctx):
    host = _objects()["table"]
    header, frames = serialize(cuda.to_device(host, ctx), serializers=["cuda"], on_error="raise")

    class Foreign:
        """A device frame from another library (as rmm.DeviceBuffer under UCX)."""

        def __init__(self, buf):
            self._buf = buf
            self.__cuda_array_interface__ = buf.__cuda_array_interface__

    delivered = ctx.buffer_from_data(frames[0])  # the comm's own copy
    back = deserialize(header, [Foreign(delivered)], deserializers=["cuda"])
    assert back.to_host().equals(host)
    first = back.column(0).chunk(0).buffers()[1]
    assert delivered.address <= first.address < delivered.address + delivered.size, "zero-copy over the frame"
    del delivered
    assert back.to_host().equals(host), "the result keeps the frame alive"


def test_registration_waits_for_distributed(tmp_path):
    code = (
        "import sys\n"
        "from cuarrow import cuda\n"
        "assert 'distributed' not in sys.modules, 'cuarrow imported distributed'\n"
        "from distributed.protocol import dask_serialize\n"
        "print(dask_serialize.dispatch(cuda.DeviceTable).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "_host_serialize"


def _sum_column(table):
    # runs in a worker process: the table arrives there as a DeviceTable
    from cuarrow import cuda

    assert isinstance(table, cuda.DeviceTable)
    return table.slice(1), int(sum(x for x in table.to_host().column("x").to_pylist() if x is not None))


PROTOCOL = os.environ.get("CUARROW_DASK_PROTOCOL", "tcp")
try:
    import distributed_ucxx  # noqa: F401 - registers Dask's "ucx" comm

    UCX_MISSING = None
except ImportError as e:
    UCX_MISSING = (
        f"distributed-ucxx is not importable ({e}): Dask has no UCX comm here "
        "(scripts/fetch-gpu-ucx.sh, then scripts/gpu-suite.sh ucx on the GPU machine)"
    )


def _skip_unless_ucx_runs(emulated):
    if UCX_MISSING:
        pytest.skip(UCX_MISSING)
    if emulated:
        pytest.skip("UCX receives device frames into memory RMM allocates: needs a real GPU, not the emulation")


def _cluster(protocol):
    return distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, protocol=protocol, dashboard_address=None, silence_logs=50
    )


def test_local_cluster_moves_a_device_table_between_workers(ctx, emulated):
    if PROTOCOL not in ("tcp", "ucx"):
        pytest.fail(f"CUARROW_DASK_PROTOCOL={PROTOCOL!r}: say tcp or ucx")
    if PROTOCOL == "ucx":
        _skip_unless_ucx_runs(emulated)
    host = pa.table({"x": pa.array([1, None, 3, 4], pa.int64()), "s": ["a", "b", None, "d"]})
    with (
        _cluster(PROTOCOL) as cluster,
        distributed.Client(cluster) as client,
    ):
        workers = list(client.scheduler_info()["workers"])
        assert len(workers) == 2
        [remote] = client.scatter([cuda.to_device(host, ctx)], workers=[workers[0]])
        result = client.submit(_sum_column, remote, workers=[workers[1]], pure=False)
        sliced, total = result.result(timeout=120)
        assert total == 8
        assert isinstance(sliced, cuda.DeviceTable)
        assert sliced.to_host().equals(host.slice(1))
        assert client.gather(remote).to_host().equals(host)


def _record_device_frames(dask_worker=None):
    """On a worker: wraps the `cuda` family's deserializer of DeviceTable to
    note each frame it is given (type, device address, size)."""
    from distributed.protocol import cuda_deserialize

    from cuarrow import _share

    seen = []

    def noting(header, frames):
        cai = getattr(frames[0], "__cuda_array_interface__", None)
        where = (cai["data"][0], cai["shape"][0]) if cai else (None, None)
        seen.append((f"{type(frames[0]).__module__}.{type(frames[0]).__name__}", *where))
        return _share._device_deserialize(header, frames)

    cuda_deserialize.register(cuda.DeviceTable)(noting)
    dask_worker.cuarrow_device_frames = seen


def _where_it_landed(table):
    """On the worker that fetched `table`: the frame it was read from and
    whether the table's data lies inside that frame (zero-copy)."""
    seen = distributed.get_worker().cuarrow_device_frames
    assert isinstance(table, cuda.DeviceTable)
    if not seen:
        return {"frames": 0}
    kind, address, size = seen[-1]
    data = table.column(0).chunk(0).buffers()[1]
    inside = address is not None and address <= data.address < address + size
    return {"frames": len(seen), "frame": kind, "device": address is not None, "inside": inside}


@pytest.mark.gpu
def test_ucx_moves_a_device_table_as_one_device_frame_read_zero_copy(ctx, emulated):
    _skip_unless_ucx_runs(emulated)
    host = pa.table(
        {"x": pa.array(range(100_000), pa.int64()), "s": [str(i) if i % 7 else None for i in range(100_000)]}
    )
    with _cluster("ucx") as cluster, distributed.Client(cluster) as client:
        a, b = sorted(client.scheduler_info()["workers"])
        assert a.startswith("ucx://") and b.startswith("ucx://")
        client.run(_record_device_frames, workers=[b])
        [remote] = client.scatter([cuda.to_device(host, ctx)], workers=[a])
        landed = client.submit(_where_it_landed, remote, workers=[b], allow_other_workers=False, pure=False)
        got = landed.result(timeout=120)
        assert got.get("frames") == 1, f"B did not deserialize one cuda-family frame: {got}"
        assert got["device"], f"B was given a host frame ({got['frame']}), not device memory"
        assert got["inside"], f"the table on B does not lie in the device frame it came in ({got['frame']})"
        assert client.gather(remote).to_host().equals(host)


def test_process_pool_executor_sends_device_tables(ctx):
    import concurrent.futures as cf
    import multiprocessing as mp

    host = pa.table({"x": pa.array([5, 6, None], pa.int64())})
    with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
        sliced, total = ex.submit(_sum_column, cuda.to_device(host, ctx)).result(timeout=120)
    assert total == 11 and sliced.to_host().equals(host.slice(1))
