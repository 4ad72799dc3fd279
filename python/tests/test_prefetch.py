"""cuda.prefetch_to_device: a stream of host record batches moved to the
device ahead of the loop that takes them (cuarrow::arrow::device_readahead)."""

import gc
import subprocess
import sys
import textwrap
import threading
import time

import pyarrow as pa
import pytest

from cuarrow import cuda


def _batches(n=6, rows=1000):
    return [
        pa.record_batch(
            {
                "i": pa.array(range(k * rows, (k + 1) * rows), pa.int64()),
                "s": pa.array([None if j % 7 == 0 else f"v{k}-{j}" for j in range(rows)]),
                "l": pa.array([[j, j + 1] for j in range(rows)], pa.list_(pa.int32())),
            }
        )
        for k in range(n)
    ]


class _Counted:
    """An iterable of batches that counts the batches taken from it."""

    def __init__(self, batches, fail_at=None, pause=0.0):
        self.batches, self.fail_at, self.pause = batches, fail_at, pause
        self.taken = 0
        self.threads = set()

    def __iter__(self):
        for k, b in enumerate(self.batches):
            if k == self.fail_at:
                raise RuntimeError(f"the source broke at batch {k}")
            if self.pause:
                time.sleep(self.pause)
            self.taken += 1
            self.threads.add(threading.get_ident())
            yield b


@pytest.mark.parametrize("readahead", [0, 1, 3])
def test_every_batch_comes_in_order_on_the_device(ctx, readahead):
    batches = _batches()
    got = list(
        cuda.prefetch_to_device(pa.RecordBatchReader.from_batches(batches[0].schema, batches), ctx, readahead=readahead)
    )
    assert len(got) == len(batches)
    for g, b in zip(got, batches):
        assert isinstance(g, cuda.DeviceRecordBatch)
        assert g.device_type == pa.DeviceAllocationType.CUDA and g.device_id == 0
        assert g.schema.equals(b.schema)
        assert g.to_host().equals(b)


def test_sources_tables_and_iterables(ctx):
    batches = _batches(4)
    table = pa.Table.from_batches(batches)
    assert pa.Table.from_batches([b.to_host() for b in cuda.prefetch_to_device(table)]).equals(table)
    source = _Counted(batches)
    got = [b.to_host() for b in cuda.prefetch_to_device(source, 0)]
    assert got == batches
    assert list(cuda.prefetch_to_device(iter([]))) == []
    empty = pa.RecordBatchReader.from_batches(batches[0].schema, [])
    assert list(cuda.prefetch_to_device(empty)) == []


def test_a_dataset_scanner_and_a_parquet_file(ctx, tmp_path):
    # Producers that make their batches on Arrow C++'s own threads.
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow built without Parquet")
    ds = pytest.importorskip("pyarrow.dataset", reason="pyarrow built without datasets")
    table = pa.Table.from_batches(_batches(5))
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=1500)
    scanner = ds.dataset(tmp_path / "t.parquet").scanner(batch_size=700)
    got = pa.Table.from_batches([b.to_host() for b in cuda.prefetch_to_device(scanner.to_reader(), readahead=3)])
    assert got.equals(table)
    f = pq.ParquetFile(tmp_path / "t.parquet")
    got = [b.to_host() for b in cuda.prefetch_to_device(f.iter_batches(batch_size=1000, columns=["i", "l"]))]
    assert pa.Table.from_batches(got).equals(table.select(["i", "l"]))


@pytest.mark.parametrize("readahead", [0, 2])
def test_reads_at_most_readahead_transfers_ahead(ctx, readahead):
    source = _Counted(_batches(8))
    it = cuda.prefetch_to_device(source, readahead=readahead, readahead_bytes=1)  # one batch a transfer
    next(it)
    time.sleep(0.3)
    assert source.taken == 1 + readahead, "the batch in hand and `readahead` ahead"
    assert len(list(it)) == 7
    # The first batch is taken on the calling thread (for the schema); the
    # others there too with readahead=0, else on cuarrow's thread.
    assert (source.threads == {threading.get_ident()}) == (readahead == 0)


def test_small_batches_are_moved_together_up_to_readahead_bytes(ctx):
    batches = _batches(8)
    source = _Counted(batches)
    it = cuda.prefetch_to_device(source, readahead=1)  # 64 MiB a transfer: the seven after the first at once
    first = next(it)
    time.sleep(0.3)
    assert source.taken == 8, "the first batch alone, then the seven others in one transfer ahead"
    assert [first.to_host()] + [b.to_host() for b in it] == batches


@pytest.mark.parametrize("readahead", [0, 2])
def test_a_failing_source_gives_the_batches_before_then_its_error(ctx, readahead):
    batches = _batches()
    got = []
    with pytest.raises(RuntimeError, match="the source broke at batch 3"):
        for b in cuda.prefetch_to_device(_Counted(batches, fail_at=3), readahead=readahead):
            got.append(b.to_host())
    assert got == batches[:3]


def test_leaving_the_loop_early_frees_what_was_moved_ahead(ctx):
    gc.collect()
    before = ctx.bytes_allocated
    for b in cuda.prefetch_to_device(_Counted(_batches(10)), readahead=4):
        first = b
        break
    gc.collect()
    del first, b
    gc.collect()
    assert ctx.bytes_allocated == before
    # Dropped while its thread waits in a slow Python source for the GIL: no hang.
    it = cuda.prefetch_to_device(_Counted(_batches(10), pause=0.02), readahead=2)
    next(it)
    del it
    gc.collect()
    assert ctx.bytes_allocated == before


def test_a_process_exits_cleanly_with_a_read_ahead_still_running():
    # The thread is in a Python producer (it takes the GIL) when the
    # interpreter exits: the read-ahead is stopped at exit, not left to
    # finalization (where it aborted the process).
    code = """
        import time, pyarrow as pa
        from cuarrow import cuda
        def slow():
            for k in range(100):
                time.sleep(0.01)
                yield pa.record_batch({"x": list(range(1000))})
        it = cuda.prefetch_to_device(slow(), readahead=3)
        next(it)
        print("leaving", flush=True)
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "leaving"


def test_bad_sources_and_arguments_are_refused(ctx):
    with pytest.raises(TypeError, match="stream of record batches"):
        cuda.prefetch_to_device(42)
    with pytest.raises(TypeError, match="must give pyarrow.RecordBatch objects, not int"):
        cuda.prefetch_to_device([1, 2])
    batches = _batches(2)
    with pytest.raises(ValueError, match=r"depth \(the transfers ahead\) must be at least 0, not -1"):
        cuda.prefetch_to_device(pa.Table.from_batches(batches), readahead=-1)
    with pytest.raises(ValueError, match=r"read_bytes \(the bytes of one transfer ahead\) must be at least 1, not 0"):
        cuda.prefetch_to_device(pa.Table.from_batches(batches), readahead_bytes=0)
    with pytest.raises(pa.ArrowInvalid, match="struct"):
        cuda.prefetch_to_device(pa.chunked_array([[1, 2], [3]]))
    # A batch of another schema in the middle (pyarrow's from_batches does
    # not check): the import refuses it, after the batches before.
    other = pa.record_batch({"x": [1]})
    got = []
    with pytest.raises(pa.ArrowInvalid, match="n_children is 1 .* \\(expected 3\\)"):
        for b in cuda.prefetch_to_device([batches[0], other]):
            got.append(b)
    assert len(got) == 1
