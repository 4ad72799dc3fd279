#!/usr/bin/env python3
"""Sharing a DeviceTable with another process (docs/sharing.md): the cost of
``share()`` in the exporter and of ``cuda.open_shared`` in an importer whose
CUDA context already exists (issue 15's target: a 1 GiB table of 100
columns opens in <= 2 ms).

    python3 bench/share_bench.py                 # 1 GiB, 100 int64 columns
    python3 bench/share_bench.py --quick         # 64 MiB (the emulation too)
    python3 bench/share_bench.py --out DIR       # also DIR/share_bench.json and DIR/summary.md
    python3 bench/share_bench.py --memory pool   # only share(memory="pool") (default: both)

The exporter times ``share()`` (one device-to-device copy, synchronized).
A spawned importer creates its context and warms up (one open and close),
then opens the descriptor --repeat times; each open maps the allocation
afresh (the previous table is dropped first, which closes the mapping), and
the time is the ``open_shared`` call alone.  With ``--memory pool`` (and
``both``) the table is shared in pool memory and the pool's descriptor goes
to the child with its arguments (``multiprocessing.reduction.DupFd``): the
child's first open (timed on its own, after the context exists) includes
the pool's import, later opens do not.  The first and last columns of
the last open are checked against the exporter's on the host.  Two more
figures: the time a fresh child takes from importing cuarrow to its first
open (context creation included, PyTorch's reduce_tensor way of counting),
and the driver's floor, opening a legacy IPC handle of a plain allocation of
the same size with nothing else (``Context.open_ipc_buffer``).
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

TARGET_OPEN_MS = 2.0  # issue 15: open_shared of 1 GiB in 100 columns


def _importer(descriptor: bytes, raw_handle: bytes, repeat: int, conn, pool) -> None:
    start = time.perf_counter()
    from cuarrow import cuda

    ctx = cuda.Context(0)
    ctx.new_buffer(1)
    fd = None
    if pool is not None:
        fd = pool[0].detach()  # the pool's descriptor, received with the arguments
        pool = (fd, pool[1])
    ready = time.perf_counter()
    # The fresh child's first open: for pool memory the pool's import included.
    t = cuda.open_shared(descriptor, ctx, pool=pool)
    end_first = time.perf_counter()
    first_open, fresh = end_first - ready, end_first - start
    if fd is not None:
        import os

        os.close(fd)  # the pool is imported (cached for the process): later opens do not read it
    times = []
    for _ in range(repeat):
        t = None  # the previous table goes, and its mapping is closed
        gc.collect()
        start = time.perf_counter()
        t = cuda.open_shared(descriptor, ctx, pool=pool)
        times.append(time.perf_counter() - start)
    last = t
    first = last.column(0).to_host()
    end = last.column(last.num_columns - 1).to_host()
    # The driver's floor: cuIpcOpenMemHandle of a plain allocation of the
    # same size (pyarrow.cuda's open_ipc_buffer), nothing else.
    handle = cuda.IpcMemHandle.from_buffer(raw_handle)
    raw = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        b = ctx.open_ipc_buffer(handle)
        raw.append(time.perf_counter() - start)
        del b
    conn.send((times, first, end, last.num_rows, last.num_columns, fresh, raw, first_open))


def _run(memory: str, a: argparse.Namespace, ctx, host, table, rows: int) -> tuple[dict, str]:
    from multiprocessing.reduction import DupFd

    from cuarrow import cuda

    share_times = []
    for _ in range(3):
        start = time.perf_counter()
        shared = table.share(memory=memory)
        share_times.append(time.perf_counter() - start)
        if len(share_times) < 3:
            shared.release()
    median = statistics.median(share_times) * 1e3
    print(f"share(memory={memory!r}): {shared.nbytes / 2**20:.0f} MiB, median {median:.2f} ms", file=sys.stderr)

    plain = ctx.new_buffer(shared.nbytes)  # cuMemAlloc, exported with legacy IPC alone
    raw_handle = plain.export_for_ipc().serialize().to_pybytes()
    pool = (DupFd(shared.pool_fd()), shared.pool_id) if memory == "pool" else None

    ctx_mp = mp.get_context("spawn")
    parent, child = ctx_mp.Pipe()
    proc = ctx_mp.Process(target=_importer, args=(shared.descriptor, raw_handle, a.repeat, child, pool))
    proc.start()
    times, first, end, n_rows, n_cols, fresh, raw, first_open = parent.recv()
    proc.join()
    shared.release()
    del plain
    ok = first.equals(host.column(0)) and end.equals(host.column(a.columns - 1))
    ok = ok and n_rows == rows and n_cols == a.columns
    ms = [t * 1e3 for t in times]
    result = {
        "memory": memory,
        "bytes": rows * 8 * a.columns,
        "columns": a.columns,
        "share_ms_median": statistics.median(share_times) * 1e3,
        "first_open_ms": first_open * 1e3,
        "open_ms_median": statistics.median(ms),
        "open_ms_min": min(ms),
        "open_ms_max": max(ms),
        "fresh_child_first_open_ms": fresh * 1e3,
        "raw_ipc_open_ms_median": statistics.median(raw) * 1e3,
        "correct": ok,
        "emulated": cuda.is_emulated(),
        "target_open_ms": TARGET_OPEN_MS,
    }
    # judged at the target's size only, on a GPU, with the right data
    judged = result["bytes"] >= 1000 << 20 and a.columns == 100 and not result["emulated"]
    result["target_met"] = (ok and result["open_ms_median"] <= TARGET_OPEN_MS) if judged else None
    met = {True: "met", False: "**MISSED**", None: "not judged (not 1 GiB of 100 columns on a GPU)"}
    first_what = "the pool's import included" if memory == "pool" else "context already created"
    summary = (
        f"## memory={memory}\n\n"
        f"- share(): median {result['share_ms_median']:.2f} ms (one device-to-device copy)\n"
        f"- the child's first open_shared ({first_what}): {result['first_open_ms']:.3f} ms\n"
        f"- later open_shared in that process: median {result['open_ms_median']:.3f} ms "
        f"({result['open_ms_min']:.3f}-{result['open_ms_max']:.3f}, {a.repeat} opens); "
        f"target <= {TARGET_OPEN_MS:g} ms for 1 GiB of 100 columns: {met[result['target_met']]}\n"
        f"- the driver's floor, cuIpcOpenMemHandle of a plain {result['bytes'] / 2**20:.0f} MiB allocation "
        f"alone (open_ipc_buffer): median {result['raw_ipc_open_ms_median']:.3f} ms\n"
        f"- a fresh child (import, context creation, first open_shared): {result['fresh_child_first_open_ms']:.0f} ms\n"
        f"- data: {'checked, correct' if ok else '**WRONG**'}\n"
    )
    return result, summary


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="64 MiB instead of 1 GiB")
    p.add_argument("--columns", type=int, default=100)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--memory", choices=["legacy", "pool", "both"], default="both", help="share()'s memory")
    p.add_argument("--out", type=Path)
    a = p.parse_args()

    import numpy as np
    import pyarrow as pa

    from cuarrow import cuda

    total = (64 if a.quick else 1024) << 20
    rows = total // (8 * a.columns)
    ctx = cuda.Context(0)
    host = pa.table({f"c{i}": np.arange(i, i + rows, dtype=np.int64) for i in range(a.columns)})
    table = cuda.to_device(host, ctx)
    memories = ["legacy", "pool"] if a.memory == "both" else [a.memory]
    results, parts = {}, []
    for memory in memories:
        results[memory], part = _run(memory, a, ctx, host, table, rows)
        parts.append(part)
    print(json.dumps(results, indent=2))
    first = results[memories[0]]
    summary = (
        f"# share() / open_shared, {first['bytes'] / 2**20:.0f} MiB in {a.columns} columns"
        f"{' (EMULATION: meaningless figures)' if first['emulated'] else ''}\n\n" + "\n".join(parts)
    )
    print(summary)
    ok = all(r["correct"] for r in results.values())
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "share_bench.json").write_text(json.dumps(results, indent=2) + "\n")
        (a.out / "summary.md").write_text(summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
