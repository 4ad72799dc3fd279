"""Arrow IPC files (Feather v2) and streams read by path straight into device
memory (cuarrow.ipc.open_file / open_stream over a path, read_feather):
pyarrow writes the file, cuarrow reads it onto the device, to_host() equals
what pyarrow reads; projection reads only the chosen columns' bytes;
compressed files decompress; bad paths and files raise clear errors."""

import gc
import os
import re
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pytest
from arrow_samples import all_types, sample, type_id

from cuarrow import cuda, ipc


def _table(t, rows=(37, 0, 11), seed=0):
    schema = pa.schema([pa.field("x", t), pa.field("i", pa.int32())])
    batches = [
        pa.record_batch([sample(t, n, seed=seed + k), pa.array(np.arange(n, dtype=np.int32))], schema=schema)
        for k, n in enumerate(rows)
    ]
    return pa.Table.from_batches(batches, schema)


def _wide(rows=5000, columns=10, chunks=4):
    """`chunks` batches, each built on its own (not slices of one array:
    to_device compacts a slice's buffers, and the bytes a writer writes
    follow the buffers' sizes)."""
    rng = np.random.default_rng(7)
    n = rows // chunks
    batches = []
    for _ in range(chunks):
        cols = {}
        for k in range(columns):
            if k % 3 == 0:
                cols[f"c{k}"] = pa.array(rng.integers(0, 1000, n), pa.int64())
            elif k % 3 == 1:
                cols[f"c{k}"] = pa.array([None if i % 17 == 0 else f"s{i % 97}" for i in range(n)], pa.string())
            else:
                cols[f"c{k}"] = pa.array(rng.random(n), pa.float64())
        batches.append(pa.record_batch(cols))
    return pa.Table.from_batches(batches)


def _write_file(path, table, compression=None):
    opts = pa.ipc.IpcWriteOptions(compression=compression) if compression else None
    with pa.ipc.new_file(path, table.schema, options=opts) as w:
        w.write_table(table)
    return path


def _write_stream(path, table, compression=None):
    opts = pa.ipc.IpcWriteOptions(compression=compression) if compression else None
    with pa.ipc.new_stream(path, table.schema, options=opts) as w:
        w.write_table(table)
    return path


@pytest.mark.parametrize("t", all_types(), ids=type_id)
def test_every_type_reads_from_a_file_and_a_stream_by_path(ctx, tmp_path, t):
    # A file holds one dictionary per field: the chunks share one.
    table = _table(t).unify_dictionaries()
    f = _write_file(tmp_path / "t.arrow", table)
    s = _write_stream(tmp_path / "t.arrows", table)
    with ipc.open_file(f) as r:
        assert r.num_record_batches == 3
        assert r.schema.equals(table.schema)
        got = r.read_all()
        assert isinstance(got, cuda.DeviceTable) and not got.is_cpu
        assert got.to_host().equals(table)
        assert r.read_path == "staging"
    got = ipc.open_stream(str(s)).read_all()
    assert got.to_host().equals(table)


def test_read_path_chooses_how_a_path_reaches_the_device(ctx, tmp_path):
    table = _wide(rows=2000, columns=3, chunks=2)
    f = _write_file(tmp_path / "p.arrow", table)
    s = _write_stream(tmp_path / "p.arrows", table)
    with ipc.open_file(f, read_path="staging") as r:
        assert r.read_all().to_host().equals(table)
        assert r.read_path == "staging"
    assert ipc.read_feather(f, read_path="staging").to_host().equals(table)
    assert ipc.open_stream(s, read_path="staging").read_all().to_host().equals(table)
    status = ipc.gds_status()
    assert set(status) == {"mode", "loaded", "usable", "compat_mode", "available", "library", "reason"}
    if status["available"]:  # GPUDirect Storage reads directly here: the reader uses it
        with ipc.open_file(f, read_path="gds") as r:
            assert r.read_all().to_host().equals(table)
            assert r.read_path == "gds"
    else:  # asked for, it is an error that says why, not a quiet fallback
        with pytest.raises(cuda.CudaDriverError, match="gds read path") as e:
            ipc.read_feather(f, read_path="gds")
        assert status["reason"] in str(e.value)
    with pytest.raises(ValueError, match='"auto".*"staging" or "gds", not "direct"'):
        ipc.open_file(f, read_path="direct")
    with pytest.raises(TypeError):
        ipc.open_file(f, read_path=None)
    dbuf = ctx.buffer_from_data(f.read_bytes())
    with pytest.raises(ValueError, match="device memory already"):
        ipc.open_file(dbuf, read_path="staging")
    assert ipc.open_file(dbuf).read_all().to_host().equals(table)  # "auto" is every reader's default


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_compressed_files_and_streams(ctx, tmp_path, compression):
    table = _wide()
    f = _write_file(tmp_path / "c.arrow", table, compression)
    assert ipc.read_feather(f).to_host().equals(table)
    s = _write_stream(tmp_path / "c.arrows", table, compression)
    assert ipc.open_stream(s).read_all().to_host().equals(table)
    # pyarrow's feather writer (LZ4 by default) too
    feather.write_feather(table, tmp_path / "f.feather")
    assert ipc.read_feather(tmp_path / "f.feather").to_host().equals(table)


