#!/usr/bin/env python3
"""cuarrow's Arrow IPC / Feather benchmark: files to device tables and back, beside what users do today.

One command, one run, every figure side by side (issue 14)::

    python3 bench/ipc_bench.py                  # a ~2.2 GiB, 17-column table (estimated 1-2 minutes on an H200)
    python3 bench/ipc_bench.py --quick          # a 64 MiB table (under 30 s)
    python3 bench/ipc_bench.py --out DIR --dir /local/disk --cold

A mixed table (int64, float64, int32, strings, list<int32>, with nulls) is
written by pyarrow to Feather files (uncompressed, LZ4, ZSTD; pyarrow's
default batches of 64K rows) in a temporary folder under --dir, each read
once so that it is in the page cache.  Then, each case warmed up and timed
call by call (bench.py's loop: median, min, max; 3 timed calls from 256 MiB,
except the stream into device memory, which takes milliseconds and is timed,
like the smaller cases, for --budget seconds):

- reads: 16-thread ``os.preadv`` of the file into host memory (the machine's
  page-cache bandwidth), ``pyarrow.feather.read_table`` + ``cuda.to_device``,
  ``pa.ipc.open_file(pa.memory_map(path)).read_all()`` + ``to_device``, and
  cuarrow's ``ipc.read_feather(path)`` and ``ipc.open_file(path).read_all()``;
  10% of the columns; the LZ4 and ZSTD files, beside the host's own decode
  ceiling (the same buffers' frames decoded by 16 threads into host memory,
  no file, no device); with --cold, the file out of the page cache (pread
  and cuarrow);
- writes: ``DeviceTable.to_host()`` + ``feather.write_feather`` against
  ``ipc.write_feather``, for each compression, and beside them the file
  system's own ceiling for one file (the uncompressed file's bytes written
  from host memory by ``os.pwrite``, 1 and 16 threads); an IPC stream into device
  memory (``ipc.new_stream``) against a raw device-to-device cudaMemcpy of
  as many bytes (through CuPy);
- ``ipc.read_record_batch`` of a message already on the device, at 1 MiB,
  64 MiB and 1 GiB: zero-copy, so its time should not grow with the body.

GB/s are bytes of the uncompressed table (the size of the uncompressed
Feather file: what lands in device memory) per median second, 1 GB = 1e9 B,
for every read and write, compressed or not; so ratios of GB/s are ratios of
time.  Every call is synchronous.  Each cuarrow case's result is checked
once against pyarrow's table (every column up to 256 MiB, a sample of
columns above), so a fast wrong answer is reported as WRONG.  A cuarrow API
that does not exist yet is skipped with a note ("skipped: cuarrow.ipc.X not
available").

Output as bench.py's: progress on stderr, the table and the targets on
stdout, and in --out results.json, results.txt, summary.md (the targets, to
paste in the README) and results.png.  See bench/README.md, "IPC / Feather
benchmark".
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import os
import shutil
import socket
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench.py, beside this file, also when imported

import bench  # noqa: E402 - found through the line above
from bench import Case, GiB, MiB, Timing, fmt_size, log, parse_size  # noqa: E402

COMPRESSIONS = ("uncompressed", "lz4", "zstd")
PROJECTED = ("ts_ms", "lat", "user_id", "lon", "score", "qty")  # the columns read by the projection, in order
FULL_CHECK_BYTES = 256 * MiB  # results up to this size are compared whole; above, a sample of columns
PART_ROWS = 1 << 21  # the table is built in parts of this many rows (string offsets stay 32-bit)
DROP_CACHES = "/proc/sys/vm/drop_caches"

G_READ = "read, page cache"
G_PROJ = "read 10% of columns"
G_LZ4 = "read lz4"
G_ZSTD = "read zstd"
G_COLD = "read, not in page cache"
G_WRITE = {c: f"write {c}" for c in COMPRESSIONS}
G_STREAM = "write to device memory"
G_MSG = "read_record_batch"
GROUP_ORDER = [G_READ, G_PROJ, G_LZ4, G_ZSTD, G_COLD, *G_WRITE.values(), G_STREAM, G_MSG]

L_PREAD = "preadv, {threads} threads, into host memory"
L_PWRITE = "pwrite of the file's bytes from host memory, {threads}, into a new file"
L_DECODE = "{codec} frames of the same buffers, {threads} threads, into host memory"
L_FEATHER = "feather.read_table + cuda.to_device"
L_MMAP = "ipc.open_file(memory_map).read_all + cuda.to_device"
L_READ = "ipc.read_feather(path)"
L_READ_GPU = "ipc.read_feather(path, gpu_decompression=True)"
L_FEATHER_OWN = "feather.read_table + cuda.to_device, cuarrow's file"
L_READ_OWN = "ipc.read_feather(path), cuarrow's file"
L_OPEN = "ipc.open_file(path).read_all()"
L_PROJ_CA = "ipc.read_feather(path, columns=…)"
L_PROJ_PA = "feather.read_table(columns=…) + cuda.to_device"
L_TOHOST_WRITE = "to_host + feather.write_feather"
L_WRITE = "ipc.write_feather(device table)"
L_D2D = "cudaMemcpy D2D, same bytes"
L_STREAM = "ipc.new_stream + write_table + close"
L_MSG = "ipc.read_record_batch(message)"


# ---------------------------------------------------------------------------
# The data
# ---------------------------------------------------------------------------


def _words(rng: np.random.Generator, n: int) -> list[str]:
    """n made-up words of 2..9 letters, common letters more often."""
    letters = "etaoinshrdlucmfwypvbgkqjxz"
    weights = np.linspace(2.0, 0.2, len(letters))
    lengths = rng.integers(2, 10, size=n)
    text = "".join(letters[i] for i in rng.choice(len(letters), size=int(lengths.sum()), p=weights / weights.sum()))
    ends = np.cumsum(lengths)
    return [text[e - k : e] for e, k in zip(ends, lengths)]


class Vocab:
    """The string values the columns draw from (built once: Python strings are slow per row)."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        words = _words(rng, 400)
        self.countries = pa.array([w.capitalize() for w in words[:60]])
        firsts, lasts = words[60:160], words[160:260]
        self.names = pa.array(
            [f"{firsts[i].capitalize()} {lasts[j].capitalize()}" for i, j in rng.integers(0, 100, size=(3000, 2))]
        )
        picks = rng.integers(0, len(words), size=(8000, 9))
        self.comments = pa.array(
            [" ".join(words[j] for j in row[:k]) for row, k in zip(picks, rng.integers(0, 10, 8000))]
        )


