#!/usr/bin/env python3
"""A DeviceTable moved between two Dask workers, beside a NumPy array of the
same size on the same cluster (issue 15's targets: over TCP the table within
1.3 x the array's time; over UCX at least 0.5 x the throughput of a raw
device-to-device copy of the same size).

    python3 bench/dask_bench.py                  # 1 GiB each, 5 timed moves each
    python3 bench/dask_bench.py --quick          # 64 MiB, 3 moves (the emulation too)
    python3 bench/dask_bench.py --out DIR        # results.json and summary.md in DIR
    python3 bench/dask_bench.py --protocol ucx   # over UCX (distributed-ucxx; a real GPU)

A ``distributed.LocalCluster(n_workers=2, threads_per_worker=1,
processes=True, protocol="tcp")``: two worker processes, A and B, on the
one GPU.  The host table (bench.py's mixed table: int64, float64, strings
with nulls, list<int32>; plus 3 int64 and 3 float64 columns: 10 columns in
all) is built on A, once.  Then, for each move, a fresh object is made on A
by a task pinned there (``cuda.to_device`` of that host table; ``np.arange``
for the array), so it never passes through the client; a task pinned to B
that takes it as its argument and returns its row count makes B fetch it
from A: exactly one worker-to-worker transfer.  Timed:

- ``transfer``: what B's Dask records for that fetch (its
  ``transfer_incoming_log``: from B's request to the object deserialized on
  B, so A's serialization, the comm and B's deserialization; for the
  table: packing on the device, the device-to-host copy on A, TCP, the
  host-to-device copy on B);
- ``task``: the client's wall time from submitting B's task to its result
  (the transfer plus scheduling round trips; ``empty task`` gives those
  alone).

The first move of each kind (imports, contexts, first allocations) is
reported apart; the figures are medians of the others.  Table and array
moves alternate.  Each array is checked on B (first, last, sum) and the last
table is compared with the host table on B (``to_host().equals``); a wrong
result fails the run.  Both objects of a move are released before the next.

Frame compression is off (``distributed.comm.compression``), as it is by
default, so both kinds move their bytes as they are.

``--protocol ucx`` (distributed-ucxx registers Dask's "ucx" comm; its
"ucxx" is the same comm under a legacy prefix): the table travels in the
``cuda`` serialization family, ONE device frame that B receives into memory
RMM allocates and reads zero-copy.  Beside the table and the NumPy array, a
CuPy array of the same size (when CuPy is there) gives the comm's own speed
for device memory, and the client times a raw device-to-device copy of the
same size first (``cudaMemcpy`` through CuPy, else cuarrow's
``copy_from_device``; median of 5).  The target: the table's transfer
throughput at least 0.5 x that copy's.  UCX takes its settings from the
environment (``UCX_TLS`` ...; recorded in results.json); without
``UCX_TLS`` UCX chooses its transports itself.  Needs a real GPU: the
emulation's device memory is host memory, which RMM cannot allocate.

``share()`` / ``open_shared`` between two plain processes is
bench/share_bench.py.  See bench/README.md, "Dask benchmark".
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = str(Path(__file__).resolve().parent)
sys.path.insert(0, BENCH_DIR)  # bench.py, beside this file

import bench  # noqa: E402 - found through the line above
from bench import GiB, MiB, fmt_size, log, parse_size  # noqa: E402

TARGET_RATIO = 1.3  # issue 15: table time / array time over TCP, at most
TARGET_UCX_D2D = 0.5  # issue 15: table throughput over UCX / raw D2D copy throughput, at least
NAMES = {"table": "DeviceTable", "array": "NumPy array", "cupy": "CuPy array (device)"}
WAIT_S = 120  # any one step longer than this: something is stuck (a lost worker), fail


# ---- run on the workers ----------------------------------------------------------------------
# Defined in this script, so cloudpickle sends them by value; they import
# what they need there.


def _host_table(nbytes: int) -> Any:
    """On worker A: ~nbytes of mixed columns (bench.py's mixed table, plus
    3 int64 and 3 float64 columns)."""
    import sys as _sys

    import numpy as np
    import pyarrow as pa

    if BENCH_DIR not in _sys.path:
        _sys.path.insert(0, BENCH_DIR)
    from bench import build_mixed_table

    # bench.py's mixed table is ~54.6 bytes a row, the 6 columns 48 more
    mixed = build_mixed_table(int(nbytes * 54.6 / 102.6), seed=15)
    rows = mixed.num_rows
    rng = np.random.default_rng(16)
    for i in range(3):
        mixed = mixed.append_column(f"i64_{i}", pa.array(rng.integers(-(1 << 50), 1 << 50, rows, dtype=np.int64)))
        mixed = mixed.append_column(f"f64_{i}", pa.array(rng.standard_normal(rows)))
    return mixed


def _to_device(host: Any, move: int) -> Any:
    """On worker A: a fresh DeviceTable (`move` makes each task distinct)."""
    from cuarrow import cuda

    return cuda.to_device(host, cuda.Context(0))


def _array(nbytes: int, move: int) -> Any:
    import numpy as np

    a = np.arange(nbytes // 8, dtype=np.int64)
    a += move
    return a


def _cupy_array(nbytes: int, move: int) -> Any:
    import cupy

    a = cupy.arange(nbytes // 8, dtype=cupy.int64)
    a += move
    cupy.cuda.get_current_stream().synchronize()
    return a


def _rows(obj: Any) -> int:
    """On worker B: touches nothing but the object's length."""
    return int(obj.num_rows) if hasattr(obj, "num_rows") else len(obj)


