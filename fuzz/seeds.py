"""Seeds for the schema_import and metadata_blob fuzz targets from pyarrow's
own C Data Interface exporter (the encoding is fuzz/schema_import.cpp's), and
for ipc_codec from pyarrow's codecs (one byte for the codec, then the framed
buffer, as fuzz/ipc_codec.cpp reads it).

    python3 fuzz/seeds.py build/fuzz-corpus
"""

import ctypes
import os
import struct
import sys

import pyarrow as pa


class ArrowSchema(ctypes.Structure):
    pass


ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p),
    ("name", ctypes.c_char_p),
    ("metadata", ctypes.c_void_p),
    ("flags", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowSchema))),
    ("dictionary", ctypes.POINTER(ArrowSchema)),
    ("release", ctypes.c_void_p),
    ("private_data", ctypes.c_void_p),
]


def blob(address):
    if not address:
        return None
    n = struct.unpack("<i", ctypes.string_at(address, 4))[0]
    pos = 4
    for _ in range(2 * n):
        (length,) = struct.unpack("<i", ctypes.string_at(address + pos, 4))
        pos += 4 + length
    return ctypes.string_at(address, pos)


def encode(root):
    nodes, index = [root], {ctypes.addressof(root): 0}
    i = 0
    while i < len(nodes):
        s = nodes[i]
        kids = [s.children[c].contents for c in range(s.n_children)]
        if s.dictionary:
            kids.append(s.dictionary.contents)
        for k in kids:
            index[ctypes.addressof(k)] = len(nodes)
            nodes.append(k)
        i += 1
    if len(nodes) > 32:
        return None
    out = bytearray([len(nodes) - 1])
    for s in nodes:
        fmt, name = s.format or b"", s.name or b""
        out += bytes([len(fmt)]) + fmt + bytes([len(name)]) + name + bytes([s.flags & 7])
        md = blob(s.metadata)
        out += b"\0" if md is None else b"\1" + struct.pack("<H", len(md)) + md
        out += bytes([s.n_children]) + bytes(index[ctypes.addressof(s.children[c].contents)] for c in range(s.n_children))
        out += bytes([index[ctypes.addressof(s.dictionary.contents)] if s.dictionary else 0xFF])
    return bytes(out)


def samples():
    yield pa.field("i", pa.int64(), metadata={"a": "b"})
    yield pa.field("s", pa.string(), nullable=False)
    yield pa.field("ts", pa.timestamp("ns", "America/New_York"))
    yield pa.field("d", pa.decimal128(12, 4))
    yield pa.field("l", pa.list_(pa.field("x", pa.float32())))
    yield pa.field("m", pa.map_(pa.string(), pa.list_(pa.int8())))
    yield pa.field("st", pa.struct([("a", pa.bool_()), ("b", pa.large_binary()), ("c", pa.date64())]))
    yield pa.field("dict", pa.dictionary(pa.int32(), pa.string(), ordered=True))
    yield pa.field("du", pa.dense_union([pa.field("x", pa.int16()), pa.field("y", pa.utf8())], [5, 9]))
    yield pa.field("fsl", pa.list_(pa.uint16(), 4))
    yield pa.field("ree", pa.run_end_encoded(pa.int16(), pa.string()))
    yield pa.field("views", pa.struct([("s", pa.string_view()), ("b", pa.binary_view())]))
    yield pa.field("lv", pa.list_view(pa.large_string()))
    yield pa.field("dur", pa.duration("us"), metadata={"pandas": '{"x": 1}' * 20})


def main(root):
    count = 0
    for i, f in enumerate(samples()):
        c = ArrowSchema()
        try:
            f._export_to_c(ctypes.addressof(c))
        except (AttributeError, NotImplementedError, pa.ArrowNotImplementedError):
            continue
        enc = encode(c)
        for target, data in (("schema_import", enc), ("metadata_blob", blob(c.metadata))):
            if data:
                os.makedirs(os.path.join(root, target), exist_ok=True)
                with open(os.path.join(root, target, f"pyarrow_{i}"), "wb") as fh:
                    fh.write(data)
                count += 1
        ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowSchema))(c.release)(ctypes.byref(c))
    schema = pa.schema([pa.field("a", pa.int32()), pa.field("b", pa.string())], metadata={"origin": "pyarrow"})
    c = ArrowSchema()
    schema._export_to_c(ctypes.addressof(c))
    with open(os.path.join(root, "schema_import", "pyarrow_schema"), "wb") as fh:
        fh.write(encode(c))
    ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowSchema))(c.release)(ctypes.byref(c))
    count += 1
    os.makedirs(os.path.join(root, "ipc_codec"), exist_ok=True)
    for tag, codec in ((0, "lz4"), (1, "zstd")):
        for j, plain in enumerate((b"pyarrow", b"0123456789" * 500, bytes(range(256)) * 9)):
            framed = struct.pack("<q", len(plain)) + pa.compress(plain, codec=codec, asbytes=True)
            with open(os.path.join(root, "ipc_codec", f"pyarrow_{codec}_{j}"), "wb") as fh:
                fh.write(bytes([tag]) + framed)
            count += 1
    print(f"wrote {count} pyarrow seeds under {root}")


if __name__ == "__main__":
    main(sys.argv[1])
