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
    cuda.set_transfer_options(staging_threshold_bytes=64 << 10, staging_chunk_bytes=64 << 10, staging_threads=3)
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
    assert cuda.transfer_options()["staging_chunk_bytes"] >= 64 << 10
