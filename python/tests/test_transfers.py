"""Fast paths for host <-> device transfers: the staging pipeline for
ordinary memory, the pinned result pool behind copy_to_host(), and the
per-context transfer statistics.  Correctness only: speed is the
benchmark's business (bench/)."""

import gc

import numpy as np
import pyarrow as pa
import pytest

from cuarrow import cuda


@pytest.fixture
def small_chunks():
    """Staging with 64 KiB chunks, so small arrays cross many chunk boundaries."""
    saved = cuda.transfer_options()
    cuda.set_transfer_options(
        staging_threshold_bytes=64 << 10, staging_chunk_bytes=64 << 10, staging_threads=3, staging_threads_to_device=2
    )
    yield
    cuda.set_transfer_options(**saved)


@pytest.mark.parametrize("n", [(64 << 10) - 1, 64 << 10, (64 << 10) + 1, 5 * (64 << 10) + 17, (1 << 20) + 3])
def test_staged_round_trip(small_chunks, n):
    ctx = cuda.Context(0)
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    ctx.reset_transfer_stats()
    dbuf = ctx.buffer_from_data(data)
    into = np.zeros(n, dtype=np.uint8)
    dbuf.copy_to_host(buf=into)
    assert np.array_equal(into, data)
    stats = ctx.transfer_stats()
    assert stats["host_to_device_bytes"] == n
    assert stats["device_to_host_bytes"] == n
    assert stats["staged_bytes"] == (2 * n if n >= 64 << 10 else 0)  # below the threshold: direct
    assert stats["copies"] == 2


def test_copy_to_host_lands_in_the_pinned_pool_and_gives_it_back():
    ctx = cuda.Context(0)
    data = np.arange(1 << 18, dtype=np.int32)
    dbuf = ctx.buffer_from_data(data)
    before = cuda.pinned_pool_stats()["in_use_bytes"]
    host = dbuf.copy_to_host()
    assert isinstance(host, pa.Buffer)
    assert host.size == data.nbytes
    assert np.array_equal(np.frombuffer(host, dtype=np.int32), data)
    assert cuda.pinned_pool_stats()["in_use_bytes"] >= before + data.nbytes
    part = dbuf.copy_to_host(position=8, nbytes=16)
    assert np.frombuffer(part, dtype=np.int32).tolist() == [2, 3, 4, 5]
    del host, part
    gc.collect()
    assert cuda.pinned_pool_stats()["in_use_bytes"] == before
    # A memory_pool asks for pyarrow's memory instead.
    from_pool = dbuf.copy_to_host(memory_pool=pa.default_memory_pool())
    assert np.array_equal(np.frombuffer(from_pool, dtype=np.int32), data)


def test_full_pinned_pool_falls_back_to_ordinary_memory():
    saved = cuda.transfer_options()
    try:
        cuda.set_transfer_options(pinned_pool_limit_bytes=1 << 20)
        data = np.arange(1 << 20, dtype=np.int32)  # 4 MiB: over the limit
        host = cuda.Context(0).buffer_from_data(data).copy_to_host()
        assert np.array_equal(np.frombuffer(host, dtype=np.int32), data)
    finally:
        cuda.set_transfer_options(**saved)


def test_transfer_options_are_checked():
    with pytest.raises(TypeError, match="unknown transfer option"):
        cuda.set_transfer_options(chunk=1)
    with pytest.raises(ValueError):
        cuda.set_transfer_options(staging_chunk_bytes=10)
    with pytest.raises(ValueError, match="staging_threads_to_device"):
        cuda.set_transfer_options(staging_threads_to_device=0)
    with pytest.raises(ValueError, match="staging_streaming_store_limit_bytes"):
        cuda.set_transfer_options(staging_streaming_store_limit_bytes=-1)
    assert cuda.transfer_options()["staging_streaming_store_limit_bytes"] == 128 << 20
    assert cuda.transfer_options()["staging_chunk_bytes"] >= 64 << 10


def test_a_table_of_many_small_columns_and_batches_is_staged_as_one(small_chunks):
    """Every column below the staging threshold, the table far above it: the
    whole table goes through the pipeline in one job (the 1000-column case
    of the benchmark), both ways, and comes back equal."""
    ctx = cuda.Context(0)
    rng = np.random.default_rng(5)
    columns = {f"c{i}": rng.integers(0, 1 << 40, 2000) for i in range(40)}  # 16 KB each
    table = pa.table(columns)
    table = pa.concat_tables([table.slice(0, 700), table.slice(700, 600), table.slice(1300)])
    assert len(table.to_batches()) == 3
    assert table.column(0).nbytes < 64 << 10  # one column is below the threshold
    ctx.reset_transfer_stats()
    d = cuda.to_device(table)
    stats = ctx.transfer_stats()
    assert stats["staged_bytes"] == stats["host_to_device_bytes"] > 40 * 16000
    back = d.to_host()
    assert back.equals(table)
    # The batches' chunks come back together too (pinned pool: direct DMAs).
    assert d.column("c3").to_host().equals(table.column("c3"))


