#!/usr/bin/env python3
"""Checks that Dask's UCX comm works here before anything is measured over it
(scripts/gpu-suite.sh ucx; runs here too, as far as a machine without a GPU
lets it).

    python3 scripts/ucx-check.py [UCX_SITE]      # UCX_SITE default build/ucx-site
    python3 scripts/ucx-check.py --proto-summary LOG

The second form reads the output of a run with UCX_PROTO_INFO=y (UCX's
tables of the protocols it chose, printed by every process) and prints each
distinct table about device memory once: which transports move device
frames (cuda_ipc, or a staged pipeline through cuda_copy).

1. versions and locations of what the UCX comm stands on (distributed-ucxx,
   ucxx and its UCX, rmm, dask, distributed, numpy, cuda-core,
   cuda-bindings, pynvml, cupy, cuarrow) and the UCX_* settings;
2. every requirement of the distributions in UCX_SITE (their METADATA,
   extras left out) met by what this Python imports; rapids-dask-dependency
   is left out on purpose (it pins an older Dask than CI's) and only named;
3. Dask's "ucx" scheme resolves to distributed-ucxx's backend;
4. a LocalCluster of two worker processes over UCX starts and moves a NumPy
   array from one worker to the other (host memory: runs without a GPU),
   then, on a real GPU, a DeviceTable (checked equal on arrival, and that it
   arrived as a cuarrow DeviceTable) and, when CuPy is there, a CuPy array.

Exits 1 when a step fails (saying which and why), 0 otherwise; on the
emulation the device moves are reported as not run.  Every step is bounded
(120 s for a result); the suite runs it under `timeout` as well.
"""

from __future__ import annotations

import email.parser
import importlib
import importlib.metadata
import logging
import os
import re
import sys
import time
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.version import Version
except ImportError:  # pip carries its own copy
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.version import Version  # type: ignore[no-redef]

LEFT_OUT = {"rapids-dask-dependency": "pins dask/distributed to an older release than CI's; not installed on purpose"}
WAIT_S = 120
DISTRIBUTIONS = {"pynvml": "nvidia-ml-py"}


def say(msg: str) -> None:
    print(msg, flush=True)


def norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def module_info(name: str, attr: str = "__version__") -> str:
    try:
        m = importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - any import failure is the answer
        return f"NOT IMPORTABLE ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    where = getattr(m, "__file__", None) or "?"
    version = getattr(m, attr, None)
    if version is None and name in DISTRIBUTIONS:  # a module without a version attribute
        version = importlib.metadata.version(DISTRIBUTIONS[name])
    return f"{version or '?'}  ({Path(where).parent if where != '?' else where})"


def requirements_met(site: Path) -> list[str]:
    problems = []
    for meta in sorted(site.glob("*.dist-info/METADATA")):
        msg = email.parser.Parser().parsestr(meta.read_text(encoding="utf-8"))
        who = f"{msg['Name']} {msg['Version']}"
        for text in msg.get_all("Requires-Dist") or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            if norm(req.name) in LEFT_OUT:
                say(f"  {who}: {req} -- left out: {LEFT_OUT[norm(req.name)]}")
                continue
            try:
                have = importlib.metadata.version(req.name)
            except importlib.metadata.PackageNotFoundError:
                problems.append(f"{who} needs {req}: not installed")
                continue
            ok = req.specifier.contains(Version(have), prereleases=True)
            if not ok:
                problems.append(f"{who} needs {req}: this Python has {have}")
            say(f"  {who}: {req} -- {have} {'ok' if ok else 'NOT MET'}")
    return problems


# ---- run on the workers ---------------------------------------------------------------------


def _numpy_array(n: int):
    import numpy as np

    return np.arange(n, dtype=np.int64)


def _check_numpy(a) -> tuple[int, int]:
    return len(a), int(a.sum())


def _device_table():
    import pyarrow as pa

    from cuarrow import cuda

    host = pa.table({"x": pa.array(range(1 << 20), pa.int64()), "s": [str(i % 97) for i in range(1 << 20)]})
    return cuda.to_device(host, cuda.Context(0))


def _table_arrived(t) -> tuple[str, bool]:
    import pyarrow as pa

    host = pa.table({"x": pa.array(range(1 << 20), pa.int64()), "s": [str(i % 97) for i in range(1 << 20)]})
    return type(t).__name__, bool(t.to_host().equals(host))


def _cupy_array(n: int):
    import cupy

    return cupy.arange(n, dtype=cupy.int64)


def _ucx_tls() -> str:
    import ucxx

    try:
        return str(ucxx.get_config().get("TLS"))
    except Exception as e:  # noqa: BLE001 - only reported
        return f"? ({e})"


# ---- the client -----------------------------------------------------------------------------


