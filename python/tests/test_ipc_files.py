"""Arrow IPC files (Feather v2) and streams read by path straight into device
memory (cuarrow.ipc.open_file / open_stream over a path, read_feather):
pyarrow writes the file, cuarrow reads it onto the device, to_host() equals
what pyarrow reads; projection reads only the chosen columns' bytes;
compressed files decompress; bad paths and files raise clear errors."""

import os

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
    rng = np.random.default_rng(7)
    cols = {}
    for k in range(columns):
        if k % 3 == 0:
            cols[f"c{k}"] = pa.array(rng.integers(0, 1000, rows), pa.int64())
        elif k % 3 == 1:
            cols[f"c{k}"] = pa.array([None if i % 17 == 0 else f"s{i % 97}" for i in range(rows)], pa.string())
        else:
            cols[f"c{k}"] = pa.array(rng.random(rows), pa.float64())
    t = pa.table(cols)
    return pa.Table.from_batches(t.to_batches(max_chunksize=rows // chunks))


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
    with pytest.raises(IndexError):
        r.get_batch(4)


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
    with pytest.raises(IndexError):
        ipc.read_feather(path, columns=[10])


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
