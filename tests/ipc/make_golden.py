#!/usr/bin/env python3
"""Writes the golden Arrow IPC streams and files under tests/ipc/data/.

How the files were made: `python3 tests/ipc/make_golden.py` with pyarrow
26.0.1 (Arrow C++ 26.0.1), on 2026-12-04; running it again writes the same
bytes.  The C++ test tests/ipc/golden_test.cpp reads every message of every file,
re-encodes its metadata with cuarrow::ipc::write_message_metadata and
compares byte for byte (schema, record batch and dictionary batch messages,
the file footer).  The files are small (a few rows a batch) and committed;
run this again only to add cases, and say so in the commit.

Each case is a stream (<name>.arrows); the `file_*` cases are IPC files
(<name>.arrow, Feather v2).  file_wide.arrow (16 columns, 4 batches, one
empty) and file_lz4.arrow / file_zstd.arrow (compressed, an
int64 buffer of 160 KB) were added for reading files by path.
"""

import decimal
import pathlib
import sys

import pyarrow as pa
import pyarrow.ipc as ipc

OUT = pathlib.Path(__file__).resolve().parent / "data"


def primitives():
    cols = {
        "null": pa.array([None, None], pa.null()),
        "bool": pa.array([True, None], pa.bool_()),
        "i8": pa.array([1, -2], pa.int8()),
        "u8": pa.array([1, 2], pa.uint8()),
        "i16": pa.array([1, None], pa.int16()),
        "u16": pa.array([1, 2], pa.uint16()),
        "i32": pa.array([1, 2], pa.int32()),
        "u32": pa.array([1, 2], pa.uint32()),
        "i64": pa.array([1, 2], pa.int64()),
        "u64": pa.array([1, 2], pa.uint64()),
        "f16": pa.array([None, None], pa.float16()),
        "f32": pa.array([1.5, 2.5], pa.float32()),
        "f64": pa.array([1.5, None], pa.float64()),
        "d32": pa.array([decimal.Decimal("1.23"), None], pa.decimal32(7, 2)),
        "d64": pa.array([decimal.Decimal("1.23"), None], pa.decimal64(15, 2)),
        "d128": pa.array([decimal.Decimal("1.23"), None], pa.decimal128(38, 2)),
        "d256": pa.array([decimal.Decimal("-1.5"), None], pa.decimal256(76, 1)),
        "date32": pa.array([1, 2], pa.date32()),
        "date64": pa.array([86400000, None], pa.date64()),
        "t32s": pa.array([1, 2], pa.time32("s")),
        "t32ms": pa.array([1, 2], pa.time32("ms")),
        "t64us": pa.array([1, 2], pa.time64("us")),
        "t64ns": pa.array([1, 2], pa.time64("ns")),
        "ts_s": pa.array([1, 2], pa.timestamp("s")),
        "ts_ms_utc": pa.array([1, 2], pa.timestamp("ms", tz="UTC")),
        "ts_us_tz": pa.array([1, 2], pa.timestamp("us", tz="Europe/Paris")),
        "ts_ns": pa.array([1, None], pa.timestamp("ns")),
        "dur_s": pa.array([1, 2], pa.duration("s")),
        "dur_ms": pa.array([1, 2], pa.duration("ms")),
        "dur_us": pa.array([1, 2], pa.duration("us")),
        "dur_ns": pa.array([1, 2], pa.duration("ns")),
        "mdn": pa.array([(1, 2, 3), None], pa.month_day_nano_interval()),
    }
    # interval[months] and interval[day_time] have no pyarrow factory: the
    # C++ round-trip tests cover them.
    return [pa.record_batch(cols)]


def binaries():
    cols = {
        "bin": pa.array([b"ab", None, b""], pa.binary()),
        "lbin": pa.array([b"ab", b"c", None], pa.large_binary()),
        "str": pa.array(["x", "yz", None], pa.string()),
        "lstr": pa.array(["x", None, "yz"], pa.large_string()),
        "bview": pa.array([b"short", b"a value longer than twelve bytes", None], pa.binary_view()),
        "sview": pa.array(["s", "another value longer than twelve", "x" * 20], pa.string_view()),
        "fsb": pa.array([b"abcd", None, b"efgh"], pa.binary(4)),
    }
    return [pa.record_batch(cols)]