def cluster_check(real_gpu: bool) -> list[str]:
    import distributed

    problems = []
    t0 = time.time()
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            protocol="ucx",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        a, b = sorted(client.scheduler_info()["workers"])
        tls = client.run(_ucx_tls, workers=[b])[b]
        say(f"cluster up in {time.time() - t0:.1f} s: A {a}, B {b}; UCX TLS on B: {tls}")
        n = 1 << 24  # 128 MiB
        t = time.time()
        src = client.submit(_numpy_array, n, workers=[a], pure=False)
        got = client.submit(_check_numpy, src, workers=[b], pure=False).result(timeout=WAIT_S)
        ok = got == (n, n * (n - 1) // 2)
        say(f"NumPy array, 128 MiB, A -> B: {'ok' if ok else f'WRONG {got}'} ({time.time() - t:.2f} s with its making)")
        if not ok:
            problems.append("a NumPy array moved over UCX arrived wrong")
        if not real_gpu:
            say("DeviceTable and CuPy moves: NOT RUN (no real GPU: RMM cannot allocate the device frames UCX receives)")
            return problems
        t = time.time()
        table = client.submit(_device_table, workers=[a], pure=False)
        kind, same = client.submit(_table_arrived, table, workers=[b], pure=False).result(timeout=WAIT_S)
        ok = kind == "DeviceTable" and same
        verdict = "ok" if ok else f"WRONG: {kind}, equal {same}"
        say(f"DeviceTable, 1 Mi rows, A -> B: {verdict} ({time.time() - t:.2f} s)")
        if not ok:
            problems.append(f"a DeviceTable moved over UCX arrived as {kind}, equal {same}")
        try:
            importlib.import_module("cupy")
        except ImportError:
            say("CuPy array move: NOT RUN (no CuPy)")
            return problems
        t = time.time()
        src = client.submit(_cupy_array, n, workers=[a], pure=False)
        got = client.submit(_check_numpy, src, workers=[b], pure=False).result(timeout=WAIT_S)
        ok = got == (n, n * (n - 1) // 2)
        say(f"CuPy array, 128 MiB, A -> B: {'ok' if ok else f'WRONG {got}'} ({time.time() - t:.2f} s with its making)")
        if not ok:
            problems.append("a CuPy array moved over UCX arrived wrong")
    return problems


def proto_summary(log: Path) -> int:
    """The distinct UCX_PROTO_INFO tables about device memory in `log`."""
    prefix = re.compile(r"^\[[0-9.]+\] \[([^\]]*)\]\s*")
    tables: dict[tuple[str, str], tuple[list[str], set[str]]] = {}
    current: dict[str, tuple[tuple[str, str], list[str]]] = {}  # process -> (title, rows) being read
    for raw in log.read_text(errors="replace").splitlines():
        m = prefix.match(raw)
        if not m:
            continue
        proc, line = m.group(1), raw[m.end() :].strip()
        cells = [" ".join(c.split()) for c in line.strip("|").split("|")]
        if line.startswith("| ucp_context") and len(cells) >= 2:
            where = " ".join(w for w in cells[0].split() if not w.startswith(("ucp_context", "cfg#")))
            current[proc] = ((where, cells[1]), [])
        elif line.startswith("|") and proc in current:
            current[proc][1].append(" | ".join(c for c in cells if c))
        elif line.startswith("+") and proc in current and current[proc][1]:
            title, rows = current.pop(proc)
            tables.setdefault(title, (rows, set()))[1].add(proc)
    shown = 0
    for (where, what), (rows, procs) in sorted(tables.items()):
        if "cuda" not in what:
            continue
        shown += 1
        say(f"{where}: {what} (in {len(procs)} process{'es' if len(procs) > 1 else ''})")
        for r in rows:
            say(f"    {r}")
    if not shown:
        say(f"no UCX_PROTO_INFO table about device memory in {log} ({len(tables)} tables in all)")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--proto-summary"] and len(argv) == 2:
        return proto_summary(Path(argv[1]))
    site = Path(argv[0] if argv else "build/ucx-site")
    if not site.is_dir():
        say(f"ucx-check: no {site} (make it with scripts/fetch-gpu-ucx.sh)")
        return 1
    given = {k: v for k, v in os.environ.items() if k.startswith("UCX")}
    say(f"Python {sys.version.split()[0]} ({sys.executable})")
    say("  UCX settings given: " + (", ".join(f"{k}={v}" for k, v in sorted(given.items())) or "none"))
    for name, attr in [
        ("distributed_ucxx", "__version__"),
        ("ucxx", "__version__"),
        ("ucxx", "__ucx_version__"),
        ("rmm", "__version__"),
        ("dask", "__version__"),
        ("distributed", "__version__"),
        ("numpy", "__version__"),
        ("cuda.core", "__version__"),
        ("cuda.bindings", "__version__"),
        ("pynvml", "__version__"),
        ("cupy", "__version__"),
        ("cuarrow", "__version__"),
    ]:
        say(f"  {name}{'' if attr == '__version__' else ' ' + attr}: {module_info(name, attr)}")
    added = {k: v for k, v in os.environ.items() if k.startswith("UCX") and k not in given}
    say("  UCX settings ucxx adds on import: " + (", ".join(f"{k}={v}" for k, v in sorted(added.items())) or "none"))

    say("Requirements of the UCX site's distributions:")
    problems = requirements_met(site)

    from distributed.comm.registry import get_backend

    try:
        backend = get_backend("ucx")
        name = f"{type(backend).__module__}.{type(backend).__name__}"
        say(f"Dask's 'ucx' scheme: {name}")
        if not name.startswith("distributed_ucxx"):
            problems.append(f"Dask's 'ucx' scheme is {name}, not distributed-ucxx's (is it importable?)")
    except Exception as e:  # noqa: BLE001 - reported
        problems.append(f"Dask has no 'ucx' scheme: {e}")

    from cuarrow import cuda

    cuda.use_emulation_if_no_gpu()
    if cuda.is_emulated():
        os.environ["CUARROW_CUDA_DRIVER"] = "emulated"  # the workers follow
    if not problems:
        try:
            problems += cluster_check(real_gpu=not cuda.is_emulated())
        except Exception as e:  # noqa: BLE001 - reported
            problems.append(f"the UCX cluster failed: {type(e).__name__}: {e}")
    else:
        say("UCX cluster: NOT RUN (the problems below come first)")
    for p in problems:
        say(f"PROBLEM: {p}")
    say("ucx-check: " + ("FAILED" if problems else "passed"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