def _array_check(a: Any) -> tuple[int, int, int, int]:
    return len(a), int(a[0]), int(a[-1]), int(a.sum())


def _table_equals(dev: Any, host: Any) -> bool:
    from cuarrow import cuda

    return isinstance(dev, cuda.DeviceTable) and dev.to_host().equals(host)


def _incoming(key: Any, dask_worker: Any = None) -> list[float]:
    """On worker B: the durations Dask recorded for fetches of `key`."""
    log_ = getattr(dask_worker, "transfer_incoming_log", None)
    if log_ is None:
        return []
    return [float(e["duration"]) for e in log_ if key in e.get("keys", {})]


def _nothing() -> int:
    return 0


# ---- the client ----------------------------------------------------------------------------


def raw_d2d(ctx: Any, nbytes: int, repeat: int = 5) -> dict[str, Any]:
    """A device-to-device copy of nbytes in this process: cudaMemcpy through
    CuPy's runtime bindings when CuPy is there (as bench.py's raw D2D), else
    cuarrow's copy_from_device; the first call untimed."""
    try:
        import cupy

        src, dst = cupy.zeros(nbytes, dtype=cupy.uint8), cupy.empty(nbytes, dtype=cupy.uint8)
        rt = cupy.cuda.runtime
        kind = getattr(rt, "memcpyDeviceToDevice", 3)

        def copy() -> None:
            rt.memcpy(dst.data.ptr, src.data.ptr, nbytes, kind)
            rt.streamSynchronize(0)

        how = "cudaMemcpy D2D (CuPy's runtime bindings)"
    except ImportError:
        dsrc, ddst = ctx.new_buffer(nbytes), ctx.new_buffer(nbytes)

        def copy() -> None:
            ddst.copy_from_device(dsrc)

        how = "cuarrow copy_from_device"
    samples = bench.time_calls(copy, repeat)
    out = summary(samples)
    out.update(how=how, nbytes=nbytes, gbps=nbytes / out["median_s"] / 1e9)
    if how.startswith("cudaMemcpy"):
        del src, dst
        cupy.get_default_memory_pool().free_all_blocks()  # the client keeps no 2 GiB
    return out


def _module_version(name: str, attr: str = "__version__") -> str | None:
    """A module's version attribute (the RAPIDS wheels' distribution names
    carry a CUDA suffix: distributed-ucxx-cu13)."""
    try:
        import importlib

        return str(getattr(importlib.import_module(name), attr))
    except Exception:
        return None


def summary(samples: list[float]) -> dict[str, Any]:
    return {
        "n": len(samples),
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "max_s": max(samples),
        "samples_s": samples,
    }


