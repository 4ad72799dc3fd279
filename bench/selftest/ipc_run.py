#!/usr/bin/env python3
"""Check ipc_bench.py end to end without a GPU: every case, every target.

Runs the IPC benchmark in this process, on cuarrow's host emulation of the
CUDA driver, at small sizes, with the host-memory CuPy of ``fakes/`` (for
the raw device-to-device reference) and, while cuarrow.ipc does not have
them yet, stand-ins for ``read_feather``, ``open_file(path)`` and
``write_feather`` made of pyarrow and ``cuda.to_device`` (printed when
used).  ``--cold`` runs with the page-cache drop pointed at a file of its
own: the cold cases' code runs, nothing is dropped.

    CUARROW_CUDA_DRIVER=emulated python3 bench/selftest/ipc_run.py [--keep DIR]

It fails if a case fails or reads back wrong data, a group or a target is
missing, or an output file is not written; then it runs again with a
``read_feather`` that returns a wrong column, and fails unless that run
reports the wrong data and exits non-zero (the check can catch a fast wrong
answer).  The figures are meaningless (host memcpy on both sides).  Never
put ``fakes/`` on a real run's path.
"""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ.setdefault("CUARROW_CUDA_DRIVER", "emulated")
sys.path.insert(0, str(HERE / "fakes"))
sys.path.insert(0, str(HERE.parent))

import bench  # noqa: E402 - found through the sys.path set above, beside the fakes
import ipc_bench  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.feather as feather  # noqa: E402

from cuarrow import cuda, ipc  # noqa: E402 - after the driver choice above


class StandInFileReader:
    """A stand-in for cuarrow.ipc.open_file(path): pyarrow reads, to_device moves."""

    read_path = "stand-in"

    def __init__(self, path):
        self.path = path

    def read_all(self):
        return cuda.to_device(feather.read_table(self.path))


def install_stand_ins(scratch: Path) -> list:
    """cuarrow.ipc's by-path API from pyarrow, where it is missing; the names installed."""
    installed = []
    if not hasattr(ipc, "read_feather"):
        ipc.read_feather = lambda path, columns=None: cuda.to_device(feather.read_table(path, columns=columns))
        installed.append("read_feather")
    if not hasattr(ipc, "write_feather"):
        ipc.write_feather = lambda table, path, compression=None: feather.write_feather(
            table.to_host(), path, compression=compression
        )
        installed.append("write_feather")
    probe = scratch / "probe.feather"
    feather.write_feather(pa.table({"a": [1]}), probe)
    try:
        ipc.open_file(probe)
    except TypeError:  # today's open_file reads device memory only
        real_open_file = ipc.open_file

        def open_file(source, *args, **kwargs):
            if isinstance(source, (str, os.PathLike)):
                return StandInFileReader(source)
            return real_open_file(source, *args, **kwargs)

        ipc.open_file = open_file
        installed.append("open_file(path)")
    return installed


