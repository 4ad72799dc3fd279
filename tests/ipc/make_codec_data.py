#!/usr/bin/env python3
"""Writes the compressed samples that tests/ipc/codec_test.cpp decodes, made
by pyarrow (Arrow C++'s codecs and IPC writer), into tests/ipc/data/:

  sample.bin              the plain bytes of the raw samples
  raw_<codec>.bin         pa.compress(sample, codec) (one LZ4 frame / ZSTD frame)
  stream_<codec>.arrows   an IPC stream written with IpcWriteOptions(compression=codec)
  stream_<codec>.txt      its framed body buffers: "offset length plain_offset plain_length"
                          per line (offsets into the stream file and into stream_plain.bin)
  stream_plain.bin        the plain bytes of those buffers, in order
  lz4_content_size.bin    raw_lz4.bin with the frame header's optional content size
                          (other LZ4 writers set it; Arrow's does not)

The framed buffers are located without a metadata reader: each non-empty
buffer Arrow writes is the 8-byte length, then pa.compress of the buffer,
padded to 8 bytes, in depth-first order; the script checks that these
concatenated are the message body byte for byte before writing the index.

    python3 tests/ipc/make_codec_data.py          # rewrite the committed files
"""

from __future__ import annotations

import pathlib
import struct
import sys

import pyarrow as pa

DATA = pathlib.Path(__file__).resolve().parent / "data"
CODECS = {"lz4": "lz4", "zstd": "zstd"}  # file name -> pyarrow codec (lz4 is LZ4_FRAME)


def sample_bytes() -> bytes:
    # Compressible text with some variety, an odd length.
    words = [b"arrow", b"columnar", b"device", b"frame", b"zstd", b"lz4", b"buffer"]
    out = bytearray()
    i = 0
    while len(out) < 50_001:
        out += words[(i * 7 + i // 3) % len(words)] + b" %d\n" % (i * 31 % 997)
        i += 1
    return bytes(out[:50_001])


def sample_batch() -> pa.RecordBatch:
    n = 1024
    ints = pa.array(range(n), type=pa.int64())
    # Poorly compressible: a fixed pseudo-random sequence.
    x = 12345
    noise = []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        noise.append(struct.unpack("<d", struct.pack("<Q", (x >> 12) | 0x3FF0000000000000))[0])
    floats = pa.array(noise, type=pa.float64())
    strings = pa.array([f"value {i % 37}" for i in range(n)], type=pa.string())
    return pa.record_batch([ints, floats, strings], names=["i", "f", "s"])


def written_buffers(batch: pa.RecordBatch) -> list[bytes]:
    """The body buffers in the order Arrow writes them (no nulls, offset 0)."""
    out: list[bytes] = []
    for col in batch.columns:
        n = len(col)
        bufs = col.buffers()
        out.append(b"")  # validity: no nulls, written as an empty buffer
        if pa.types.is_string(col.type):
            offsets = bufs[1].to_pybytes()[: 4 * (n + 1)]
            total = struct.unpack_from("<i", offsets, 4 * n)[0]
            data = bufs[2].to_pybytes()
            # Arrow keeps up to 8-byte padding of the data when the buffer has it.
            out += [offsets, data[: min((total + 7) // 8 * 8, len(data))]]
        else:
            width = col.type.bit_width // 8
            data = bufs[1].to_pybytes()
            out.append(data[: min((n * width + 7) // 8 * 8, len(data))])
    return out


def xxh32_short(data: bytes) -> int:
    """XXH32 with seed 0 of fewer than 16 bytes (an LZ4 frame descriptor)."""
    assert len(data) < 16
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    m = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    h = (p5 + len(data)) & m
    i = 0
    while i + 4 <= len(data):
        h = (rotl((h + int.from_bytes(data[i : i + 4], "little") * p3) & m, 17) * p4) & m
        i += 4
    for b in data[i:]:
        h = (rotl((h + b * p5) & m, 11) * p1) & m
    h ^= h >> 15
    h = (h * p2) & m
    h ^= h >> 13
    h = (h * p3) & m
    h ^= h >> 16
    return h


def with_content_size(frame: bytes, size: int) -> bytes:
    """An LZ4 frame (magic, FLG, BD, HC, blocks) given the content size flag and field."""
    assert frame[:4] == b"\x04\x22\x4d\x18" and not frame[4] & 0x09  # no content size, no dictionary id
    assert frame[6] == (xxh32_short(frame[4:6]) >> 8) & 0xFF  # the header checksum as computed here
    descriptor = bytes([frame[4] | 0x08, frame[5]]) + struct.pack("<Q", size)
    return frame[:4] + descriptor + bytes([(xxh32_short(descriptor) >> 8) & 0xFF]) + frame[7:]


def pad8(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 8)


def main() -> int:
    DATA.mkdir(exist_ok=True)
    sample = sample_bytes()
    (DATA / "sample.bin").write_bytes(sample)
    batch = sample_batch()
    plain = written_buffers(batch)
    plain_offsets = []
    pos = 0
    for b in plain:
        plain_offsets.append(pos)
        pos += len(b)
    (DATA / "stream_plain.bin").write_bytes(b"".join(plain))

    for name, codec in CODECS.items():
        (DATA / f"raw_{name}.bin").write_bytes(pa.compress(sample, codec=codec, asbytes=True))
        if name == "lz4":
            framed = with_content_size(pa.compress(sample, codec=codec, asbytes=True), len(sample))
            assert pa.decompress(framed, len(sample), codec=codec, asbytes=True) == sample
            (DATA / "lz4_content_size.bin").write_bytes(framed)

        sink = pa.BufferOutputStream()
        options = pa.ipc.IpcWriteOptions(compression=codec)
        with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
            writer.write_batch(batch)
        stream = sink.getvalue().to_pybytes()
        (DATA / f"stream_{name}.arrows").write_bytes(stream)

        # Find the record batch's body: messages one after another.
        reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(stream))
        position = 0
        body_offset = None
        for message in reader:
            size = len(message.serialize().to_pybytes())
            if message.type == "record batch":
                body_offset = position + size - message.body.size
                assert stream[body_offset : body_offset + message.body.size] == message.body.to_pybytes()
                body = message.body.to_pybytes()
            position += size
        assert body_offset is not None

        framed = []
        for b in plain:
            framed.append(b"" if not b else struct.pack("<q", len(b)) + pa.compress(b, codec=codec, asbytes=True))
        if b"".join(pad8(f) for f in framed) != body:
            print(f"{name}: the body is not the framed buffers as expected; not written", file=sys.stderr)
            return 1
        lines = []
        at = body_offset
        for f, b, po in zip(framed, plain, plain_offsets):
            if f:
                lines.append(f"{at} {len(f)} {po} {len(b)}")
            at += len(pad8(f))
        (DATA / f"stream_{name}.txt").write_text("\n".join(lines) + "\n")
        print(f"{name}: {len(lines)} framed buffers, stream {len(stream)} bytes (pyarrow {pa.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
