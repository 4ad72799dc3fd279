"""How fast one file takes bytes from host memory, by thread count: pwrite at
distinct offsets against memcpy into a shared mapping (after ftruncate, or
posix_fallocate).  Evidence for the Feather writer's design (issue 14's
write target): whether writing one file in parallel scales on a file system.
With --cuarrow, instead: cuarrow's ipc.write_feather of a device table of
that size, one child process per CUARROW_STAGING_THREADS value (the
writer's pwrite threads), to see where the writer stands against the file's
own ceiling.

    python3 bench/write_scaling_probe.py [DIR] [--gib N] [--cuarrow]
"""

from __future__ import annotations

import argparse
import mmap
import os
import subprocess
import sys
import threading
import time

import numpy as np

CHUNK = 4 << 20


def _run(threads: int, work) -> None:
    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def by_pwrite(path: str, n: int, threads: int, data: np.ndarray) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    offsets = list(range(0, n, CHUNK))
    t0 = time.perf_counter()
    _run(threads, lambda k: [os.pwrite(fd, data, o) for o in offsets[k::threads]])
    dt = time.perf_counter() - t0
    os.close(fd)
    os.remove(path)
    return n / dt / 1e9


def by_mapping(path: str, n: int, threads: int, data: np.ndarray, fallocate: bool) -> float:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    offsets = list(range(0, n, CHUNK))
    t0 = time.perf_counter()
    if fallocate:
        os.posix_fallocate(fd, 0, n)
    else:
        os.ftruncate(fd, n)
    m = mmap.mmap(fd, n)
    views = [np.frombuffer(m, dtype=np.uint8)]
    _run(threads, lambda k: [np.copyto(views[0][o : o + CHUNK], data) for o in offsets[k::threads]])
    views.clear()  # the mapping closes only without exports
    m.close()
    dt = time.perf_counter() - t0
    os.close(fd)
    os.remove(path)
    return n / dt / 1e9


_WRITER = """
import os, sys, time
import numpy as np, pyarrow as pa
from cuarrow import cuda, ipc
n, path = int(sys.argv[1]), sys.argv[2]
cols = 16
rows = n // (8 * cols)
t = pa.table({f"c{i}": np.arange(i, i + rows, dtype=np.int64) for i in range(cols)})
dt = cuda.to_device(pa.Table.from_batches(t.to_batches(max_chunksize=1 << 16)))
best = []
for _ in range(3):
    t0 = time.perf_counter()
    ipc.write_feather(dt, path, compression="uncompressed")
    best.append(time.perf_counter() - t0)
    os.remove(path)
print(f"{rows * cols * 8 / min(best) / 1e9:.2f}")
"""


def by_cuarrow(path: str, n: int, threads: int) -> str:
    env = dict(os.environ, CUARROW_STAGING_THREADS=str(threads))
    r = subprocess.run([sys.executable, "-c", _WRITER, str(n), path], env=env, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else f"failed: {r.stderr.strip().splitlines()[-1:]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", default="/tmp")
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--cuarrow", action="store_true", help="cuarrow's write_feather by writer thread count")
    a = ap.parse_args()
    if a.cuarrow:
        n = int(a.gib * (1 << 30))
        path = os.path.join(a.dir, "cuarrow-write-probe.arrow")
        table = f"a {a.gib} GiB device table (16 int64 columns, 64 Ki-row batches)"
        print(f"cuarrow ipc.write_feather of {table} into {a.dir}")
        print("CUARROW_STAGING_THREADS  GB/s (best of 3)")
        for t in (1, 2, 4, 8, 12):
            print(f"{t:23d}  {by_cuarrow(path, n, t)}", flush=True)
        return
    n = int(a.gib * (1 << 30)) // CHUNK * CHUNK
    data = np.frombuffer(os.urandom(CHUNK), dtype=np.uint8)
    path = os.path.join(a.dir, "cuarrow-write-probe.bin")
    print(f"{a.gib} GiB into one file in {a.dir}, {CHUNK >> 20} MiB pieces, GB/s")
    print("threads  pwrite  mmap(ftruncate)  mmap(fallocate)")
    for t in (1, 2, 4, 8, 16):
        row = (by_pwrite(path, n, t, data), by_mapping(path, n, t, data, False), by_mapping(path, n, t, data, True))
        print(f"{t:7d}  {row[0]:6.2f}  {row[1]:15.2f}  {row[2]:15.2f}", flush=True)


if __name__ == "__main__":
    main()
