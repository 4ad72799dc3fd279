"""Reading and writing IPC batch by batch costs a bounded number of driver
calls per batch, counted by the emulated driver: batches cross between the
facade and the binding as the core's own objects (no C Device Data export
and re-import, which waited on an event and read offsets back from the
device for every batch), and the small reads of offsets that remain (the
readers' cheap validation, the writers' layouts) go as one batched copy with
no host function per value.  A regression that brings a per-batch export,
import or probe back breaks these counts."""

import ctypes

import pyarrow as pa
import pytest
from conftest import EMULATED

from cuarrow import cuda, ipc

pytestmark = pytest.mark.skipif(not EMULATED, reason="counts the emulated driver's calls")

# Calls a batch must not cost at all, on any path: host functions (keep-alives
# of per-value copies), pointer queries and events (of an export and import).
NONE_PER_BATCH = ("cuLaunchHostFunc", "cuPointerGetAttributes", "cuEventCreate", "cuEventRecord", "cuStreamWaitEvent")


@pytest.fixture(scope="module")
def emu():
    lib = ctypes.CDLL(cuda.driver_info()["path"])
    lib.cuarrow_emu_call_count.restype = ctypes.c_size_t
    lib.cuarrow_emu_call_count.argtypes = [ctypes.c_char_p]
    return lib


def _table(ctx, n):
    """`n` batches of a primitive, a string and a list column (the last two
    have offsets a reader checks and a writer lays out)."""
    batches = [
        pa.record_batch(
            {
                "i": pa.array(range(k, k + 50), pa.int64()),
                "s": pa.array([None if j % 7 == 0 else f"v{j}" for j in range(50)]),
                "l": pa.array([[j, j + 1] for j in range(50)], pa.list_(pa.int32())),
            }
        )
        for k in range(n)
    ]
    return cuda.to_device(pa.Table.from_batches(batches), ctx)


def _per_batch(emu, ctx, prepare, run, names):
    """The calls of `names` per batch: (calls for 30 batches - calls for 10) / 20."""
    counts = []
    for n in (10, 30):
        arg = prepare(_table(ctx, n))
        emu.cuarrow_emu_reset_call_counts()
        run(arg)
        counts.append({name: emu.cuarrow_emu_call_count(name.encode()) for name in names})
    return {name: (counts[1][name] - counts[0][name]) / 20 for name in names}


def _check(per_batch, syncs, d2h):
    for name in NONE_PER_BATCH:
        assert per_batch[name] == 0, (name, per_batch)
    assert per_batch["cuStreamSynchronize"] <= syncs, per_batch
    assert per_batch["cuMemcpyDtoHAsync"] <= d2h, per_batch


NAMES = (*NONE_PER_BATCH, "cuStreamSynchronize", "cuMemcpyDtoHAsync")


def _stream(ctx, table):
    w = ipc.new_stream(ctx, table.schema)
    w.write_table(table)
    return w.close()


def _file(ctx, table):
    w = ipc.new_file(ctx, table.schema)
    w.write_table(table)
    return w.close()


def test_reading_a_stream_in_device_memory(emu, ctx):
    def run(buf):
        assert ipc.open_stream(buf).read_all().num_rows > 0

    # Per batch: its metadata read to the host (one copy, one sync) and four
    # small copies of the first and last offsets of the string and list
    # columns for the reader's cheap validation, which read_all does for
    # every batch at once (one sync in all).
    per = _per_batch(emu, ctx, lambda t: _stream(ctx, t), run, NAMES)
    _check(per, syncs=1, d2h=5)

    def one_by_one(buf):
        assert sum(len(b) for b in ipc.open_stream(buf)) > 0

    # Batch by batch, each batch's validation is one sync of its own.
    per = _per_batch(emu, ctx, lambda t: _stream(ctx, t), one_by_one, NAMES)
    _check(per, syncs=2, d2h=5)


def test_reading_a_file_in_device_memory(emu, ctx):
    def run(buf):
        r = ipc.open_file(buf)
        assert sum(len(r.get_batch(i)) for i in range(r.num_record_batches)) > 0

    per = _per_batch(emu, ctx, lambda t: _file(ctx, t), run, NAMES)
    _check(per, syncs=2, d2h=5)
    per = _per_batch(emu, ctx, lambda t: _file(ctx, t), lambda buf: ipc.open_file(buf).read_all(), NAMES)
    _check(per, syncs=1, d2h=5)


def test_reading_files_by_path(emu, ctx, tmp_path):
    def feather(table):
        path = tmp_path / f"f{table.num_rows}.arrow"
        ipc.write_feather(table, path, compression="uncompressed")
        return path

    def stream(table):
        path = tmp_path / f"s{table.num_rows}.arrows"
        with ipc.new_stream(path, table.schema) as w:
            w.write_table(table)
        return path

    # Bodies come from the file, and the offsets the readers' validation
    # checks are taken from the staging slots on their way to the device:
    # nothing is read back from the device, for any batch.
    per = _per_batch(emu, ctx, feather, lambda p: ipc.read_feather(p, context=ctx), NAMES)
    _check(per, syncs=0, d2h=0)
    per = _per_batch(emu, ctx, stream, lambda p: ipc.open_stream(p, context=ctx).read_all(), NAMES)
    _check(per, syncs=0, d2h=0)