def nested():
    item = pa.field("item", pa.int32())
    cols = {
        "list": pa.array([[1, 2], None, []], pa.list_(pa.int32())),
        "llist": pa.array([[1], [2, 3], None], pa.large_list(pa.field("v", pa.int64(), nullable=False))),
        "lview": pa.array([[1, 2], None, [3]], pa.list_view(item)),
        "llview": pa.array([[1], [], None], pa.large_list_view(pa.int16())),
        "fsl": pa.array([[1, 2], None, [5, 6]], pa.list_(pa.int8(), 2)),
        "struct": pa.array(
            [{"a": 1, "b": "x"}, None, {"a": None, "b": "z"}],
            pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.string(), nullable=False)]),
        ),
        "map": pa.array([[("k", 1)], None, []], pa.map_(pa.string(), pa.int32())),
        "map_sorted": pa.array([[(1, "v")], [], None], pa.map_(pa.int16(), pa.string(), keys_sorted=True)),
        "sunion": pa.UnionArray.from_sparse(
            pa.array([0, 1, 0], pa.int8()), [pa.array([1, 2, 3]), pa.array(["a", "b", "c"])], ["i", "s"]
        ),
        "dunion": pa.UnionArray.from_dense(
            pa.array([5, 7, 5], pa.int8()),
            pa.array([0, 0, 1], pa.int32()),
            [pa.array([1.5, 2.5]), pa.array([True])],
            ["f", "b"],
            [5, 7],
        ),
        "ree": pa.RunEndEncodedArray.from_arrays(pa.array([2, 3], pa.int32()), pa.array(["a", None])),
        "ree64": pa.RunEndEncodedArray.from_arrays(pa.array([1, 3], pa.int64()), pa.array([1.0, 2.0])),
        "deep": pa.array([[[{"x": [1]}]], None, []], pa.list_(pa.list_(pa.struct([("x", pa.list_(pa.int64()))])))),
    }
    return [pa.record_batch(cols)]


def metadata():
    schema = pa.schema(
        [
            pa.field("a", pa.int32(), nullable=False, metadata={"unit": "m", "k2": "v2"}),
            pa.field("ext", pa.int64(), metadata={"ARROW:extension:name": "my.ext", "ARROW:extension:metadata": ""}),
            pa.field("", pa.string()),
        ],
        metadata={"origin": "cuarrow golden", "empty": "", "utf8 é": "ü"},
    )
    batch = pa.record_batch([pa.array([1, 2], pa.int32()), pa.array([3, None]), pa.array(["p", "q"])], schema=schema)
    return schema, [batch], [{"batch": "0"}, None]


def dictionaries():
    values1 = pa.array(["a", "b"])
    values2 = pa.array(["a", "b", "c"])
    d_type = pa.dictionary(pa.int32(), pa.string())
    o_type = pa.dictionary(pa.int8(), pa.int64(), ordered=True)
    schema = pa.schema(
        [
            pa.field("d", d_type),
            pa.field("o", o_type, nullable=False),
            pa.field("ld", pa.list_(pa.field("item", pa.dictionary(pa.uint16(), pa.large_string())))),
        ]
    )

    def batch(values, idx):
        return pa.record_batch(
            [
                pa.DictionaryArray.from_arrays(pa.array(idx, pa.int32()), values),
                pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int8()), pa.array([10, 20]), ordered=True),
                pa.array([[None], ["u"]], pa.list_(pa.dictionary(pa.uint16(), pa.large_string()))),
            ],
            schema=schema,
        )

    return schema, [batch(values1, [0, 1]), batch(values2, [2, None])]


def codes(n):
    """Union type codes 0, 1, 0, ... in a buffer of n bytes followed by
    zeros: Arrow's writer cuts a slice's type codes to min(64-byte padded
    length, buffer size) bytes from the slice's offset, reading past the
    buffer's end near it (pyarrow's own buffers hold whatever its allocator
    left there); zeros there make the golden bytes deterministic."""
    whole = pa.py_buffer(bytes(i % 2 for i in range(n)) + bytes(128))
    return pa.Array.from_buffers(pa.int8(), n, [None, whole.slice(0, n)])