def _zipf_index(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """n indices into k values, value i about 1/(i+1) as often as value 0
    (as real categories and ids are): log-uniform, fast for any k."""
    idx = (np.exp(rng.random(n) * np.log(k + 1.0)) - 1.0).astype(np.int32)
    return np.minimum(idx, k - 1, out=idx)


def _nulls(rng: np.random.Generator, n: int, fraction: float) -> np.ndarray:
    return rng.random(n) < fraction


def _part(rng: np.random.Generator, vocab: Vocab, start: int, n: int) -> pa.Table:
    """Rows [start, start + n): 17 columns that compress about as real data does
    (ids, timestamps, prices in cents, categories, words), not zeros and not noise."""
    sku_digits = rng.integers(0, 10**8, size=n, dtype=np.int32)
    sku = np.empty((n, 12), dtype=np.uint8)
    sku[:, :4] = np.frombuffer(b"SKU-", dtype=np.uint8)
    for j in range(8):
        sku[:, 11 - j] = 48 + sku_digits % 10
        sku_digits //= 10
    tag_len = rng.integers(0, 7, size=n)
    tag_off = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(tag_len, out=tag_off[1:])
    tags = pa.ListArray.from_arrays(
        pa.array(tag_off), pa.array(_zipf_index(rng, int(tag_off[-1]), 200).astype(np.int32))
    )

    def strings(values: pa.Array, idx: np.ndarray, null_fraction: float) -> pa.Array:
        return values.take(pa.array(idx, mask=_nulls(rng, n, null_fraction) if null_fraction else None))

    columns = {
        "id": pa.array(np.arange(start, start + n, dtype=np.int64) + 10_000_000),
        "ts_ms": pa.array(1_700_000_000_000 + start * 900 + np.cumsum(rng.integers(0, 1800, size=n))),
        "user_id": pa.array(_zipf_index(rng, n, 2_000_000).astype(np.int64)),
        "amount": pa.array(np.round(rng.lognormal(3.0, 1.0, size=n), 2), mask=_nulls(rng, n, 0.05)),
        "lat": pa.array(np.round(rng.uniform(-60.0, 70.0, size=n), 5)),
        "lon": pa.array(np.round(rng.uniform(-180.0, 180.0, size=n), 5)),
        "score": pa.array(np.round(rng.normal(50.0, 15.0, size=n), 1)),
        "qty": pa.array(rng.geometric(0.25, size=n).astype(np.int32)),
        "category": pa.array(_zipf_index(rng, n, 50)),
        "status": pa.array(_zipf_index(rng, n, 5), mask=_nulls(rng, n, 0.1)),
        "year": pa.array(rng.integers(2000, 2026, size=n, dtype=np.int32)),
        "flags": pa.array(rng.integers(0, 16, size=n, dtype=np.int32)),
        "country": strings(vocab.countries, _zipf_index(rng, n, len(vocab.countries)), 0.0),
        "name": strings(vocab.names, rng.integers(0, len(vocab.names), size=n), 0.02),
        "comment": strings(vocab.comments, rng.integers(0, len(vocab.comments), size=n), 0.2),
        "sku": pa.StringArray.from_buffers(
            n, pa.py_buffer(np.arange(0, 12 * (n + 1), 12, dtype=np.int32)), pa.py_buffer(sku)
        ),
        "tags": tags,
    }
    return pa.table(columns)


def table_bytes(table: pa.Table) -> int:
    return sum(b.size for b in bench.table_buffers(table))


def build_table(target_bytes: int, seed: int = 14) -> pa.Table:
    """About `target_bytes` of Arrow buffers in 17 columns, built in parts of
    PART_ROWS rows by threads (NumPy and Arrow release the GIL), each part
    from its own seed: the same table for the same size, every run."""
    vocab = Vocab(seed)
    sample = _part(np.random.default_rng(seed), vocab, 0, 20_000)
    rows = max(int(target_bytes / (table_bytes(sample) / sample.num_rows)), 1000)
    starts = range(0, rows, PART_ROWS)
    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        parts = list(
            pool.map(
                lambda i: _part(np.random.default_rng([seed, i]), vocab, starts[i], min(PART_ROWS, rows - starts[i])),
                range(len(starts)),
            )
        )
    table = pa.concat_tables(parts)
    table.validate(full=False)
    return table


# ---------------------------------------------------------------------------
# Reading files with threads (the page-cache and storage references)
# ---------------------------------------------------------------------------


class _Pieces:
    """`size` bytes cut into 16 MiB pieces for `threads` threads, each a
    system call that releases the GIL; each() runs one function on every
    piece of the file at `path` opened with `flags`."""

    PIECE = 16 * MiB

    def __init__(self, path: Path, size: int, threads: int, name: str) -> None:
        self.path = path
        self.size = size
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix=name)
        self.pieces = [(a, min(a + self.PIECE, size)) for a in range(0, size, self.PIECE)]

    def each(self, flags: int, piece: Callable[[int, int, int], None]) -> None:
        fd = os.open(self.path, flags, 0o644)
        try:
            list(self.pool.map(lambda span: piece(fd, *span), self.pieces))
        finally:
            os.close(fd)

    def close(self) -> None:
        self.pool.shutdown()


class ThreadedPread(_Pieces):
    """The whole file into a pre-allocated, pre-touched NumPy buffer with
    `threads` threads, each os.preadv of 16 MiB pieces."""

    def __init__(self, path: Path, threads: int) -> None:
        super().__init__(path, path.stat().st_size, threads, "pread")
        self.dest = np.empty(self.size, dtype=np.uint8)
        self.dest.fill(1)  # touch every page: no page faults in the figures

    def __call__(self) -> np.ndarray:
        view = memoryview(self.dest)

        def piece(fd: int, a: int, b: int) -> None:
            while a < b:
                got = os.preadv(fd, [view[a:b]], a)
                if got <= 0:
                    raise OSError(f"{self.path}: end of file at byte {a} of {self.size}")
                a += got

        self.each(os.O_RDONLY, piece)
        return self.dest


class ThreadedPwrite(_Pieces):
    """The file system's own ceiling for a write: the uncompressed file's
    bytes, already in pre-touched host memory, written into a new file of
    the same folder by `threads` threads, each os.pwrite of 16 MiB pieces
    at their offsets."""

    def __init__(self, source: Path, path: Path, threads: int) -> None:
        self.data = np.fromfile(source, dtype=np.uint8)
        super().__init__(path, self.data.size, threads, "pwrite")

    def __call__(self) -> int:
        view = memoryview(self.data)

        def piece(fd: int, a: int, b: int) -> None:
            while a < b:
                a += os.pwrite(fd, view[a:b], a)

        self.each(os.O_WRONLY | os.O_CREAT | os.O_TRUNC, piece)
        return os.path.getsize(self.path)


def decode_ceiling_library() -> Path | None:
    """bench/decode_ceiling.cpp built (CUARROW_DECODE_CEILING_SO, else a
    build folder of this checkout), or None."""
    env = os.environ.get("CUARROW_DECODE_CEILING_SO")
    if env:
        return Path(env)
    root = Path(__file__).resolve().parent.parent
    for build in ("gpu", "dev"):
        p = root / "build" / build / "lib" / "libcuarrow_decode_ceiling.so"
        if p.exists():
            return p
    return None