def check(out: Path, rc: int) -> list:
    problems = []
    if rc != 0:
        problems.append(f"ipc_bench.main returned {rc}")
    data = json.loads((out / "results.json").read_text())
    results = data["results"]
    if data["errors"]:
        problems.append(f"failed cases: {data['errors']}")
    wrong = [f"{r['group']}: {r['name']}" for r in results if r["verified"] is False]
    if wrong:
        problems.append(f"wrong data: {wrong}")
    unchecked = [
        f"{r['group']}: {r['name']}" for r in results if r["impl"] in ("cuarrow", "os", "raw") and r["verified"] is None
    ]
    if unchecked:
        problems.append(f"results not checked: {unchecked}")
    groups = {r["group"] for r in results}
    missing = [g for g in ipc_bench.GROUP_ORDER if g not in groups]
    if missing:
        problems.append(f"no case in {missing}")
    for group, impls in {
        ipc_bench.G_READ: {"os", "pyarrow", "cuarrow"},
        ipc_bench.G_COLD: {"os", "cuarrow"},
        ipc_bench.G_STREAM: {"raw", "cuarrow"},
        ipc_bench.G_LZ4: {"host", "pyarrow", "cuarrow"},
        ipc_bench.G_ZSTD: {"host", "pyarrow", "cuarrow"},
        ipc_bench.G_WRITE["uncompressed"]: {"os", "pyarrow", "cuarrow"},
    }.items():
        got = {r["impl"] for r in results if r["group"] == group}
        if not impls <= got:
            problems.append(f"{group}: no case for {sorted(impls - got)}")
    if len([r for r in results if r["group"] == ipc_bench.G_MSG]) < 2:
        problems.append("read_record_batch at fewer than two sizes")
    opened = [r for r in results if r["label"] == ipc_bench.L_OPEN]
    if not opened or not opened[0].get("read_path"):
        problems.append("open_file(path).read_all(): no case, or no read_path recorded")
    judged = {v["target"] for v in data["targets"]}
    expected = {
        "≥ 0.95 × 16-thread pread",
        "≥ memory-mapped pyarrow + to_device",
        "≥ 0.9 × the storage (cold pread)",
        "≤ 0.15 × the full read's time",
        "≥ 16 GB/s",
        "≥ 10 GB/s",
        "< 1 ms at 1 GiB",
        "≥ 20 GB/s",
        "≥ 0.9 × raw D2D",
    }
    if expected - judged:
        problems.append(f"targets not judged: {sorted(expected - judged)}")
    if any(v["value"] in ("no reference figure", "no full read") for v in data["targets"]):
        problems.append("a target without its reference figure")
    if any(r.get("ratio_ref") is None for r in results if r["impl"] == "cuarrow"):
        problems.append("cuarrow rows without a '× ref' ratio")
    phases = data["meta"].get("write_phases", {})
    if set(phases) != {*ipc_bench.COMPRESSIONS, "device stream"} or any(
        p.get("batches", 0) < 1 for p in phases.values()
    ):
        problems.append(f"write phases not recorded for every write: {sorted(phases)}")
    if len(data["meta"]["table"]["file_bytes"]) != 3 or data["meta"]["table"]["columns"] != 17:
        problems.append("results.json does not describe the table and its three files")
    for name in ("results.txt", "summary.md"):
        if not (out / name).is_file():
            problems.append(f"{name} not written")
    try:
        import matplotlib  # noqa: F401

        if not (out / "results.png").is_file():
            problems.append("results.png not written")
    except ImportError:
        print("selftest: matplotlib missing, the plot is not checked")
    return problems


def main() -> int:
    args = sys.argv[1:]
    keep = Path(args[args.index("--keep") + 1]) if "--keep" in args else None
    out = keep or Path(tempfile.mkdtemp(prefix="cuarrow-ipc-bench-selftest-"))
    scratch = Path(tempfile.mkdtemp(prefix="cuarrow-ipc-bench-scratch-"))
    try:
        problems = run(out, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for p in problems:
        print("selftest PROBLEM:", p)
    n = len(json.loads((out / "results.json").read_text())["results"])
    print(f"selftest {'FAILED' if problems else 'passed'}: {n} cases, output in {out}")
    return 1 if problems else 0


def run(out: Path, scratch: Path) -> list:
    installed = install_stand_ins(scratch)
    if installed:
        print(f"selftest: cuarrow.ipc lacks {', '.join(installed)}: using pyarrow stand-ins", flush=True)
    real_load_peers = bench.load_peers
    bench.load_peers = lambda emulated, notes, **kw: real_load_peers(False, notes, **kw)  # the fakes run here
    ipc_bench.DROP_CACHES = str(scratch / "drop_caches")  # the cold path runs; nothing is dropped
    Path(ipc_bench.DROP_CACHES).touch()
    common = ["--quick", "--table-bytes", "4M", "--message-sizes", "1M,4M", "--dir", str(scratch), "--budget", "0.02"]
    rc = ipc_bench.main([*common, "--cold", "--out", str(out)])
    problems = check(out, rc)

    # The same with a read_feather that gets a column wrong: it must be caught.
    good = ipc.read_feather

    def wrong_read_feather(path, columns=None):
        table = _host_of(good(path, columns=columns))
        first = table.column(0)
        return cuda.to_device(table.set_column(0, table.field(0), first.take(pa.array(range(len(first) - 1, -1, -1)))))

    ipc.read_feather = wrong_read_feather
    try:
        bad_out = out / "wrong"
        rc_bad = ipc_bench.main([*common, "--no-plot", "--out", str(bad_out)])
        bad = json.loads((bad_out / "results.json").read_text())
        caught = [
            r["group"] for r in bad["results"] if r["label"].startswith("ipc.read_feather") and r["verified"] is False
        ]
        met = [v for v in bad["targets"] if v["name"].startswith("cuarrow ipc.read_feather") and v["met"] is not False]
        if rc_bad == 0 or ipc_bench.G_READ not in caught or met:
            problems.append(
                f"a read_feather with a wrong column was not reported (rc {rc_bad}, caught in {caught}, "
                f"targets still met or unjudged: {[v['target'] for v in met]})"
            )
    finally:
        ipc.read_feather = good

    return problems


def _host_of(table):
    return table.to_host() if hasattr(table, "to_host") else table


if __name__ == "__main__":
    sys.exit(main())