def test_batches_in_any_order_and_their_metadata(ctx, tmp_path):
    table = _wide()
    path = tmp_path / "w.arrow"
    with pa.ipc.new_file(path, table.schema, metadata={"who": "test"}) as w:
        for i, b in enumerate(table.to_batches()):
            w.write_batch(b, custom_metadata={"i": str(i)})
    r = ipc.open_file(path)
    host = table.to_batches()
    for i in [3, 0, 2, 1, 3]:
        assert r.get_batch(i).to_host().equals(host[i])
        b, md = r.get_batch_with_custom_metadata(i)
        assert md[b"i"] == str(i).encode()
    assert r.metadata[b"who"] == b"test"
    # pyarrow's exception and words: a ValueError, "Batch number 4 out of range".
    for bad in (4, -1):
        with pytest.raises(ValueError, match=f"Batch number {bad} out of range: the file has 4 record batches"):
            r.get_batch(bad)
        with pytest.raises(ValueError, match=f"Batch number {bad} out of range"):
            r.get_batch_with_custom_metadata(bad)
    assert r.get_batch(3).to_host().equals(host[3]), "the reader still reads"


def test_projection_reads_only_the_chosen_columns(ctx, tmp_path):
    table = _wide(rows=20000, columns=10)
    path = _write_file(tmp_path / "w.arrow", table)
    full = ipc.open_file(path)
    full.read_all()
    got = ipc.read_feather(path, columns=["c2", "c0"])
    assert got.schema.names == ["c2", "c0"]
    assert got.to_host().equals(table.select(["c2", "c0"]))
    part = ipc.open_file(path, options=pa.ipc.IpcReadOptions(included_fields=[0]))
    assert part.read_all().to_host().equals(table.select([0]))
    assert part.bytes_read < full.bytes_read / 5, (part.bytes_read, full.bytes_read)
    assert ipc.read_feather(path, columns=[9, 1]).to_host().equals(table.select([9, 1]))
    s = _write_stream(tmp_path / "w.arrows", table)
    got = ipc.open_stream(s, options=pa.ipc.IpcReadOptions(included_fields=[1])).read_all()
    assert got.to_host().equals(table.select([1]))
    with pytest.raises(KeyError, match="nope"):
        ipc.read_feather(path, columns=["nope"])
    for bad in (10, -1):
        with pytest.raises(pa.ArrowInvalid, match=f"Out of bounds field index: {bad} .*has 10 top-level fields"):
            ipc.read_feather(path, columns=[bad])


def test_progress_callback_and_bar(ctx, tmp_path, capsys):
    table = _wide()
    path = _write_file(tmp_path / "w.arrow", table)
    calls = []
    got = ipc.read_feather(path, progress=lambda done, total, nbytes: calls.append((done, total, nbytes)))
    assert got.to_host().equals(table)
    assert [c[0] for c in calls] == [1, 2, 3, 4] and all(c[1] == 4 for c in calls)
    assert all(a[2] < b[2] for a, b in zip(calls, calls[1:])), "bytes read grow"
    ipc.read_feather(path, progress=True)
    assert "w.arrow" in capsys.readouterr().err
    ipc.read_feather(path)
    assert capsys.readouterr().err == "", "no progress by default"
    with pytest.raises(TypeError, match="progress"):
        ipc.read_feather(path, progress="yes")


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_many_batches_in_one_job_equal_the_batch_reads(ctx, tmp_path, compression):
    table = _wide(rows=12000, chunks=12)
    path = _write_file(tmp_path / "many.arrow", table, compression)
    r = ipc.RecordBatchFileReader(path)
    order = [11, 0, 5, 5, 3]
    got = r._read_batches(order)
    assert [b.to_host().equals(r.get_batch(i).to_host()) for b, i in zip(got, order)] == [True] * len(order)
    assert r.read_all().to_host().equals(table)
    assert ipc.read_feather(path).to_host().equals(table)
    assert ipc.read_feather(path, columns=[3, 1]).to_host().equals(table.select([3, 1]))
    with pytest.raises(ValueError, match="Batch number 12 out of range"):
        r._read_batches([0, 12])


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_iterating_a_file_reads_ahead_and_gives_every_batch_in_order(ctx, tmp_path, compression):
    table = _wide(rows=12000, chunks=12)
    path = _write_file(tmp_path / "ahead.arrow", table, compression)
    host = table.to_batches()
    r = ipc.open_file(path)
    got = [b.to_host() for b in r]
    assert len(got) == 12 and all(g.equals(h) for g, h in zip(got, host))
    # The first batch alone, then the other 11 in one staging job.
    assert r.stats()["staging_jobs"] == 2
    # Chosen batches, a read of each, no read-ahead, a projection.
    order = [11, 0, 5, 5]
    for kwargs in ({"readahead": 1, "readahead_bytes": 1}, {"readahead": 0}):
        got = [b.to_host() for b in r.iter_batches(order, **kwargs)]
        assert [g.equals(host[i]) for g, i in zip(got, order)] == [True] * 4, kwargs
    projected = ipc.open_file(path, options=pa.ipc.IpcReadOptions(included_fields=[3, 1]))
    assert pa.Table.from_batches([b.to_host() for b in projected]).equals(table.select([3, 1]))