class ThreadedDecode:
    """The host's own ceiling for a compressed read: the table's buffers,
    each compressed alone as the IPC writer does (``pa.compress``, the
    codec's default level: one ZSTD or LZ4 frame per buffer), decoded by
    `threads` threads through the system's libzstd / liblz4, one context a
    thread, into pre-allocated, pre-touched host memory.  No file, no
    device: what the machine's cores decode per second, beside cuarrow's
    read of the same data.  The threads are C++ ones (bench/decode_ceiling.cpp,
    one call a round) where that library is built; else Python threads
    calling the codec through ctypes, which take the GIL back between
    frames (a lower bound on the ceiling only)."""

    def __init__(self, table: pa.Table, codec: str, threads: int) -> None:
        import ctypes
        import ctypes.util

        self.codec = codec
        self.frames: list[tuple[pa.Buffer, np.ndarray]] = []
        for batch in table.to_batches():
            for col in batch.columns:
                for b in col.buffers():  # its children's too
                    if b is not None and b.size > 0:
                        out = np.empty(b.size, dtype=np.uint8)
                        out.fill(1)
                        self.frames.append((pa.compress(b, codec=codec, asbytes=False), out))
        self.nbytes = sum(o.size for _, o in self.frames)
        self.threads = threads
        self.ctypes = ctypes
        so = decode_ceiling_library()
        self.native = ctypes.CDLL(str(so)) if so is not None else None
        if self.native is not None:
            self.how = "C++ threads"
            n = len(self.frames)
            self.args = (
                (ctypes.c_void_p * n)(*[f.address for f, _ in self.frames]),
                (ctypes.c_size_t * n)(*[f.size for f, _ in self.frames]),
                (ctypes.c_void_p * n)(*[o.ctypes.data for _, o in self.frames]),
                (ctypes.c_size_t * n)(*[o.size for _, o in self.frames]),
            )
            self.native.cuarrow_decode_ceiling.restype = ctypes.c_int
            ptrs, sizes = ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)
            self.native.cuarrow_decode_ceiling.argtypes = [ctypes.c_int, ctypes.c_size_t, ptrs, sizes, ptrs, sizes]
            self.native.cuarrow_decode_ceiling.argtypes += [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
            return
        self.how = "Python threads (ctypes; a lower bound)"
        name = {"zstd": "zstd", "lz4": "lz4"}[codec]
        self.lib = ctypes.CDLL(ctypes.util.find_library(name) or f"lib{name}.so.1")
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="decode")
        if codec == "zstd":
            # One decompression context a thread, as cuarrow's reader keeps
            # (ZSTD_decompress would make one for every frame).
            self.lib.ZSTD_createDCtx.restype = ctypes.c_void_p
            self.lib.ZSTD_freeDCtx.argtypes = [ctypes.c_void_p]
            self.lib.ZSTD_decompressDCtx.restype = ctypes.c_size_t
            self.lib.ZSTD_decompressDCtx.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
            self.lib.ZSTD_decompressDCtx.argtypes += [ctypes.c_void_p, ctypes.c_size_t]
        else:
            self.lib.LZ4F_createDecompressionContext.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
            self.lib.LZ4F_decompress.restype = ctypes.c_size_t
            out_or_in = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]  # (dst, &dst size), (src, &src size)
            self.lib.LZ4F_decompress.argtypes = [ctypes.c_void_p, *out_or_in, *out_or_in, ctypes.c_void_p]

    def set_threads(self, threads: int) -> None:
        """Decode on `threads` threads from now on (the same frames)."""
        self.threads = threads
        if self.native is None:
            self.pool.shutdown()
            self.pool = ThreadPoolExecutor(threads, thread_name_prefix="decode")

    def _share(self, k: int) -> None:
        ct = self.ctypes
        ctx = ct.c_void_p()
        if self.codec == "lz4":
            self.lib.LZ4F_createDecompressionContext(ct.byref(ctx), 100)  # LZ4F_VERSION
        else:
            ctx = ct.c_void_p(self.lib.ZSTD_createDCtx())
        for frame, out in self.frames[k :: self.threads]:
            if self.codec == "zstd":
                got = self.lib.ZSTD_decompressDCtx(ctx, out.ctypes.data, out.size, frame.address, frame.size)
            else:
                dst, src = ct.c_size_t(out.size), ct.c_size_t(frame.size)
                self.lib.LZ4F_decompress(ctx, out.ctypes.data, ct.byref(dst), frame.address, ct.byref(src), None)
                got = dst.value
            if got != out.size:
                raise RuntimeError(f"host {self.codec} decode: {got} bytes, expected {out.size}")
        if self.codec == "lz4":
            self.lib.LZ4F_freeDecompressionContext(ctx)
        else:
            self.lib.ZSTD_freeDCtx(ctx)

    def __call__(self) -> int:
        if self.native is not None:
            err = self.ctypes.create_string_buffer(512)
            codec = {"lz4": 0, "zstd": 1}[self.codec]
            n = len(self.frames)
            if self.native.cuarrow_decode_ceiling(codec, n, *self.args, self.threads, err, 512):
                raise RuntimeError(f"host {self.codec} decode: {err.value.decode()}")
            return self.nbytes
        list(self.pool.map(self._share, range(self.threads)))
        return self.nbytes

    def close(self) -> None:
        if self.native is None:
            self.pool.shutdown()


def file_ends(path: str) -> np.ndarray:
    size = os.path.getsize(path)
    k = min(bench.ENDS, size)
    with open(path, "rb") as f:
        head = f.read(k)
        f.seek(size - k)
        tail = f.read(k)
    return np.frombuffer(head + tail, dtype=np.uint8)


def cold_dropper(notes: list[str]) -> Callable[[], None] | None:
    """A function that empties the page cache, if this machine lets us; else None and a note why."""
    if not os.access(DROP_CACHES, os.W_OK):
        notes.append(
            f"cold reads not measured: {DROP_CACHES} is not writable here (needs root, and /proc/sys writable)"
        )
        return None

    def drop() -> None:
        os.sync()
        with open(DROP_CACHES, "w") as f:
            f.write("3\n")

    try:
        drop()
    except OSError as e:
        notes.append(f"cold reads not measured: writing {DROP_CACHES} failed ({e})")
        return None
    return drop


# ---------------------------------------------------------------------------
# Checking results (once per case, untimed)
# ---------------------------------------------------------------------------


def sample_columns(schema: pa.Schema) -> list[str]:
    """The columns compared for a big result: the first, one of each other
    kind (float, int32, string, list) and the last."""
    names = [schema.field(0).name]
    for pred in (pa.types.is_float64, pa.types.is_int32, pa.types.is_string, pa.types.is_list):
        for f in schema:
            if pred(f.type):
                names.append(f.name)
                break
    names.append(schema.field(len(schema) - 1).name)
    return list(dict.fromkeys(names))


def _host(obj: Any) -> Any:
    return obj.to_host() if hasattr(obj, "to_host") else obj


def same_data(got: Any, expect: Any) -> bool:
    """`got` (a device table or batch, or a host one) holds `expect`'s data:
    every column up to FULL_CHECK_BYTES, else the sample_columns."""
    if got.num_rows != expect.num_rows or list(got.schema.names) != list(expect.schema.names):
        return False
    if not got.schema.equals(expect.schema, check_metadata=False):
        return False
    if table_bytes(expect if isinstance(expect, pa.Table) else pa.Table.from_batches([expect])) <= FULL_CHECK_BYTES:
        return bool(_host(got).equals(expect))
    return all(_host(got.column(n)).equals(expect.column(n)) for n in sample_columns(expect.schema))


def same_file(path: str, expect: pa.Table) -> bool:
    return same_data(feather.read_table(path, memory_map=True), expect)


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------


class Setup:
    """What every case uses: the files, the table, cuarrow, CuPy."""

    def __init__(self, args: argparse.Namespace, cuda: Any, ctx: Any, ipc: Any, cupy: Any, workdir: Path) -> None:
        self.args = args
        self.cuda = cuda
        self.ctx = ctx
        self.ipc = ipc
        self.cupy = cupy
        self.workdir = workdir
        self.table: pa.Table = None  # type: ignore[assignment]
        self.files: dict[str, Path] = {}
        self.file_bytes: dict[str, int] = {}
        self.nbytes = 0  # the uncompressed file's size: the bytes every read and write moves
        self.closers: list[Callable[[], None]] = []  # thread pools of the reference cases


def ipc_api(ipc: Any, name: str, notes: list[str]) -> Any:
    fn = getattr(ipc, name, None)
    if fn is None:
        notes.append(f"skipped: cuarrow.ipc.{name} not available")
        log(notes[-1])
    return fn