def wait_released(client: Any, keys: list[Any], timeout: float = 30.0) -> None:
    """Until no worker holds `keys` (the next move starts with the memory back)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        held = client.who_has(keys)
        if not any(held.get(k) for k in keys):
            return
        time.sleep(0.05)
    log(f"  (keys still held after {timeout:.0f} s: {keys})")


def move_once(client: Any, distributed: Any, kind: str, make: Any, a: str, b: str) -> dict[str, Any]:
    """Makes a fresh object on A with `make()` (a future), moves it to B,
    returns the timings and the futures (released by the caller)."""
    src = make()
    distributed.wait([src], timeout=WAIT_S)
    if src.status != "finished":
        src.result(timeout=WAIT_S)  # raises the worker's error
    start = time.perf_counter()
    rows = client.submit(_rows, src, workers=[b], allow_other_workers=False, pure=False)
    n = rows.result(timeout=WAIT_S)
    task_s = time.perf_counter() - start
    durations = client.run(_incoming, src.key, workers=[b])[b]
    return {
        "kind": kind,
        "rows": n,
        "task_s": task_s,
        "transfer_s": durations[-1] if durations else None,
        "futures": [src, rows],
    }


def render_summary(meta: dict[str, Any], res: dict[str, Any]) -> str:
    m = meta["machine"]
    o = meta["options"]
    out = [
        f"# cuarrow Dask benchmark, {meta['date_utc']} on {m['hostname']}",
        "",
        f"- machine: {m.get('gpu_name') or '?'}; {m.get('nvidia_smi') or 'nvidia-smi not available'}; "
        f"{m['cpu_count']} CPUs ({m.get('cpu_model', '?')}), {m.get('mem_total', '?')} RAM; Python {m['python']}",
        f"- code: {meta.get('git_commit') or 'commit unknown'}; wall time {meta.get('wall_s')} s",
        f"- command: `{meta['command']}`",
        f"- cluster: LocalCluster, 2 worker processes x 1 thread, protocol {o['protocol']}, "
        f"comm compression {meta['comm_compression']}; {o['repeat']} timed moves of each kind after a first one",
        f"- table: {res['table']['rows']} rows, {res['table']['columns']} columns "
        f"({res['table']['types']}), {fmt_size(res['table']['nbytes'])} of Arrow buffers; "
        f"array: int64, {fmt_size(res['array']['nbytes'])}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items() if v),
    ]
    if o["protocol"] != "tcp":
        ucx_env = meta.get("ucx_env") or {}
        out.append(
            "- UCX settings: "
            + (", ".join(f"{k}={v}" for k, v in sorted(ucx_env.items())) or "none set (UCX chose its transports)")
        )
    if meta.get("emulated"):
        out.append("- **EMULATION: the figures are host memcpy, meaningless as performance figures**")
    out += [
        "",
        "| moved A -> B | bytes | transfer, median (min-max) | GB/s | task, median | first move: transfer / task |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for kind in res["kinds"]:
        r = res[kind]
        t, k = r.get("transfer"), r["task"]
        tr = f"{t['median_s'] * 1e3:.1f} ms ({t['min_s'] * 1e3:.1f}-{t['max_s'] * 1e3:.1f})" if t else "n/a"
        gbps = f"{r['nbytes'] / t['median_s'] / 1e9:.2f}" if t else "n/a"
        first_t = f"{r['first']['transfer_s'] * 1e3:.1f}" if r["first"]["transfer_s"] is not None else "n/a"
        first = f"{first_t} / {r['first']['task_s'] * 1e3:.1f} ms"
        name = NAMES[kind]
        out.append(f"| {name} | {fmt_size(r['nbytes'])} | {tr} | {gbps} | {k['median_s'] * 1e3:.1f} ms | {first} |")
    out.append(f"| empty task on B | | | | {res['empty_task']['median_s'] * 1e3:.1f} ms | |")
    d2d = res.get("raw_d2d")
    if d2d:
        out.append(
            f"| raw D2D copy in one process ({d2d['how']}) | {fmt_size(d2d['nbytes'])} | "
            f"{d2d['median_s'] * 1e3:.2f} ms ({d2d['min_s'] * 1e3:.2f}-{d2d['max_s'] * 1e3:.2f}) | "
            f"{d2d['gbps']:.1f} | | |"
        )
    v = res["verdict"]
    met = {True: "met", False: "**MISSED**", None: "not judged"}[v["met"]]
    out.append("")
    if o["protocol"] == "tcp":
        out.append(
            f"Target (issue 15): DeviceTable time <= {TARGET_RATIO} x the NumPy array's, over {o['protocol']}: "
            f"{v['ratio']:.2f} x ({v['measure']} medians): {met}."
        )
    else:
        out.append(
            f"Target (issue 15): DeviceTable throughput over {o['protocol']} >= {TARGET_UCX_D2D} x the raw "
            f"device-to-device copy's: {v['ratio']:.3g} x ({v['measure']} medians): {met}."
        )
        cp = res.get("cupy", {}).get("transfer")
        if d2d and cp:
            out.append(
                f"The comm's own ceiling: a CuPy array of {fmt_size(res['cupy']['nbytes'])} moves at "
                f"{d2d['median_s'] / cp['median_s']:.3g} x the raw copy's throughput."
            )
    out.append(
        f"Table / NumPy array: {res['array_ratio']:.2f} x ({v['measure']} medians); task-time ratio: "
        f"{res['task_ratio']:.2f} x.  Data: {'checked, correct' if res['correct'] else '**WRONG**'}."
    )
    if v.get("note"):
        out.append(v["note"])
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="64 MiB and 3 moves (a self-check; runs on the emulation)")
    p.add_argument("--bytes", type=parse_size, help="size of the table and of the array (default 1G; quick 64M)")
    p.add_argument("--repeat", type=int, help="timed moves of each kind after the first (default 5; quick 3)")
    p.add_argument(
        "--protocol",
        default="tcp",
        choices=["tcp", "ucx"],
        help="the cluster's comm (ucx: distributed-ucxx and a real GPU; UCX_TLS etc. from the environment)",
    )
    p.add_argument("--out", type=Path, help="folder for results.json and summary.md")
    a = p.parse_args(argv)
    nbytes = a.bytes or (64 * MiB if a.quick else GiB)
    repeat = a.repeat or (3 if a.quick else 5)
    t_begin = time.time()
    now = _dt.datetime.now(_dt.timezone.utc)

    import dask
    import distributed
    import numpy as np
    import pyarrow as pa

    from cuarrow import cuda

    why = cuda.use_emulation_if_no_gpu()
    emulated = cuda.is_emulated()
    kinds = ["table", "array"]
    if a.protocol == "ucx":
        try:
            import distributed_ucxx  # noqa: F401 - registers the comm
        except ImportError as e:
            log(f"dask_bench: --protocol ucx needs distributed-ucxx ({e}); scripts/fetch-gpu-ucx.sh fetches it")
            return 2
        if emulated:
            log(
                "dask_bench: --protocol ucx needs a real GPU: UCX receives device frames into memory RMM "
                "allocates, which the host emulation of the driver cannot give (use --protocol tcp there)"
            )
            return 2
        try:
            import cupy  # noqa: F401

            kinds.append("cupy")
        except ImportError:
            log("(no CuPy here: no CuPy array moved for comparison)")
        if "UCX_TLS" not in os.environ:
            log("(UCX_TLS not set: UCX chooses its transports)")
    if emulated:
        # the workers are other processes: they follow the environment
        os.environ["CUARROW_CUDA_DRIVER"] = "emulated"
        log(bench.EMULATION_BANNER)
        log(f"    (emulation selected because: {why or 'CUARROW_CUDA_DRIVER'})")
    ctx = cuda.Context(0)

    res: dict[str, Any] = {"kinds": kinds}
    if a.protocol != "tcp":
        res["raw_d2d"] = raw_d2d(ctx, nbytes)
        d2d = res["raw_d2d"]
        log(f"raw D2D copy of {fmt_size(nbytes)}: {d2d['median_s'] * 1e3:.2f} ms, {d2d['gbps']:.1f} GB/s")

    correct = True
    with (
        dask.config.set({"distributed.comm.compression": False}),
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            protocol=a.protocol,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        a_addr, b_addr = sorted(client.scheduler_info()["workers"])
        log(f"cluster up: A {a_addr}, B {b_addr}  [{time.time() - t_begin:.1f} s]")
        host = client.submit(_host_table, nbytes, workers=[a_addr], allow_other_workers=False, pure=False)
        shape = client.submit(
            lambda t: (t.num_rows, t.num_columns, t.nbytes, sorted({str(f.type) for f in t.schema})),
            host,
            workers=[a_addr],
            pure=False,
        ).result(timeout=WAIT_S)
        took = time.time() - t_begin
        log(f"host table on A: {shape[0]} rows, {shape[1]} columns, {fmt_size(shape[2])}  [{took:.1f} s]")
        res["table"] = {"rows": shape[0], "columns": shape[1], "nbytes": shape[2], "types": ", ".join(shape[3])}
        for kind in kinds[1:]:
            res[kind] = {"nbytes": nbytes // 8 * 8}
        makers = {"table": _to_device, "array": _array, "cupy": _cupy_array}

        def make(kind: str, move: int) -> Any:
            arg = host if kind == "table" else nbytes
            return client.submit(makers[kind], arg, move, workers=[a_addr], allow_other_workers=False, pure=False)

        moves: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        last_table = None
        for move in range(repeat + 1):
            for kind in kinds:
                m = move_once(client, distributed, kind, functools.partial(make, kind, move), a_addr, b_addr)
                src, rows = m.pop("futures")
                if kind != "table":
                    n = nbytes // 8
                    got = client.submit(_array_check, src, workers=[b_addr], pure=False).result(timeout=WAIT_S)
                    want = (n, move, n - 1 + move, n * (n - 1) // 2 + n * move)
                    if got != want:
                        log(f"  WRONG {NAMES[kind]} on B: {got}, expected {want}")
                        correct = False
                elif m["rows"] != shape[0]:
                    log(f"  WRONG table on B: {m['rows']} rows, expected {shape[0]}")
                    correct = False
                tr = m["transfer_s"]
                log(
                    f"[{time.time() - t_begin:6.1f}s] {'first' if move == 0 else f'move {move}'} {kind}: "
                    f"transfer {'n/a' if tr is None else f'{tr * 1e3:.1f} ms'}, task {m['task_s'] * 1e3:.1f} ms"
                )
                moves[kind].append(m)
                if kind == "table" and move == repeat:
                    last_table = src  # compared with the host table below
                    continue
                keys = [src.key, rows.key]
                del src, rows
                wait_released(client, keys)
        # B fetches the host table from A for this (untimed)
        same = client.submit(_table_equals, last_table, host, workers=[b_addr], pure=False).result(timeout=WAIT_S)
        log(f"last table on B equals the host table: {same}")
        correct = correct and bool(same)
        empty = []
        for _ in range(5):
            start = time.perf_counter()
            client.submit(_nothing, workers=[b_addr], pure=False).result(timeout=WAIT_S)
            empty.append(time.perf_counter() - start)
        res["empty_task"] = summary(empty)
        comm_compression = dask.config.get("distributed.comm.compression")

    for kind in kinds:
        first, timed = moves[kind][0], moves[kind][1:]
        res[kind]["first"] = {"transfer_s": first["transfer_s"], "task_s": first["task_s"]}
        res[kind]["task"] = summary([m["task_s"] for m in timed])
        transfers = [m["transfer_s"] for m in timed]
        res[kind]["transfer"] = summary(transfers) if None not in transfers else None
    use = "transfer" if all(res[k]["transfer"] for k in kinds) else "task"
    res["array_ratio"] = res["table"][use]["median_s"] / res["array"][use]["median_s"]
    res["task_ratio"] = res["table"]["task"]["median_s"] / res["array"]["task"]["median_s"]
    if a.protocol == "tcp":
        ratio = res["array_ratio"]
        verdict: dict[str, Any] = {"ratio": ratio, "target": TARGET_RATIO, "measure": use, "met": ratio <= TARGET_RATIO}
    else:
        # throughput of the table's move over the raw copy's: bytes / median time each
        table_gbps = res["table"]["nbytes"] / res["table"][use]["median_s"] / 1e9
        ratio = table_gbps / res["raw_d2d"]["gbps"]
        verdict = {"ratio": ratio, "target": TARGET_UCX_D2D, "measure": use, "met": ratio >= TARGET_UCX_D2D}
    if use == "task":
        verdict["note"] = "Dask's transfer log was not available: the ratio is of task times."
    if emulated:
        verdict["met"] = None
        verdict["note"] = "Not judged: the emulation."
    if not correct:
        verdict["met"] = False  # a fast wrong answer meets nothing
        verdict["note"] = "Missed: B received wrong data."
    res["verdict"] = verdict
    res["correct"] = correct

    meta = {
        "date_utc": now.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "git_commit": os.environ.get("CUARROW_COMMIT") or bench.git_commit(Path(BENCH_DIR).parent),
        "emulated": emulated,
        "machine": bench.machine_info(ctx),
        "versions": {
            "cuarrow": bench._version("cuarrow"),
            "dask": dask.__version__,
            "distributed": distributed.__version__,
            "numpy": np.__version__,
            "pyarrow": pa.__version__,
            "tornado": bench._version("tornado"),
            "distributed-ucxx": _module_version("distributed_ucxx") if a.protocol == "ucx" else None,
            "ucxx": _module_version("ucxx") if a.protocol == "ucx" else None,
            "UCX": _module_version("ucxx", "__ucx_version__") if a.protocol == "ucx" else None,
            "cupy": _module_version("cupy") if "cupy" in kinds else None,
        },
        "options": {"quick": a.quick, "bytes": nbytes, "repeat": repeat, "protocol": a.protocol},
        "ucx_env": {k: v for k, v in os.environ.items() if k.startswith(("UCX_", "UCXPY_"))},
        "comm_compression": comm_compression,
        "wall_s": round(time.time() - t_begin, 1),
    }
    text = render_summary(meta, res)
    print(text)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "results.json").write_text(json.dumps({"meta": meta, "results": res}, indent=2) + "\n")
        (a.out / "summary.md").write_text(text)
        log(f"wrote {a.out}/results.json and summary.md")
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