def test_a_loop_left_early_stops_reading_ahead_and_frees_what_it_read(ctx, tmp_path):
    table = _wide(rows=12000, chunks=12)
    path = _write_file(tmp_path / "early.arrow", table)
    r = ipc.open_file(path)
    before = ctx.bytes_allocated
    for k, b in enumerate(r.iter_batches(readahead=3, readahead_bytes=1)):
        assert b.to_host().equals(table.to_batches()[k])
        if k == 1:
            break
    del b
    gc.collect()
    assert ctx.bytes_allocated == before
    batches = r.iter_batches(readahead=2)
    del batches  # never iterated: dropped, it stops too
    gc.collect()
    assert ctx.bytes_allocated == before


def test_reading_ahead_gives_the_batches_before_a_failing_read_then_its_error(ctx, tmp_path):
    table = _wide(rows=12000, chunks=12)
    path = _write_file(tmp_path / "cut.arrow", table)
    r = ipc.open_file(path)
    with pa.ipc.open_file(path) as p:
        cut = p.num_record_batches
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) * 2 // 3)
    got = []
    with pytest.raises(OSError, match="ends at offset"):
        for b in r.iter_batches(readahead=2, readahead_bytes=1 << 40):
            got.append(b.to_host())
    assert 0 < len(got) < cut
    assert all(g.equals(h) for g, h in zip(got, table.to_batches()))


def test_reading_ahead_refuses_bad_arguments(ctx, tmp_path):
    path = _write_file(tmp_path / "w.arrow", _wide())
    r = ipc.open_file(path)
    opened = r.bytes_read
    for readahead in (2, 0):
        with pytest.raises(ValueError, match="Batch number 4 out of range"):
            r.iter_batches([0, 4], readahead=readahead)
    with pytest.raises(ValueError, match=r"depth \(the reads ahead\) must be at least 0, not -1"):
        r.iter_batches(readahead=-1)
    with pytest.raises(ValueError, match=r"read_bytes \(the bytes of one read ahead\) must be at least 1, not 0"):
        r.iter_batches(readahead_bytes=0)
    assert r.bytes_read == opened and r.stats()["batches"] == 0, "nothing was read"
    # In device memory the batches are there already: readahead is ignored.
    buf = cuda.Context(0).buffer_from_data(open(path, "rb").read())
    assert pa.Table.from_batches([b.to_host() for b in ipc.open_file(buf).iter_batches()]).equals(_wide())


def _dictionary_stream(path, batches=10):
    """A stream whose dictionary is replaced before every batch."""
    schema = pa.schema([pa.field("d", pa.dictionary(pa.int32(), pa.string())), pa.field("i", pa.int64())])
    host = [
        pa.record_batch(
            [
                pa.DictionaryArray.from_arrays(pa.array([0, 1, 0] * (k + 1), pa.int32()), [f"a{k}", f"b{k}"]),
                pa.array(range(3 * (k + 1)), pa.int64()),
            ],
            schema=schema,
        )
        for k in range(batches)
    ]
    with pa.ipc.new_stream(path, schema) as w:
        for b in host:
            w.write_batch(b)
    return host


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_iterating_a_stream_by_path_reads_ahead_and_gives_every_batch_in_order(ctx, tmp_path, compression):
    table = _wide(rows=12000, chunks=12)
    host = table.to_batches()
    path = _write_stream(tmp_path / "ahead.arrows", table, compression)
    r = ipc.open_stream(path)
    got = [b.to_host() for b in r]
    assert len(got) == 12 and all(g.equals(h) for g, h in zip(got, host))
    assert r.stats()["staging_jobs"] == 2, "the first batch alone, then the other 11 in one staging job"
    with pytest.raises(StopIteration):
        r.read_next_batch()
    for kwargs in ({"readahead": 1, "readahead_bytes": 1}, {"readahead": 0}):
        got = [b.to_host() for b in ipc.open_stream(path).iter_batches(**kwargs)]
        assert len(got) == 12 and all(g.equals(h) for g, h in zip(got, host)), kwargs
    # Dictionaries replaced between batches.
    dpath = tmp_path / "dict.arrows"
    dhost = _dictionary_stream(dpath)
    assert [b.to_host() for b in ipc.open_stream(dpath)] == dhost