def read_cases(s: Setup, pread: ThreadedPread, notes: list[str]) -> list[Case]:
    cuda, ipc, table, n = s.cuda, s.ipc, s.table, s.nbytes
    path = str(s.files["uncompressed"])  # cuarrow is called as users call it: with a str
    cases: list[Case] = []

    def C(
        group: str, impl: str, label: str, fn: Callable[[], Any], nbytes: int = n, semantics: str = "alloc", **kw: Any
    ) -> Case:
        return Case(group, impl, label, nbytes, fn, semantics, **kw)

    ends = file_ends(path)
    cases.append(
        C(
            G_READ,
            "os",
            L_PREAD.format(threads=s.args.threads),
            pread,
            semantics="into",
            verify=lambda buf: np.array_equal(bench.read_ends(buf, n), ends),
        )
    )
    cases.append(C(G_READ, "pyarrow", L_FEATHER, lambda: cuda.to_device(feather.read_table(path))))
    cases.append(
        C(G_READ, "pyarrow", L_MMAP, lambda: cuda.to_device(pa.ipc.open_file(pa.memory_map(str(path))).read_all()))
    )
    read_feather = ipc_api(ipc, "read_feather", notes)
    if read_feather is not None:
        cases.append(C(G_READ, "cuarrow", L_READ, lambda: read_feather(path), verify=lambda t: same_data(t, table)))
    opened: dict[str, Any] = {}
    try:
        ipc.open_file(path)
    except TypeError as e:
        notes.append(f"skipped: cuarrow.ipc.open_file(path) not available (open_file refuses a path: {e})")
        log(notes[-1])
    except Exception:  # noqa: BLE001 - the case reports it
        pass
    else:

        def open_read_all() -> Any:
            reader = ipc.open_file(path)
            out = reader.read_all()
            opened["read_path"] = getattr(reader, "read_path", None)
            return out

        c = C(G_READ, "cuarrow", L_OPEN, open_read_all, verify=lambda t: same_data(t, table))
        c.extra = opened  # type: ignore[attr-defined]
        cases.append(c)

    # 10% of the columns (at least 2): fixed-width ones first (2 of 17: an
    # int64 and a float64, about 10% of the bytes too)
    k = max(2, round(table.num_columns / 10))
    cols = [c for c in PROJECTED if c in table.column_names][:k]
    sub = table.select(cols)
    pn = table_bytes(sub)
    note = f"columns {', '.join(cols)}: {fmt_size(pn)} of {fmt_size(table_bytes(table))}"
    cases.append(
        C(
            G_PROJ,
            "pyarrow",
            L_PROJ_PA,
            lambda: cuda.to_device(feather.read_table(path, columns=cols)),
            nbytes=pn,
            note=note,
        )
    )
    if read_feather is not None:
        cases.append(
            C(
                G_PROJ,
                "cuarrow",
                L_PROJ_CA,
                lambda: read_feather(path, columns=cols),
                nbytes=pn,
                note=note,
                verify=lambda t: same_data(t, sub),
            )
        )
    for comp, group in (("lz4", G_LZ4), ("zstd", G_ZSTD)):
        cpath = str(s.files[comp])
        try:
            decode = ThreadedDecode(table, comp, s.args.threads)
        except (OSError, AttributeError) as e:  # no such library on this machine
            notes.append(f"host {comp} decode ceiling not measured: {e}")
        else:
            s.closers.append(decode.close)
            cases.append(
                C(
                    group,
                    "host",
                    L_DECODE.format(codec=comp.upper(), threads=s.args.threads),
                    decode,
                    note=f"{len(decode.frames)} frames, one per buffer, {decode.how} (the machine's decode ceiling)",
                    verify=lambda got, d=decode: got == d.nbytes,
                )
            )
        cases.append(C(group, "pyarrow", L_FEATHER, lambda p=cpath: cuda.to_device(feather.read_table(p))))
        if read_feather is not None:
            cases.append(
                C(group, "cuarrow", L_READ, lambda p=cpath: read_feather(p), verify=lambda t: same_data(t, table))
            )
    write_feather = getattr(ipc, "write_feather", None)
    if read_feather is not None and write_feather is not None:
        # The same table as cuarrow writes it (untimed, once): the table's
        # batches of PART_ROWS rows, each buffer above 4 MiB in 4 MiB ZSTD
        # frames, which its reader decodes on several workers (pyarrow's
        # files have one frame a buffer, of 64Ki-row batches).
        own = s.workdir / "table-zstd-cuarrow.feather"
        write_feather(cuda.to_device(table), str(own), compression="zstd")
        s.files["zstd-cuarrow"] = own
        note = f"the table as cuarrow writes it: {len(table.to_batches())} batches, 4 MiB frames"
        cases.append(C(G_ZSTD, "pyarrow", L_FEATHER_OWN, lambda: cuda.to_device(feather.read_table(own)), note=note))
        cases.append(
            C(
                G_ZSTD,
                "cuarrow",
                L_READ_OWN,
                lambda: read_feather(str(own)),
                note=note,
                verify=lambda t: same_data(t, table),
            )
        )
    nvcomp = getattr(s.ipc, "nvcomp_status", None)
    status = nvcomp() if nvcomp is not None else {"available": False, "reason": "this cuarrow has no nvcomp_status"}
    if read_feather is not None and status["available"]:
        zpath = str(s.files["zstd"])
        cases.append(
            C(
                G_ZSTD,
                "cuarrow",
                L_READ_GPU,
                lambda: read_feather(zpath, gpu_decompression=True),
                note=f"nvCOMP {status['version']} on the GPU (opt-in: for trusted files)",
                verify=lambda t: same_data(t, table),
            )
        )
    else:
        notes.append(f"ZSTD on the GPU not measured: {status['reason']}")
    return cases


def read_phases(s: Setup, notes: list[str]) -> dict[str, Any]:
    """Where one read_feather of each file spends its time (the reader's
    opt-in stats: pread, decompression, waits for the DMAs, metadata ...),
    one untimed read each after the timed cases (warm page cache).  Empty,
    with a note, for a cuarrow without read_feather(stats=...)."""
    out: dict[str, Any] = {}
    k = max(2, round(s.table.num_columns / 10))
    cols = [c for c in PROJECTED if c in s.table.column_names][:k]
    runs: list[tuple[str, str, Any]] = [(comp, comp, None) for comp in COMPRESSIONS]
    runs.append(("projected", "uncompressed", cols))  # the 10% projection's read
    for name, comp, columns in runs:
        got: dict[str, Any] = {}
        t0 = time.perf_counter()
        try:
            s.ipc.read_feather(str(s.files[comp]), columns=columns, stats=got)
        except TypeError as e:
            notes.append(f"read phases not measured: read_feather(stats=...) not available ({e})")
            return {}
        except Exception as e:  # noqa: BLE001 - the timed cases report failures; say so and go on
            notes.append(f"read phases of the {name} read not measured: {type(e).__name__}: {e}")
            continue
        got["wall_seconds"] = time.perf_counter() - t0
        out[name] = got
        log(
            f"read phases, {name}: "
            + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in got.items())
        )
    return out


