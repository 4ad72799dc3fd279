"""The ``cuarrow`` command (also ``python -m cuarrow``).

``cuarrow info``          the driver, each device, the transfer settings and
                          which sharing and storage paths this machine can use
``cuarrow info --json``   the same as one JSON object
``cuarrow bench --quick`` about 20 seconds measuring this machine's link:
                          cuarrow's copies beside a raw cudaMemcpy (CuPy)
``cuarrow bench``         the full benchmark, bench/bench.py of the source tree
``cuarrow demo``          the Arrow "CUDA Integration" page (cuarrow.demo)

The driver is the one ``CUARROW_CUDA_DRIVER`` names (a path, or ``emulated``
for cuarrow's host emulation), else the real one (libcuda.so.1);
``--emulated`` selects the emulation.  A failure (no driver, no device) is
one line on stderr and exit status 1; a wrong command line, status 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import cuarrow

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

_PROG = "cuarrow"


class _Failure(Exception):
    """A failure said in one line (no traceback)."""


# ---------------------------------------------------------------- formatting


def _fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"


def _fmt_time(seconds: float) -> str:
    return f"{seconds * 1e6:6.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:6.2f} ms"


def _parse_size(text: str) -> int:
    """``64M``, ``4K``, ``1G``, ``4`` (bytes; K/M/G are powers of 1024)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": KiB, "M": MiB, "G": GiB}.get(t[-1:], 1)
    if scale != 1:
        t = t[:-1]
    try:
        n = int(float(t) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4, 4K, 64M, 1G)") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"a size must be at least 1 byte, not {text!r}")
    return n