def test_a_stream_loop_left_early_puts_the_reader_back_at_the_next_batch(ctx, tmp_path):
    table = _wide(rows=12000, chunks=12)
    host = table.to_batches()
    path = _write_stream(tmp_path / "early.arrows", table)
    r = ipc.open_stream(path)
    before = ctx.bytes_allocated
    for k, b in enumerate(r.iter_batches(readahead=3, readahead_bytes=1)):
        assert b.to_host().equals(host[k])
        if k == 1:
            break
    del b
    gc.collect()
    assert ctx.bytes_allocated == before, "what was read ahead is freed"
    # pyarrow's reader goes on after the last batch the loop took: so does this one.
    assert r.read_next_batch().to_host().equals(host[2])
    # A loop, a read of the reader inside it, the loop again: each batch once, in order.
    it = iter(r)
    got = [next(it).to_host(), r.read_next_batch().to_host(), next(it).to_host()]
    assert got == host[3:6]
    del it
    assert [b.to_host() for b in r.iter_batches()] == host[6:]
    # A loop never started, dropped; then read_all from where the reader was.
    r = ipc.open_stream(path)
    assert r.read_next_batch().to_host().equals(host[0])
    batches = r.iter_batches(readahead=2)
    del batches
    gc.collect()
    assert r.read_all().to_host().equals(pa.Table.from_batches(host[1:]))
    # With dictionaries replaced between batches: put back with the right ones.
    dpath = tmp_path / "dict.arrows"
    dhost = _dictionary_stream(dpath)
    for stop in (0, 3, 9):
        r = ipc.open_stream(dpath)
        got = []
        for k, b in enumerate(r.iter_batches(readahead=3, readahead_bytes=1)):
            got.append(b.to_host())
            if k == stop:
                break
        got += [b.to_host() for b in r.read_all().to_batches()]
        assert got == dhost, stop


def test_stream_reading_ahead_gives_the_batches_before_a_failing_read_then_its_error(ctx, tmp_path):
    table = _wide(rows=12000, chunks=12)
    path = _write_stream(tmp_path / "cut.arrows", table)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) * 2 // 3)
    r = ipc.open_stream(path)
    got = []
    with pytest.raises(pa.ArrowInvalid, match="runs past the end of file .*cut.arrows"):
        for b in r.iter_batches(readahead=2, readahead_bytes=1 << 40):
            got.append(b.to_host())
    assert 0 < len(got) < 12
    assert all(g.equals(h) for g, h in zip(got, table.to_batches()))
    with pytest.raises(ValueError, match=r"depth \(the reads ahead\) must be at least 0, not -1"):
        r.iter_batches(readahead=-1)
    with pytest.raises(ValueError, match=r"read_bytes \(the bytes of one read ahead\) must be at least 1, not 0"):
        r.iter_batches(readahead_bytes=0)
    with pytest.raises(ValueError, match="read_bytes"):
        r.iter_batches(readahead=0, readahead_bytes=0)  # checked without a thread too, as for files


@pytest.mark.multi_device
def test_into_another_context(ctx1, tmp_path):
    table = _table(pa.int64())
    path = _write_file(tmp_path / "t.arrow", table)
    got = ipc.read_feather(path, context=ctx1)
    assert got.device_id == ctx1.device_number
    assert got.to_host().equals(table)