def write_phases(s: Setup, device_table: Any, notes: list[str]) -> dict[str, Any]:
    """Where one write of each kind spends its time (the writers' stats:
    layouts, compression, metadata, the file's writes or the device
    stream's allocation, queueing and wait), one untimed write each after
    the timed cases.  Empty, with a note, for a cuarrow without them."""
    out: dict[str, Any] = {}

    def one(name: str, write: Callable[[], dict[str, Any]]) -> bool:
        t0 = time.perf_counter()
        try:
            got = write()
        except (TypeError, AttributeError) as e:
            notes.append(f"write phases not measured: the writers' stats are not available ({e})")
            return False
        except Exception as e:  # noqa: BLE001 - the timed cases report failures; say so and go on
            notes.append(f"write phases of the {name} write not measured: {type(e).__name__}: {e}")
            return True
        got["wall_seconds"] = time.perf_counter() - t0
        out[name] = got
        log(
            f"write phases, {name}: "
            + ", ".join(
                f"{k.removesuffix('_seconds')} {v * 1e3:.3f} ms" if isinstance(v, float) else f"{k} {v}"
                for k, v in got.items()
            )
        )
        return True

    for comp in COMPRESSIONS:
        path = s.workdir / f"phases-{comp}.feather"

        def to_file(p: Path = path, c: str = comp) -> dict[str, Any]:
            got: dict[str, Any] = {}
            try:
                s.ipc.write_feather(device_table, str(p), compression=c, stats=got)
            finally:
                p.unlink(missing_ok=True)
            return got

        if not one(comp, to_file):
            return {}

    def to_device_memory() -> dict[str, Any]:
        w = s.ipc.new_stream(s.ctx, s.table.schema)
        w.write_table(device_table)
        w.close()
        return dict(w.stats())

    one("device stream", to_device_memory)
    return out


def cold_cases(s: Setup, pread: ThreadedPread, notes: list[str]) -> list[Case]:
    path, n, table = str(s.files["uncompressed"]), s.nbytes, s.table
    ends = file_ends(path)
    cases = [
        Case(
            G_COLD,
            "os",
            L_PREAD.format(threads=s.args.threads) + " (the storage)",
            n,
            pread,
            "into",
            verify=lambda buf: np.array_equal(bench.read_ends(buf, n), ends),
        )
    ]
    read_feather = getattr(s.ipc, "read_feather", None)
    if read_feather is not None:
        cases.append(
            Case(
                G_COLD, "cuarrow", L_READ, n, lambda: read_feather(path), "alloc", verify=lambda t: same_data(t, table)
            )
        )
    return cases


def write_cases(s: Setup, device_table: Any, notes: list[str]) -> list[Case]:
    ipc, table, n = s.ipc, s.table, s.nbytes
    cases: list[Case] = []
    write_feather = ipc_api(ipc, "write_feather", notes)
    for threads in sorted({1, s.args.threads}):
        pw = ThreadedPwrite(s.files["uncompressed"], s.workdir / f"written-os-{threads}.bin", threads)
        s.closers.append(pw.close)
        cases.append(
            Case(
                G_WRITE["uncompressed"],
                "os",
                L_PWRITE.format(threads=f"{threads} thread" + ("s" if threads > 1 else "")),
                n,
                pw,
                "into",
                note="the file system's own ceiling for one file",
                verify=lambda got: got == n,
            )
        )
        cases[-1].cleanup = str(pw.path)  # type: ignore[attr-defined]
    for comp in COMPRESSIONS:
        group = G_WRITE[comp]
        theirs, ours = (str(s.workdir / f"written-{who}-{comp}.feather") for who in ("pyarrow", "cuarrow"))
        cases.append(
            Case(
                group,
                "pyarrow",
                L_TOHOST_WRITE,
                n,
                lambda p=theirs, c=comp: feather.write_feather(device_table.to_host(), p, compression=c),
                "into",
                verify=lambda _, p=theirs: same_file(p, table),
            )
        )
        cases[-1].cleanup = theirs  # type: ignore[attr-defined]
        if write_feather is not None:
            cases.append(
                Case(
                    group,
                    "cuarrow",
                    L_WRITE,
                    n,
                    lambda p=ours, c=comp: write_feather(device_table, p, compression=c),
                    "into",
                    verify=lambda _, p=ours: same_file(p, table),
                )
            )
            cases[-1].cleanup = ours  # type: ignore[attr-defined]
    return cases


def stream_cases(s: Setup, device_table: Any, notes: list[str]) -> list[Case]:
    """An IPC stream written into device memory, beside a raw device-to-device
    copy of as many bytes as the stream has."""
    ipc, ctx, schema, table = s.ipc, s.ctx, s.table.schema, s.table

    def write_stream() -> Any:
        w = ipc.new_stream(ctx, schema)
        w.write_table(device_table)
        return w.close()

    size = write_stream().size  # once, untimed: the reference copies as many bytes
    label = f"{fmt_size(size)} stream"
    cases = [
        Case(
            G_STREAM,
            "cuarrow",
            L_STREAM,
            size,
            write_stream,
            "alloc",
            size_label=label,
            verify=lambda buf: same_data(ipc.open_stream(buf).read_all(), table),
        )
    ]
    cupy = s.cupy
    if cupy is not None:
        rt = cupy.cuda.runtime
        _, _, d2d = bench._memcpy_kinds(rt)
        pattern = np.resize(np.arange(251, dtype=np.uint8), size)
        src, dst = cupy.empty(size, dtype=cupy.uint8), cupy.empty(size, dtype=cupy.uint8)
        src.set(pattern)
        expect = bench.read_ends(pattern, size)
        del pattern
        memcpy, sync, sp, dp = rt.memcpy, rt.streamSynchronize, src.data.ptr, dst.data.ptr

        def raw() -> None:
            memcpy(dp, sp, size, d2d)
            sync(0)

        cases.insert(0, Case(G_STREAM, "raw", L_D2D, size, raw, "into", size_label=label, dest=dst, expect=expect))
        cases[0].keep = (src, dst)  # type: ignore[attr-defined]
    return cases


def message_cases(s: Setup, notes: list[str]) -> list[Case]:
    """read_record_batch of one message already on the device, at each size."""
    ipc, cuda, ctx, table = s.ipc, s.cuda, s.ctx, s.table
    per_row = table_bytes(table) / table.num_rows
    cases: list[Case] = []
    for target in sorted({min(x, table_bytes(table)) for x in s.args.message_sizes}):
        # Rows for a message of at least `target` bytes (the judge of the
        # 1 GiB case wants one of 1 GiB; rows by the mean row size made
        # 1023.22 MiB): grown by what is missing until it is, or the table
        # is used whole.
        rows = max(1, min(table.num_rows, int(target / per_row)))
        while True:
            batch = table.slice(0, rows).combine_chunks().to_batches()[0]
            msg = ipc.serialize_record_batch(cuda.to_device(batch, ctx), ctx)
            if msg.size >= target or rows == table.num_rows:
                break
            rows = min(table.num_rows, rows + max(1, int((target - msg.size) / per_row * 1.01) + 1))
        schema = batch.schema
        case = Case(
            G_MSG,
            "cuarrow",
            L_MSG,
            msg.size,
            lambda m=msg, sc=schema: ipc.read_record_batch(m, sc),
            "alloc",
            size_label=f"{fmt_size(msg.size)} message",
            verify=lambda b, e=batch: same_data(b, e),
        )
        case.keep = msg  # type: ignore[attr-defined]
        cases.append(case)
    return cases


# ---------------------------------------------------------------------------
# Ratios, targets
# ---------------------------------------------------------------------------


def _find(results: list[dict[str, Any]], group: str, impl: str, label: str) -> dict[str, Any] | None:
    for r in results:
        if r["group"] == group and r["impl"] == impl and r["label"] == label:
            return r
    return None


def _pread(results: list[dict[str, Any]], group: str) -> dict[str, Any] | None:
    return next((r for r in results if r["group"] == group and r["impl"] == "os"), None)


