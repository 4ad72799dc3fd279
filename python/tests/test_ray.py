"""Ray moves device objects as it moves any Python object: by pickle, which
for cuarrow's device objects is a host copy (protocol 5, out of band) that
unpickles onto the device (docs/sharing.md, "Ray").  Ray's object store and a
remote task in a worker process round-trip every kind."""

import numpy as np
import pyarrow as pa
import pytest

from cuarrow import cuda

ray = pytest.importorskip("ray", reason="Ray is not installed (python/requirements-test.txt installs it)")


@pytest.fixture(scope="module")
def ray_session():
    # Worker processes inherit this process's environment: the emulated
    # driver in CI, the real one on a GPU.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _host_objects():
    table = pa.table(
        {"i": pa.array(np.arange(50, dtype=np.int64)), "s": pa.array([f"v{k}" if k % 7 else None for k in range(50)])}
    )
    table = pa.Table.from_batches(table.to_batches(max_chunksize=20))
    return {
        "table": table,
        "record_batch": table.to_batches()[1],
        "array": table.column("s").chunk(0),
        "chunked_array": table.column("i"),
    }


def test_the_object_store_round_trips_every_kind(ray_session, ctx):
    for kind, host in _host_objects().items():
        d = cuda.to_device(host, ctx)
        back = ray.get(ray.put(d))
        assert type(back) is type(d), kind
        assert back.to_host().equals(host), kind
    buf = ctx.buffer_from_data(np.arange(64, dtype=np.uint8))
    back = ray.get(ray.put(buf))
    assert isinstance(back, cuda.CudaBuffer)
    assert back.copy_to_host().to_pybytes() == bytes(range(64))


@ray.remote
def _sum_and_take(table):
    # In a worker process: the table is on its device; a column back to the
    # host to compute, and a slice of the table sent back as a device object.
    total = int(table.column("i").to_host().to_numpy().sum())
    return total, table.slice(5, 10)


def test_a_remote_task_receives_and_returns_a_device_table(ray_session, ctx):
    host = _host_objects()["table"]
    total, part = ray.get(_sum_and_take.remote(cuda.to_device(host, ctx)))
    assert total == sum(range(50))
    assert isinstance(part, cuda.DeviceTable)
    assert part.to_host().equals(host.slice(5, 10))