def test_bad_paths_raise_oserrors(ctx, tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.arrow"):
        ipc.open_file(tmp_path / "missing.arrow")
    with pytest.raises(IsADirectoryError):
        ipc.read_feather(tmp_path)
    with pytest.raises(TypeError, match="path"):
        ipc.read_feather(b"bytes are not a path")


def test_malformed_files_raise_arrow_invalid_and_never_crash(ctx, tmp_path):
    table = _wide(rows=400)
    good = _write_file(tmp_path / "g.arrow", table).read_bytes()
    for cut in [0, 7, len(good) // 2, len(good) - 3]:
        p = tmp_path / f"cut{cut}.arrow"
        p.write_bytes(good[:cut])
        with pytest.raises((pa.ArrowInvalid, OSError)):
            ipc.open_file(p).read_all()
    rng = np.random.default_rng(3)
    for k in range(40):
        bad = bytearray(good)
        for i in rng.integers(0, len(bad), 4):
            bad[i] ^= 0xFF
        p = tmp_path / f"flip{k}.arrow"
        p.write_bytes(bytes(bad))
        try:
            ipc.open_file(p).read_all().to_host()
        except (pa.ArrowInvalid, OSError, IndexError):
            pass
    # the reader of a good file still works after all that
    assert ipc.read_feather(tmp_path / "g.arrow").to_host().equals(table)


def test_a_file_shrunk_while_open_is_an_oserror(ctx, tmp_path):
    table = _wide()
    path = _write_file(tmp_path / "w.arrow", table)
    r = ipc.open_file(path)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 3)
    with pytest.raises(OSError, match="ends at offset"):
        r.read_all()


# ---- writing to a path -------------------------------------------------------------------


@pytest.mark.parametrize("t", all_types(), ids=type_id)
def test_every_type_written_to_a_path_reads_in_pyarrow(ctx, tmp_path, t):
    table = _table(t).unify_dictionaries()
    d = cuda.to_device(table, ctx)
    ipc.write_feather(d, tmp_path / "t.arrow", compression="uncompressed")
    assert pa.ipc.open_file(tmp_path / "t.arrow").read_all().equals(table)
    with ipc.new_stream(tmp_path / "t.arrows", table.schema) as w:
        w.write_table(d)
    assert pa.ipc.open_stream(tmp_path / "t.arrows").read_all().equals(table)


def test_uncompressed_files_are_pyarrows_bytes(ctx, tmp_path):
    table = _wide()
    with pa.ipc.new_file(tmp_path / "pa.arrow", table.schema, metadata={"k": "v"}) as w:
        w.write_table(table)
    with ipc.new_file(tmp_path / "cu.arrow", table.schema, metadata={"k": "v"}) as w:
        w.write_table(cuda.to_device(table, ctx))
        assert w.bytes_written > 0
    assert (tmp_path / "cu.arrow").read_bytes() == (tmp_path / "pa.arrow").read_bytes()


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_write_feather_compressed_reads_back_in_both(ctx, tmp_path, compression):
    table = _wide()
    path = tmp_path / "w.feather"
    ipc.write_feather(cuda.to_device(table, ctx), path, compression=compression, chunksize=1000)
    got = feather.read_table(path)
    assert got.equals(table)
    assert max(len(b) for b in got.to_batches()) <= 1000
    with pa.ipc.open_file(path) as r:
        assert r.num_record_batches == 8, "each batch of 1250 rows in two"
    assert ipc.read_feather(path).to_host().equals(table)
    if compression == "zstd":
        ipc.write_feather(cuda.to_device(table, ctx), tmp_path / "l.feather", compression="zstd", compression_level=9)
        assert feather.read_table(tmp_path / "l.feather").equals(table)
    with pytest.raises(ValueError, match="compression"):
        ipc.write_feather(cuda.to_device(table, ctx), path, compression="snappy")


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_compressed_buffers_above_4_mib_are_written_in_chunks_every_reader_reads(ctx, tmp_path, compression):
    # Buffers above 4 MiB are compressed in 4 MiB chunks on several threads
    # (one LZ4 frame of independent blocks; one ZSTD frame per chunk):
    # pyarrow, cuarrow's host path and its GPU path (nvCOMP takes a buffer
    # of one frame only; the host decides the others) all read the table.
    rng = np.random.default_rng(4)
    n = 1_300_000  # 10.4 MB of int64, 2 chunks and a bit
    table = pa.table(
        {
            "i": pa.array(np.arange(n, dtype=np.int64) // 3),
            "f": pa.array(rng.integers(0, 1000, n).astype(np.float64)),
            "s": pa.array([f"w{k % 977}" for k in range(n)]),
        }
    )
    path = tmp_path / "big.feather"
    ipc.write_feather(cuda.to_device(table, ctx), path, compression=compression)
    assert feather.read_table(path).equals(table)
    assert ipc.read_feather(path).to_host().equals(table)
    assert ipc.read_feather(path, gpu_decompression=True).to_host().equals(table)
    assert path.stat().st_size < table.nbytes / 2, "compressed"
    # Each 4 MiB ZSTD frame or LZ4 block (sized on trust: full but the
    # last) is decoded straight into a staging slot; a buffer that pyarrow
    # writes as one frame goes through scratch memory.
    with ipc.open_file(path) as reader:
        assert reader.read_all().to_host().equals(table)
        assert reader.stats()["scratch_decoded_bytes"] == 0
    theirs = tmp_path / "theirs.feather"
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_file(theirs, table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=n)  # one batch: buffers above a staging chunk
    with ipc.open_file(theirs) as reader:
        assert reader.read_all().to_host().equals(table)
        assert reader.stats()["scratch_decoded_bytes"] >= table.column("i").nbytes


def test_a_failed_write_leaves_no_file_and_bad_paths_are_oserrors(ctx, tmp_path):
    table = _wide(rows=100)
    with pytest.raises(FileNotFoundError):
        ipc.new_file(tmp_path / "no" / "such" / "dir.arrow", table.schema)
    with pytest.raises(IsADirectoryError):
        ipc.write_feather(cuda.to_device(table, ctx), tmp_path)
    path = tmp_path / "partial.arrow"
    with pytest.raises(pa.ArrowInvalid, match="different schema"):
        with ipc.new_file(path, table.schema) as w:
            w.write_table(cuda.to_device(table, ctx))
            w.write_batch(cuda.to_device(pa.record_batch({"other": [1]}), ctx))
    del w
    import gc

    gc.collect()
    assert not path.exists(), "an unclosed writer removes its file"
    with ipc.new_stream(path, table.schema) as w:
        pass
    assert pa.ipc.open_stream(path).read_all().num_rows == 0
    with pytest.raises(TypeError, match="getvalue"):
        w.getvalue()


def test_write_progress(ctx, tmp_path, monkeypatch):
    # A report per group of batches (about 1 GiB each, one writer call
    # each): this small table is one group.
    calls = []
    ipc.write_feather(
        cuda.to_device(_wide(), ctx), tmp_path / "w.arrow", progress=lambda *a: calls.append(a), compression="lz4"
    )
    assert [c[:2] for c in calls] == [(4, 4)]
    # Groups of one batch: a report per batch.
    monkeypatch.setattr(ipc, "_PROGRESS_GROUP_BYTES", 1)
    calls.clear()
    ipc.write_feather(
        cuda.to_device(_wide(), ctx), tmp_path / "w.arrow", progress=lambda *a: calls.append(a), compression="lz4"
    )
    assert [c[:2] for c in calls] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert feather.read_table(tmp_path / "w.arrow").equals(_wide())


@pytest.mark.parametrize("compression", ["uncompressed", "lz4", "zstd"])
def test_write_feather_of_many_batches_in_one_call(ctx, tmp_path, compression):
    # 60 batches written by one writer call (one staging job for all the
    # bodies): what pyarrow reads back is the table; uncompressed, the bytes
    # are pyarrow's.
    table = _wide(rows=60 * 200, columns=7, chunks=60)
    path = tmp_path / "many.feather"
    ipc.write_feather(cuda.to_device(table, ctx), path, compression=compression)
    with pa.ipc.open_file(path) as r:
        assert r.num_record_batches == 60
        assert r.read_all().equals(table)
    if compression == "uncompressed":
        assert path.read_bytes() == _write_file(tmp_path / "pa.arrow", table).read_bytes()
    # The writers' write_table takes the same path, streams too.
    with ipc.new_stream(tmp_path / "many.arrows", table.schema) as w:
        w.write_table(cuda.to_device(table, ctx), max_chunksize=150)
    got = pa.ipc.open_stream(tmp_path / "many.arrows").read_all()
    assert got.equals(table)
    assert max(len(b) for b in got.to_batches()) <= 150


def test_body_group_bytes_chooses_shared_or_own_allocations(ctx, tmp_path):
    table = _wide(chunks=12)
    path = tmp_path / "groups.arrow"
    feather.write_feather(table, path, compression="uncompressed")
    n = len(table.to_batches())
    for kwargs, shared in (({}, True), ({"body_group_bytes": None}, True), ({"body_group_bytes": 0}, False)):
        stats = {}
        got = ipc.read_feather(path, context=ctx, stats=stats, **kwargs)
        assert got.to_host().equals(table)
        # Shared: neighbouring bodies in one DMA; own: a DMA (at least) a body.
        assert (stats["dmas"] < n) == shared, (kwargs, stats["dmas"], n)
    with ipc.open_file(path, context=ctx, body_group_bytes=0, collect_stats=True) as r:
        assert r.read_all().to_host().equals(table)
        assert r.stats()["dmas"] >= n
    stream = _write_stream(tmp_path / "groups.arrows", table)
    with ipc.open_stream(stream, context=ctx, body_group_bytes=1 << 20, collect_stats=True) as r:
        assert r.read_all().to_host().equals(table)
        assert r.stats()["dmas"] < n
    with pytest.raises(ValueError, match="body_group_bytes"):
        ipc.read_feather(path, context=ctx, body_group_bytes=-2)
    with pytest.raises(TypeError):
        ipc.read_feather(path, context=ctx, body_group_bytes="32M")


@pytest.mark.parametrize("compression", ["uncompressed", "lz4", "zstd"])
def test_read_stats_say_where_the_time_went(ctx, tmp_path, compression):
    table = _wide()
    path = tmp_path / "stats.arrow"
    feather.write_feather(table, path, compression=compression)
    stats = {}
    got = ipc.read_feather(path, context=ctx, stats=stats)
    assert got.to_host().equals(table)
    assert stats["batches"] == len(table.to_batches())
    assert stats["staging_jobs"] == 1  # every body in one job
    if compression == "uncompressed":  # small neighbouring bodies travel together
        assert 0 < stats["dmas"] < stats["batches"]
    assert 0 < stats["bytes_read"] <= os.path.getsize(path)
    assert stats["metadata_seconds"] > 0 and stats["staging_seconds"] > 0 and stats["build_seconds"] > 0
    assert stats["pread_seconds"] > 0
    assert (stats["decompress_seconds"] > 0) == (compression != "uncompressed")


@pytest.mark.parametrize("compression", ["uncompressed", "zstd"])
def test_write_stats_say_where_the_time_went(ctx, tmp_path, compression):
    table = _wide()
    device = cuda.to_device(table, ctx)
    stats = {}
    ipc.write_feather(device, tmp_path / "w.arrow", compression=compression, stats=stats)
    assert feather.read_table(tmp_path / "w.arrow").equals(table)
    n = len(table.to_batches())
    # A file's messages: the schema and every batch (no dictionaries).
    assert stats["batches"] == n and stats["messages"] == n + 1
    assert stats["body_pieces"] > 0 and stats["file_write_seconds"] > 0 and stats["layout_seconds"] > 0
    assert (stats["compress_seconds"] > 0) == (compression != "uncompressed")
    assert (stats["compress_copy_seconds"] > 0) == (compression != "uncompressed")
    assert stats["compress_copy_seconds"] <= stats["compress_seconds"]
    assert stats["allocate_seconds"] == stats["queue_seconds"] == stats["wait_seconds"] == 0
    assert stats["early_messages"] == 0
    # Into device memory: the same counts, the device phases instead of the
    # file's; every message copied as it was written (uncompressed, no
    # dictionaries), before close(), where the gather kernel runs.
    early = ctx.gather_status() == "ready"
    with ipc.new_stream(ctx, table.schema) as w:
        w.write_table(device)
        before = w.stats()
    after = w.stats()
    assert before["early_messages"] == (n + 1 if early else 0)
    assert (before["queue_seconds"] > 0) == early
    assert after["wait_seconds"] > before["wait_seconds"] and after["queue_seconds"] > 0
    assert after["batches"] == n and after["messages"] == n + 1 and after["file_write_seconds"] == 0
    assert after["early_messages"] == before["early_messages"]
    with pytest.raises(TypeError, match="stats must be None or a dict"):
        ipc.write_feather(device, tmp_path / "x.arrow", stats=[])


def test_a_device_writer_left_unclosed_frees_what_its_copies_used(ctx):
    # An exception inside the with-block leaves the writer unclosed: where
    # it copied early, its copies may still be queued when it is dropped,
    # and what they use is released once the stream has passed them.
    table = _wide()
    device = cuda.to_device(table, ctx)
    ctx.synchronize()
    before = ctx.bytes_allocated
    with pytest.raises(RuntimeError, match="stop here"):
        with ipc.new_stream(ctx, table.schema) as w:
            w.write_table(device)
            raise RuntimeError("stop here")
    del w
    gc.collect()
    ctx.synchronize()
    assert ctx.bytes_allocated == before
    # The batches were not harmed, and another writer takes them.
    with ipc.new_stream(ctx, table.schema) as w:
        w.write_table(device)
    assert ipc.open_stream(w.getvalue()).read_all().to_host().equals(table)


def test_read_stats_time_nothing_unless_asked(ctx, tmp_path):
    table = _wide()
    path = tmp_path / "s.arrows"
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table)
    reader = ipc.open_stream(path, context=ctx)
    assert reader.read_all().to_host().equals(table)
    stats = reader.stats()
    assert stats["batches"] == len(table.to_batches()) and stats["bytes_read"] == reader.bytes_read
    assert all(v == 0 for k, v in stats.items() if k.endswith("_seconds"))
    timed = ipc.open_stream(path, context=ctx, collect_stats=True)
    timed.read_next_batch()
    assert timed.stats()["batches"] == 1 and timed.stats()["staging_seconds"] > 0
    assert ipc.open_stream(_stream_in_device_memory(ctx, table)).stats() is None


def _stream_in_device_memory(ctx, table):
    w = ipc.new_stream(ctx, table.schema)
    w.write_table(table)
    return w.close()


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_gpu_decompression_reads_the_same_and_says_what_ran(ctx, tmp_path, kind):
    table = _wide(rows=8000, chunks=4)
    status = ipc.nvcomp_status()
    assert set(status) == {"mode", "available", "version", "library", "reason"}
    if kind == "file":
        path = _write_file(tmp_path / "z.arrow", table, "zstd")
        reader = ipc.open_file(path, collect_stats=True, gpu_decompression=True)
    else:
        path = _write_stream(tmp_path / "z.arrows", table, "zstd")
        reader = ipc.open_stream(path, collect_stats=True, gpu_decompression=True)
    assert reader.read_all().to_host().equals(table)
    stats = reader.stats()
    if status["available"]:
        assert "decompressed on the GPU by nvCOMP " + status["version"] in reader.read_path_reason
        assert stats["gpu_decompress_seconds"] > 0
    else:
        # Asked for and not there: the host decompressed it, and says why.
        assert "not on the GPU as asked" in reader.read_path_reason
        assert status["reason"] in reader.read_path_reason
        assert stats["gpu_decompress_seconds"] == 0
        assert stats["decompress_seconds"] > 0
    # Not asked for: the host path, whatever is installed.
    plain = ipc.open_file(path) if kind == "file" else ipc.open_stream(path)
    assert plain.read_all().to_host().equals(table)
    assert "nvCOMP" not in plain.read_path_reason
    if kind == "file":
        assert ipc.read_feather(path, gpu_decompression=True).to_host().equals(table)


@pytest.mark.skipif(
    cuda.is_emulated() or not ipc.nvcomp_status()["available"],
    reason="needs a real GPU and nvCOMP 6 (pip install nvidia-libnvcomp-cu13, or CUARROW_NVCOMP_LIBRARY)",
)
def test_gpu_decompression_of_a_corrupt_frame_is_an_error_never_data(ctx, tmp_path):
    table = _wide(rows=8000, chunks=2)
    path = _write_file(tmp_path / "z.arrow", table, "zstd")
    data = bytearray(path.read_bytes())
    frame = data.index(b"\x28\xb5\x2f\xfd")  # the first ZSTD frame; its header stays intact
    data[frame + 24 : frame + 64] = b"\xff" * 40
    bad = tmp_path / "bad.arrow"
    bad.write_bytes(bytes(data))
    # In a child process: nvCOMP promises no clean error for corrupt data.
    # nvCOMP 6.0 on the H200 (2026-12-05) faults on this one: an illegal
    # address, a CudaError, after which the process cannot use the device
    # (why gpu_decompression is for trusted files).  A reported status is an
    # ArrowInvalid naming the buffer, after which reads go on.  Either way
    # the corrupt file is never returned as data, and this process's device
    # is untouched.
    code = (
        "import sys, pyarrow as pa\n"
        "from cuarrow import cuda, ipc\n"
        "try:\n"
        "    t = ipc.read_feather(sys.argv[1], gpu_decompression=True)\n"
        "    print('READ', t.num_rows)\n"
        "except pa.ArrowInvalid as e:\n"
        "    print('ArrowInvalid:', e)\n"
        "    print(ipc.read_feather(sys.argv[2], gpu_decompression=True).num_rows)\n"
        "except cuda.CudaError as e:\n"
        "    print('CudaError:', e)\n"
    )
    argv = [sys.executable, "-c", code, str(bad), str(path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "READ" not in done.stdout, done.stdout
    if "ArrowInvalid:" in done.stdout:
        assert re.search(r"ArrowInvalid: .*buffers\[\d+\]", done.stdout), done.stdout
        assert done.stdout.strip().splitlines()[-1] == str(table.num_rows)
    else:
        assert re.search(r"CudaError: .*nvCOMP", done.stdout), done.stdout
    assert ipc.read_feather(path, gpu_decompression=True).to_host().equals(table)


def test_the_nvcomp_wheel_is_not_loaded_on_the_emulation(tmp_path):
    """On the driver's host emulation an installed nvidia-libnvcomp-cu13
    wheel is left alone (its kernels cannot run on emulated memory), and
    no environment variable is set for child processes; a reader asking for
    GPU decompression gets the host's."""
    lib = tmp_path / "site" / "nvidia" / "libnvcomp" / "lib64"
    lib.mkdir(parents=True)
    (lib / "libnvcomp.so.6").write_bytes(b"not a library")
    table = _wide(rows=2000, chunks=2)
    path = _write_file(tmp_path / "z.arrow", table, "zstd")
    code = (
        "import os, sys\n"
        "from cuarrow import ipc\n"
        "status = ipc.nvcomp_status()\n"
        "assert not status['available'], status\n"
        "assert 'emulation' in status['reason'], status\n"
        "assert 'CUARROW_NVCOMP_LIBRARY' not in os.environ\n"
        "reader = ipc.open_file(sys.argv[1], gpu_decompression=True, collect_stats=True)\n"
        "rows = reader.read_all().num_rows\n"
        "assert reader.stats()['decompress_seconds'] > 0 and reader.stats()['gpu_decompress_seconds'] == 0\n"
        "print(rows)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CUARROW_NVCOMP_LIBRARY"}
    env["CUARROW_CUDA_DRIVER"] = "emulated"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path / "site"), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(table.num_rows)