def add_ratios(results: list[dict[str, Any]]) -> None:
    """× ref: this GB/s ÷ the reference of its group (named in ref_name):
    pread for reads, today's pyarrow path for projection, compressed reads
    and writes, raw D2D for the stream; for read_record_batch, the smallest
    message's time ÷ this time (1.0: independent of the body size)."""
    for r in results:
        g = r["group"]
        ref = None
        if g in (G_READ, G_COLD):
            ref = _pread(results, g)
        elif g in (G_PROJ, G_LZ4, G_ZSTD) or g in G_WRITE.values():
            ref = next((x for x in results if x["group"] == g and x["impl"] == "pyarrow"), None)
        elif g == G_STREAM:
            ref = _find(results, g, "raw", L_D2D)
        elif g == G_MSG:
            msgs = [x for x in results if x["group"] == G_MSG]
            ref = min(msgs, key=lambda x: x["nbytes"])
            r["ratio_ref"] = ref["median_s"] / r["median_s"]
            r["ref_name"] = f"time at {ref['size_label']}"
            continue
        if ref is None or ref is r:
            r["ratio_ref"], r["ref_name"] = None, None
        else:
            r["ratio_ref"] = r["gbps_median"] / ref["gbps_median"]
            r["ref_name"] = ref["name"]


def evaluate_targets(results: list[dict[str, Any]], data_bytes: int) -> list[dict[str, Any]]:
    """Issue 14's targets against this run's medians.  Ratios are judged at
    any size; absolute rates (GB/s, 1 ms) only for a table (message) of at
    least 1 GiB, the sizes the issue speaks of."""
    verdicts: list[dict[str, Any]] = []
    big = data_bytes >= GiB

    def judge(r: dict[str, Any] | None, text: str, ok: bool | None, value: str) -> None:
        if r is None:
            return
        if r.get("verified") is False:  # a fast wrong answer meets nothing
            ok, value = False, f"{value}, WRONG DATA"
        r.setdefault("targets", []).append({"target": text, "met": ok})
        verdicts.append(
            {"group": r["group"], "size": r["size_label"], "name": r["name"], "target": text, "value": value, "met": ok}
        )

    def rate(r: dict[str, Any], floor: float, beside: dict[str, Any] | None = None, what: str = "decode") -> None:
        gb = r["gbps_median"]
        value = f"{gb:.1f} GB/s" + ("" if big else " (table < 1 GiB)")
        if beside is not None:  # the machine's own ceiling, for context (not judged)
            value += f"; {gb / beside['gbps_median']:.2f} × the machine's own {what} ceiling of {_gb(beside)} GB/s"
        judge(r, f"≥ {floor:g} GB/s", gb >= floor if big else None, value)

    def versus(r: dict[str, Any] | None, ref: dict[str, Any] | None, factor: float, text: str) -> None:
        if r is None:
            return
        if ref is None:
            judge(r, text, None, "no reference figure")
            return
        x = r["gbps_median"] / ref["gbps_median"]
        judge(r, text, x >= factor, f"{x:.2f} × ({_gb(ref)} GB/s)")

    read = _find(results, G_READ, "cuarrow", L_READ)
    versus(read, _pread(results, G_READ), 0.95, "≥ 0.95 × 16-thread pread")
    versus(read, _find(results, G_READ, "pyarrow", L_MMAP), 1.0, "≥ memory-mapped pyarrow + to_device")
    versus(_find(results, G_COLD, "cuarrow", L_READ), _pread(results, G_COLD), 0.9, "≥ 0.9 × the storage (cold pread)")
    proj, full = _find(results, G_PROJ, "cuarrow", L_PROJ_CA), read
    if proj is not None:
        if full is None:
            judge(proj, "≤ 0.15 × the full read's time", None, "no full read")
        else:
            x = proj["median_s"] / full["median_s"]
            judge(proj, "≤ 0.15 × the full read's time", x <= 0.15, f"{x:.3f} × ({full['median_s'] * 1e3:.1f} ms)")
    for group, floor in ((G_LZ4, 16.0), (G_ZSTD, 10.0)):
        r = _find(results, group, "cuarrow", L_READ)
        if r is not None:
            rate(r, floor, next((x for x in results if x["group"] == group and x["impl"] == "host"), None))
    r = _find(results, G_ZSTD, "cuarrow", L_READ_GPU)
    if r is not None:
        rate(r, 10.0)
    msgs = sorted((r for r in results if r["group"] == G_MSG), key=lambda r: r["nbytes"])
    if msgs:
        top = msgs[-1]
        us = top["median_s"] * 1e6
        judge(
            top,
            "< 1 ms at 1 GiB",
            us < 1000 if top["nbytes"] >= GiB else None,
            f"{us:.0f} µs" + ("" if top["nbytes"] >= GiB else " (message < 1 GiB)"),
        )
        if len(msgs) > 1:
            x = top["median_s"] / msgs[0]["median_s"]
            judge(top, f"≤ 2 × the time at {msgs[0]['size_label']}", x <= 2.0, f"{x:.2f} ×")
    w = _find(results, G_WRITE["uncompressed"], "cuarrow", L_WRITE)
    if w is not None:
        ceiling = [x for x in results if x["group"] == G_WRITE["uncompressed"] and x["impl"] == "os"]
        rate(w, 20.0, max(ceiling, key=lambda x: x["gbps_median"]) if ceiling else None, "one-file write")
    versus(
        _find(results, G_STREAM, "cuarrow", L_STREAM), _find(results, G_STREAM, "raw", L_D2D), 0.9, "≥ 0.9 × raw D2D"
    )
    return verdicts


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def _gb(r: dict[str, Any]) -> str:
    return bench._fmt_gbps(r["gbps_median"])


def _ms(s: float) -> str:
    return f"{s * 1e6:.1f} µs" if s < 1e-3 else f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.1f} s"


IMPL_ORDER = {"os": 0, "raw": 0, "pyarrow": 1, "cuarrow": 2}


