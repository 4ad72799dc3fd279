#!/usr/bin/env python3
"""A file read batch by batch by a loop that works on each batch: how much
of the reading cuarrow's read-ahead hides behind the work
(``RecordBatchFileReader.iter_batches``, ``cuarrow::ipc::batch_readahead``;
``cuda.prefetch_to_device`` for any stream of host batches).

    PYTHONPATH=<installed cuarrow> python3 bench/readahead_probe.py \\
        [--table-bytes 2.2G] [--step-gbps 10,40] [--readahead-bytes 64M,256M] [--reps 3] [--dir /dev/shm]
        [--out FILE]

The IPC benchmark's table (bench/ipc_bench.py) is written by pyarrow as an
uncompressed Feather file (64 Ki-row batches).  Each loop takes every batch
onto the device and then "works" on it for nbytes / step-rate seconds
(``time.sleep``, which releases the GIL as a loop waiting for its kernels
or its training step does).  The loops, one after another, each timed
--reps times after a warm-up:

- pyarrow (what users do today): ``for b in pa.ipc.open_file(pa.memory_map(path)):
  cuda.to_device(b)``;
- the same pyarrow batches moved ahead by cuarrow's thread
  (``cuda.prefetch_to_device``, ``cuarrow::arrow::device_readahead``; 2
  batches ahead), which takes any stream of host batches;
- cuarrow without read-ahead: ``for b in ipc.open_file(path).iter_batches(readahead=0)``
  (each batch read when asked);
- cuarrow as a plain loop reads: ``for b in ipc.open_file(path)`` (read-ahead:
  2 reads of up to 64 MiB of batches ahead, on a thread of their own), and
  ``iter_batches(readahead_bytes=N)`` for each N of --readahead-bytes;
- the same batches written as an IPC stream: pyarrow's
  ``pa.ipc.open_stream(pa.memory_map(path))`` + ``cuda.to_device``, and
  cuarrow's ``ipc.open_stream(path)`` without and with read-ahead
  (``cuarrow::ipc::stream_readahead``).

For each step rate, and with no work (the read alone): the loop's seconds
(median), GB/s of the file's bytes, and for the loops with work
``hidden`` = (read alone + work alone - loop) / min(read alone, work alone):
the share of the shorter of the two that the loop hid (1: the loop took as
long as the longer one; 0: as long as both).  Numbers mean something only
on the GPU machine; on the emulation this is a smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table-bytes", default="2.2G")
    ap.add_argument("--step-gbps", default="10,40", help="rates of the work on each batch, GB/s of its bytes")
    ap.add_argument("--readahead-bytes", default="64M", help="more read-ahead loops, with runs of these sizes")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import bench  # noqa: PLC0415
    import ipc_bench  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.feather as feather  # noqa: PLC0415

    from cuarrow import cuda  # noqa: PLC0415
    from cuarrow.cuda import ipc  # noqa: PLC0415

    rates = [float(r) for r in args.step_gbps.split(",") if r]
    workdir = Path(args.dir) / f"readahead-probe-{os.getpid()}"
    workdir.mkdir(parents=True)
    path = workdir / "table.feather"
    result: dict[str, Any] = {"machine": bench.cpu_topology() | {"cpu_count": os.cpu_count()}, "loops": {}}
    try:
        table = ipc_bench.build_table(bench.parse_size(args.table_bytes))
        feather.write_feather(table, path, compression="uncompressed")
        nbytes = path.stat().st_size
        with pa.ipc.open_file(path) as f:
            batches = f.num_record_batches
        # The same batches as an IPC stream (no footer: read in order).
        stream_path = workdir / "table.arrows"
        with pa.ipc.new_stream(stream_path, table.schema) as w:
            for b in table.to_batches(max_chunksize=max(1, table.num_rows // batches)):
                w.write_batch(b)
        del table
        result |= {"nbytes": nbytes, "batches": batches, "emulated": cuda.is_emulated()}
        print(f"file: {bench.fmt_size(nbytes)}, {batches} batches", flush=True)
        ctx = cuda.Context(0)

        def pyarrow_loop(step: Callable[[Any], None]) -> None:
            with pa.ipc.open_file(pa.memory_map(str(path))) as f:
                for i in range(f.num_record_batches):
                    step(cuda.to_device(f.get_batch(i)))

        def prefetch_loop(step: Callable[[Any], None]) -> None:
            # The same pyarrow batches, moved ahead of the loop by cuarrow's thread.
            with pa.ipc.open_file(pa.memory_map(str(path))) as f:
                source = (f.get_batch(i) for i in range(f.num_record_batches))
                for b in cuda.prefetch_to_device(pa.RecordBatchReader.from_batches(f.schema, source), ctx):
                    step(b)

        def cuarrow_loop(**options: int) -> Callable[[Callable[[Any], None]], None]:
            def loop(step: Callable[[Any], None]) -> None:
                r = ipc.open_file(str(path))
                for b in r.iter_batches(**options) if options else r:
                    step(b)

            return loop

        def pyarrow_stream_loop(step: Callable[[Any], None]) -> None:
            with pa.ipc.open_stream(pa.memory_map(str(stream_path))) as f:
                for b in f:
                    step(cuda.to_device(b))

        def cuarrow_stream_loop(**options: int) -> Callable[[Callable[[Any], None]], None]:
            def loop(step: Callable[[Any], None]) -> None:
                r = ipc.open_stream(str(stream_path))
                for b in r.iter_batches(**options) if options else r:
                    step(b)

            return loop

        loops = {
            "pyarrow memory_map + to_device": pyarrow_loop,
            "pyarrow memory_map + cuarrow prefetch_to_device": prefetch_loop,
            "cuarrow iter_batches(readahead=0)": cuarrow_loop(readahead=0),
            "cuarrow for b in open_file(path) (read-ahead)": cuarrow_loop(),
            "stream: pyarrow memory_map + to_device": pyarrow_stream_loop,
            "stream: cuarrow iter_batches(readahead=0)": cuarrow_stream_loop(readahead=0),
            "stream: cuarrow for b in open_stream(path)": cuarrow_stream_loop(),
        }
        for size in (bench.parse_size(s) for s in args.readahead_bytes.split(",") if s):
            loops[f"cuarrow iter_batches(readahead_bytes={bench.fmt_size(size)})"] = cuarrow_loop(readahead_bytes=size)

        def timed(loop: Callable[[Callable[[Any], None]], None], rate: float | None) -> float:
            def step(b: Any) -> None:
                if rate:
                    time.sleep(b.nbytes / (rate * 1e9))

            loop(step)  # warm-up
            samples = []
            for _ in range(args.reps):
                ctx.synchronize()
                t0 = time.perf_counter()
                loop(step)
                ctx.synchronize()
                samples.append(time.perf_counter() - t0)
            return statistics.median(samples)

        # The work alone, once a rate: the same sleeps as every loop's steps.
        sizes = [b.nbytes for b in ipc.open_file(str(path)).iter_batches(readahead=0)]
        work_alone = {}
        for rate in rates:
            t0 = time.perf_counter()
            for n in sizes:
                time.sleep(n / (rate * 1e9))
            work_alone[rate] = time.perf_counter() - t0

        for name, loop in loops.items():
            alone = timed(loop, None)
            row: dict[str, Any] = {"read_alone_s": alone, "read_alone_gb_per_s": nbytes / alone / 1e9, "with_work": {}}
            print(f"{name:48s} read alone   {alone * 1e3:8.1f} ms  {nbytes / alone / 1e9:6.2f} GB/s", flush=True)
            for rate in rates:
                work = work_alone[rate]
                both = timed(loop, rate)
                hidden = (alone + work - both) / min(alone, work)
                row["with_work"][str(rate)] = {"work_alone_s": work, "loop_s": both, "hidden": hidden}
                print(
                    f"{name:48s} work {rate:5.1f} GB/s: loop {both * 1e3:8.1f} ms (work alone {work * 1e3:7.1f} ms, "
                    f"read alone {alone * 1e3:7.1f} ms): hidden {hidden:5.2f}",
                    flush=True,
                )
            result["loops"][name] = row
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
