"""Device objects sent elsewhere: pickle makes a host copy (protocol 5
out-of-band buffers) that unpickles onto the device; Dask's serialization
families (host frames for TCP, one device frame for UCX) round-trip them, and
a LocalCluster of worker processes moves a DeviceTable between workers."""

import copy
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


def test_local_cluster_moves_a_device_table_between_workers(ctx):
    host = pa.table({"x": pa.array([1, None, 3, 4], pa.int64()), "s": ["a", "b", None, "d"]})
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=50
        ) as cluster,
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


def test_process_pool_executor_sends_device_tables(ctx):
    import concurrent.futures as cf
    import multiprocessing as mp

    host = pa.table({"x": pa.array([5, 6, None], pa.int64())})
    with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
        sliced, total = ex.submit(_sum_column, cuda.to_device(host, ctx)).result(timeout=120)
    assert total == 11 and sliced.to_host().equals(host.slice(1))