def display_order(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def key(ir: tuple[int, dict[str, Any]]) -> tuple:
        i, r = ir
        return (
            GROUP_ORDER.index(r["group"]),
            r["nbytes"] if r["group"] == G_MSG else 0,
            IMPL_ORDER.get(r["impl"], 9),
            i,
        )

    return [r for _, r in sorted(enumerate(results), key=key)]


def render_table(results: list[dict[str, Any]]) -> str:
    head = ["operation", "bytes", "implementation", "GB/s", "time/call", "min–max GB/s", "× ref", "data", "met"]
    rows = []
    ordered = display_order(results)
    for r in ordered:
        verdicts = r.get("targets", [])
        met = " ".join({True: "met", False: "MISSED", None: "?"}[v["met"]] for v in verdicts)
        rows.append(
            [
                r["group"],
                r["size_label"],
                r["name"] + (f" [{r['read_path']}]" if r.get("read_path") else ""),
                "–" if r["group"] == G_MSG else _gb(r),
                _ms(r["median_s"]),
                f"{bench._fmt_gbps(r['gbps_min'])}–{bench._fmt_gbps(r['gbps_max'])}" if r["group"] != G_MSG else "–",
                bench._fmt_ratio(r.get("ratio_ref")),
                {True: "ok", False: "WRONG", None: "–"}[r.get("verified")],
                met,
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)] if rows else [len(h) for h in head]
    right = {3, 4, 5, 6}

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    lines = [line(head).rstrip(), "  ".join("-" * w for w in widths)]
    prev = None
    for r, cells in zip(ordered, rows):
        if prev is not None and r["group"] != prev:
            lines.append("")
        prev = r["group"]
        lines.append(line(cells).rstrip())
    return "\n".join(lines)


def render_report(
    results: list[dict[str, Any]], verdicts: list[dict[str, Any]], notes: list[str], errors: list[dict], emulated: bool
) -> str:
    header = [bench.EMULATION_BANNER] if emulated else []
    how = (
        "GB/s = bytes of the uncompressed table (the uncompressed Feather file) / median seconds per call, "
        "1 GB = 1e9 B, for compressed files too (decompressed bytes); projection: the chosen columns' bytes. "
        "× ref = this GB/s / its group's reference (reads: 16-thread pread; projection, lz4, zstd and writes: "
        "today's pyarrow path; the device stream: raw D2D cudaMemcpy of as many bytes); read_record_batch: "
        "the smallest message's time / this time. data: the result compared with pyarrow's table."
    )
    report = "\n".join(header + textwrap.wrap(how, 110)) + "\n\n" + render_table(results) + "\n"
    if notes:
        report += "\n" + "\n".join(notes) + "\n"
    if errors:
        report += "\nFAILED cases:\n" + "\n".join(f"  {e['group']} {e['name']}: {e['error']}" for e in errors) + "\n"
    met = sum(1 for v in verdicts if v["met"] is True)
    missed = sum(1 for v in verdicts if v["met"] is False)
    report += f"\ntargets (issue 14): {met} met, {missed} missed, {len(verdicts) - met - missed} not judged\n"
    for v in verdicts:
        word = {True: "met   ", False: "MISSED", None: "?     "}[v["met"]]
        report += f"  {word} {v['group']} {v['size']} {v['name']}: {v['value']} (target {v['target']})\n"
    if emulated:
        report += "\n" + bench.EMULATION_BANNER + "\n"
    return report


def render_summary(meta: dict[str, Any], verdicts: list[dict[str, Any]], results: list[dict[str, Any]]) -> str:
    m = meta["machine"]
    t = meta["table"]
    out = [
        f"# cuarrow IPC / Feather benchmark, {meta['date_utc']} on {m['hostname']}",
        "",
        f"- machine: {m.get('gpu_name') or '?'}; {m.get('nvidia_smi') or 'nvidia-smi not available'}; "
        f"{m['cpu_count']} CPUs ({m.get('cpu_model', '?')}), {m.get('mem_total', '?')} RAM; Python {m['python']}",
        f"- code: {meta.get('git_commit') or 'commit unknown'}; wall time {meta.get('wall_s')} s",
        f"- command: `{meta['command']}`",
        f"- table: {t['rows']} rows, {t['columns']} columns, {fmt_size(t['nbytes'])} of Arrow buffers; files "
        + ", ".join(f"{k} {fmt_size(v)}" for k, v in t["file_bytes"].items())
        + f" in {meta['options']['dir']}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items() if v),
    ]
    paths = sorted({r["read_path"] for r in results if r.get("read_path")})
    if paths:
        out.append(f"- cuarrow's read path (`open_file(path).read_path`): {', '.join(paths)}")
    if meta.get("emulated"):
        out.append("- **EMULATION: the figures are host memcpy, meaningless as performance figures**")
    out += [
        "",
        "| operation | implementation | target | this run | met |",
        "| --- | --- | --- | --- | --- |",
    ]
    for v in verdicts:
        met = {True: "yes", False: "**no**", None: "?"}[v["met"]]
        out.append(f"| {v['group']} ({v['size']}) | {v['name']} | {v['target']} | {v['value']} | {met} |")
    refs = [r for r in display_order(results) if r["impl"] in ("os", "raw", "pyarrow")]
    if refs:
        out += ["", "Beside them in the same run:", "", "| operation | what users do today, or the limit | GB/s |"]
        out.append("| --- | --- | --- |")
        out += [f"| {r['group']} ({r['size_label']}) | {r['name']} | {_gb(r)} |" for r in refs]
    wrong = [r for r in results if r.get("verified") is False]
    if wrong:
        out += ["", "**Wrong data**: " + ", ".join(f"{r['group']} {r['name']}" for r in wrong)]
    return "\n".join(out) + "\n"


COLORS = {"os": "black", "raw": "black", "pyarrow": "tab:blue", "cuarrow": "tab:red"}


def plot(results: list[dict[str, Any]], path: Path, title: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "skipped the plot: matplotlib not installed"
    bars = [r for r in display_order(results) if r["group"] != G_MSG]
    msgs = [r for r in display_order(results) if r["group"] == G_MSG]
    fig, (ax, ax2) = plt.subplots(
        1, 2, figsize=(17, 2 + 0.32 * max(len(bars), 4)), gridspec_kw={"width_ratios": [3, 1]}
    )
    y = np.arange(len(bars))
    vals = [r["gbps_median"] for r in bars]
    ax.barh(y, vals, color=[COLORS.get(r["impl"], "gray") for r in bars])
    for yi, v in zip(y, vals):
        ax.text(v, yi, f" {bench._fmt_gbps(v)}", va="center", fontsize=7)
    ax.set_yticks(y)
    ax.set_yticklabels([f"{r['group']}: {r['name']}" for r in bars], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("GB/s of the uncompressed table (median)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title("files and streams to and from device tables")
    if msgs:
        ax2.plot([r["nbytes"] for r in msgs], [r["median_s"] * 1e6 for r in msgs], "o-", color=COLORS["cuarrow"])
        ax2.set_xscale("log", base=2)
        ax2.set_xticks([r["nbytes"] for r in msgs])
        ax2.set_xticklabels([fmt_size(r["nbytes"]) for r in msgs], fontsize=8)
        ax2.minorticks_off()
        ax2.axhline(1000, color="black", lw=0.8, ls=":")
        ax2.set_ylim(bottom=0)
        ax2.set_xlabel("message size")
        ax2.set_ylabel("µs per call (median)")
        ax2.grid(True, alpha=0.3)
        ax2.set_title("read_record_batch (target < 1000 µs)")
    else:
        ax2.set_axis_off()
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return None


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def parse_sizes(text: str) -> list[int]:
    return sorted({parse_size(x) for x in text.split(",") if x.strip()})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="a 64 MiB table, messages up to 64 MiB (under 30 s)")
    ap.add_argument(
        "--table-bytes", type=parse_size, help="bytes of the table's Arrow buffers (default 2.2G; quick 64M)"
    )
    ap.add_argument(
        "--message-sizes",
        type=parse_sizes,
        default=[MiB, 64 * MiB, GiB],
        help="read_record_batch message sizes, capped at the table's (default 1M,64M,1G)",
    )
    ap.add_argument(
        "--dir", type=Path, default=Path("/tmp"), help="where the Feather files go (local disk; default /tmp)"
    )
    ap.add_argument("--out", type=Path, help="output folder (default bench/results/<UTC date-time>-<host>-ipc)")
    ap.add_argument("--threads", type=int, default=16, help="threads of the pread reference (default 16)")
    ap.add_argument("--reps", type=int, default=3, help="timed calls per case from 256 MiB (default 3)")
    ap.add_argument(
        "--budget", type=float, help="seconds of timed calls per case below 256 MiB (default 0.3; quick 0.1)"
    )
    ap.add_argument(
        "--cold",
        action="store_true",
        help=f"also read the uncompressed file out of the page cache (needs {DROP_CACHES} writable)",
    )
    ap.add_argument("--no-plot", action="store_true", help="do not write results.png")
    args = ap.parse_args(argv)

    t_begin = time.time()
    quick = args.quick
    target = args.table_bytes or (64 * MiB if quick else int(2.2 * GiB))
    if quick and args.message_sizes == [MiB, 64 * MiB, GiB]:
        args.message_sizes = [MiB, 64 * MiB]
    big = Timing(quick, 0.0, args.reps, args.reps)
    small = Timing(quick, args.budget if args.budget is not None else (0.1 if quick else 0.3), 5, 200)
    fast = Timing(quick, small.budget, 20, 5000)  # read_record_batch: microseconds a call
    now = _dt.datetime.now(_dt.timezone.utc)
    host_name = socket.gethostname()
    out_dir = args.out or Path(__file__).resolve().parent / "results" / f"{now:%Y-%m-%d-%H%M}-{host_name}-ipc"

    from cuarrow import cuda

    why_emulated = cuda.use_emulation_if_no_gpu()
    emulated = cuda.is_emulated()
    if emulated:
        log(bench.EMULATION_BANNER)
        log(f"    (emulation selected because: {why_emulated or 'CUARROW_CUDA_DRIVER'})")
    ipc = importlib.import_module("cuarrow.ipc")
    ctx = cuda.Context(0)
    notes: list[str] = []
    peers = bench.load_peers(emulated, notes, names=("cupy",), without_raw="no raw D2D reference for the stream")
    for n in notes:
        log(n)

    workdir = Path(tempfile.mkdtemp(prefix="cuarrow-ipc-bench-", dir=args.dir))
    s = Setup(args, cuda, ctx, ipc, peers.get("cupy"), workdir)
    results: list[dict[str, Any]] = []
    phases: dict[str, Any] = {}
    errors: list[dict[str, Any]] = []
    pread = None
    try:
        log(f"building the table (~{fmt_size(target)}) ...")
        s.table = build_table(target)
        tb = table_bytes(s.table)
        log(
            f"  {s.table.num_rows} rows, {s.table.num_columns} columns, {fmt_size(tb)}  [{time.time() - t_begin:.1f} s]"
        )
        for comp in COMPRESSIONS:
            path = workdir / f"table-{comp}.feather"
            feather.write_feather(s.table, path, compression=comp)
            s.files[comp] = path
            s.file_bytes[comp] = path.stat().st_size
            log(f"  wrote {path.name}: {fmt_size(path.stat().st_size)}  [{time.time() - t_begin:.1f} s]")
        s.nbytes = s.files["uncompressed"].stat().st_size
        for path in s.files.values():  # into the page cache
            with open(path, "rb") as f:
                while f.read(64 * MiB):
                    pass
        pread = ThreadedPread(s.files["uncompressed"], args.threads)

        drop = cold_dropper(notes) if args.cold else None
        if not args.cold:
            notes.append("cold reads not measured: --cold not given")
        cases = read_cases(s, pread, notes)
        cold = cold_cases(s, pread, notes) if drop is not None else []
        log("moving the table to the device for the write cases ...")
        dev = {"table": cuda.to_device(s.table, ctx)}

        def release_table() -> list[Case]:
            dev.clear()  # written: its device memory goes to the messages (the emulation has 1 GiB by default)
            return []

        wphases: dict[str, Any] = {}

        def measure_write_phases() -> list[Case]:
            wphases.update(write_phases(s, dev["table"], notes))
            return []

        later: list[tuple[str, Callable[[], list[Case]]]] = [
            ("writes", lambda: write_cases(s, dev["table"], notes)),
            ("device stream", lambda: stream_cases(s, dev["table"], notes)),
            ("write phases", measure_write_phases),
            ("", release_table),
        ]
        for name in ("serialize_record_batch", "read_record_batch"):
            if ipc_api(ipc, name, notes) is None:
                break
        else:
            later.append(("read_record_batch", lambda: message_cases(s, notes)))

        def run(case: Case, before_each: Callable[[], None] | None = None) -> None:
            # The stream into device memory takes milliseconds however many
            # bytes it holds: timed for the small cases' budget (3 calls
            # spread 2.7-3.9 ms on an H100, 2026-12-05), not 3 calls.
            if case.group == G_MSG:
                timing = fast
            elif case.group == G_STREAM or case.nbytes < 256 * MiB:
                timing = small
            else:
                timing = big
            prefix = f"[{time.time() - t_begin:6.1f}s] {case.group} {case.size_label} {case.name}"
            try:
                r = bench.measure(case, timing, before_each)
            except Exception as e:  # noqa: BLE001
                msg = f"{type(e).__name__}: {e}"
                log(f"{prefix}: FAILED {msg}")
                errors.append({"group": case.group, "size_label": case.size_label, "name": case.name, "error": msg})
                return
            finally:
                p = getattr(case, "cleanup", None)
                if p is not None:
                    Path(p).unlink(missing_ok=True)
            r.pop("samples_s", None)
            r.update(getattr(case, "extra", {}))
            results.append(r)
            check = "  WRONG DATA" if r["verified"] is False else ""
            log(f"{prefix}: {_gb(r)} GB/s ({_ms(r['median_s'])}/call), {r['n_samples']} calls{check}")

        for case in cases:
            run(case)
        phases = read_phases(s, notes)
        for case in cold:
            run(case, drop)
        for what, make in later:
            try:
                made = make()
            except Exception as e:  # noqa: BLE001 - setting a group up failed: say so, run the rest
                msg = f"{type(e).__name__}: {e}"
                log(f"{what}: FAILED to set up the cases: {msg}")
                errors.append({"group": what, "size_label": "", "name": "(setting up the cases)", "error": msg})
                continue
            for case in made:
                run(case)
            made = []  # the cases' buffers go before the next group's are made
    finally:
        if pread is not None:
            pread.close()
        for close in s.closers:
            close()
        shutil.rmtree(workdir, ignore_errors=True)

    add_ratios(results)
    verdicts = evaluate_targets(results, s.nbytes)
    report = render_report(results, verdicts, notes, errors, emulated)
    print(report, flush=True)

    repo = Path(__file__).resolve().parent.parent
    versions = {
        "cuarrow": getattr(importlib.import_module("cuarrow"), "__version__", None),
        "numpy": np.__version__,
        "pyarrow": pa.__version__,
        "cupy": getattr(peers.get("cupy"), "__version__", None),
        "matplotlib": bench._version("matplotlib"),
    }
    try:
        versions["cuda_driver_api"] = cuda.driver_info()["version"]
    except Exception:  # noqa: BLE001
        pass
    meta = {
        "date_utc": now.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "git_commit": os.environ.get("CUARROW_COMMIT") or bench.git_commit(repo),
        "emulated": emulated,
        "driver": cuda.driver_info(),
        "machine": bench.machine_info(ctx),
        "versions": versions,
        "options": {
            "quick": quick,
            "table_bytes": target,
            "message_sizes": args.message_sizes,
            "dir": str(args.dir),
            "threads": args.threads,
            "reps": args.reps,
            "budget_s": small.budget,
            "cold": args.cold,
        },
        "table": {
            "rows": s.table.num_rows,
            "columns": s.table.num_columns,
            "nbytes": table_bytes(s.table),
            "schema": str(s.table.schema),
            "file_bytes": s.file_bytes,
        },
        "notes": notes,
        "read_phases": phases,
        "write_phases": wphases,
        "cuarrow_env": {k: v for k, v in os.environ.items() if k.startswith("CUARROW_")},
        "wall_s": round(time.time() - t_begin, 1),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    bench.write_json(out_dir / "results.json", meta, results, verdicts, errors)
    (out_dir / "results.txt").write_text(report)
    (out_dir / "summary.md").write_text(render_summary(meta, verdicts, results))
    plotted = False
    if not args.no_plot:
        title = f"cuarrow IPC / Feather, {meta['date_utc']}, {meta['machine'].get('gpu_name')} on {host_name}" + (
            "  [EMULATION: meaningless numbers]" if emulated else ""
        )
        why = plot(results, out_dir / "results.png", title)
        plotted = why is None
        if why:
            log(why)
    log(
        f"wrote {out_dir}/results.json, results.txt, summary.md"
        + (", results.png" if plotted else "")
        + f"  ({time.time() - t_begin:.0f} s in all)"
    )
    return 1 if errors or any(r["verified"] is False for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