def test_to_host_of_a_table_spends_no_pinned_memory_when_the_pool_is_off(small_chunks):
    """With the pinned pool full (limit 0), results land in ordinary memory
    through the pipeline: the table still comes back whole."""
    saved = cuda.transfer_options()
    cuda.set_transfer_options(pinned_pool_limit_bytes=0)
    try:
        ctx = cuda.Context(0)
        table = pa.table({f"c{i}": np.arange(3000, dtype=np.int64) * i for i in range(30)})
        d = cuda.to_device(table)
        ctx.reset_transfer_stats()
        back = d.to_host()
        assert back.equals(table)
        assert ctx.transfer_stats()["staged_bytes"] == 30 * 3000 * 8
    finally:
        cuda.set_transfer_options(**saved)


def test_to_host_builds_the_table_while_the_copy_runs_and_waits_before_returning():
    """DeviceTable.to_host() exports the host data while the DMA runs (one
    batched copy, queued) and waits once before returning: the result is
    whole, its batches carry the table's own schema object, and a transfer
    dropped without waiting leaves nothing dangling."""
    from cuarrow import _cuarrow as lib

    ctx = cuda.Context(0)
    schema = pa.schema([pa.field("a", pa.int64()), pa.field("s", pa.string())], metadata={"k": "v"})
    table = pa.Table.from_batches(
        [
            pa.record_batch(
                [pa.array(np.arange(5000) + 7 * b), pa.array([f"x{i}" for i in range(5000)])], schema=schema
            )
            for b in range(3)
        ]
    )
    d = cuda.to_device(table)
    back = d.to_host()
    assert back.equals(table)
    assert back.schema.metadata == {b"k": b"v"}
    assert all(batch.schema is back.schema or batch.schema.equals(schema) for batch in back.to_batches())

    # The binding's steps: capsules describe the data at once; bytes after wait().
    transfer, capsules = lib.batches_to_host_begin([b._data for b in d._batches], None)
    assert len(capsules) == 3
    batches = [pa.RecordBatch._import_from_c(lib.capsule_address(c), schema) for c in capsules]
    transfer.wait()
    transfer.wait()  # a second wait returns at once
    assert pa.Table.from_batches(batches, schema=schema).equals(table)
    with pytest.raises(ValueError, match="already consumed"):
        lib.capsule_address(capsules[0])  # pyarrow moved the struct out
    with pytest.raises(TypeError, match="PyCapsule"):
        lib.capsule_address(object())
    with pytest.raises(TypeError, match="BatchData"):
        lib.batches_to_host_begin([object()], None)
    with pytest.raises(TypeError, match=r"batches_to_device\(\): incompatible(?s:.*)BatchData"):
        lib.batches_to_device([d._batches[0]._data, "not a batch"], ctx._ctx)
    with pytest.raises(TypeError, match=r"arrays_to_device\(\): incompatible(?s:.*)ArrayData"):
        lib.arrays_to_device([1], ctx._ctx)
    assert lib.batches_to_device([], ctx._ctx) == []

    # Dropped unwaited: the memory stays alive until the copies have run.
    before = cuda.pinned_pool_stats()["in_use_bytes"]
    transfer, capsules = lib.batches_to_host_begin([b._data for b in d._batches], None)
    del transfer, capsules
    gc.collect()
    ctx.synchronize()
    assert d.to_host().equals(table)
    gc.collect()
    assert cuda.pinned_pool_stats()["in_use_bytes"] == before

    # Strings: pyarrow's importer reads their last offsets, so these are
    # imported only once the copy is done (the emulation's copies run on a
    # thread of their own: importing early would read offsets mid-copy).
    words = pa.table({"w": pa.array([f"word {i}" * (i % 7) for i in range(200_000)]), "n": np.arange(200_000)})
    dw = cuda.to_device(words)
    for _ in range(3):
        assert dw.to_host().equals(words)
        assert dw.column("w").to_host().equals(words.column("w"))

    # Chunked arrays and single arrays take the same path.
    chunked = pa.chunked_array([np.arange(10), np.arange(3)])
    assert cuda.to_device(chunked).to_host().equals(chunked)
    assert d.column("s").to_host().equals(table.column("s"))
    assert d._batches[1].to_host().equals(table.to_batches()[1])


def test_streams_parse_their_schema_once_and_refuse_a_non_struct_as_batches():
    from cuarrow import _cuarrow as lib

    table = pa.table({f"c{i}": np.arange(3) * i for i in range(50)}, metadata={"k": "v"})
    is_batches, schema_capsule, items = lib.read_stream(table.__arrow_c_stream__(), 2)
    assert is_batches and len(items) == 1
    assert pa.Schema._import_from_c_capsule(schema_capsule).equals(table.schema, check_metadata=True)
    d = cuda.to_device(table)
    assert d.schema.equals(table.schema, check_metadata=True)
    assert d.to_host().equals(table)
    is_batches, _, items = lib.read_stream(pa.chunked_array([[1, 2], [3]]).__arrow_c_stream__(), 0)
    assert not is_batches and len(items) == 2
    with pytest.raises(pa.ArrowInvalid, match="needs a struct schema, got int64"):
        lib.read_stream(pa.chunked_array([[1, 2]]).__arrow_c_stream__(), 2)