def _positive_seconds(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not s > 0:
        raise argparse.ArgumentTypeError(f"seconds must be positive, not {text!r}")
    return s


def _cuda_version(encoded: int) -> str:
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text


# ---------------------------------------------------------------- the driver


def _select_driver(emulated: bool) -> None:
    from cuarrow import cuda

    if emulated:
        cuda.use_emulation()


def _driver() -> dict[str, Any]:
    """The loaded driver and its devices; _Failure when there is none."""
    from cuarrow import cuda

    chosen = os.environ.get("CUARROW_CUDA_DRIVER", "")
    try:
        info = cuda.driver_info()
    except (cuda.CudaError, OSError, RuntimeError) as e:
        hint = "" if chosen else " (no GPU? --emulated runs on cuarrow's host emulation of the driver)"
        raise _Failure(f"no usable CUDA driver: {_one_line(e)}{hint}") from None
    if info["devices"] == 0:
        raise _Failure(f"no CUDA device: the driver {info['path']} reports none")
    return dict(info)


# ---------------------------------------------------------------- info

_PCIE_GENERATION = {"2.5": 1, "5.0": 2, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6, "128.0": 7}


def _pcie_link(bus_id: str) -> dict[str, Any] | None:
    """The PCIe link of the device at `bus_id` from Linux's sysfs (the CUDA
    driver does not report it): current and maximum generation and width."""
    # The driver spells the bus id with an 8-digit domain on some systems.
    domain, _, rest = bus_id.lower().partition(":")
    path = Path("/sys/bus/pci/devices") / f"{domain[-4:].rjust(4, '0')}:{rest}"

    def read(name: str) -> str | None:
        try:
            return (path / name).read_text().strip()
        except OSError:
            return None

    def generation(speed: str | None) -> int | None:
        if not speed:
            return None
        number = speed.split()[0]
        return _PCIE_GENERATION.get(number if "." in number else number + ".0")

    def width(text: str | None) -> int | None:
        return int(text) if text and text.isdigit() else None

    speed, max_speed = read("current_link_speed"), read("max_link_speed")
    if speed is None:
        return None
    return {
        "generation": generation(speed),
        "width": width(read("current_link_width")),
        "max_generation": generation(max_speed),
        "max_width": width(read("max_link_width")),
        "speed": speed,
    }


def _try(fn: Callable[[], Any]) -> tuple[bool, str]:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the answer is the reason
        return False, _one_line(e)
    return True, ""


def _sharing(ordinal: int, pools_supported: bool) -> dict[str, Any]:
    """Whether CUDA IPC (legacy handles) and pool IPC work on device `ordinal`:
    each tried on a small buffer (export only; opening needs another process)."""
    from cuarrow import cuda

    ctx = cuda.Context(ordinal)
    buf = ctx.new_buffer(256)
    legacy, legacy_why = _try(lambda: buf.export_for_ipc().serialize())
    if pools_supported:
        pool, pool_why = _try(lambda: buf.share(memory="pool").release())
    else:
        pool, pool_why = False, "the device or driver has no memory pools"
    return {
        "cuda_ipc": {"usable": legacy, "reason": legacy_why},
        "pool_ipc": {"usable": pool, "reason": pool_why},
    }


def _gather_info() -> dict[str, Any]:
    from cuarrow import _cuarrow as lib
    from cuarrow import cuda

    drv = _driver()
    emulated = bool(drv["emulated"])
    devices = []
    for ordinal in range(drv["devices"]):
        p = dict(lib.get_device_properties(ordinal))
        link = None if emulated else _pcie_link(p["pci_bus_id"])
        device = {
            "ordinal": ordinal,
            "name": p["name"],
            "total_memory": p["total_memory"],
            "compute_capability": ".".join(str(v) for v in p["compute_capability"]),
            "pci_bus_id": p["pci_bus_id"],
            "pcie": link,
            "memory_pools_supported": bool(p["memory_pools_supported"]),
            "unified_addressing": bool(p["unified_addressing"]),
        }
        device.update(_sharing(ordinal, device["memory_pools_supported"]))
        device["gather_kernel"] = lib.Context.get(ordinal).gather_status()
        devices.append(device)
    gds = dict(lib.gds_status())
    from cuarrow import ipc

    nvcomp = ipc.nvcomp_status()
    return {
        "cuarrow_version": cuarrow.__version__,
        "driver": {
            "path": drv["path"],
            "version": _cuda_version(drv["version"]),
            "emulated": emulated,
        },
        "devices": devices,
        "transfer_options": cuda.transfer_options(),
        "pinned_pool": cuda.pinned_pool_stats(),
        "gds": {
            "mode": gds["mode"],
            "usable": bool(gds["usable"]),
            "available": bool(gds["available"]),
            "compat_mode": bool(gds["compat_mode"]),
            "library": gds["library"],
            "reason": gds["reason"],
        },
        "nvcomp": nvcomp,
    }


def _yes_no(usable: bool, reason: str) -> str:
    return "yes" if usable else f"no ({reason})" if reason else "no"


def _print_info(info: dict[str, Any]) -> None:
    rows: list[tuple[str, str]] = []
    drv = info["driver"]
    rows.append(("cuarrow", info["cuarrow_version"]))
    if drv["emulated"]:
        rows.append(("driver", f"HOST EMULATION of the CUDA driver (no GPU is used), {drv['path']}"))
    else:
        rows.append(("driver", f"CUDA {drv['version']}, {drv['path']}"))
    for d in info["devices"]:
        rows.append((f"device {d['ordinal']}", f"{d['name']}, {_fmt_bytes(d['total_memory'])}"))
        rows.append(("  compute, bus", f"sm {d['compute_capability']}, {d['pci_bus_id']}"))
        link = d["pcie"]
        if link is None:
            pcie = "n/a (emulated device)" if drv["emulated"] else "unknown (not in /sys/bus/pci)"
        else:
            gen = f"Gen{link['generation']}" if link["generation"] else link["speed"]
            pcie = f"{gen} x{link['width']}"
            if (link["max_generation"], link["max_width"]) != (link["generation"], link["width"]):
                pcie += f" (max Gen{link['max_generation']} x{link['max_width']})"
        rows.append(("  PCIe", pcie))
        rows.append(("  CUDA IPC", _yes_no(d["cuda_ipc"]["usable"], d["cuda_ipc"]["reason"])))
        rows.append(("  pool IPC", _yes_no(d["pool_ipc"]["usable"], d["pool_ipc"]["reason"])))
        gather = d["gather_kernel"]
        rows.append(("  gather kernel", "yes" if gather == "ready" else _yes_no(False, gather)))
    t, pool = info["transfer_options"], info["pinned_pool"]
    rows.append(
        (
            "pinned pool",
            f"{_fmt_bytes(pool['pinned_bytes'])} held of {_fmt_bytes(t['pinned_pool_limit_bytes'])} limit",
        )
    )
    threshold = t["staging_threshold_bytes"]
    staging = (
        "off" if threshold == 0 else f"from {_fmt_bytes(threshold)}, chunks of {_fmt_bytes(t['staging_chunk_bytes'])}"
    )
    rows.append(("staging", staging))
    rows.append(("  threads", f"{t['staging_threads_to_device']} to device, {t['staging_threads']} to host"))
    g = info["gds"]
    if g["available"]:
        gds = f"yes ({g['library']}{', compatibility mode' if g['compat_mode'] else ''})"
    else:
        gds = f"no ({g['reason']})" if g["reason"] else "no"
    rows.append(("GPUDirect Storage", gds))
    n = info["nvcomp"]
    rows.append(
        (
            "nvCOMP (ZSTD on the GPU)",
            f"yes ({n['version']}, {n['library']})" if n["available"] else _yes_no(False, n["reason"]),
        )
    )
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


def _cmd_info(args: argparse.Namespace) -> int:
    info = _gather_info()
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        _print_info(info)
    return 0


# ---------------------------------------------------------------- bench


class _Progress:
    """A bar on a terminal (stderr), one plain line per step otherwise."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0
        self.tty = sys.stderr.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        if self.tty:
            width = 30
            filled = width * self.done // self.total
            bar = "#" * filled + "." * (width - filled)
            sys.stderr.write(f"\r[{bar}] {self.done}/{self.total} {label:<40.40}")
            if self.done == self.total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(f"bench: {self.done}/{self.total} {label}\n")
        sys.stderr.flush()


def _time_case(fn: Callable[[], Any], budget: float, max_calls: int = 100_000) -> list[float]:
    """Seconds of each call of `fn` (after one warm-up call), calling it until
    `budget` seconds have passed (at least 3 calls)."""
    fn()
    samples: list[float] = []
    end = time.perf_counter() + budget
    while len(samples) < 3 or (time.perf_counter() < end and len(samples) < max_calls):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e9)
    return samples


def _raw_reference(size: int, emulated: bool) -> tuple[Any, str]:
    """bench/bench.py's raw reference (cudaMemcpy through CuPy's runtime
    bindings, then a synchronization): (its copies, "") or (None, why not)."""
    if emulated:
        return None, "unavailable on the host emulation (CuPy needs a GPU)"
    try:
        cupy = importlib.import_module("cupy")
    except ImportError:
        return None, "unavailable: CuPy is not installed (pip install cupy-cuda12x or cupy-cuda13x)"
    try:
        import numpy as np

        rt = cupy.cuda.runtime
        h2d, d2h = getattr(rt, "memcpyHostToDevice", 1), getattr(rt, "memcpyDeviceToHost", 2)
        pinned_mem = cupy.cuda.alloc_pinned_memory(size)
        pinned = np.frombuffer(pinned_mem, dtype=np.uint8, count=size)
        pageable = np.ones(size, dtype=np.uint8)
        dev = cupy.empty(size, dtype=cupy.uint8)
        rt.deviceSynchronize()
    except Exception as e:  # noqa: BLE001 - the reference is optional
        return None, f"unavailable: CuPy failed ({_one_line(e)})"

    def copy(dst: int, src: int, n: int, kind: int) -> Callable[[], None]:
        def fn() -> None:
            rt.memcpy(dst, src, n, kind)
            rt.streamSynchronize(0)

        return fn

    d = dev.data.ptr
    keep = (pinned_mem, pinned, pageable, dev)  # alive while the copies run
    cases = {
        ("H2D", "pageable"): lambda n: copy(d, pageable.ctypes.data, n, h2d),
        ("H2D", "pinned"): lambda n: copy(d, pinned.ctypes.data, n, h2d),
        ("D2H", "pageable"): lambda n: copy(pageable.ctypes.data, d, n, d2h),
        ("D2H", "pinned"): lambda n: copy(pinned.ctypes.data, d, n, d2h),
    }
    return (cases, keep), ""


def _quick_bench(args: argparse.Namespace) -> int:
    import numpy as np

    from cuarrow import cuda

    drv = _driver()
    emulated = bool(drv["emulated"])
    size = args.size
    sizes = sorted({4, size}) if size > 4 else [size]
    ctx = cuda.Context(0)
    pageable_src = np.ones(size, dtype=np.uint8)
    pageable_dst = np.empty(size, dtype=np.uint8)
    pinned = cuda.new_host_buffer(size)
    dev = ctx.new_buffer(size)

    def cuarrow_case(direction: str, memory: str, n: int) -> Callable[[], Any]:
        d = dev.slice(0, n)
        if direction == "H2D":
            src: Any = pageable_src[:n] if memory == "pageable" else pinned.slice(0, n)
            return lambda: d.copy_from_host(src)
        dst: Any = pageable_dst[:n] if memory == "pageable" else pinned.slice(0, n)
        return lambda: d.copy_to_host(buf=dst)

    raw, raw_why = _raw_reference(size, emulated)
    kinds = [("H2D", "pageable"), ("H2D", "pinned"), ("D2H", "pageable"), ("D2H", "pinned")]
    plan: list[tuple[str, str, int, str, Callable[[], Any]]] = []
    for direction, memory in kinds:
        for n in sizes:
            plan.append((direction, memory, n, "cuarrow", cuarrow_case(direction, memory, n)))
            if raw is not None:
                plan.append((direction, memory, n, "raw", raw[0][(direction, memory)](n)))
    budget = args.seconds / len(plan)

    if emulated:
        print("EMULATED: the host emulation of the driver runs this; its figures are meaningless (no GPU, no link).")
    progress = _Progress(len(plan))
    results: dict[tuple[str, str, int, str], float] = {}
    for direction, memory, n, impl, fn in plan:
        samples = _time_case(fn, budget)
        results[(direction, memory, n, impl)] = statistics.median(samples)
        progress.step(f"{direction} {memory} {_fmt_bytes(n)} ({impl})")

    where = "host emulation" if emulated else f"GPU 0, {ctx.device_name}"
    print(f"cuarrow {cuarrow.__version__} on {where}: median of each case's calls (GB/s = 1e9 bytes/s)")
    header = f"{'copy':<22}{'size':>9}{'cuarrow':>22}{'raw cudaMemcpy':>22}"
    print(header)
    print("-" * len(header))
    for direction, memory in kinds:
        for n in sizes:
            cells = []
            for impl in ("cuarrow", "raw"):
                t = results.get((direction, memory, n, impl))
                if t is None:
                    cells.append("-")
                elif n < 64 * KiB:  # a latency: GB/s would read 0.00
                    cells.append(_fmt_time(t))
                else:
                    cells.append(f"{n / t / 1e9:7.2f} GB/s {_fmt_time(t)}")
            print(f"{direction + ' ' + memory:<22}{_fmt_bytes(n):>9}{cells[0]:>22}{cells[1]:>22}")
    if raw is None:
        print(f"raw reference {raw_why}")
    if emulated:
        print("EMULATED: figures above are meaningless (host memory copies, no GPU).")
    return 0


def _source_bench() -> Path | None:
    """bench/bench.py of the source tree this package runs from, if any."""
    candidate = Path(cuarrow.__file__).resolve().parents[2] / "bench" / "bench.py"
    return candidate if candidate.is_file() else None


def _cmd_bench(args: argparse.Namespace, rest: list[str]) -> int:
    if args.quick:
        if rest:
            raise _Failure(f"bench --quick takes no other arguments: {' '.join(rest)}")
        return _quick_bench(args)
    script = _source_bench()
    if script is None:
        raise _Failure(
            "the full benchmark is bench/bench.py of cuarrow's source tree, which is not here: run "
            "`python3 bench/bench.py` in a checkout of cuarrow (`cuarrow bench --quick` runs here)"
        )
    import subprocess

    return subprocess.call([sys.executable, str(script), *rest])


# ---------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="cuarrow: Apache Arrow on NVIDIA GPUs.  What this machine offers, how fast its link is, a demo.",
        epilog="The driver: CUARROW_CUDA_DRIVER (a path, or 'emulated'), else libcuda.so.1.",
    )
    parser.add_argument("--version", action="version", version=f"cuarrow {cuarrow.__version__}")
    parser.add_argument(
        "--emulated", action="store_true", help="use cuarrow's host emulation of the CUDA driver (no GPU)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    info = sub.add_parser(
        "info",
        help="the driver, devices, transfer settings, IPC and GPUDirect Storage",
        description="The driver, each device (name, memory, PCIe link), the pinned pool and staging "
        "settings, and whether CUDA IPC, pool IPC and GPUDirect Storage are usable.",
    )
    info.add_argument("--json", action="store_true", help="print one JSON object")
    bench = sub.add_parser(
        "bench",
        help="measure this machine's host<->device link (--quick: about 20 s)",
        description="--quick: cuarrow's host<->device copies (pageable and pinned memory, 4 bytes and --size) "
        "beside a raw cudaMemcpy through CuPy, in about --seconds seconds.  Without --quick: the full "
        "benchmark, bench/bench.py of the source tree (other arguments are passed to it).",
    )
    bench.add_argument("--quick", action="store_true", help="the short measurement (else bench/bench.py)")
    bench.add_argument(
        "--seconds", type=_positive_seconds, default=20.0, help="time --quick spends measuring (default 20)"
    )
    bench.add_argument("--size", type=_parse_size, default=64 * MiB, help="the large copy's size (default 64M)")
    sub.add_parser(
        "demo",
        add_help=False,
        help="walk through the Arrow 'CUDA Integration' page (cuarrow.demo; --help for its options)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        from cuarrow import demo

        if args.emulated:
            rest = ["--emulated", *rest]
        return demo.main(rest)
    if rest and args.command != "bench":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command is None:
        parser.print_help()
        return 2
    try:
        _select_driver(args.emulated)
        if args.command == "info":
            return _cmd_info(args)
        return _cmd_bench(args, rest)
    except _Failure as e:
        print(f"{_PROG}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{_PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - one line, not a traceback
        print(f"{_PROG}: {args.command} failed: {type(e).__name__}: {_one_line(e)}", file=sys.stderr)
        return 1
