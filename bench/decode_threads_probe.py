#!/usr/bin/env python3
"""How compressed reads scale with host threads (issue 14's ZSTD target: 10
GB/s of decompressed bytes into device memory, on host threads).

    PYTHONPATH=<installed cuarrow> python3 bench/decode_threads_probe.py \\
        [--table-bytes 2.2G] [--ceiling-threads 1,4,8,12,16,24] [--threads 16,20,24] [--reps 5]
        [--dir /dev/shm] [--out FILE]

The IPC benchmark's table (bench/ipc_bench.py) is written as Feather files:
pyarrow's ZSTD and LZ4 (one frame a buffer, 64 Ki-row batches) and
cuarrow's (2 Mi-row batches, buffers above 4 MiB in 4 MiB frames or
independent LZ4 blocks, which its reader decodes on several workers).
Then:

- the host's decode ceiling for each --ceiling-threads count N: the same
  buffers' frames decoded by N C++ threads into host memory
  (bench/decode_ceiling.cpp, when built: the CUARROW_DECODE_CEILING_SO
  library or build/{gpu,dev}/lib), the curve that shows what the
  machine's CPUs are worth;
- cuarrow's read_feather of each file for each --threads count N, in a
  child process whose readers have N workers
  (CUARROW_STAGING_THREADS_TO_DEVICE=N: it raises the readers' default, one
  a core up to 16, never lowers it), with the reader's stats (time spent
  decompressing, reading, waiting for DMAs).

Figures are GB/s of the uncompressed file's bytes (as ipc_bench counts
them), the median of --reps calls after one warm-up.  They mean something
only on the GPU machine; elsewhere (the emulation) it is a smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def child(path: str, reps: int) -> None:
    """In a child: read_feather(path) reps times (after one warm-up);
    prints the seconds and the last read's stats as JSON."""
    from cuarrow.cuda import ipc  # noqa: PLC0415

    ipc.read_feather(path)
    seconds = []
    stats: dict[str, Any] = {}
    for _ in range(reps):
        t0 = time.perf_counter()
        stats.clear()
        table = ipc.read_feather(path, stats=stats)  # returns once the bytes are on the device
        seconds.append(time.perf_counter() - t0)
        del table
    print(json.dumps({"seconds": seconds, "stats": stats}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table-bytes", default="2.2G")
    ap.add_argument("--ceiling-threads", default="1,4,8,12,16,24")
    ap.add_argument("--threads", default="16,20,24")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", nargs=2, metavar=("PATH", "REPS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return 0

    import bench  # noqa: PLC0415
    import ipc_bench  # noqa: PLC0415
    import pyarrow.feather as feather  # noqa: PLC0415

    from cuarrow import cuda  # noqa: PLC0415
    from cuarrow.cuda import ipc  # noqa: PLC0415

    threads = [int(t) for t in args.threads.split(",")]
    ceiling_threads = [int(t) for t in args.ceiling_threads.split(",")]
    workdir = Path(args.dir) / f"decode-threads-{os.getpid()}"
    workdir.mkdir(parents=True)
    result: dict[str, Any] = {
        "machine": bench.cpu_topology() | {"cpu_count": os.cpu_count()},
        "threads": threads,
        "ceiling_threads": ceiling_threads,
        "ceiling": {},
        "reads": {},
    }
    try:
        table = ipc_bench.build_table(bench.parse_size(args.table_bytes))
        names = ("uncompressed", "zstd", "lz4", "zstd-cuarrow", "lz4-cuarrow")
        files = {name: workdir / f"{name}.feather" for name in names}
        for comp in ("uncompressed", "zstd", "lz4"):
            feather.write_feather(table, files[comp], compression=comp)
        on_device = cuda.to_device(table)
        for comp in ("zstd", "lz4"):
            ipc.write_feather(on_device, str(files[f"{comp}-cuarrow"]), compression=comp)
        del on_device
        nbytes = files["uncompressed"].stat().st_size
        result["nbytes"] = nbytes
        files.pop("uncompressed").unlink()
        print(f"table: {table.num_rows} rows, {bench.fmt_size(nbytes)} uncompressed", flush=True)

        for codec in ("zstd", "lz4"):
            try:
                decode = ipc_bench.ThreadedDecode(table, codec, 1)
            except OSError as e:
                result["ceiling"][codec] = f"not measured: {e}"
                continue
            rows = {}
            for n in ceiling_threads:
                decode.set_threads(n)
                decode()
                samples = []
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    decode()
                    samples.append(time.perf_counter() - t0)
                rows[n] = decode.nbytes / statistics.median(samples) / 1e9
                print(f"ceiling {codec} {n:3d} threads ({decode.how}): {rows[n]:6.2f} GB/s", flush=True)
            result["ceiling"][codec] = {"how": decode.how, "gb_per_s": rows}
            decode.close()

        for name, path in files.items():
            rows = {}
            for n in threads:
                env = dict(os.environ, CUARROW_STAGING_THREADS_TO_DEVICE=str(n))
                r = subprocess.run(
                    [sys.executable, __file__, "--child", str(path), str(args.reps)],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                if r.returncode != 0:
                    rows[n] = {"error": r.stderr[-2000:]}
                    print(f"read {name} {n} workers: failed\n{r.stderr[-2000:]}", flush=True)
                    continue
                got = json.loads(r.stdout.strip().splitlines()[-1])
                med = statistics.median(got["seconds"])
                rows[n] = {"gb_per_s": nbytes / med / 1e9, "seconds": got["seconds"], "stats": got["stats"]}
                busy = got["stats"].get("decompress_seconds")
                extra = f", decompressing {busy:.2f} s of worker time" if busy is not None else ""
                print(f"read {name:13s} {n:3d} workers: {rows[n]['gb_per_s']:6.2f} GB/s{extra}", flush=True)
            result["reads"][name] = rows
    finally:
        for p in workdir.glob("*"):
            p.unlink()
        workdir.rmdir()
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
