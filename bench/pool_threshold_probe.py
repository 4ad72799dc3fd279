#!/usr/bin/env python3
"""Diagnostic: bench/bench.py's table section with the device's default
memory pool told to keep everything it frees (release threshold = max), and
the pool's reserved / used memory printed before and after.

cuarrow keeps 1/16 of the device cached in the default pool; when more than
that is reserved (in use or cached) at a synchronization, the driver hands
freed memory back and the next allocation maps fresh pages.  This probe
tells whether the benchmark's wide-table figures pay for that::

    PYTHONPATH=<installed cuarrow> python3 bench/pool_threshold_probe.py [--keep-all] -- <bench.py args>
"""

from __future__ import annotations

import sys
from pathlib import Path


def pool_figures(d, pool) -> str:
    out = []
    for name in ("RESERVED_MEM_CURRENT", "USED_MEM_CURRENT", "RELEASE_THRESHOLD"):
        attr = getattr(d.CUmemPool_attribute, f"CU_MEMPOOL_ATTR_{name}")
        err, value = d.cuMemPoolGetAttribute(pool, attr)
        out.append(f"{name.lower()} {int(value) / 2**30:.2f} GiB")
    return ", ".join(out)


def watch_cases(bench, d, pool) -> None:
    """Wrap bench.measure: cuarrow cases of 64 MiB or more report the pool's
    reserved memory around each of their calls."""
    attr = d.CUmemPool_attribute.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT

    def reserved() -> int:
        return int(d.cuMemPoolGetAttribute(pool, attr)[1])

    measure = bench.measure

    def watched(case, timing):
        if case.impl != "cuarrow" or case.nbytes < 64 * bench.MiB:
            return measure(case, timing)
        fn = case.fn
        around = []

        def wrapped():
            before = reserved()
            result = fn()
            around.append((before, reserved()))
            return result

        case.fn = wrapped
        try:
            return measure(case, timing)
        finally:
            case.fn = fn
            grew = sum(1 for b, a in around if a > b)
            shrank = sum(1 for b, a in around if a < b)
            lo = min(min(x) for x in around) / 2**30
            hi = max(max(x) for x in around) / 2**30
            print(
                f"pool during {case.group} {case.size_label} cuarrow {case.label}: {len(around)} calls, "
                f"grew in {grew}, shrank in {shrank}; reserved {lo:.2f}-{hi:.2f} GiB",
                flush=True,
            )

    bench.measure = watched


def main() -> int:
    argv = sys.argv[1:]
    keep_all = "--keep-all" in argv
    watch = "--watch" in argv
    bench_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    from cuda.bindings import driver as d

    d.cuInit(0)
    _, dev = d.cuDeviceGet(0)
    _, pool = d.cuDeviceGetDefaultMemPool(dev)
    if keep_all:
        d.cuMemPoolSetAttribute(pool, d.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, d.cuuint64_t(2**64 - 1))
    print(f"pool before ({'keep all' if keep_all else 'as cuarrow sets it'}): {pool_figures(d, pool)}", flush=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench

    if watch:
        watch_cases(bench, d, pool)
    rc = bench.main(bench_args)
    print(f"pool after: {pool_figures(d, pool)}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