def test_writing_batch_by_batch(emu, ctx, tmp_path):
    def write_batches(table):
        w = ipc.new_stream(ctx, table.schema)
        for b in table.to_batches():
            w.write_batch(b)
        w.close()

    # Each write lays its batch out: one batched read of its offsets.
    per = _per_batch(emu, ctx, lambda t: t, write_batches, NAMES)
    _check(per, syncs=1, d2h=5)


def test_writing_tables(emu, ctx, tmp_path):
    def write_table(table):
        w = ipc.new_stream(ctx, table.schema)
        w.write_table(table)
        w.close()

    # Every batch laid out together: no synchronization per batch.
    per = _per_batch(emu, ctx, lambda t: t, write_table, NAMES)
    _check(per, syncs=0, d2h=5)
    per = _per_batch(
        emu, ctx, lambda t: t, lambda t: ipc.write_feather(t, tmp_path / "w.arrow", compression="uncompressed"), NAMES
    )
    _check(per, syncs=0, d2h=5)


def test_a_table_written_into_device_memory_costs_no_driver_call_per_batch(emu, ctx):
    """new_stream / new_file + write_table + close: the offsets every layout
    needs are read in one batched copy, every message's metadata and body
    and the zeros of the padding go in a few batched copies, and one
    synchronization waits for them: no copy, memset, synchronization or
    event per batch (226 batches made 2,260 DtoH and 227 HtoD calls and a
    memset of the whole stream), and no driver call per batch at all,
    counting every entry point."""
    per_call = ("cuMemcpyDtoHAsync", "cuMemcpyHtoDAsync", "cuMemcpyDtoDAsync", "cuMemsetD8Async")
    names = (*NAMES, *per_call)
    for write in (_stream, _file):

        def run(table, write=write):
            write(ctx, table)

        per = _per_batch(emu, ctx, lambda t: t, run, names)
        for name in (*NONE_PER_BATCH, *per_call, "cuStreamSynchronize"):
            assert per[name] == 0, (write.__name__, name, per)
        counts = []
        for n in (10, 30):
            table = _table(ctx, n)
            emu.cuarrow_emu_reset_call_counts()
            run(table)
            counts.append(emu.cuarrow_emu_call_count(None))
        # The batched copies are queued in parts of growing size (the GPU
        # starts on the first while the host plans the next): a few calls
        # more for three times the batches, far from one per batch.
        assert (counts[1] - counts[0]) / 20 < 1, (write.__name__, counts)


def test_foreign_device_batches_are_written(ctx):
    """An object with __arrow_c_device_array__ (not cuarrow's class) is
    imported once and written."""

    class Foreign:
        def __init__(self, batch):
            self._batch = batch
            self.schema = batch.schema
            self.num_columns = batch.num_columns

        def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
            return self._batch.__arrow_c_device_array__(requested_schema, **kwargs)

    table = _table(ctx, 2)
    w = ipc.new_stream(ctx, table.schema)
    for b in table.to_batches():
        w.write_batch(Foreign(b))
    got = ipc.open_stream(w.close()).read_all()
    assert got.to_host().equals(table.to_host())


def test_a_stream_copied_as_it_is_written_queues_no_host_function_and_waits_once(emu, ctx):
    """Where the writer copies as it writes (the gather kernel is loaded),
    nothing it queues makes the stream wait for the host: no host function
    (the keep-alive of a memset of the padding's zeros made the first
    part's launch wait for the driver's host thread) and no memset.  And
    close() queues the stream's last copies (here every batch's, the table
    being small) and the end marker with the reads that check the offsets
    the writer assumed, in one launch of the gather kernel, and waits once
    for all of it (a launch and a wait for the check of their own, then a
    second wait, before)."""
    if ctx.gather_status() != "ready":
        pytest.skip(f"the writer copies early only with the gather kernel: {ctx.gather_status()}")
    table = _table(ctx, 10)
    ctx.synchronize()
    emu.cuarrow_emu_reset_call_counts()
    w = ipc.new_stream(ctx, table.schema)
    w.write_table(table)
    names = ("cuLaunchHostFunc", "cuMemsetD8Async", "cuLaunchKernel", "cuStreamSynchronize", "cuCtxSynchronize")
    before = {n: emu.cuarrow_emu_call_count(n.encode()) for n in names}
    out = w.close()
    calls = {n: emu.cuarrow_emu_call_count(n.encode()) - before[n] for n in names}
    assert w.stats()["early_messages"] == w.stats()["messages"]
    for name in ("cuLaunchHostFunc", "cuMemsetD8Async"):
        assert before[name] + calls[name] == 0, name
    assert calls["cuLaunchKernel"] == 1, calls
    assert calls["cuStreamSynchronize"] + calls["cuCtxSynchronize"] == 1, calls
    assert ipc.open_stream(out).read_all().to_host().equals(table.to_host())