def sliceable():
    """A batch long enough (200 rows) that Arrow's writer truncates the
    buffers of its slices: fixed-width and bitmap buffers to 64-byte padded
    lengths, binary values to the range the offsets use, offsets rebased.
    The C++ test slices the batch read from `slice_source` as pyarrow slices
    it here and compares its writer's bytes with `sliced`."""
    n = 200
    ints = pa.array([None if i % 7 == 0 else i for i in range(n)], pa.int32())
    cols = {
        "i32": ints,
        "i8": pa.array([i % 100 for i in range(n)], pa.int8()),
        "f64": pa.array([i / 4 for i in range(n)], pa.float64()),
        "bool": pa.array([None if i % 5 == 0 else i % 3 == 0 for i in range(n)], pa.bool_()),
        "str": pa.array([None if i % 11 == 0 else "v" * (i % 9) for i in range(n)], pa.string()),
        "lbin": pa.array([bytes([i % 256]) * (i % 4) for i in range(n)], pa.large_binary()),
        "list": pa.array([None if i % 13 == 0 else list(range(i % 5)) for i in range(n)], pa.list_(pa.int16())),
        "fsl": pa.array([[i, i + 1] for i in range(n)], pa.list_(pa.int64(), 2)),
        "struct": pa.StructArray.from_arrays([ints, pa.array([str(i) for i in range(n)])], ["a", "b"]),
        "sunion": pa.UnionArray.from_sparse(
            codes(n), [pa.array(range(n), pa.int64()), pa.array([str(i) for i in range(n)])]
        ),
        "dunion": pa.UnionArray.from_dense(
            codes(n),
            pa.array([i // 2 for i in range(n)], pa.int32()),
            [pa.array(range(n // 2), pa.float32()), pa.array([i % 2 == 0 for i in range(n // 2)])],
        ),
    }
    return pa.record_batch(cols)


# The slices of sliceable() written to `sliced`, (offset, length); the C++
# test (tests/ipc/stream_test.cpp) takes the same.
SLICES = [(0, 10), (3, 100), (64, 64), (130, 70), (0, 0), (199, 1)]


def wide(rows):
    """A wide batch (16 columns of several kinds) for reading files by path:
    projection reads some of them, and its body is larger than the smallest
    staging chunk (64 KiB) at 1000 rows."""
    cols = {}
    for k in range(8):
        cols[f"i{k}"] = pa.array([(i * (k + 3) * 2654435761) % (1 << 40) - (1 << 39) for i in range(rows)], pa.int64())
    cols["f0"] = pa.array([i / 7 for i in range(rows)], pa.float64())
    cols["f1"] = pa.array([None if i % 5 == 0 else i * 0.25 for i in range(rows)], pa.float64())
    cols["s0"] = pa.array([f"value {i}" for i in range(rows)], pa.string())
    cols["s1"] = pa.array([None if i % 3 == 0 else "x" * (i % 11) for i in range(rows)], pa.large_string())
    cols["dict"] = pa.DictionaryArray.from_arrays(
        pa.array([i % 4 for i in range(rows)], pa.int8()), pa.array(["north", "south", "east", "west"])
    )
    cols["list"] = pa.array([[i, i + 1][: i % 3] for i in range(rows)], pa.list_(pa.int32()))
    cols["struct"] = pa.array(
        [{"a": i, "b": None if i % 2 else str(i)} for i in range(rows)],
        pa.struct([("a", pa.int16()), ("b", pa.string())]),
    )
    cols["bool"] = pa.array([i % 3 == 1 for i in range(rows)], pa.bool_())
    return pa.record_batch(cols)


def compressible(rows):
    """A batch whose int64 column decompresses to more than a 64 KiB staging
    chunk at 20000 rows (a compressed buffer produced in parts)."""
    words = ["arrow", "device", "file", "column"]
    return pa.record_batch(
        {
            "seq": pa.array([i % 100 for i in range(rows)], pa.int64()),
            "text": pa.array([None if i % 7 == 0 else words[i % 4] for i in range(rows)], pa.string()),
            "dict": pa.DictionaryArray.from_arrays(
                pa.array([i % 2 for i in range(rows)], pa.int8()), pa.array(["a", "b"])
            ),
        }
    )


def write_stream(name, schema, batches, options=None, batch_metadata=None):
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, schema, options=options) as w:
        for i, b in enumerate(batches):
            md = batch_metadata[i] if batch_metadata else None
            if md:
                w.write_batch(b, custom_metadata=md)
            else:
                w.write_batch(b)
    (OUT / f"{name}.arrows").write_bytes(sink.getvalue().to_pybytes())


def write_file(name, schema, batches, options=None, metadata=None):
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema, options=options, metadata=metadata) as w:
        for b in batches:
            w.write_batch(b)
    (OUT / f"{name}.arrow").write_bytes(sink.getvalue().to_pybytes())


def main():
    OUT.mkdir(exist_ok=True)
    for name, fn in [("primitives", primitives), ("binaries", binaries), ("nested", nested)]:
        batches = fn()
        write_stream(name, batches[0].schema, batches)
    schema, batches, batch_md = metadata()
    write_stream("metadata", schema, batches + batches, batch_metadata=batch_md)
    schema, batches = dictionaries()
    write_stream("dictionaries", schema, batches)
    write_stream("dictionary_deltas", schema, batches, options=ipc.IpcWriteOptions(emit_dictionary_deltas=True))
    write_stream("empty_schema", pa.schema([]), [pa.record_batch([], schema=pa.schema([]))])
    empty = pa.record_batch([pa.array([], pa.int64()), pa.array([], pa.string())], names=["x", "y"])
    write_stream("empty_batch", empty.schema, [empty])
    b = binaries()[0]
    write_stream("zstd", b.schema, [b], options=ipc.IpcWriteOptions(compression="zstd"))
    write_stream("lz4", b.schema, [b], options=ipc.IpcWriteOptions(compression="lz4"))
    # A file holds one dictionary per field (deltas allowed, no replacement).
    write_file("file_dictionaries", schema, batches[:1] + batches[:1])
    p = primitives()[0]
    write_file("file_primitives", p.schema, [p, p], metadata={"file": "metadata"})
    src = sliceable()
    write_stream("slice_source", src.schema, [src])
    write_stream("sliced", src.schema, [src.slice(o, n) for o, n in SLICES])
    # Read by path (tests/ipc/file_test.cpp): several batches, one empty;
    # compressed files whose buffers decompress to more than a chunk.
    w = [wide(1000), wide(0), wide(300), wide(1000)]
    write_file("file_wide", w[0].schema, w)
    c = [compressible(20000), compressible(5)]
    for codec in ("lz4", "zstd"):
        write_file(f"file_{codec}", c[0].schema, c, options=ipc.IpcWriteOptions(compression=codec))
    print("wrote", sorted(x.name for x in OUT.iterdir()), file=sys.stderr)


if __name__ == "__main__":
    main()
